"""A pool with a hung member and a member killed mid-run: how many requests it costs (issue 33).

    members    four fake llama.cpp servers, each in its own process: three answer POST /completion
               (whole or streamed) after 10, 30 and 90 ms, and report their slots; the fourth accepts
               connections and never answers anything (with ``--hang-at S``: answers as the 30 ms one
               does until S seconds into the run, then hangs). The 10 ms one is killed at ``--kill-at``.
    llmproxy   `llmproxy serve --config` with one pool of the four: first_token_timeout 2 s,
               max_running 64 for the model and each member
    load       24 clients sending the MemGPT request (not streamed; ``--stream`` for streamed) for
               ``--seconds`` (16), each as soon as its last answer came

Prints, per run: answers, errors by status (a request lost is any that got no answer), the requests each
member was sent (from its own count) and the slowest answer. Target: 0 lost, in every run.

Run: .venv/bin/python bench/bench_pool_hung.py [--runs 3] [--seconds 16] [--clients 24] [--stream]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from aiohttp import web

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_server import memgpt_request, wait_for_port  # noqa: E402
from bench_vs_litellm import API_KEY, free_port  # noqa: E402
from fake_backend import CALL_ARGUMENTS, call_answer  # noqa: E402

MEMBERS = {"fast": 0.010, "mid": 0.030, "slow": 0.090, "hung": None}  # seconds to answer; None: never
ANSWER = call_answer(CALL_ARGUMENTS["message"])
STARTING = 3.0  # seconds from the members' start to the load's, about (llmproxy starting and checking them)


def serve_member(port: int, latency: float | None, hang_at: float | None) -> None:
    sent = 0
    started = time.monotonic()
    if latency is None and hang_at is not None:  # answers until it hangs
        latency = MEMBERS["mid"]

    def hung() -> bool:
        return latency is None or (hang_at is not None and time.monotonic() - started >= hang_at)

    async def hang_or_wait() -> None:
        await asyncio.sleep(latency) if not hung() else await asyncio.Event().wait()

    async def completion(request: web.Request) -> web.StreamResponse:
        nonlocal sent
        sent += 1
        body = await request.json()
        await hang_or_wait()
        final = {"content": ANSWER, "stop": True, "stop_type": "eos", "tokens_evaluated": len(body["prompt"]) // 4,
                 "tokens_predicted": len(ANSWER) // 4}
        if not body.get("stream"):
            return web.json_response(final)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b"data: " + json.dumps({"content": ANSWER, "stop": False}).encode() + b"\n\n")
        await response.write(b"data: " + json.dumps({**final, "content": ""}).encode() + b"\n\n")
        return response

    async def slots(request: web.Request) -> web.Response:
        if hung():
            await asyncio.Event().wait()
        return web.json_response([{"id": i, "is_processing": False} for i in range(64)])

    async def tokenize(request: web.Request) -> web.Response:
        if hung():
            await asyncio.Event().wait()
        return web.json_response({"tokens": list(range(len((await request.json())["content"]) // 4))})

    async def props(request: web.Request) -> web.Response:
        if hung():
            await asyncio.Event().wait()
        return web.json_response({"model_path": "/models/fake.gguf", "default_generation_settings": {"n_ctx": 8192}})

    async def stats(request: web.Request) -> web.Response:
        return web.json_response({"sent": sent})

    app = web.Application()
    app.router.add_post("/completion", completion)
    app.router.add_post("/tokenize", tokenize)
    app.router.add_get("/slots", slots)
    app.router.add_get("/props", props)
    app.router.add_get("/health", props)
    app.router.add_get("/stats", stats)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None, backlog=1024)


def start_llmproxy(port: int, members: dict[str, int], workdir: Path) -> subprocess.Popen:
    lines = [f'  {{ endpoint = "http://127.0.0.1:{members[name]}", name = "{name}", max_running = 64 }},'
             for name in MEMBERS]
    config = workdir / "llmproxy.toml"
    config.write_text('[models.bench]\nbackend = "llamacpp"\nwrapper = "chatml"\ncontext_window = 8192\n'
                      "first_token_timeout = 2\nmax_running = 64\nmembers = [\n" + "\n".join(lines) + "\n]\n")
    log = open(workdir / "llmproxy.log", "wb")  # noqa: SIM115 - the process's for its lifetime
    command = [sys.executable, "-m", "llmproxy", "serve", "--config", str(config), "--port", str(port),
               "--log-level", "info", "--api-key", API_KEY]
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)


async def load(port: int, body: bytes, clients: int, seconds: float, kill_at: float,
               fast: subprocess.Popen) -> tuple[collections.Counter, float]:
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    statuses: collections.Counter = collections.Counter()
    slowest = 0.0
    deadline = time.perf_counter() + seconds
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {API_KEY}"}

    async def client(session: aiohttp.ClientSession) -> None:
        nonlocal slowest
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            try:
                async with session.post(url, data=body, headers=headers) as response:
                    text = await response.read()
                    ok = response.status == 200 and (b"[DONE]" in text or not body.endswith(b"true}"))
                    statuses["200" if ok else f"{response.status} {text[:160]!r}"] += 1
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                statuses[repr(exc)[:160]] += 1
            slowest = max(slowest, time.perf_counter() - started)

    async def kill() -> None:
        await asyncio.sleep(kill_at)
        fast.send_signal(signal.SIGKILL)

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                     timeout=aiohttp.ClientTimeout(total=60)) as session:
        await asyncio.gather(*(client(session) for _ in range(clients)), kill())
    return statuses, slowest


async def sent_counts(members: dict[str, int]) -> dict[str, int | str]:
    counts: dict[str, int | str] = {}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        for name, port in members.items():
            try:
                async with session.get(f"http://127.0.0.1:{port}/stats") as response:
                    counts[name] = (await response.json())["sent"]
            except aiohttp.ClientError:
                counts[name] = "killed"
    return counts


def run(options: argparse.Namespace, body: bytes, number: int) -> int:
    ports = {name: free_port() for name in MEMBERS}
    hang_at = [] if options.hang_at is None else ["--hang-at", str(options.hang_at + STARTING)]
    processes = {name: subprocess.Popen([sys.executable, __file__, "--member", name, "--port", str(port),
                                         *(hang_at if MEMBERS[name] is None else [])])
                 for name, port in ports.items()}
    proxy_port = free_port()
    with tempfile.TemporaryDirectory() as workdir:
        proxy = None
        try:
            for port in ports.values():
                wait_for_port(port)
            proxy = start_llmproxy(proxy_port, ports, Path(workdir))
            wait_for_port(proxy_port, 120)
            statuses, slowest = asyncio.run(load(proxy_port, body, options.clients, options.seconds,
                                                 options.kill_at, processes["fast"]))
            counts = asyncio.run(sent_counts(ports))
            log_text = (Path(workdir) / "llmproxy.log").read_text(errors="replace")
            moved = log_text.count("trying another member")
            if options.keep_log:
                Path(options.keep_log).write_text(log_text)
        finally:
            if proxy is not None:
                proxy.terminate()
                proxy.wait(timeout=30)
            for process in processes.values():
                process.kill()
                process.wait(timeout=30)
    answered = statuses.pop("200", 0)
    lost = sum(statuses.values())
    print(f"run {number}: {answered} answered, {lost} lost, slowest {slowest:.2f} s; sent to each member: "
          + ", ".join(f"{name} {count}" for name, count in counts.items()) + f"; moved to another member: {moved}",
          flush=True)
    for status, count in statuses.most_common(5):
        print(f"        {count} x {status}", flush=True)
    return lost


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=16.0)
    parser.add_argument("--kill-at", type=float, default=6.0)
    parser.add_argument("--clients", type=int, default=24)
    parser.add_argument("--stream", action="store_true", help="streamed requests")
    parser.add_argument("--keep-log", help="write llmproxy's log of the last run here")
    parser.add_argument("--hang-at", type=float, help="the hung member answers until this many seconds into the run")
    parser.add_argument("--member", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.member:
        serve_member(options.port, MEMBERS[options.member], options.hang_at)
        return
    body = json.dumps({**memgpt_request(), "stream": options.stream}).encode()
    print(f"{options.clients} clients, {'streamed' if options.stream else 'whole'} MemGPT requests for "
          f"{options.seconds:g} s; members answering in " + ", ".join(
              f"{name} {latency * 1000:g} ms" if latency is not None else
              f"{name} {'never' if options.hang_at is None else f'as mid until {options.hang_at:g} s, then never'}"
              for name, latency in MEMBERS.items()) + f"; fast killed at {options.kill_at:g} s", flush=True)
    lost = [run(options, body, number) for number in range(1, options.runs + 1)]
    print(f"lost in each run: {lost}")


if __name__ == "__main__":
    main()
