"""Soak: `llmproxy serve` under steady load with faults, for minutes (not part of the test run).

Three fake llama.cpp servers (bench/fake_backend.py): one answers at once, one hangs, one fails with
HTTP 500. The server serves four models on them:

    healthy    the instant fake
    hung       the hanging fake, first_token_timeout 2 s: each request ends in a 504 after 2 s
    failing    the failing fake: each request ends in a 502 at once
    covered    the hanging fake too, falling back to healthy: answered, 2 s late

N clients (default 16) send requests without pause, each picked at random: 80% healthy, 6% hung,
6% failing, 4% covered, 4% healthy but the client hangs up right after sending. Every 10 s the
server's resident memory, threads and open descriptors are sampled.

Passes when no healthy or covered request is lost (each gets its 200), every hung and failing one
gets its error status, and memory, threads and descriptors end where they were after warm-up.

Run: .venv/bin/python bench/soak.py [--minutes 10] [--clients 16]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_server import memgpt_request, wait_for_port  # noqa: E402
from bench_vs_litellm import free_port  # noqa: E402

MIX = [("healthy", 80), ("hung", 6), ("failing", 6), ("covered", 4), ("leaves", 4)]
EXPECTED = {"healthy": 200, "covered": 200, "hung": 504, "failing": 502}


def config(ports: dict[str, int]) -> str:
    def model(name: str, port: int, extra: str = "") -> str:
        return (f'[models.{name}]\nbackend = "llamacpp"\nendpoint = "http://127.0.0.1:{port}"\nwrapper = "chatml"\n'
                f"context_window = 8192\nretries = 0\nmax_queue = 64\n{extra}\n")

    return (model("healthy", ports["instant"]) + model("hung", ports["hang"], "first_token_timeout = 2")
            + model("failing", ports["fail"]) + model("covered", ports["hang"],
                                                      'first_token_timeout = 2\nfallbacks = ["healthy"]'))


def process_state(pid: int) -> tuple[float, int, int]:
    """(resident MiB, threads, open descriptors) of a process, from /proc (Linux)."""
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    rss = int(fields["VmRSS"].split()[0]) / 1024
    return rss, int(fields["Threads"]), len(os.listdir(f"/proc/{pid}/fd"))


async def post(port: int, model: str, body: dict, leave: bool) -> int:
    """The HTTP status of one request on a fresh connection; 0 for a client that left at once."""
    payload = json.dumps({**body, "model": model}).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode() + payload)
    try:
        if leave:
            await writer.drain()
            return 0
        head = await reader.readuntil(b"\r\n\r\n")
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length")), None)
        if length is None:
            await reader.read()  # a stream: to its end
        else:
            await reader.readexactly(length)
        return int(head.split(b" ", 2)[1])
    finally:
        writer.close()


async def load(port: int, clients: int, seconds: float, tally: collections.Counter, body: dict) -> None:
    deadline = time.monotonic() + seconds
    kinds = [kind for kind, weight in MIX for _ in range(weight)]

    async def client(seed: int) -> None:
        pick = random.Random(seed)
        while time.monotonic() < deadline:
            kind = pick.choice(kinds)
            model = "healthy" if kind == "leaves" else kind
            try:
                status = await post(port, model, body, leave=kind == "leaves")
            except (OSError, asyncio.IncompleteReadError) as exc:
                tally[(kind, type(exc).__name__)] += 1
                continue
            tally[(kind, status)] += 1

    await asyncio.gather(*(client(seed) for seed in range(clients)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=16)
    options = parser.parse_args()

    ports = {name: free_port() for name in ("instant", "hang", "fail", "proxy")}
    processes = [subprocess.Popen([sys.executable, str(HERE / "fake_backend.py"), "--port", str(ports[name]),
                                   "--behaviour", name]) for name in ("instant", "hang", "fail")]
    body = memgpt_request()
    with tempfile.TemporaryDirectory() as workdir:
        path = Path(workdir) / "models.toml"
        path.write_text(config(ports))
        proxy = subprocess.Popen([sys.executable, "-m", "llmproxy", "serve", "--config", str(path), "--port",
                                  str(ports["proxy"]), "--log-level", "error"])
        processes.append(proxy)
        try:
            wait_for_port(ports["proxy"], 60)
            asyncio.run(load(ports["proxy"], options.clients, 20, collections.Counter(), body))  # warm-up
            samples = [(0.0, *process_state(proxy.pid))]
            tally: collections.Counter = collections.Counter()
            started = time.monotonic()
            seconds = options.minutes * 60
            while (elapsed := time.monotonic() - started) < seconds:
                asyncio.run(load(ports["proxy"], options.clients, min(10.0, seconds - elapsed), tally, body))
                samples.append((time.monotonic() - started, *process_state(proxy.pid)))
                print(f"  {samples[-1][0]:5.0f} s  RSS {samples[-1][1]:6.1f} MiB  threads {samples[-1][2]:3d}  "
                      f"descriptors {samples[-1][3]:4d}  requests {sum(tally.values()):,}", flush=True)
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                process.wait(timeout=30)
    total = sum(tally.values())
    print(f"{total:,} requests in {options.minutes:g} min at {options.clients} clients ({total / seconds:.0f}/s):")
    lost = 0
    for (kind, status), count in sorted(tally.items(), key=str):
        expected = 0 if kind == "leaves" else EXPECTED[kind]
        ok = status == expected
        lost += 0 if ok or kind in ("hung", "failing") else count
        print(f"  {kind:8} {status!s:22} {count:8,}  {'as expected' if ok else 'UNEXPECTED'}")
    first, last = samples[0], samples[-1]
    print(f"lost healthy/covered requests: {lost}")
    print(f"RSS {first[1]:.1f} -> {last[1]:.1f} MiB (max {max(s[1] for s in samples):.1f}); threads {first[2]} -> "
          f"{last[2]} (max {max(s[2] for s in samples)}); descriptors {first[3]} -> {last[3]} "
          f"(max {max(s[3] for s in samples)})")


if __name__ == "__main__":
    main()
