"""How ``choose``'s call bias (llmproxy.decide.CALL_BIAS) was calibrated: each request's call margin on the
embedded SmolLM2, and how many requests each bias decides right.

The call margin is how much likelier the model finds starting a call than its favourite other first token,
in nats, at the answer's first step (llmproxy.backends._choice_sampling); ``choose`` calls where the margin
plus the bias is above zero. The requests come from bench/decide_calibration.jsonl - 20 kept apart from the
eval's decision scenarios (scenarios/decisions.jsonl), so the eval measures a bias it did not pick. Run:

    .venv/bin/python bench/decide_calibration.py                               # the calibration requests
    .venv/bin/python bench/decide_calibration.py scenarios/decisions.jsonl     # the eval's, for comparison

Requests that follow the results of the model's own calls are left out: ``choose`` answers them in text.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from llmproxy.backends._choice_sampling import call_margin
from llmproxy.decide import CALL_BIAS
from llmproxy.evaluation import load_scenarios
from llmproxy.proxy import draft
from llmproxy.route import build_route

HERE = Path(__file__).parent


def first_logits(backend, prompt: str) -> np.ndarray:
    """The model's raw logits at the first step of an answer to ``prompt`` (one token is drawn)."""
    seen: list[np.ndarray] = []
    model = backend._model  # the bench reads the loaded model directly: the margin is not in a Completion
    with model.lock:
        model.llama.on_sample = lambda token, logits: seen.append(logits.copy()) if not seen else None
        try:
            model.llama.create_completion(prompt, max_tokens=1, temperature=0)
        finally:
            model.llama.on_sample = None
    return seen[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("suite", nargs="?", type=Path, default=HERE / "decide_calibration.jsonl")
    args = parser.parse_args()
    route = build_route(decide="choose")
    llama = route.backend._model.llama
    margins: list[tuple[str, str, float]] = []
    for scenario in load_scenarios(args.suite):
        drafted = draft(scenario.request, route)
        if drafted.shape.decide != "choose":
            continue
        starts = llama._call_starts(drafted.constraint.choice.triggers)
        margin = call_margin(first_logits(route.backend, drafted.rendered.prompt), starts)
        margins.append((scenario.name, scenario.decision, margin))
        print(f"{scenario.name:28} {scenario.decision:7} call margin {margin:+6.2f}", flush=True)

    def right(bias: float) -> int:
        return sum((margin + bias > 0) == (decision == "call") for _, decision, margin in margins)

    print()
    for bias in np.arange(0, 6.01, 0.5):
        print(f"bias {bias:4.1f}: {right(bias):2d}/{len(margins)} decided right")
    best = max(right(b) for b in np.arange(0, 8, 0.01))
    span = [b for b in np.arange(0, 8, 0.01) if right(b) == best]
    print(f"\nbest: {best}/{len(margins)} for a bias from {span[0]:.2f} to {span[-1]:.2f}; "
          f"CALL_BIAS = {CALL_BIAS}: {right(CALL_BIAS)}/{len(margins)}")


if __name__ == "__main__":
    main()
