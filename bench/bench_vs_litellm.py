"""llmproxy beside LiteLLM over real HTTP: the same MemGPT-sized request, the same instant fake
backend, the same load generator, in one run (not part of the test run).

    fake backend   bench/fake_backend.py in its own process: llama.cpp's /completion for llmproxy,
                   OpenAI's /v1/chat/completions (a tool call) for LiteLLM; both answer at once
    llmproxy       `llmproxy serve --backend llamacpp --endpoint FAKE --wrapper chatml`, as users run it:
                   renders the prompt, counts its tokens with the backend's /tokenize, builds the
                   grammar, streams the answer from the backend, repairs and checks the call
    LiteLLM        `litellm --config` (its proxy server) with one model: openai/fake at FAKE/v1; it
                   forwards the chat request as it is (no prompt, grammar or repair work)
    load           N keep-alive clients (default 8) in this process, each posting the request again as
                   soon as its answer is in, for a fixed time; each proxy is measured in turn, twice

Both require the same API key (LiteLLM refuses to start without one), sent by the load generator.

Target (issue 14): llmproxy >= 10x LiteLLM, >= 560 requests/s at 8 clients on the 2-core machine, p99
under 30 ms. Everything shares the machine's cores, so the numbers are for comparing within one run.

LiteLLM is not a dependency of llmproxy; install it in a venv of its own:
    python3.11 -m venv /tmp/litellm-venv && /tmp/litellm-venv/bin/pip install 'litellm[proxy]'
Run: .venv/bin/python bench/bench_vs_litellm.py [--litellm /tmp/litellm-venv/bin/litellm] [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_server import Connection, concurrent, cpu_seconds, memgpt_request, percentile, wait_for_port  # noqa: E402

API_KEY = "sk-bench-0123456789abcdef0123456789abcdef"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_fake(port: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(HERE / "fake_backend.py"), "--port", str(port)])


def start_llmproxy(port: int, backend_port: int) -> subprocess.Popen:
    command = [sys.executable, "-m", "llmproxy", "serve", "--backend", "llamacpp", "--endpoint",
               f"http://127.0.0.1:{backend_port}", "--wrapper", "chatml", "--port", str(port),
               "--log-level", "warning", "--api-key", API_KEY]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def start_litellm(litellm: str, port: int, backend_port: int, workdir: Path) -> subprocess.Popen:
    config = workdir / "litellm.yaml"
    config.write_text(
        "model_list:\n"
        "  - model_name: bench\n"
        "    litellm_params:\n"
        "      model: openai/fake\n"
        f"      api_base: http://127.0.0.1:{backend_port}/v1\n"
        "      api_key: unused\n"
        "general_settings:\n"
        f"  master_key: {API_KEY}\n"
        "litellm_settings:\n"
        "  telemetry: false\n"
        "  set_verbose: false\n"
    )
    # Offline: LiteLLM would fetch its model price list from GitHub at start.
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR"}
    command = [litellm, "--config", str(config), "--port", str(port), "--host", "127.0.0.1", "--num_workers", "1"]
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=workdir)


async def check_answer(port: int, body: bytes) -> None:
    connection = Connection(port, body, API_KEY)
    await connection.open()
    answer = json.loads(await connection.post())
    connection.close()
    call = answer["choices"][0]["message"]["tool_calls"][0]["function"]
    assert call["name"] == "send_message" and json.loads(call["arguments"])["message"], answer


def measure(name: str, process: subprocess.Popen, port: int, body: bytes, clients: int, seconds: float) -> dict:
    asyncio.run(concurrent(port, body, clients, 2.0, API_KEY))  # warm-up: connections, caches, lazy imports
    before = cpu_seconds(process.pid)
    _, samples = asyncio.run(concurrent(port, body, clients, seconds, API_KEY))
    cpu = (cpu_seconds(process.pid) - before) / len(samples) * 1000
    result = {"name": name, "rps": len(samples) / seconds, "p50": statistics.median(samples),
              "p99": percentile(samples, 0.99), "cpu": cpu}
    print(f"  {name:9} {result['rps']:7.0f} requests/s   p50 {result['p50']:6.2f} ms   p99 {result['p99']:6.2f} ms"
          f"   proxy CPU {cpu:.2f} ms/request", flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--litellm", default="/tmp/litellm-venv/bin/litellm", help="the litellm command")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-litellm", action="store_true", help="measure llmproxy alone")
    options = parser.parse_args()

    body_fields = memgpt_request()
    body = json.dumps(body_fields).encode()
    ports = {"fake": free_port(), "llmproxy": free_port(), "litellm": free_port()}
    processes: dict[str, subprocess.Popen] = {}
    with tempfile.TemporaryDirectory() as workdir:
        try:
            processes["fake"] = start_fake(ports["fake"])
            processes["llmproxy"] = start_llmproxy(ports["llmproxy"], ports["fake"])
            if not options.no_litellm:
                processes["litellm"] = start_litellm(options.litellm, ports["litellm"], ports["fake"], Path(workdir))
            for name, port in ports.items():
                if name in processes:
                    wait_for_port(port, 120)
            proxies = [name for name in ("llmproxy", "litellm") if name in processes]
            for name in proxies:
                asyncio.run(check_answer(ports[name], body))
            print(f"request: {len(body):,} bytes, {len(body_fields['messages'])} messages, "
                  f"{len(body_fields['tools'])} tools; {options.clients} clients, {options.seconds:g} s each, "
                  f"{options.rounds} rounds; {os.cpu_count()} cores shared by all processes")
            results: dict[str, list[dict]] = {name: [] for name in proxies}
            for round_ in range(options.rounds):
                print(f"round {round_ + 1}:")
                for name in proxies:
                    results[name].append(measure(name, processes[name], ports[name], body, options.clients,
                                                 options.seconds))
        finally:
            for process in processes.values():
                process.terminate()
            for process in processes.values():
                process.wait(timeout=30)
    best = {name: max(runs, key=lambda r: r["rps"]) for name, runs in results.items()}
    if "litellm" in best:
        ratio = best["llmproxy"]["rps"] / best["litellm"]["rps"]
        print(f"llmproxy / LiteLLM (best rounds): {ratio:.1f}x requests/s; "
              f"p99 {best['llmproxy']['p99']:.1f} ms vs {best['litellm']['p99']:.1f} ms")


if __name__ == "__main__":
    main()
