"""Fuzzing every face of the server for longer than the test suite does, counted (not part of the test run).

A real server (tests/fuzz_run.py: uvicorn on a free port, instant in-process backends, a route per call
syntax family, the inspector's capture on) gets, per seed:

    schemathesis +   requests generated from the server's own /openapi.json, valid for its schema
    schemathesis -   the same, invalid: wrong types, missing fields, out-of-range values
    hostile chat     tests/test_fuzz.py's chat requests: parts swapped for random JSON, tool schemas of
                     the wrong shapes
    mutated          tests/test_fuzz_faces.py's cases: every POST endpoint's seeds (Codex, Claude Code,
                     MemGPT, the SDKs) with parts broken anywhere in them, streamed or not

Every answer is counted by endpoint and status and timed. A 5xx, a 4xx outside the endpoint's own
envelope, a malformed stream, a stream ending in an error of the server's own, no answer at all, or an
error in the server's log (a failure after the answer went out) is a finding, printed with its request (the first few). At the end: the slowest answer, how many took over
5 s, and whether the server still answers GET /v1/models. The suite runs the same checks, sized for CI:
tests/test_fuzz_openapi.py, tests/test_fuzz.py and tests/test_fuzz_faces.py.

Run: .venv/bin/python bench/bench_fuzz.py [--cases 10000] [--seeds 1 2 3] [--findings FILE]
"""

from __future__ import annotations

import argparse
import collections
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import hypothesis  # noqa: E402
import requests  # noqa: E402
import schemathesis  # noqa: E402
from fuzz_answers import answer_problem  # noqa: E402
from fuzz_endpoints import ENDPOINTS, Endpoint, endpoint_at  # noqa: E402
from fuzz_mutations import cases, encode  # noqa: E402
from fuzz_run import WRAPPERS, Answer, Target, fuzzed_server  # noqa: E402
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from test_fuzz import hostile_bodies  # noqa: E402

SLOW = 5.0  # seconds: an answer slower than this is counted
SHARES = {"schemathesis +": 0.15, "schemathesis -": 0.15, "hostile chat": 0.1, "mutated": 0.6}
CHAT = endpoint_at("/v1/chat/completions")

# (endpoint, answer, the request as text) for one generated item
Sender = Callable[[Any], tuple[Endpoint, Answer, str]]


class Tally:
    """Answers counted by endpoint and status; the slowest; the findings (the first few kept, and each
    request whole in ``saved`` when given, to replay it)."""

    def __init__(self, target: Target, saved: Path | None = None) -> None:
        self.target = target
        self.saved = saved
        self.statuses: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.findings: list[str] = []
        self.found = 0
        self.slowest = (0.0, "")
        self.slow = 0

    def add(self, endpoint: Endpoint, answer: Answer, shown: str) -> None:
        self.statuses[endpoint.path][answer.status] += 1
        if answer.seconds > self.slowest[0]:
            self.slowest = (answer.seconds, f"{endpoint.path} {shown[:200]}")
        self.slow += answer.seconds > SLOW
        if answer.status == 0:
            problem = f"no answer: {answer.body[:200].decode(errors='replace')}"
        else:
            problem = answer_problem(endpoint, answer.status, answer.content_type, answer.body)
        logged = self.target.logged()
        if problem is None and logged:
            problem = f"the server logged {logged[0][:300]}"
        if problem is not None:
            self.found += 1
            if self.saved is not None:
                with self.saved.open("a", encoding="utf-8") as file:
                    file.write(f"{endpoint.path} -> {answer.status} ({problem})\n{shown}\n\n")
            if len(self.findings) < 8:
                self.findings.append(f"{endpoint.path} -> {answer.status} ({problem}) for {shown[:400]}")

    @property
    def cases(self) -> int:
        return sum(sum(counts.values()) for counts in self.statuses.values())

    @property
    def fives(self) -> int:
        return sum(count for counts in self.statuses.values() for status, count in counts.items() if status >= 500)


def fuzz(strategy: Any, send: Sender, examples: int, seed: int, tally: Tally) -> None:
    @hypothesis.seed(seed)
    @settings(max_examples=examples, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def run(item: Any) -> None:
        tally.add(*send(item))

    run()


def senders(target: Target) -> dict[str, tuple[Any, Sender]]:
    schema = schemathesis.openapi.from_url(target.root + "/openapi.json")
    session = requests.Session()

    def call(case: Any) -> tuple[Endpoint, Answer, str]:
        started = time.perf_counter()
        try:
            response = case.call(base_url=target.root, session=session, timeout=60)
        except requests.RequestException as exc:
            return endpoint_at(case.operation.path), Answer(0, "", str(exc).encode(), 60.0), case.as_curl_command()
        content_type = response.headers.get("content-type") or [""]  # schemathesis lists each header's values
        answer = Answer(response.status_code, content_type[0], response.content, time.perf_counter() - started)
        return endpoint_at(case.operation.path), answer, case.as_curl_command()

    def post(case: tuple[Endpoint, Any]) -> tuple[Endpoint, Answer, str]:
        endpoint, body = case
        try:
            answer = target.send(endpoint, body)
        except Exception as exc:  # noqa: BLE001 - no answer at all (the server gone) is a finding too
            answer = Answer(0, "", repr(exc).encode(), 60.0)
        return endpoint, answer, encode(body).decode()

    return {
        "schemathesis +": (schema.as_strategy(schemathesis.GenerationMode.POSITIVE), call),
        "schemathesis -": (schema.as_strategy(schemathesis.GenerationMode.NEGATIVE), call),
        "hostile chat": (hostile_bodies().map(lambda body: (CHAT, body)), post),
        "mutated": (cases(ENDPOINTS, list(WRAPPERS)), post),
    }


def shares(cases: int) -> list[tuple[str, int]]:
    """``cases`` shared among the kinds as SHARES says, the last taking what rounding left."""
    counts = [(name, int(cases * share)) for name, share in SHARES.items()]
    counts[-1] = (counts[-1][0], cases - sum(count for _, count in counts[:-1]))
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=10_000, help="requests in all, over every seed")
    parser.add_argument("--seeds", type=int, nargs="+", default=[random.randrange(1 << 32)], help="one run each")
    parser.add_argument("--findings", type=Path, help="append each finding's whole request to this file")
    options = parser.parse_args()
    print(f"{options.cases} cases over seeds {options.seeds}, each seed's shared "
          + ", ".join(f"{name} {share:.0%}" for name, share in SHARES.items()), flush=True)

    started = time.monotonic()
    with fuzzed_server() as target:
        total = Tally(target)
        kinds = senders(target)
        for index, seed in enumerate(options.seeds):
            for name, examples in shares(options.cases // len(options.seeds) + (index < options.cases % len(options.seeds))):
                tally = Tally(target, options.findings)
                began = time.monotonic()
                strategy, send = kinds[name]
                target.capture()  # the rerun's placeholder names a request still kept
                fuzz(strategy, send, examples, seed, tally)
                print(f"seed {seed:<10} {name:<15} {tally.cases:6d} cases in {time.monotonic() - began:6.1f} s   "
                      f"5xx: {tally.fives}   findings: {tally.found}   slowest {tally.slowest[0]:.2f} s", flush=True)
                for finding in tally.findings:
                    print(f"    {finding}")
                for path, counts in tally.statuses.items():
                    total.statuses[path].update(counts)
                total.found += tally.found
                total.slow += tally.slow
                total.slowest = max(total.slowest, tally.slowest)
        still = target.answers()
    print(f"\nby endpoint and status ({time.monotonic() - started:.0f} s in all):")
    for path, counts in sorted(total.statuses.items()):
        shown = ", ".join(f"{status}: {count}" for status, count in sorted(counts.items()))
        print(f"  {path:<40} {sum(counts.values()):6d}   {shown}")
    print(f"total: {total.cases} cases, {total.fives} x 5xx, {total.found} findings, {total.slow} answers over "
          f"{SLOW:.0f} s; slowest {total.slowest[0]:.2f} s ({total.slowest[1][:160]}); "
          f"GET /v1/models afterwards: {'answered' if still else 'NO ANSWER'}")


if __name__ == "__main__":
    main()
