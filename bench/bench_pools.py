"""Pools beside LiteLLM's router: the same four fake members, the same load, in one run (not part of the
test run; issue 23).

    members    four fake servers, each in its own process, speaking llama.cpp's /completion and /slots
               (for llmproxy) and OpenAI's streamed /v1/chat/completions (for LiteLLM); each runs at most
               ``slots`` generations at once at ``rate`` tokens/s a stream, and queues the rest as a real
               server defers them:
                 fast   8 slots, 200 tokens/s
                 slow   4 slots, 100 tokens/s
                 doomed 4 slots, 100 tokens/s, killed halfway through the run (its process ends)
                 hung   accepts connections and never answers anything
    llmproxy   `llmproxy serve --config` with one pool of the four (weight = slots, max_running = slots,
               first_token_timeout 5 s, max_queue 64): balanced by the slots each reports
    LiteLLM    `litellm --config` (its proxy) with the four as one model_name, routing_strategy least-busy,
               timeout 5 s, num_retries 3 (its retries move a request to another deployment)
    load       N clients (default 64), agents each with its own ``user``, each posting a streamed
               MemGPT-sized request as soon as its last answer ended, for a fixed time; a request fails "before it started" when no answer token
               reached its client (an error status, or an error event first)

Each proxy gets fresh members. Targets: 0 requests failed before they started (LiteLLM: counted), p99
latency <= half of LiteLLM's, requests per live member proportional to its capacity (slots x rate) within
15 %, in each half of the run (before the kill and after it). Everything shares the machine's cores:
compare within one run.

LiteLLM is not a dependency of llmproxy; install it in a venv of its own:
    python3.11 -m venv /tmp/litellm-venv && /tmp/litellm-venv/bin/pip install 'litellm[proxy]'
Run: .venv/bin/python bench/bench_pools.py [--litellm /tmp/litellm-venv/bin/litellm] [--seconds 30] [--speed 1]

``--speed 0.25`` runs every member four times slower: the same load then needs a quarter of the CPU, so
on a small machine the shares show the pool's rule (tests/test_pools_balance.py checks it in a
simulation) rather than a proxy, fake members and clients that share too few cores.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from aiohttp import web

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_server import memgpt_request, percentile, wait_for_port  # noqa: E402
from bench_vs_litellm import API_KEY, free_port  # noqa: E402
from fake_backend import CALL_ARGUMENTS, call_answer, tokens  # noqa: E402

MEMBERS = {  # name: (slots, tokens/s a stream, behaviour)
    "fast": (8, 200.0, "ok"),
    "slow": (4, 100.0, "ok"),
    "doomed": (4, 100.0, "ok"),
    "hung": (4, 100.0, "hang"),
}
ERRORS: list[str] = []  # what each failed request got, in this process
ANSWER = tokens(call_answer(CALL_ARGUMENTS["message"]))  # a MemGPT send_message call, ~3 characters a token


# --- a member: one fake server process ----------------------------------------------------------


class Member:
    """A fake server that runs ``slots`` generations at once at ``rate`` tokens/s and queues the rest."""

    def __init__(self, slots: int, rate: float, behaviour: str) -> None:
        self.slots, self.rate, self.behaviour = slots, rate, behaviour
        self.places = asyncio.Semaphore(slots)
        self.active = 0
        self.finished = 0

    async def hang_or(self, request: web.Request) -> None:
        if self.behaviour == "hang":
            await asyncio.Event().wait()  # never answers

    async def generate(self, response: web.StreamResponse, event) -> None:  # noqa: ANN001
        async with self.places:
            self.active += 1
            try:
                for index, token in enumerate(ANSWER):
                    await asyncio.sleep(1 / self.rate)
                    await response.write(b"data: " + json.dumps(event(index, token)).encode() + b"\n\n")
            finally:
                self.active -= 1
        self.finished += 1

    async def completion(self, request: web.Request) -> web.StreamResponse:
        await self.hang_or(request)
        body = await request.json()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await self.generate(response, lambda index, token: {"content": token, "stop": False})
        final = {"content": "", "stop": True, "stop_type": "eos", "tokens_evaluated": len(body["prompt"]) // 4,
                 "tokens_predicted": len(ANSWER)}
        await response.write(b"data: " + json.dumps(final).encode() + b"\n\n")
        return response

    async def chat(self, request: web.Request) -> web.StreamResponse:
        await self.hang_or(request)
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        arguments = json.dumps(CALL_ARGUMENTS)
        pieces = [arguments[i:i + 3] for i in range(0, len(arguments), 3)][:len(ANSWER)]

        def chunk(index: int, token: str) -> dict:
            call = {"index": 0, "function": {"arguments": pieces[index] if index < len(pieces) else ""}}
            if index == 0:
                call.update(id="call_1", type="function", function={"name": "send_message", "arguments": ""})
            return {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": int(time.time()),
                    "model": "fake", "choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}]}

        await self.generate(response, chunk)
        last = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": int(time.time()), "model": "fake",
                "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
        await response.write(b"data: " + json.dumps(last).encode() + b"\n\ndata: [DONE]\n\n")
        return response

    async def slots_(self, request: web.Request) -> web.Response:
        await self.hang_or(request)
        return web.json_response([{"id": i, "is_processing": i < self.active} for i in range(self.slots)])

    async def simple(self, request: web.Request) -> web.Response:
        await self.hang_or(request)
        path = request.path
        if path == "/tokenize":
            return web.json_response({"tokens": list(range(len((await request.json())["content"]) // 4))})
        if path == "/props":
            return web.json_response({"model_path": "/models/fake.gguf", "default_generation_settings": {"n_ctx": 8192}})
        if path == "/v1/models":
            return web.json_response({"object": "list", "data": [{"id": "fake", "object": "model"}]})
        return web.json_response({"status": "ok"})

    async def stats(self, request: web.Request) -> web.Response:
        return web.json_response({"finished": self.finished})


def serve_member(port: int, name: str, speed: float) -> None:
    slots, rate, behaviour = MEMBERS[name]
    member = Member(slots, rate * speed, behaviour)
    app = web.Application()
    app.router.add_post("/completion", member.completion)
    app.router.add_post("/v1/chat/completions", member.chat)
    app.router.add_get("/slots", member.slots_)
    app.router.add_get("/stats", member.stats)
    for path in ("/health", "/props", "/v1/models"):
        app.router.add_get(path, member.simple)
    app.router.add_post("/tokenize", member.simple)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None, backlog=1024)


# --- the proxies --------------------------------------------------------------------------------


def start_llmproxy(port: int, members: dict[str, int], workdir: Path) -> subprocess.Popen:
    lines = [f'  {{ endpoint = "http://127.0.0.1:{members[name]}", name = "{name}", weight = {MEMBERS[name][0]}, '
             f'max_running = {MEMBERS[name][0]} }},' for name in MEMBERS]
    config = workdir / "llmproxy.toml"
    config.write_text('[models.bench]\nbackend = "llamacpp"\nwrapper = "chatml"\ncontext_window = 8192\n'
                      "first_token_timeout = 5\nmax_queue = 64\nmembers = [\n" + "\n".join(lines) + "\n]\n")
    command = [sys.executable, "-m", "llmproxy", "serve", "--config", str(config), "--port", str(port),
               "--log-level", "warning", "--api-key", API_KEY]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def start_litellm(litellm: str, port: int, members: dict[str, int], workdir: Path) -> subprocess.Popen:
    deployments = "".join(
        "  - model_name: bench\n    litellm_params:\n      model: openai/fake\n"
        f"      api_base: http://127.0.0.1:{members[name]}/v1\n      api_key: unused\n      timeout: 5\n"
        for name in MEMBERS)
    config = workdir / "litellm.yaml"
    config.write_text("model_list:\n" + deployments +
                      "router_settings:\n  routing_strategy: least-busy\n  num_retries: 3\n  timeout: 5\n"
                      f"general_settings:\n  master_key: {API_KEY}\n"
                      "litellm_settings:\n  telemetry: false\n  set_verbose: false\n  num_retries: 3\n")
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR"}
    command = [litellm, "--config", str(config), "--port", str(port), "--host", "127.0.0.1", "--num_workers", "1"]
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=workdir)


# --- the load -----------------------------------------------------------------------------------


async def one_request(session: aiohttp.ClientSession, url: str, body: bytes) -> tuple[str, float]:
    """("ok" | "not_started" | "broken", seconds) of one streamed request."""
    started = time.perf_counter()
    answered = False
    try:
        async with session.post(url, data=body, headers={"Content-Type": "application/json",
                                                         "Authorization": f"Bearer {API_KEY}"}) as response:
            if response.status != 200:
                ERRORS.append(f"{response.status} {(await response.read())[:300]!r}")
                return "not_started", time.perf_counter() - started
            async for line in response.content:
                if line.startswith(b"data: [DONE]"):
                    return ("ok" if answered else "not_started"), time.perf_counter() - started
                if line.startswith(b"data: {"):
                    event = json.loads(line[6:])
                    if "error" in event:
                        ERRORS.append(f"event {event['error']}"[:300])
                        return ("broken" if answered else "not_started"), time.perf_counter() - started
                    delta = (event.get("choices") or [{}])[0].get("delta") or {}
                    answered = answered or bool(delta.get("tool_calls") or delta.get("content"))
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        ERRORS.append(repr(exc))
    return ("broken" if answered else "not_started"), time.perf_counter() - started


async def load(port: int, body: bytes, clients: int, seconds: float, doomed: subprocess.Popen,
               members: dict[str, int]) -> dict:
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    outcomes: dict[str, int] = {"ok": 0, "not_started": 0, "broken": 0}
    latencies: list[float] = []
    halves: list[dict[str, int]] = []  # answers each live member finished before the kill, and after it
    deadline = time.perf_counter() + seconds
    timeout = aiohttp.ClientTimeout(total=120)

    async def client(session: aiohttp.ClientSession, number: int) -> None:
        mine = body[:-1] + f', "user": "agent-{number}"}}'.encode()  # 64 agents, each its own conversation
        while time.perf_counter() < deadline:
            outcome, took = await one_request(session, url, mine)
            outcomes[outcome] += 1
            if outcome == "ok":
                latencies.append(took)

    async def finished(session: aiohttp.ClientSession, names: tuple[str, ...]) -> dict[str, int]:
        counts = {}
        for name in names:
            async with session.get(f"http://127.0.0.1:{members[name]}/stats") as response:
                counts[name] = (await response.json())["finished"]
        return counts

    async def kill_halfway(session: aiohttp.ClientSession) -> None:
        await asyncio.sleep(seconds / 2)
        halves.append(await finished(session, ("fast", "slow", "doomed")))
        doomed.send_signal(signal.SIGKILL)

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await asyncio.gather(*(client(session, number) for number in range(clients)), kill_halfway(session))
        at_end = await finished(session, ("fast", "slow"))
    halves.append({name: count - halves[0][name] for name, count in at_end.items()})
    return {"outcomes": outcomes, "latencies": latencies, "halves": halves}


def measure(name: str, start, options: argparse.Namespace, body: bytes) -> dict:  # noqa: ANN001
    ports = {member: free_port() for member in MEMBERS}
    processes = {member: subprocess.Popen([sys.executable, __file__, "--member", member, "--port", str(port),
                                           "--speed", str(options.speed)])
                 for member, port in ports.items()}
    proxy_port = free_port()
    with tempfile.TemporaryDirectory() as workdir:
        proxy = None
        try:
            for port in ports.values():
                wait_for_port(port)
            proxy = start(proxy_port, ports, Path(workdir))
            wait_for_port(proxy_port, 120)
            time.sleep(2)  # the proxy's first checks of its members
            result = asyncio.run(load(proxy_port, body, options.clients, options.seconds, processes["doomed"], ports))
        finally:
            if proxy is not None:
                proxy.terminate()
                proxy.wait(timeout=30)
            for process in processes.values():  # fakes: the hung one would wait for its handlers for ever
                process.kill()
                process.wait(timeout=30)
    outcomes, latencies = result["outcomes"], result["latencies"]
    # Each half of the run on its own: the members alive in it, each with its capacity (slots x rate).
    halves = []
    for finished in result["halves"]:
        capacity = {member: MEMBERS[member][0] * MEMBERS[member][1] for member in finished}
        served = sum(finished.values())
        halves.append({member: (finished[member] / served if served else 0.0,
                                capacity[member] / sum(capacity.values())) for member in finished})
    p50 = statistics.median(latencies) if latencies else float("nan")
    p99 = percentile(latencies, 0.99) if latencies else float("nan")
    print(f"  {name:9} ok {outcomes['ok']:5}  failed before starting {outcomes['not_started']:4}  "
          f"broken mid-stream {outcomes['broken']:3}  p50 {p50 * 1000:6.0f} ms  p99 {p99 * 1000:6.0f} ms", flush=True)
    for half, shares in zip(("before the kill", "after it"), halves):
        print(f"            answers per live member {half} (share of answers / share of capacity): " +
              ", ".join(f"{member} {got:.0%}/{want:.0%} ({got / want:.2f})" for member, (got, want) in shares.items()),
              flush=True)
    for error, count in sorted(collections.Counter(ERRORS).items(), key=lambda item: -item[1])[:5]:
        print(f"            {count} x {error}", flush=True)
    ERRORS.clear()
    return {"name": name, "p99": p99, **outcomes, "halves": halves}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--litellm", default="/tmp/litellm-venv/bin/litellm", help="the litellm command")
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--no-litellm", action="store_true", help="measure llmproxy alone")
    parser.add_argument("--speed", type=float, default=1.0,
                        help="every member's tokens/s times this: below 1, the proxies need less CPU to fill them")
    parser.add_argument("--member", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.member:
        serve_member(options.port, options.member, options.speed)
        return
    body = json.dumps({**memgpt_request(), "stream": True}).encode()
    print(f"{options.clients} clients, streamed MemGPT requests ({len(body):,} bytes), {options.seconds:g} s each; "
          "members: " + ", ".join(f"{n} {s} slots {r * options.speed:g} tok/s {b}"
                                  for n, (s, r, b) in MEMBERS.items()) +
          f"; {os.cpu_count()} cores shared by all processes")
    results = [measure("llmproxy", start_llmproxy, options, body)]
    if not options.no_litellm:
        results.append(measure("LiteLLM", lambda port, members, workdir: start_litellm(
            options.litellm, port, members, workdir), options, body))
        ours, theirs = results
        print(f"p99: llmproxy {ours['p99'] * 1000:.0f} ms, LiteLLM {theirs['p99'] * 1000:.0f} ms "
              f"({ours['p99'] / theirs['p99']:.2f}x); failed before starting: {ours['not_started']} vs "
              f"{theirs['not_started']}")


if __name__ == "__main__":
    main()
