"""The cost of ``choose`` (llmproxy.decide): tokens/s of its answers against ``free``'s on the embedded model.

The same requests go through two routes on the embedded SmolLM2 that differ only in their decide mode:
plain answers (requests no tool fits: ``choose`` decides to answer, ``free`` answers as it always does)
and calls (``choose`` decides to call; ``free`` is told to, with ``tool_choice: "required"``, the same call
grammar). Each request is run once to load the model and fill its prompt cache, then ``--runs`` times per
mode, alternating, so both meet the same machine; a run counts where both modes gave that kind of answer.
Tokens/s is completion tokens over the wall time of the whole pipeline (render, grammar, the first step's
choice, generation, checks), the prompt read from the cache. Run:

    .venv/bin/python bench/bench_decide.py --runs 5
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from llmproxy.evaluation import load_scenarios
from llmproxy.proxy import chat_completion
from llmproxy.route import build_route

SUITE = Path(__file__).parent.parent / "scenarios" / "decisions.jsonl"


def timed(request, route) -> tuple[float, int, bool]:
    start = time.perf_counter()
    response = chat_completion(request, route)
    elapsed = time.perf_counter() - start
    return elapsed, response.usage.completion_tokens, bool(response.choices[0].message.tool_calls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs per request and mode")
    parser.add_argument("--max-tokens", type=int, default=96)
    args = parser.parse_args()
    settings = {"max_tokens": args.max_tokens, "seed": 7}
    routes = {"free": build_route(decide="free", settings=settings),
              "choose": build_route(decide="choose", settings=settings)}
    scenarios = [s for s in load_scenarios(SUITE) if s.decision == "answer" and s.request.messages[-1].role == "user"]
    calls = [s for s in load_scenarios(SUITE) if s.decision == "call"]
    kinds = {"plain answers": [(s.request, s.request) for s in scenarios],
             "calls": [(s.request.model_copy(update={"tool_choice": "required"}), s.request) for s in calls]}
    print(f"embedded {routes['free'].backend.model_name}, {args.runs} runs a request and mode, "
          f"max_tokens {args.max_tokens}")
    print(f"| {'answers':13} | {'mode':6} | {'runs':>8} | {'tokens':>6} | {'tokens/s median':>15} | "
          f"{'tokens/s of all':>15} |")
    print(f"|{'-' * 15}|{'-' * 8}|{'-' * 9}:|{'-' * 7}:|{'-' * 16}:|{'-' * 16}:|")
    for kind, pairs in kinds.items():
        rates: dict[str, list[float]] = {"free": [], "choose": []}
        totals = {mode: [0.0, 0] for mode in rates}
        for free_request, choose_request in pairs:
            asked = {"free": free_request, "choose": choose_request}
            for mode in rates:
                timed(asked[mode], routes[mode])  # the prompt into the cache, the first choice's vocabulary scan
            for _ in range(args.runs):
                runs = {mode: timed(asked[mode], routes[mode]) for mode in rates}
                if any(called != (kind == "calls") for _, _, called in runs.values()):
                    continue  # one of them answered the other way: not a pair of this kind of answer
                for mode, (elapsed, tokens, _) in runs.items():
                    rates[mode].append(tokens / elapsed)
                    totals[mode][0] += elapsed
                    totals[mode][1] += tokens
        for mode, values in rates.items():
            elapsed, tokens = totals[mode]
            print(f"| {kind:13} | {mode:6} | {len(values):8d} | {tokens:6d} | {statistics.median(values):15.1f} | "
                  f"{tokens / elapsed:15.1f} |")


if __name__ == "__main__":
    main()
