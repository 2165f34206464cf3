"""Many streams through one proxy: direct, llmproxy and LiteLLM side by side in one run, against one
paced fake backend (not part of the test run; issue 23, part 7).

    fake backend   a paced server in its own process: every stream sends ``--tokens`` tokens (default
                   400) at ``--rate`` tokens/s (default 200), each token due at a fixed time from the
                   stream's start; it speaks llama.cpp's /completion (+ /tokenize, /props, /health)
                   for llmproxy and OpenAI's streamed /v1/chat/completions for the direct clients and
                   LiteLLM
    direct         the clients stream /v1/chat/completions from the fake itself
    llmproxy       `llmproxy serve --backend llamacpp --endpoint FAKE --wrapper chatml` in its own
                   process: renders the prompt, counts its tokens with /tokenize, streams the answer
                   through its scanner and re-frames every token as an OpenAI chunk
    LiteLLM        `litellm --config` (its proxy, one worker) with one model: openai/fake at FAKE/v1
    load           N clients (default 32, then 64) in this process, each posting a plain chat request
                   (no tools) with ``stream: true`` as soon as its last stream ended; raw asyncio
                   sockets that count the token marker in the bytes, so they cost little

For each target and load: client tokens/s over the measured window (the sum of all clients; the fake
allows N x rate), the latency of the first tokens that came within the window (p50, p99; nan: none
did; for the proxies also p50 minus direct's in the same round), and the proxy's CPU time (the
scheduler's count: bench_server.cpu_seconds) over the window divided by the tokens its clients
received: the CPU a relayed token costs. The fake's and the load generator's CPU a token are shown
too, to see who had the cores.

Targets (issue 23): llmproxy <= 50 us of CPU a relayed token, first token <= 10 ms later than direct at
p50, >= 95 % of the direct rate at 32 and 64 streams. On two cores or more the proxies run on one core
and the fake backend and the load generator on another (bench_server.pin_apart): what the others do
then costs a proxy no CPU time, though the machine's own drift still does, so compare within one run.

LiteLLM is not a dependency of llmproxy; install it in a venv of its own:
    python3.11 -m venv /tmp/litellm-venv && /tmp/litellm-venv/bin/pip install 'litellm[proxy]'
Run: .venv/bin/python bench/bench_streams.py [--litellm /tmp/litellm-venv/bin/litellm] [--seconds 8]
     [--streams 32 64] [--rounds 1] [--no-litellm] [--baseline CHECKOUT]
``--baseline``: the llmproxy of another checkout measured beside this one's, in the same rounds (e.g.
the last commit's: git worktree add /tmp/old HEAD; --baseline /tmp/old).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_server import cpu_seconds, percentile, pin_apart, wait_for_port  # noqa: E402
from bench_vs_litellm import API_KEY, free_port, start_litellm  # noqa: E402
from fake_backend import FakeBackend  # noqa: E402

MARKER = b"~t"  # in every token, and nowhere else in any proxy's stream (ids and fields have no "~")
END = b"\r\n0\r\n\r\n"  # a chunked body's last chunk


# --- the paced fake backend (its own process) ----------------------------------------------------


def _chunk(data: bytes) -> bytes:
    """One piece of an HTTP/1.1 chunked body."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def token(index: int) -> bytes:
    """Token ``index`` of a stream: the marker, and a number (LiteLLM fails a stream that repeats a chunk)."""
    return b"~t%d " % index


STREAM_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


class PacedBackend(FakeBackend):
    """bench/fake_backend.py's server, but streams are paced: token i of a stream is written
    ``i / rate`` seconds after the stream started."""

    count = 400
    rate = 200.0

    def answer(self, method: str, path: str, body: bytes) -> bytes | None:
        request = json.loads(body) if body else {}
        if path == "/completion" and request.get("stream"):
            prompt_tokens = len(request.get("prompt", "")) // 4
            final = {"content": "", "stop": True, "stop_type": "eos", "tokens_evaluated": prompt_tokens,
                     "tokens_predicted": self.count}
            self._pace(lambda i: b'data: {"content":"%s","stop":false}\n\n' % token(i),
                       b"data: " + json.dumps(final).encode() + b"\n\n")
            return None
        if path == "/v1/chat/completions" and request.get("stream"):
            head = b'data: {"id":"chatcmpl-fake","object":"chat.completion.chunk","created":%d,"model":"fake",' \
                   % int(time.time())
            event = head + b'"choices":[{"index":0,"delta":{"content":"%s"},"finish_reason":null}]}\n\n'
            last = (head + b'"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":20,'
                    b'"completion_tokens":%d,"total_tokens":%d}}\n\ndata: [DONE]\n\n' % (self.count, self.count + 20))
            self._pace(lambda i: event % token(i), last)
            return None
        return super().answer(method, path, body)

    def _pace(self, event, last: bytes) -> None:  # noqa: ANN001
        loop = asyncio.get_running_loop()
        start = loop.time()
        self.transport.write(STREAM_HEAD)

        def send(index: int) -> None:
            if self.transport.is_closing():
                return
            if index == self.count:
                self.transport.write(_chunk(last) + b"0\r\n\r\n")
                return
            self.transport.write(_chunk(event(index)))
            loop.call_at(start + (index + 1) / self.rate, send, index + 1)

        loop.call_at(start + 1 / self.rate, send, 0)


async def serve_paced(port: int, count: int, rate: float) -> None:
    protocol = type("Paced", (PacedBackend,), {"count": count, "rate": rate})
    server = await asyncio.get_running_loop().create_server(protocol, "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


# --- the load -------------------------------------------------------------------------------------


def chat_body(model: str) -> bytes:
    messages = [{"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "Tell me a long story about a lighthouse keeper."}]
    return json.dumps({"model": model, "messages": messages, "stream": True}).encode()


class Window:
    """What the clients saw between ``start`` and ``end`` (perf_counter seconds)."""

    def __init__(self, start: float, end: float) -> None:
        self.start, self.end = start, end
        self.tokens = 0
        self.first: list[float] = []  # ms from a request's send to its first token, first tokens in the window
        self.failures: list[str] = []


async def client(port: int, request: bytes, window: Window) -> None:
    """Stream after stream, each on a fresh connection, counting the token marker in the bytes as they
    come; a stream ends with the chunked body's last chunk (every server here sends chunked bodies)."""
    while time.perf_counter() < window.end:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        sent = time.perf_counter()
        writer.write(request)
        first = None
        tail = b""
        last = b""
        while True:
            data = await reader.read(65536)
            if not data:
                break
            found = (tail + data).count(MARKER)
            tail, last = data[-1:], (last + data)[-400:]  # the end says how it ended
            if found:
                now = time.perf_counter()
                if first is None:
                    first = now
                    if window.start <= now < window.end:
                        window.first.append((now - sent) * 1000)
                if window.start <= now < window.end:
                    window.tokens += found
            if last.endswith(END):
                break
        writer.close()
        if first is None or b"[DONE]" not in last:
            window.failures.append(last.decode("latin-1"))


async def load(port: int, path: str, model: str, streams: int, warmup: float, seconds: float) -> Window:
    body = chat_body(model)
    request = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
               f"Authorization: Bearer {API_KEY}\r\nConnection: close\r\nContent-Length: {len(body)}\r\n\r\n"
               ).encode() + body
    start = time.perf_counter() + warmup
    window = Window(start, start + seconds)
    await asyncio.gather(*(client(port, request, window) for _ in range(streams)))
    return window


# --- the run --------------------------------------------------------------------------------------


def start_llmproxy(port: int, backend_port: int, source: str | None = None) -> subprocess.Popen:
    """``llmproxy serve`` in front of the fake; ``source``: a checkout whose llmproxy to run instead of
    this one's (another commit's, to compare in one run)."""
    command = [sys.executable, "-m", "llmproxy", "serve", "--backend", "llamacpp", "--endpoint",
               f"http://127.0.0.1:{backend_port}", "--wrapper", "chatml", "--port", str(port),
               "--log-level", "warning", "--api-key", API_KEY, "--max-running", "256"]
    env = None if source is None else {**os.environ, "PYTHONPATH": source}
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=source)


def measure(name: str, process: subprocess.Popen | None, fake: subprocess.Popen, port: int, model: str,
            streams: int, options: argparse.Namespace, direct: dict | None) -> dict:
    pid = process.pid if process is not None else None
    cpu: dict[str, tuple[float, float, float]] = {}  # (proxy, fake, load generator) CPU seconds

    def now() -> tuple[float, float, float]:
        times = os.times()
        return cpu_seconds(pid) if pid else 0.0, cpu_seconds(fake.pid), times.user + times.system

    async def run() -> Window:
        task = asyncio.ensure_future(load(port, "/v1/chat/completions", model, streams, options.warmup,
                                          options.seconds))
        await asyncio.sleep(options.warmup)
        cpu["before"] = now()
        await asyncio.sleep(options.seconds)
        cpu["after"] = now()
        return await task

    window = asyncio.run(run())
    rate = window.tokens / options.seconds
    first = window.first or [float("nan")]
    proxy_us, fake_us, load_us = ((after - before) / max(window.tokens, 1) * 1e6
                                  for before, after in zip(cpu["before"], cpu["after"], strict=True))
    result = {"name": name, "rate": rate, "p50": statistics.median(first), "p99": percentile(first, 0.99),
              "cpu_us": proxy_us if pid else None, "failures": len(window.failures)}
    line = (f"  {name:9} {rate:7.0f} tokens/s ({rate / (streams * options.rate):4.0%} of {streams} x rate)"
            f"   first token p50 {result['p50']:7.1f} ms  p99 {result['p99']:7.1f} ms")
    if direct is not None:
        line += (f"  (p50 {result['p50'] - direct['p50']:+.1f} ms vs direct, rate {rate / direct['rate']:4.0%}"
                 " of direct)")
    if result["cpu_us"] is not None:
        line += f"   proxy CPU {result['cpu_us']:.0f} us/token"
    line += f"   (fake {fake_us:.0f}, load {load_us:.0f} us/token)"
    if window.failures:
        line += f"   {len(window.failures)} failed streams, the first ending {window.failures[0][-300:]!r}"
    print(line, flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--litellm", default="/tmp/litellm-venv/bin/litellm", help="the litellm command")
    parser.add_argument("--streams", type=int, nargs="+", default=[32, 64])
    parser.add_argument("--tokens", type=int, default=400, help="tokens a stream")
    parser.add_argument("--rate", type=float, default=200.0, help="tokens/s a stream")
    parser.add_argument("--seconds", type=float, default=8.0, help="the measured window")
    parser.add_argument("--warmup", type=float, default=3.0, help="load before the window")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of every target at each load, alternating")
    parser.add_argument("--no-litellm", action="store_true", help="measure direct and llmproxy alone")
    parser.add_argument("--baseline", metavar="CHECKOUT",
                        help="also measure the llmproxy of another checkout (git worktree add /tmp/old HEAD)")
    parser.add_argument("--serve-fake", type=int, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.serve_fake:
        asyncio.run(serve_paced(options.serve_fake, options.tokens, options.rate))
        return

    ports = {"fake": free_port(), "llmproxy": free_port(), "baseline": free_port(), "litellm": free_port()}
    processes: dict[str, subprocess.Popen] = {}
    with tempfile.TemporaryDirectory() as workdir:
        try:
            processes["fake"] = subprocess.Popen([sys.executable, __file__, "--serve-fake", str(ports["fake"]),
                                                  "--tokens", str(options.tokens), "--rate", str(options.rate)])
            processes["llmproxy"] = start_llmproxy(ports["llmproxy"], ports["fake"])
            if options.baseline:
                processes["baseline"] = start_llmproxy(ports["baseline"], ports["fake"], options.baseline)
            if not options.no_litellm:
                processes["litellm"] = start_litellm(options.litellm, ports["litellm"], ports["fake"], Path(workdir))
            for name, port in ports.items():
                if name in processes:
                    wait_for_port(port, 120)
            proxies = [process.pid for name, process in processes.items() if name != "fake"]
            pinned = pin_apart(proxies, [0, processes["fake"].pid])
            print(f"{options.tokens} tokens a stream at {options.rate:g} tokens/s; {options.warmup:g} s warm-up, "
                  f"{options.seconds:g} s measured; " + ("the proxies on one core, the fake backend and the load "
                                                          "generator on another" if pinned else
                                                          "one core shared by the fake, the load and the proxy"))
            targets = [("direct", None, ports["fake"], "fake"), ("llmproxy", processes["llmproxy"], ports["llmproxy"],
                                                                  "bench")]
            if "baseline" in processes:
                targets.append(("baseline", processes["baseline"], ports["baseline"], "bench"))
            if "litellm" in processes:
                targets.append(("litellm", processes["litellm"], ports["litellm"], "bench"))
            for streams in options.streams:
                for round_ in range(1, options.rounds + 1):
                    print(f"{streams} streams" + (f", round {round_}:" if options.rounds > 1 else ":"))
                    direct = None
                    for name, process, port, model in targets:
                        result = measure(name, process, processes["fake"], port, model, streams, options, direct)
                        if name == "direct":
                            direct = result
        finally:
            for process in processes.values():
                process.terminate()
            for process in processes.values():
                process.wait(timeout=30)


if __name__ == "__main__":
    main()
