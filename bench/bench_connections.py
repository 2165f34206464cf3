"""Connection hygiene against hostile clients, timed (not part of the test run).

The server runs in its own process as ``llmproxy serve`` runs it (``llmproxy.server.app.run``, default
connection limits unless given) with an instant in-process backend. Then, at once:

    idle flood   N connections (default 1,100) that send nothing; then one real chat request:
                 how long it takes, and how many of the idle ones the server closed to make room
    silent       one connection that sends nothing: when the server closes it (idle_timeout)
    slow head    request headers a byte every 0.5 s: when the server answers 408 (header_timeout)
    slow body    a body a byte every 0.5 s: when the server answers 408 (body_timeout)

Run: .venv/bin/python bench/bench_connections.py [--idle 1100] [--max-connections 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench_server import InstantBackend, memgpt_request, wait_for_port  # noqa: E402


def serve(port: int, max_connections: int) -> None:
    from llmproxy.prompts import load_wrapper
    from llmproxy.route import Route
    from llmproxy.server.app import create_app, run
    from llmproxy.server.config import ConnectionLimits

    route = Route(name="bench", backend=InstantBackend(False), wrapper=load_wrapper("chatml").wrapper,
                  grammar="none", context_window=8192)
    run(create_app({"bench": route}), "127.0.0.1", port, "warning", ConnectionLimits(max_connections=max_connections))


async def closed_after(reader: asyncio.StreamReader, started: float) -> tuple[float, bytes]:
    """Seconds from ``started`` until the server closes the connection, and what it sent."""
    received = await reader.read()
    return time.monotonic() - started, received


async def trickle(port: int, first: bytes, rest: bytes) -> tuple[float, bytes]:
    """Send ``first``, then ``rest`` a byte every 0.5 s, until the server answers and closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = time.monotonic()
    writer.write(first)

    async def dribble() -> None:
        for byte in rest:
            await asyncio.sleep(0.5)
            writer.write(bytes([byte]))

    sender = asyncio.ensure_future(dribble())
    try:
        return await closed_after(reader, started)
    finally:
        sender.cancel()
        writer.close()


async def silent(port: int) -> tuple[float, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        return await closed_after(reader, time.monotonic())
    finally:
        writer.close()


def idle_flood(port: int, count: int, body: bytes) -> tuple[float, int]:
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(count)]
    try:
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                         b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        elapsed = time.monotonic() - started
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
        time.sleep(0.2)
        closed = 0
        for sock in idle:
            sock.setblocking(False)
            try:
                closed += sock.recv(1) == b""
            except BlockingIOError:
                pass
        return elapsed, closed
    finally:
        for sock in idle:
            sock.close()


def status(raw: bytes) -> str:
    return raw.split(b"\r\n", 1)[0].decode() if raw else "(closed, nothing sent)"


async def slow_clients(port: int, body: bytes) -> list[tuple[str, tuple[float, bytes]]]:
    head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body))
    results = await asyncio.gather(silent(port), trickle(port, head[:40], head[40:]), trickle(port, head, body))
    return list(zip(("silent", "slow head", "slow body"), results))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=int, default=1100, help="idle connections to open")
    parser.add_argument("--max-connections", type=int, default=1000)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.serve:
        serve(options.serve, options.max_connections)
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, options.idle + 256)), hard))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [sys.executable, __file__, "--serve", str(port), "--max-connections", str(options.max_connections)]
    server = subprocess.Popen(command)
    try:
        wait_for_port(port)
        body = json.dumps(memgpt_request()).encode()
        elapsed, closed = idle_flood(port, options.idle, body)
        print(f"idle flood: {options.idle} silent connections, then a real request: 200 in {elapsed * 1000:.0f} ms; "
              f"{closed} idle connections closed to make room (max_connections {options.max_connections})")
        for name, (seconds, raw) in asyncio.run(slow_clients(port, body)):
            print(f"{name:>10}: closed after {seconds:.1f} s, answer: {status(raw)}")
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    main()
