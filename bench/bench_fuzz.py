"""Fuzzing the server for longer than the test suite does, counted (not part of the test run).

A real server (uvicorn on a free port, an instant in-process backend: tests/server_helpers.py) gets:

    schemathesis +   requests generated from the server's own /openapi.json, valid for its schema
    schemathesis -   the same, invalid: wrong types, missing fields, out-of-range values
    hostile          tests/test_fuzz.py's chat requests: valid ones with parts swapped for random JSON
                     (lone surrogates, deep values, huge numbers) and tool schemas of the wrong shapes

Every answer is counted by status. A 5xx, or a 4xx whose body is not OpenAI's error envelope, is a
finding, printed with its request (the first few). The test suite runs the same checks, sized for CI:
tests/test_fuzz_openapi.py and tests/test_fuzz.py.

Run: .venv/bin/python bench/bench_fuzz.py [--examples 1000] [--seed N]
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import httpx  # noqa: E402
import hypothesis  # noqa: E402
import requests  # noqa: E402
import schemathesis  # noqa: E402
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from server_helpers import InstantBackend, envelope_problem, route, running  # noqa: E402
from test_fuzz import hostile_bodies  # noqa: E402

# (status, body, the request as text) for one generated item
Sender = Callable[[Any], tuple[int, bytes, str]]


def fuzz(strategy: Any, send: Sender, examples: int, seed: int) -> tuple[collections.Counter, list[str]]:
    """Statuses of ``examples`` generated requests, and the findings (at most 5 kept)."""
    statuses: collections.Counter = collections.Counter()
    findings: list[str] = []

    @hypothesis.seed(seed)
    @settings(max_examples=examples, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def run(item: Any) -> None:
        status, body, shown = send(item)
        statuses[status] += 1
        problem = "a 5xx" if status >= 500 else envelope_problem(body) if status >= 400 else None
        if problem is not None:
            statuses["findings"] += 1
            if len(findings) < 5:
                findings.append(f"{status} ({problem}) for {shown[:300]}")

    run()
    return statuses, findings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=1000, help="requests per kind")
    parser.add_argument("--seed", type=int, default=random.randrange(1 << 32), help="replay a run")
    options = parser.parse_args()
    print(f"seed {options.seed}, {options.examples} requests per kind")

    with running({"fake": route(InstantBackend(), wrapper="chatml-json")}) as server, httpx.Client(timeout=60) as client:
        root = server.base_url.removesuffix("/v1")
        schema = schemathesis.openapi.from_url(root + "/openapi.json")
        session = requests.Session()

        def call(case: Any) -> tuple[int, bytes, str]:
            response = case.call(base_url=root, session=session, timeout=60)
            return response.status_code, response.content, case.as_curl_command()

        def post(body: dict) -> tuple[int, bytes, str]:
            payload = json.dumps(body, ensure_ascii=True)  # lone surrogates travel as \ud800 escapes
            response = client.post(server.base_url + "/chat/completions", content=payload.encode(),
                                   headers={"content-type": "application/json"})
            return response.status_code, response.content, payload

        kinds = [
            ("schemathesis +", schema.as_strategy(schemathesis.GenerationMode.POSITIVE), call),
            ("schemathesis -", schema.as_strategy(schemathesis.GenerationMode.NEGATIVE), call),
            ("hostile", hostile_bodies(), post),
        ]
        total = collections.Counter()
        for name, strategy, send in kinds:
            started = time.monotonic()
            statuses, findings = fuzz(strategy, send, options.examples, options.seed)
            cases = sum(count for status, count in statuses.items() if status != "findings")
            fives = sum(count for status, count in statuses.items() if status != "findings" and status >= 500)
            shown = ", ".join(f"{status}: {count}" for status, count in sorted(statuses.items(), key=str)
                              if status != "findings")
            print(f"{name:<15} {cases:6d} requests in {time.monotonic() - started:5.1f} s   5xx: {fives}   "
                  f"findings: {statuses['findings']}   ({shown})")
            for finding in findings:
                print(f"    {finding}")
            total.update({"requests": cases, "5xx": fives, "findings": statuses["findings"]})
        still = client.post(server.base_url + "/chat/completions",
                            json={"model": "fake", "messages": [{"role": "user", "content": "hi"}]}).status_code
    print(f"total: {total['requests']} requests, {total['5xx']} x 5xx, {total['findings']} findings; "
          f"a plain request afterwards: {still}")


if __name__ == "__main__":
    main()
