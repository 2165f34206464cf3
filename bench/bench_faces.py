"""The cost of each face: the same request through OpenAI chat, the Responses API and Anthropic's
Messages API, over real HTTP, in one run (not part of the test run).

    fake backend   bench/fake_backend.py in its own process: llama.cpp's /completion, answering a
                   MemGPT send_message call at once, streamed one token an event
    llmproxy       `llmproxy serve --backend llamacpp --endpoint FAKE --wrapper chatml`, as users run it
    the request    bench_server's MemGPT request (a ~2,000-token system prompt, 8 tools, 20 messages),
                   written in each face's own shape; every face renders the same prompt from it
    measured       streamed: time to the first byte of the answer's first event (TTFB), and to the
                   stream's end; whole: the response's latency; and llmproxy's CPU per request (from
                   /proc). One client at a time, the faces taking turns every few requests (--block)
                   in a rotating order, so that the machine's drift costs each the same.

Target (issue 21): TTFB and CPU per request through each face within 10 % of the chat endpoint's.
"unstored" is the Responses request with `store: false` (as Codex sends it); "responses" stores every
turn, as OpenAI does by default.
Run: .venv/bin/python bench/bench_faces.py [--requests 200] [--rounds 3] [--block 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_server import cpu_seconds, memgpt_request, percentile, pin_apart, wait_for_port  # noqa: E402
from bench_vs_litellm import free_port, start_fake  # noqa: E402

# "responses" stores each turn (OpenAI's default: the server's memory grows until the store is at its
# bound); "unstored" is the same request with ``store: false``, as Codex sends it.
FACES = ("chat", "responses", "unstored", "messages")
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "unstored": "/v1/responses",
         "messages": "/v1/messages"}


def as_responses(chat: dict) -> dict:
    """The chat request as a Responses API request: system -> instructions, calls and results as items."""
    items: list[dict] = []
    for message in chat["messages"][1:]:
        if message["role"] == "tool":
            items.append({"type": "function_call_output", "call_id": message["tool_call_id"],
                          "output": message["content"]})
        elif message["role"] == "assistant":
            items.append({"type": "message", "role": "assistant",
                          "content": [{"type": "output_text", "text": message["content"]}]})
            items += [{"type": "function_call", "call_id": call["id"], "name": call["function"]["name"],
                       "arguments": call["function"]["arguments"]} for call in message["tool_calls"]]
        else:
            items.append({"type": "message", "role": "user", "content": message["content"]})
    tools = [{"type": "function", **tool["function"]} for tool in chat["tools"]]
    return {"model": chat["model"], "instructions": chat["messages"][0]["content"], "input": items, "tools": tools}


def as_messages(chat: dict) -> dict:
    """The chat request as an Anthropic Messages request: calls as tool_use blocks, results as tool_result."""
    messages: list[dict] = []
    for message in chat["messages"][1:]:
        if message["role"] == "tool":
            messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": message["tool_call_id"],
                                                          "content": message["content"]}]})
        elif message["role"] == "assistant":
            blocks = [{"type": "text", "text": message["content"]}]
            blocks += [{"type": "tool_use", "id": call["id"], "name": call["function"]["name"],
                        "input": json.loads(call["function"]["arguments"])} for call in message["tool_calls"]]
            messages.append({"role": "assistant", "content": blocks})
        else:
            messages.append({"role": "user", "content": message["content"]})
    tools = [{"name": f["function"]["name"], "description": f["function"].get("description", ""),
              "input_schema": f["function"]["parameters"]} for f in chat["tools"]]
    return {"model": chat["model"], "max_tokens": 512, "system": chat["messages"][0]["content"],
            "messages": messages, "tools": tools}


class Client:
    """One keep-alive HTTP/1.1 connection posting one face's body; reads whole or streamed answers."""

    def __init__(self, port: int, face: str, body: dict) -> None:
        self.port = port
        self.face = face
        self.bodies = {stream: json.dumps({**body, "stream": stream}).encode() for stream in (False, True)}

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)

    async def post(self, stream: bool) -> tuple[float, float, bytes]:
        """(seconds to the body's first byte, seconds to its end, the body)."""
        body = self.bodies[stream]
        start = time.perf_counter()
        self.writer.write(f"POST {PATHS[self.face]} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                          f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        head = await self.reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"{self.face}: {head[:200]!r} {await self.reader.read(500)!r}")
        if b"transfer-encoding: chunked" not in head.lower():
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length"))
            data = await self.reader.readexactly(length)
            end = time.perf_counter() - start
            return end, end, data
        first, data = None, b""
        while True:  # chunked: size line, data, CRLF; a zero size ends it
            size = int((await self.reader.readuntil(b"\r\n")).strip(), 16)
            chunk = await self.reader.readexactly(size + 2)
            if first is None:
                first = time.perf_counter() - start
            if size == 0:
                return first, time.perf_counter() - start, data
            data += chunk[:-2]

    def close(self) -> None:
        self.writer.close()


def check(face: str, body: bytes) -> None:
    """Each face answers with the call (the bench measures answers, not errors)."""
    text = body.decode()
    assert "send_message" in text and ("tool_use" in text if face == "messages" else True), text[:500]


async def measure(port: int, server_pid: int, bodies: dict[str, dict], count: int, block: int,
                  totals: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, float]]:
    """One round: ``count`` streamed and ``count`` whole requests per face, the faces taking turns every
    ``block`` of each (in a rotating order), so that the machine's drift within the round costs each
    the same. Adds each face's samples to ``totals`` and gives the round's own figures."""
    clients = {face: Client(port, face, body) for face, body in bodies.items()}
    for client in clients.values():
        await client.open()
        for stream in (False, True):  # warm: caches, lazy imports
            check(client.face, (await client.post(stream))[2])
    samples = {face: {"ttfb": [], "stream": [], "whole": [], "cpu": []} for face in clients}
    for turn in range(0, count, block):
        order = FACES[turn // block % len(FACES):] + FACES[:turn // block % len(FACES)]
        for face in order:
            client, taken = clients[face], samples[face]
            before = cpu_seconds(server_pid)
            for _ in range(min(block, count - turn)):
                first, end, _ = await client.post(True)
                taken["ttfb"].append(first)
                taken["stream"].append(end)
                taken["whole"].append((await client.post(False))[1])
            taken["cpu"].append(cpu_seconds(server_pid) - before)
    for client in clients.values():
        client.close()
    for face, taken in samples.items():
        for key, values in taken.items():
            totals[face][key] += values
    return {face: summary(taken) for face, taken in samples.items()}


def summary(taken: dict[str, list[float]]) -> dict[str, float]:
    """Median latencies (ms), the fastest tenth's TTFB (less of a busy machine's noise in it), and CPU
    per request (ms; /proc counts in clock ticks, so it is summed over many blocks rather than read
    per request)."""
    figures = {key: statistics.median(taken[key]) * 1000 for key in ("ttfb", "stream", "whole")}
    figures["ttfb_p10"] = percentile(taken["ttfb"], 0.1) * 1000
    figures["cpu"] = sum(taken["cpu"]) / (2 * len(taken["ttfb"])) * 1000
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200, help="streamed and whole requests per face and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--block", type=int, default=10, help="requests of one face before the next face's turn")
    options = parser.parse_args()
    chat = memgpt_request()
    bodies = {"chat": chat, "responses": as_responses(chat), "unstored": {**as_responses(chat), "store": False},
              "messages": as_messages(chat)}
    backend_port, port = free_port(), free_port()
    fake = start_fake(backend_port)
    server = subprocess.Popen([sys.executable, "-m", "llmproxy", "serve", "--backend", "llamacpp", "--endpoint",
                               f"http://127.0.0.1:{backend_port}", "--wrapper", "chatml", "--port", str(port),
                               "--log-level", "warning"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    totals: dict[str, dict[str, list[float]]] = {face: {"ttfb": [], "stream": [], "whole": [], "cpu": []}
                                                 for face in FACES}
    pinned = pin_apart([server.pid], [0, fake.pid])
    try:
        wait_for_port(backend_port)
        wait_for_port(port, 120)
        print(f"request: {len(json.dumps(chat)):,} bytes as chat; {options.requests} streamed + {options.requests} "
              f"whole requests per face and round, faces taking turns every {options.block}, one client at a "
              f"time; {'llmproxy on a core of its own' if pinned else 'one core shared by all'}")
        for round_ in range(options.rounds):
            figures = asyncio.run(measure(port, server.pid, bodies, options.requests, options.block, totals))
            for face, result in figures.items():
                print(f"  round {round_ + 1} {face:9}  TTFB {result['ttfb']:6.2f} ms   stream {result['stream']:6.2f} ms"
                      f"   whole {result['whole']:6.2f} ms   llmproxy CPU {result['cpu']:5.2f} ms/request", flush=True)
    finally:
        for process in (server, fake):
            process.terminate()
            process.wait(timeout=30)
    overall = {face: summary(taken) for face, taken in totals.items()}
    chat_figures = overall["chat"]
    print("all rounds (TTFB: the median and the 10th percentile of every request; CPU: summed over them all):")
    for face in FACES:
        shown = {key: compared(overall[face][key], None if face == "chat" else chat_figures[key], unit)
                 for key, unit in (("ttfb", "ms"), ("ttfb_p10", "ms"), ("cpu", "ms/request"))}
        print(f"{face}: TTFB {shown['ttfb']}, p10 {shown['ttfb_p10']}, CPU {shown['cpu']}")


def compared(value: float, chat: float | None, unit: str) -> str:
    """``value`` in ``unit``, and how it compares with chat's (None: it is chat's)."""
    return f"{value:.2f} {unit}" + ("" if chat is None else f" ({value / chat - 1:+.1%} vs chat)")


if __name__ == "__main__":
    main()
