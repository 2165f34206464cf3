"""Every POST endpoint, fuzzed: valid requests as Codex, Claude Code, MemGPT and the SDKs send them,
with parts broken anywhere in them (tests/fuzz_mutations.py), streamed or not, sent to a real server.
Each is answered with a 4xx in the endpoint's own error envelope or a sound answer (a stream
well-formed in its face's framing): never a 5xx, in a status or inside a stream (tests/fuzz_answers.py),
and the server logs no error, not even after the answer went out.

Deterministic (tests/conftest.py's hypothesis profile) and sized for CI; bench/bench_fuzz.py runs the
same cases for longer, counted.
"""

from __future__ import annotations

import json

import pytest
from fastapi.routing import APIRoute
from fuzz_answers import answer_problem
from fuzz_endpoints import ENDPOINTS
from fuzz_mutations import at, cases, deepest
from fuzz_run import WRAPPERS, fuzzed_server
from hypothesis import HealthCheck, given, settings

from llmproxy.common.nesting import MAX_NESTING

CASES_PER_ENDPOINT = 150


@pytest.fixture(scope="module")
def target():
    with fuzzed_server() as running:
        yield running


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=[endpoint.path for endpoint in ENDPOINTS])
def test_no_case_gets_a_5xx_and_every_answer_is_sound(target, endpoint):
    @settings(max_examples=CASES_PER_ENDPOINT, suppress_health_check=list(HealthCheck))
    @given(case=cases([endpoint], list(WRAPPERS)))
    def fuzz(case):
        _, body = case
        answer = target.send(endpoint, body)
        problem = answer_problem(endpoint, answer.status, answer.content_type, answer.body)
        assert problem is None, f"{endpoint.path} {body!r:.2000}\n-> {answer.status}: {problem}"
        assert target.logged() == [], f"{endpoint.path} {body!r:.2000}"

    fuzz()
    assert target.answers()


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=[endpoint.path for endpoint in ENDPOINTS])
def test_values_as_deep_as_the_server_takes_go_through_every_walker(target, endpoint):
    """The bound (llmproxy.common.nesting) is below every walker's own limit on a request's path: JSON as
    deep as it allows, in any object of any seed or as JSON text in any of its strings, is answered
    soundly, streamed or not, stored and captured; a level more, in an object, is the intake's 400
    naming the top-level field."""
    for seed in endpoint.seeds:
        for path, body in deepest(seed, MAX_NESTING):
            answer = target.send(endpoint, body)
            problem = answer_problem(endpoint, answer.status, answer.content_type, answer.body)
            assert problem is None and target.logged() == [], f"{endpoint.path} at {path}: {answer.status} {problem}"
        for path, body in deepest(seed, MAX_NESTING + 1):
            if isinstance(at(body, path), dict):
                answer = target.send(endpoint, body)
                field = path[0] if path else "deep"  # both envelopes carry error.message
                assert answer.status == 400, f"{endpoint.path} at {path}: {answer.status}"
                assert f"{field}: arrays and objects nested too deep" in json.loads(answer.body)["error"]["message"]


def test_every_post_endpoint_is_fuzzed(target):
    """An endpoint added to the app fails here until tests/fuzz_endpoints.py gives it seeds."""
    posted = {route.path for route in target.server.app.routes if isinstance(route, APIRoute) and "POST" in route.methods}
    assert posted == {endpoint.path for endpoint in ENDPOINTS}
