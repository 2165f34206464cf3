"""The cost of ``choose`` (llmproxy.decide): tokens/s of its answers against ``free``'s on the embedded model.

The same requests go through two routes on the embedded SmolLM2 that differ only in their decide mode:
plain answers (requests no tool fits: ``choose`` decides to answer, ``free`` answers as it always does)
and calls (``choose`` decides to call; ``free`` is told to, with ``tool_choice: "required"``, the same call
grammar). Each request is run once to load the model, then ``--runs`` times per mode, alternating, so both
meet the same machine; a run counts where both modes gave that kind of answer. The two modes' prompts
differ (``auto`` adds a sentence on answering in text), so before each timed run its prompt is read into
the cache untimed. Tokens/s is completion tokens over the wall time of the whole pipeline (render,
grammar, the first step's choice, the function ranking, generation, checks); the spread is the middle
half of the runs' rates. On a shared machine, ``--cpu-time`` counts this process's CPU time instead,
with llama.cpp on one thread, so other work on the machine costs it little. Run:

    .venv/bin/python bench/bench_decide.py --runs 5
    .venv/bin/python bench/bench_decide.py --runs 5 --cpu-time
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from llmproxy.backends.base import GenerationParams
from llmproxy.evaluation import load_scenarios
from llmproxy.proxy import chat_completion, plan
from llmproxy.route import build_route

SUITE = Path(__file__).parent.parent / "scenarios" / "decisions.jsonl"


def timed(request, route, clock) -> tuple[float, int, bool]:
    route.backend.complete(plan(request, route).rendered.prompt, GenerationParams(max_tokens=1))  # into the cache
    start = clock()
    response = chat_completion(request, route)
    elapsed = clock() - start
    return elapsed, response.usage.completion_tokens, bool(response.choices[0].message.tool_calls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs per request and mode")
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--cpu-time", action="store_true", help="CPU time, llama.cpp on one thread")
    args = parser.parse_args()
    clock = time.process_time if args.cpu_time else time.perf_counter
    if args.cpu_time:
        os.cpu_count = lambda: 1  # read by the embedded backend when it loads the model: one thread
    settings = {"max_tokens": args.max_tokens, "seed": 7}
    routes = {"free": build_route(decide="free", settings=settings),
              "choose": build_route(decide="choose", settings=settings)}
    scenarios = [s for s in load_scenarios(SUITE) if s.decision == "answer" and s.request.messages[-1].role == "user"]
    calls = [s for s in load_scenarios(SUITE) if s.decision == "call"]
    kinds = {"plain answers": [(s.request, s.request) for s in scenarios],
             "calls": [(s.request.model_copy(update={"tool_choice": "required"}), s.request) for s in calls]}
    print(f"embedded {routes['free'].backend.model_name}, {args.runs} runs a request and mode, "
          f"max_tokens {args.max_tokens}, {'CPU time, one thread' if args.cpu_time else 'wall time'}")
    print(f"| {'answers':13} | {'mode':6} | {'runs':>8} | {'tokens':>6} | {'tokens/s median':>15} | "
          f"{'middle half':>11} | {'tokens/s of all':>15} |")
    print(f"|{'-' * 15}|{'-' * 8}|{'-' * 9}:|{'-' * 7}:|{'-' * 16}:|{'-' * 12}:|{'-' * 16}:|")
    for kind, pairs in kinds.items():
        rates: dict[str, list[float]] = {"free": [], "choose": []}
        totals = {mode: [0.0, 0] for mode in rates}
        for free_request, choose_request in pairs:
            asked = {"free": free_request, "choose": choose_request}
            for mode in rates:
                timed(asked[mode], routes[mode], clock)  # loads the model, scans the vocabulary for the first choice
            for _ in range(args.runs):
                runs = {mode: timed(asked[mode], routes[mode], clock) for mode in rates}
                if any(called != (kind == "calls") for _, _, called in runs.values()):
                    continue  # one of them answered the other way: not a pair of this kind of answer
                for mode, (elapsed, tokens, _) in runs.items():
                    rates[mode].append(tokens / elapsed)
                    totals[mode][0] += elapsed
                    totals[mode][1] += tokens
        for mode, values in rates.items():
            elapsed, tokens = totals[mode]
            low, _, high = statistics.quantiles(values, n=4)
            print(f"| {kind:13} | {mode:6} | {len(values):8d} | {tokens:6d} | {statistics.median(values):15.1f} | "
                  f"{low:5.1f}-{high:<5.1f} | {tokens / elapsed:15.1f} |")


if __name__ == "__main__":
    main()
