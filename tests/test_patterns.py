"""Schema patterns are matched in linear time, and what cannot be is refused when the request arrives."""

from __future__ import annotations

import time

import pytest

from llmproxy.calls import schema_problem
from llmproxy.errors import InvalidRequestError
from llmproxy.grammar.patterns import check_patterns
from llmproxy.prompts import load_wrapper
from llmproxy.proxy import draft, parse_request
from llmproxy.route import Route
from scripted_backend import ScriptedBackend


def test_a_catastrophic_pattern_is_checked_at_once():
    started = time.perf_counter()
    problem = schema_problem({"a": "a" * 5_000 + "!"}, {"properties": {"a": {"type": "string", "pattern": "^(a+)+$"}}})
    assert "does not match" in problem
    assert time.perf_counter() - started < 5  # a hang guard: Python's re would take longer than the universe


def test_patterns_and_pattern_properties_still_decide():
    schema = {"type": "object", "properties": {"zip": {"pattern": "^[0-9]{5}$"}},
              "patternProperties": {"^x-": {"type": "integer"}}}
    assert schema_problem({"zip": "12345", "x-a": 1}, schema) is None
    assert "does not match" in schema_problem({"zip": "1234"}, schema)
    assert "is not of type 'integer'" in schema_problem({"x-a": "no"}, schema)


@pytest.mark.parametrize("pattern", [r"(a)\1", "(?=a)b", "(?<!x)y"])
def test_what_cannot_run_in_linear_time_is_refused_by_path(pattern):
    with pytest.raises(InvalidRequestError, match=r"f\.properties\.a\.pattern: the pattern .* cannot be checked"):
        check_patterns({"properties": {"a": {"pattern": pattern}}}, "f")


def test_a_request_with_such_a_pattern_is_refused_before_rendering():
    request = parse_request({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "string", "pattern": r"(x)\1"}}}}}]})
    route = Route("t", ScriptedBackend(), load_wrapper("chatml-json").wrapper, grammar="none")
    with pytest.raises(InvalidRequestError) as refused:
        draft(request, route)
    assert refused.value.param == "tools[0].function.parameters.properties.a.pattern"
