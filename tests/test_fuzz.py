"""Hostile and malformed chat requests, generated: a real server answers every one with a 2xx or a 4xx
in OpenAI's error envelope - never a 5xx, never a traceback - and stays up for the next request.

Bodies are built from a valid request with parts swapped for random JSON (any type, deep nesting, lone
surrogates, huge numbers) and tool schemas whose keywords hold the wrong types; hypothesis shrinks a
failure to its smallest form. Every other endpoint, and chat's own in more shapes, is fuzzed by
tests/test_fuzz_faces.py.
"""

from __future__ import annotations

import json

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from server_helpers import InstantBackend, envelope_problem, route, running

BASE = {"model": "fake", "messages": [{"role": "user", "content": "hi"}]}
KEYWORDS = ["type", "properties", "required", "items", "enum", "const", "minimum", "maximum", "minLength",
            "maxLength", "pattern", "format", "anyOf", "oneOf", "allOf", "$ref", "additionalProperties",
            "prefixItems", "minItems", "maxItems", "exclusiveMinimum", "multipleOf", "not", "$defs"]
FIELDS = ["messages", "tools", "tool_choice", "functions", "function_call", "response_format", "max_tokens",
          "temperature", "stop", "seed", "stream", "n", "top_p", "parallel_tool_calls", "logprobs", "model"]

text = st.text(alphabet=st.characters(codec=None), max_size=40)  # lone surrogates included
scalars = st.none() | st.booleans() | st.integers(min_value=-(10**30), max_value=10**30) | st.floats(
    allow_nan=False) | text
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
                           max_leaves=20)
schemas = st.recursive(
    st.dictionaries(st.sampled_from(KEYWORDS), json_values, max_size=4),
    lambda inner: st.fixed_dictionaries({"type": st.just("object"), "properties": st.dictionaries(text, inner, max_size=3)}),
    max_leaves=10)


@st.composite
def hostile_bodies(draw) -> dict:
    body = json.loads(json.dumps(BASE))
    kind = draw(st.sampled_from(["field", "tool", "message"]))
    if kind == "field":
        body[draw(st.sampled_from(FIELDS))] = draw(json_values)
    elif kind == "tool":
        body["tools"] = [{"type": "function", "function": {"name": draw(st.from_regex(r"[a-z_]{1,12}", fullmatch=True)),
                                                           "parameters": draw(schemas)}}]
        body["tool_choice"] = draw(st.sampled_from(["auto", "required", "none"]))
    else:
        body["messages"] = [{"role": draw(st.sampled_from(["user", "assistant", "tool", "system", "x"])),
                             "content": draw(json_values), **draw(st.dictionaries(text, json_values, max_size=2))}]
    return body


@pytest.fixture(scope="module")
def server():
    with running({"fake": route(InstantBackend(), wrapper="chatml-json")}) as running_server:
        yield running_server


@pytest.fixture(scope="module")
def client():
    # One client for every example: a client per request builds an SSL context, most of an example's time.
    with httpx.Client(timeout=30) as shared:
        yield shared


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=hostile_bodies())
def test_no_request_gets_a_5xx(server, client, body):
    payload = json.dumps(body, ensure_ascii=True).encode()  # lone surrogates travel as \\ud800 escapes
    response = client.post(f"{server.base_url}/chat/completions", content=payload,
                           headers={"content-type": "application/json"})
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        assert envelope_problem(response.content) is None, response.text


def test_the_server_still_answers_afterwards(server):
    response = httpx.post(f"{server.base_url}/chat/completions", json=BASE, timeout=30)
    assert response.status_code == 200
