"""The cost of each face: the same request through OpenAI chat, the Responses API and Anthropic's
Messages API, over real HTTP, in one run (not part of the test run).

    fake backend   bench/fake_backend.py in its own process: llama.cpp's /completion, answering a
                   MemGPT send_message call at once, streamed one token an event
    llmproxy       `llmproxy serve --backend llamacpp --endpoint FAKE --wrapper chatml`, as users run it
    the request    bench_server's MemGPT request (a ~2,000-token system prompt, 8 tools, 20 messages),
                   written in each face's own shape; every face renders the same prompt from it
    measured       streamed: time to the first byte of the answer's first event (TTFB), and to the
                   stream's end; whole: the response's latency; and llmproxy's CPU per request (from
                   /proc). One client at a time, the faces interleaved round by round, so that the
                   machine's drift costs each the same.

Target (issue 21): TTFB and CPU per request through each face within 10 % of the chat endpoint's.
Run: .venv/bin/python bench/bench_faces.py [--requests 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_server import cpu_seconds, memgpt_request, wait_for_port  # noqa: E402
from bench_vs_litellm import free_port, start_fake  # noqa: E402

FACES = ("chat", "responses", "messages")
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}


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


async def measure(port: int, server_pid: int, face: str, body: dict, count: int) -> dict[str, float]:
    client = Client(port, face, body)
    await client.open()
    for stream in (False, True):  # warm: caches, lazy imports
        check(face, (await client.post(stream))[2])
    firsts, ends, wholes = [], [], []
    before = cpu_seconds(server_pid)
    for _ in range(count):
        first, end, _ = await client.post(True)
        firsts.append(first)
        ends.append(end)
        wholes.append((await client.post(False))[1])
    cpu = (cpu_seconds(server_pid) - before) / (2 * count)
    client.close()
    return {"ttfb": statistics.median(firsts) * 1000, "stream": statistics.median(ends) * 1000,
            "whole": statistics.median(wholes) * 1000, "cpu": cpu * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200, help="streamed and whole requests per face and round")
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    chat = memgpt_request()
    bodies = {"chat": chat, "responses": as_responses(chat), "messages": as_messages(chat)}
    backend_port, port = free_port(), free_port()
    fake = start_fake(backend_port)
    server = subprocess.Popen([sys.executable, "-m", "llmproxy", "serve", "--backend", "llamacpp", "--endpoint",
                               f"http://127.0.0.1:{backend_port}", "--wrapper", "chatml", "--port", str(port),
                               "--log-level", "warning"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results: dict[str, list[dict[str, float]]] = {face: [] for face in FACES}
    try:
        wait_for_port(backend_port)
        wait_for_port(port, 120)
        print(f"request: {len(json.dumps(chat)):,} bytes as chat; {options.requests} streamed + {options.requests} "
              f"whole requests per face and round, one client; {os.cpu_count()} cores shared by all processes")
        for round_ in range(options.rounds):
            for face in FACES:
                result = asyncio.run(measure(port, server.pid, face, bodies[face], options.requests))
                results[face].append(result)
                print(f"  round {round_ + 1} {face:9}  TTFB {result['ttfb']:6.2f} ms   stream {result['stream']:6.2f} ms"
                      f"   whole {result['whole']:6.2f} ms   llmproxy CPU {result['cpu']:5.2f} ms/request", flush=True)
    finally:
        for process in (server, fake):
            process.terminate()
            process.wait(timeout=30)
    chat_median = {key: statistics.median(r[key] for r in results["chat"]) for key in ("ttfb", "cpu")}
    for face in FACES[1:]:
        median = {key: statistics.median(r[key] for r in results[face]) for key in ("ttfb", "cpu")}
        print(f"{face}: TTFB {median['ttfb']:.2f} ms ({median['ttfb'] / chat_median['ttfb'] - 1:+.1%} vs chat's "
              f"{chat_median['ttfb']:.2f}), CPU {median['cpu']:.2f} ms/request "
              f"({median['cpu'] / chat_median['cpu'] - 1:+.1%} vs chat's {chat_median['cpu']:.2f})")


if __name__ == "__main__":
    main()
