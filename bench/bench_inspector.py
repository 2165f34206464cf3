"""What the inspector costs the API (not part of the test run).

    throughput    8 keep-alive clients post MemGPT-sized chat requests (bench/bench_server.py's load and
                  instant backend) for a few seconds, in rounds that alternate: no page open, then the
                  inspector's page open (another process reads its live event stream, reconnecting as a
                  browser does, and polls its overview every 5 s, as the page does). Target: within 5 %.
    capture       the server started with capture on, then fed large requests (~400 KB of prompt each,
                  several times its 64 MiB buffer in all): its RSS after each batch, which must level off
                  once the buffer is full, and the bytes the buffer holds.

Run: .venv/bin/python bench/bench_inspector.py [--rounds 5] [--seconds 5] [--clients 8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_server import (InstantBackend, concurrent, cpu_seconds, memgpt_request, sequential,  # noqa: E402
                          wait_for_port)

OVERVIEW_SECONDS = 5.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve(port: int, capture: bool) -> None:
    from llmproxy.prompts import load_wrapper
    from llmproxy.route import Route
    from llmproxy.server.app import create_app, run

    logging.basicConfig(level="WARNING")
    route = Route(name="bench", backend=InstantBackend(False), wrapper=load_wrapper("chatml").wrapper,
                  grammar="none", context_window=1_000_000)
    run(create_app({"bench": route}, capture=capture), "127.0.0.1", port, "warning")


def listen(port: int, seconds: float) -> None:
    """The page, as far as the server can tell: its event stream, reconnecting after each end from the
    last event seen, and an overview every few seconds. Reads the stream raw, so that on this small
    machine the page takes as little CPU from the server as a browser's native EventSource would.
    Prints the events it read."""
    events, last, deadline = 0, b"0", time.monotonic() + seconds
    next_overview = 0.0
    while time.monotonic() < deadline:
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.settimeout(1.0)
            sock.sendall(b"GET /inspect/api/events HTTP/1.1\r\nHost: 127.0.0.1\r\nLast-Event-ID: " + last +
                         b"\r\n\r\n")
            while time.monotonic() < deadline:
                try:
                    data = sock.recv(1 << 20)
                except TimeoutError:
                    continue
                if not data:
                    break
                events += data.count(b"\nevent: request")
                at = data.rfind(b"id: ")
                end = data.find(b"\n", at)
                if at >= 0 and end > at:  # an id split between two reads is taken from the next event
                    last = data[at + 4:end]
                if time.monotonic() > next_overview:
                    httpx.get(f"http://127.0.0.1:{port}/inspect/api/overview", timeout=30).raise_for_status()
                    next_overview = time.monotonic() + OVERVIEW_SECONDS
    print(events)


def record_cost() -> None:
    """What keeping one request costs the request's own path, in process, with nothing else in the way."""
    import timeit

    from llmproxy.prompts import load_wrapper
    from llmproxy.route import Route
    from llmproxy.server.inspector import views
    from llmproxy.server.inspector.recent import Recent
    from llmproxy.server.request_log import RequestLog

    route = Route(name="bench", backend=InstantBackend(False), wrapper=load_wrapper("chatml").wrapper)
    for listening in (False, True):
        recent = Recent()
        recent.encode = views.event
        log = RequestLog("chat.completions", "req_bench", steps=recent.steps())
        log.serving(route, False)
        if listening:  # the page takes each event as it comes (and stays open)
            queue = recent.listen()
            keep = lambda: (recent.record(log), queue.get_nowait())  # noqa: E731
        else:
            keep = lambda: recent.record(log)  # noqa: E731
        runs = 100_000
        seconds = timeit.timeit(keep, number=runs)
        print(f"keeping a request, capture off, {'a page open' if listening else 'no page   '}: "
              f"{seconds / runs * 1e6:.2f} µs")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def start(port: int, capture: bool) -> subprocess.Popen:
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port)] + (["--capture"] if capture else []),
                              stderr=subprocess.DEVNULL)
    wait_for_port(port)
    return server


def throughput(options: argparse.Namespace) -> None:
    port = free_port()
    server = start(port, capture=False)
    body = json.dumps(memgpt_request()).encode()
    rates: dict[str, list[float]] = {"closed": [], "open": []}
    cpu: dict[str, list[float]] = {"closed": [], "open": []}  # the server's CPU ms per request
    try:
        asyncio.run(sequential(port, body, 300))  # warm-up
        for round_ in range(options.rounds):
            for state in ("closed", "open") if round_ % 2 == 0 else ("open", "closed"):  # cancel drift
                page = None
                if state == "open":
                    page = subprocess.Popen([sys.executable, __file__, "--listen", str(port), "--for",
                                             str(options.seconds + 5)], stdout=subprocess.PIPE, text=True)
                    time.sleep(1.5)  # the page is open and listening before the load starts
                before = cpu_seconds(server.pid)
                count, _ = asyncio.run(concurrent(port, body, options.clients, options.seconds))
                rates[state].append(count / options.seconds)
                cpu[state].append((cpu_seconds(server.pid) - before) / count * 1000)
                line = f"{count / options.seconds:.0f} requests/s, server CPU {cpu[state][-1]:.2f} ms a request"
                if page is not None:
                    events = int(page.communicate()[0].strip() or 0)
                    print(f"  page open: {line}; the page read {events} events")
                else:
                    print(f"  no page:   {line}")
    finally:
        server.terminate()
        server.wait()
    closed, opened = statistics.median(rates["closed"]), statistics.median(rates["open"])
    print(f"throughput, {options.clients} clients, median of {options.rounds} rounds of {options.seconds:.0f} s: "
          f"no page {closed:.0f} requests/s, page open {opened:.0f} requests/s ({(opened / closed - 1) * 100:+.1f} %)")
    closed, opened = statistics.median(cpu["closed"]), statistics.median(cpu["open"])
    print(f"server CPU a request, median: no page {closed:.3f} ms, page open {opened:.3f} ms "
          f"({(opened / closed - 1) * 100:+.1f} %; this machine is shared, so compare within one run)")


def capture_soak(options: argparse.Namespace) -> None:
    port = free_port()
    server = start(port, capture=True)
    request = memgpt_request()
    request["messages"][0]["content"] += "Remember this. " * 27_000  # ~400 KB of prompt
    body = json.dumps(request).encode()
    try:
        asyncio.run(sequential(port, body, 5))
        print(f"capture soak: {len(body) / 1024:.0f} KB requests; RSS before: {rss_mib(server.pid):.0f} MiB")
        for batch in range(options.batches):
            asyncio.run(sequential(port, body, 100))
            overview = httpx.get(f"http://127.0.0.1:{port}/inspect/api/overview", timeout=30).json()
            print(f"  after {(batch + 1) * 100:4d} requests: RSS {rss_mib(server.pid):6.0f} MiB, buffer "
                  f"{overview['kept_bytes'] / 1048576:5.1f} of {overview['max_bytes'] / 1048576:.0f} MiB, "
                  f"{overview['kept']} requests kept")
    finally:
        server.terminate()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--batches", type=int, default=8, help="batches of 100 large requests for the capture soak")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--capture", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--listen", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--for", dest="listen_seconds", type=float, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.serve:
        serve(options.serve, options.capture)
    elif options.listen:
        listen(options.listen, options.listen_seconds)
    else:
        record_cost()
        throughput(options)
        capture_soak(options)


if __name__ == "__main__":
    main()
