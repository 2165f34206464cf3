"""Server speed: MemGPT-sized chat requests through the real server against an instant backend
(not part of the test run).

The server runs in its own process (``llmproxy.server.app.run``, as ``llmproxy serve`` runs it, info
logging on) with an in-process backend that answers a valid ``send_message`` call at once, so every
microsecond measured is llmproxy's: HTTP, validation, rendering, token counting, the worker-thread
hop for the generation, repair, checking, serialising. The load comes from a minimal keep-alive HTTP
client in this process, so the client costs as little as possible.

By default llmproxy estimates the prompt's tokens (tiktoken), as for a backend without a tokenizer.
``--tokenizer`` makes the backend count them, in no time but through a worker thread, as the server
treats any backend tokenizer (it may be an HTTP call).

    added latency  one client, one request at a time: what llmproxy adds to each call
    throughput     N concurrent clients (default 8) for a fixed time

Targets: at least 500 requests/s at 8 clients on a 2-core machine; p50 added latency under 5 ms.

Run: .venv/bin/python bench/bench_server.py [--clients 8] [--seconds 10] [--tokenizer]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llmproxy.backends.base import Backend, Capabilities, Completion, GenerationParams  # noqa: E402

FUNCTIONS = json.loads((ROOT / "tests/fixtures/memgpt_functions.json").read_text(encoding="utf-8"))
ANSWER = (' "send_message",\n  "params": {\n    "inner_thoughts": "Answer from memory.",\n'
          '    "message": "You love the Eiger trail!"\n  }\n}')


class InstantBackend(Backend):
    """Answers a valid call at once. With ``tokenizer`` it counts tokens itself in no time, like a
    server whose /tokenize answer is cached; without, llmproxy estimates them (tiktoken)."""

    name = "instant"

    def __init__(self, tokenizer: bool) -> None:
        self.capabilities = Capabilities(tokenizer=tokenizer)

    def complete(self, prompt: str, params: GenerationParams) -> Completion:
        return Completion(ANSWER, "stop", len(prompt) // 4, 40)

    def count_tokens(self, text: str) -> int:
        return len(text) // 4



def wait_for_port(port: int, seconds: float = 30.0) -> None:
    """Until a server started in another process accepts connections on ``port``."""
    for _ in range(int(seconds * 10)):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)

def memgpt_request() -> dict:
    """~2,000-token system prompt, MemGPT's 8 functions, 20 history messages, a user event last."""
    sentence = "Sam is a warm, curious companion who remembers what matters to the user and follows up on it. "
    messages: list[dict] = [{"role": "system", "content": "You are Sam.\n" + sentence * 100}]

    def call(id_: str, name: str, arguments: dict) -> dict:
        return {"id": id_, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}

    def event(text: str) -> dict:
        return {"role": "user", "content": json.dumps({"type": "user_message", "message": text,
                                                        "time": "2024-01-03 10:00:00 AM"})}

    for turn in range(5):
        search = {"query": "hiking", "page": 0, "request_heartbeat": True}
        messages += [
            event(f"Question {turn}: what did I say about hiking?"),
            {"role": "assistant", "content": "Check memory first.",
             "tool_calls": [call(f"c{turn}", "archival_memory_search", search)]},
            {"role": "tool", "tool_call_id": f"c{turn}",
             "content": json.dumps({"status": "OK", "message": "Loves the Eiger trail."})},
            {"role": "assistant", "content": "Now answer.",
             "tool_calls": [call(f"d{turn}", "send_message", {"message": "The Eiger!"})]},
        ]
    messages.append(event("And my favourite trail?"))
    return {"model": "bench", "messages": messages, "tools": [{"type": "function", "function": f} for f in FUNCTIONS]}


# --- the server process ------------------------------------------------------------------------


def serve(port: int, tokenizer: bool) -> None:
    from llmproxy.prompts import load_wrapper
    from llmproxy.route import Route
    from llmproxy.server.app import create_app, run

    logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    route = Route(name="bench", backend=InstantBackend(tokenizer), wrapper=load_wrapper("chatml").wrapper,
                  grammar="none", context_window=8192)
    run(create_app({"bench": route}), "127.0.0.1", port, "warning")


# --- the load ----------------------------------------------------------------------------------


class Connection:
    """One keep-alive HTTP/1.1 connection that posts the same body and reads whole responses."""

    def __init__(self, port: int, body: bytes, api_key: str | None = None) -> None:
        self.port = port
        auth = f"Authorization: Bearer {api_key}\r\n" if api_key else ""
        self.request = (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"{auth}Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)

    async def post(self) -> bytes:
        self.writer.write(self.request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"unexpected response: {head[:200]!r}")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length"))
        return await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


async def sequential(port: int, body: bytes, count: int) -> list[float]:
    connection = Connection(port, body)
    await connection.open()
    answer = json.loads(await connection.post())
    assert answer["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "send_message", answer
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        await connection.post()
        samples.append((time.perf_counter() - start) * 1000)
    connection.close()
    return samples


async def concurrent(port: int, body: bytes, clients: int, seconds: float,
                     api_key: str | None = None) -> tuple[int, list[float]]:
    """(requests answered, their latencies in ms) from ``clients`` keep-alive clients for ``seconds``."""
    connections = [Connection(port, body, api_key) for _ in range(clients)]
    for connection in connections:
        await connection.open()
    samples: list[float] = []
    deadline = time.perf_counter() + seconds

    async def client(connection: Connection) -> None:
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            await connection.post()
            samples.append((time.perf_counter() - start) * 1000)

    await asyncio.gather(*(client(c) for c in connections))
    for connection in connections:
        connection.close()
    return len(samples), samples


def cpu_seconds(pid: int) -> float:
    """The CPU time of a process so far (Linux): the scheduler's own count, in nanoseconds, summed over
    its threads (``se.sum_exec_runtime`` in /proc/PID/task/*/sched), where the kernel shows it. Else
    user + system time from /proc/PID/stat, which is a sample: each clock tick goes to whichever
    process holds the CPU then, so a second of CPU is several per cent off. (The scheduler's count
    leaves out threads that have ended: the servers measured here keep theirs.)"""
    try:
        return sum(_thread_runtime(task) for task in Path(f"/proc/{pid}/task").iterdir()) / 1000
    except (OSError, ValueError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pin_apart(measured: list[int], others: list[int]) -> bool:
    """On a machine of two cores or more: the ``measured`` processes (a proxy) on a core of their own and
    the ``others`` (the fake backend, the load generator; 0: this process) on another, so that their
    work costs the measured neither CPU time nor cache. Every thread is moved, those started later
    follow their parent. False (nothing moved) on one core."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return False
    for pids, core in ((measured, cores[1]), (others, cores[0])):
        for pid in pids:
            for task in Path(f"/proc/{pid or os.getpid()}/task").iterdir():
                os.sched_setaffinity(int(task.name), {core})
    return True


def _thread_runtime(task: Path) -> float:
    """A thread's CPU time in milliseconds, from its scheduler statistics (0 for one that just ended)."""
    try:
        text = (task / "sched").read_text()
    except FileNotFoundError:
        return 0.0
    for line in text.splitlines():
        if line.startswith("se.sum_exec_runtime"):
            return float(line.split(":")[1])
    raise ValueError("no se.sum_exec_runtime")  # a kernel without it: the clock ticks instead


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--tokenizer", action="store_true", help="the backend counts tokens (else tiktoken estimates)")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.serve:
        serve(options.serve, options.tokenizer)
        return

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [sys.executable, __file__, "--serve", str(port)] + (["--tokenizer"] if options.tokenizer else [])
    server = subprocess.Popen(command, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port)
        body = json.dumps(memgpt_request()).encode()
        asyncio.run(sequential(port, body, 200))  # warm-up
        cpu_before = cpu_seconds(server.pid)
        single = asyncio.run(sequential(port, body, 1000))
        cpu_single = (cpu_seconds(server.pid) - cpu_before) / len(single) * 1000
        cpu_before = cpu_seconds(server.pid)
        count, loaded = asyncio.run(concurrent(port, body, options.clients, options.seconds))
        cpu_per_request = (cpu_seconds(server.pid) - cpu_before) / count * 1000
    finally:
        server.terminate()
        server.wait()
    counting = "backend tokenizer" if options.tokenizer else "tiktoken estimate"
    print(f"request: {len(body):,} bytes JSON, {len(FUNCTIONS)} functions, 22 messages; tokens by {counting}")
    print(f"added latency, 1 client:  p50 {statistics.median(single):.2f} ms  p99 {percentile(single, 0.99):.2f} ms")
    print(f"{options.clients} clients, {options.seconds:.0f} s:    {count / options.seconds:.0f} requests/s  "
          f"latency p50 {statistics.median(loaded):.2f} ms  p99 {percentile(loaded, 0.99):.2f} ms")
    print(f"server CPU per request: {cpu_single:.2f} ms at 1 client, {cpu_per_request:.2f} ms at {options.clients}"
          f" (so at most {1000 / cpu_per_request:.0f} requests/s from its one core; all numbers depend on what else"
          " runs on this machine)")


if __name__ == "__main__":
    main()
