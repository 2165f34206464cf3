"""Scenario evaluation: run a suite of conversations through a route and score the answers.

A scenario is one line of JSONL: an OpenAI chat request (``messages`` plus ``tools``/``tool_choice`` or
``functions``/``function_call``), a ``name``, and ``expect`` - the function that should be called
(null when any valid call is right, or when the choice is ``none`` and no call is right). A *decision*
scenario (under ``tool_choice: "auto"``) also says what the right decision is: ``"decision": "call"``
(call ``expect``) or ``"decision": "answer"`` (answer in text, no call). The built-in suites are in
``scenarios/``: ``builtin`` (every kind of request), ``decisions`` (calls needed or not, beside other
tools) and ``keywords`` (one per schema keyword the grammar expresses). This is how to pick a wrapper,
grammar mode and decide mode for a model.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from llmproxy._data import data_dir
from llmproxy.errors import ConfigurationError, InvalidRequestError, LLMProxyError, OutputParseError
from llmproxy.proxy import chat_completion, parse_request
from llmproxy.route import Route
from llmproxy.types import ChatRequest


Decision = Literal["call", "answer"]
DECISIONS = ("call", "answer")


@dataclass(frozen=True)
class Scenario:
    name: str
    request: ChatRequest
    expect: str | None
    decision: Decision | None = None  # what a decision scenario should do: call (expect), or answer in text


@dataclass(frozen=True)
class Outcome:
    scenario: str
    valid: bool  # a schema-valid call; or a plain answer where tool_choice allows one (none, auto)
    correct: bool  # valid, and the expected function (when one is expected)
    function: str | None
    arguments: dict[str, Any] | None
    repairs: tuple[str, ...]
    latency_s: float
    error: str | None = None
    attempts: int = 1  # generations it took: more than one when the second chance fired
    decided: bool | None = None  # a decision scenario: whether it called (the right function) or answered rightly


@dataclass(frozen=True)
class Summary:
    wrapper: str
    grammar: str
    decide: str  # how the route decides tool_choice "auto" (llmproxy.decide)
    total: int
    valid: int
    correct: int
    repaired: int
    retried: int  # scenarios that needed a second chance (answered or not)
    mean_latency_s: float
    decisions: int = 0  # decision scenarios decided rightly
    decision_total: int = 0  # decision scenarios


def builtin_scenarios_path(suite: str = "builtin") -> Path:
    """The file of a built-in suite: ``builtin``, ``decisions`` or ``keywords``."""
    return data_dir("scenarios") / f"{suite}.jsonl"


def builtin_suites() -> list[str]:
    return sorted(path.stem for path in data_dir("scenarios").glob("*.jsonl"))


def load_scenarios(path: Path | None = None) -> list[Scenario]:
    """Scenarios from a JSONL file (the built-in suite when ``path`` is None)."""
    path = path or builtin_scenarios_path()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigurationError(f"cannot read scenario file {path}: {exc.strerror}") from exc
    scenarios = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            expect = row.pop("expect", None)
            name = row.pop("name", f"line {number}")
            decision = row.pop("decision", None)
            if decision not in (None, *DECISIONS):
                raise ValueError(f"decision must be one of {', '.join(DECISIONS)}, not {decision!r}")
            scenarios.append(Scenario(name, parse_request(row), expect, decision))
        except (ValueError, AttributeError, InvalidRequestError) as exc:
            raise ConfigurationError(f"{path}, line {number}: not a valid scenario: {exc}") from exc
    if not scenarios:
        raise ConfigurationError(f"{path} holds no scenarios")
    return scenarios


def run_scenario(scenario: Scenario, route: Route) -> Outcome:
    """Send one scenario through ``route`` and score what comes back."""
    start = time.perf_counter()
    try:
        response = chat_completion(scenario.request, route)
    except LLMProxyError as exc:
        attempts = route.retries + 1 if isinstance(exc, OutputParseError) else 1  # every chance was taken
        return Outcome(scenario.name, False, False, None, None, (), time.perf_counter() - start, exc.message, attempts,
                       None if scenario.decision is None else False)
    latency = time.perf_counter() - start
    message = response.choices[0].message
    call = message.tool_calls[0].function if message.tool_calls else message.function_call
    function = call.name if call else None
    mode = scenario.request.choice().mode
    answered = bool((message.content or "").strip())
    if mode == "none":
        valid = call is None and answered
    elif mode == "auto":
        valid = call is not None or answered  # a plain answer is a valid choice under "auto"
    else:
        valid = call is not None  # the pipeline has already checked the arguments against the schema
    correct = valid and (scenario.expect is None or function == scenario.expect)
    repairs = tuple(response.llmproxy.repairs) if response.llmproxy else ()
    attempts = response.llmproxy.attempts if response.llmproxy else 1
    arguments = json.loads(call.arguments) if call else None
    decided = None
    if scenario.decision is not None:
        decided = correct and call is not None if scenario.decision == "call" else call is None and answered
    return Outcome(scenario.name, valid, correct, function, arguments, repairs, latency, None, attempts, decided)


def evaluate(
    scenarios: Sequence[Scenario], route: Route, on_done: Callable[[Outcome], None] | None = None
) -> list[Outcome]:
    """Run every scenario in order; ``on_done`` is told after each one (for progress bars)."""
    outcomes = []
    for scenario in scenarios:
        outcome = run_scenario(scenario, route)
        outcomes.append(outcome)
        if on_done:
            on_done(outcome)
    return outcomes


def summarise(outcomes: Sequence[Outcome], route: Route) -> Summary:
    return Summary(
        wrapper=route.wrapper.name,
        grammar=route.grammar,
        decide=route.decide,
        total=len(outcomes),
        valid=sum(o.valid for o in outcomes),
        correct=sum(o.correct for o in outcomes),
        repaired=sum(bool(o.repairs) for o in outcomes),
        retried=sum(o.attempts > 1 for o in outcomes),
        mean_latency_s=statistics.fmean(o.latency_s for o in outcomes) if outcomes else 0.0,
        decisions=sum(o.decided is True for o in outcomes),
        decision_total=sum(o.decided is not None for o in outcomes),
    )
