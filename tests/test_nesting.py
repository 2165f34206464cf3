"""llmproxy.common.nesting: JSON read under the 200-level bound, as json.loads reads it otherwise; and the
bound held on the library's Python values."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scripted_backend import ScriptedBackend

from llmproxy.backends.base import Completion
from llmproxy.common.nesting import MAX_NESTING, TooDeep, client_json, nested_deeper
from llmproxy.errors import InvalidRequestError
from llmproxy.prompts import load_wrapper
from llmproxy.proxy import chat_completion, get_chat_completion, parse_request
from llmproxy.route import Route


def arrays(depth: int, inner: str = "1") -> str:
    return "[" * depth + inner + "]" * depth


def objects(depth: int) -> str:
    return '{"a": ' * depth + "1" + "}" * depth


@pytest.mark.parametrize("nest", [arrays, objects])
def test_the_bound_is_the_parsers_own(nest):
    """pydantic-core's parser stops exactly at MAX_NESTING (a new version that moves it fails here)."""
    assert nested_deeper(client_json(nest(MAX_NESTING)), MAX_NESTING - 1)
    with pytest.raises(TooDeep, match="deeper than 200 levels"):
        client_json(nest(MAX_NESTING + 1))


@pytest.mark.parametrize("text", [arrays(MAX_NESTING + 1), arrays(5_000), objects(50_000)])
@pytest.mark.parametrize("escape", ['"\\ud800"', "\ufeff"])  # a lone surrogate, a byte-order mark: json.loads reads them
def test_what_only_json_loads_reads_is_held_to_the_same_bound(text, escape):
    body = f'{{"x": {escape}, "v": {text}}}' if escape != "\ufeff" else escape + text
    with pytest.raises(TooDeep):
        client_json(body.encode("utf-8"))
    shallow = body.replace(text, arrays(MAX_NESTING - 1)).encode("utf-8")
    assert client_json(shallow) == json.loads(shallow)


def test_a_str_holding_a_lone_surrogate_is_read():
    assert client_json('["\ud800"]') == ["\ud800"]
    with pytest.raises(TooDeep):
        client_json(arrays(MAX_NESTING + 1, '"\ud800"'))


def test_what_neither_reads_is_json_loads_error():
    with pytest.raises(ValueError, match="Expecting value"):  # json.loads's own message, as clients saw it before
        client_json(b'{"a": }')
    assert client_json('"a\nb"', strict=False) == "a\nb"
    with pytest.raises(ValueError, match="control character"):
        client_json('"a\nb"')


json_texts = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10**40), max_value=10**40) | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=30).map(json.dumps)


def same(a, b) -> bool:
    """Equal, NaN equal to NaN, and of the same types (1 is not 1.0), keys in the same order."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(same(a[key], b[key]) for key in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


@given(json_texts)
def test_any_json_reads_as_json_loads_reads_it(text):
    assert same(client_json(text), json.loads(text))
    assert same(client_json(text.encode()), json.loads(text))


def nested(depth: int, leaf=1):
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def test_depth_is_counted_as_the_parser_counts_it():
    assert not nested_deeper("a string, iterable but no level")
    assert not nested_deeper([], 0) and nested_deeper([1], 0)
    assert not nested_deeper(nested(3), 3) and nested_deeper(nested(4), 3)
    assert not nested_deeper(nested(4, []), 4)  # an empty one holds nothing to walk
    assert nested_deeper({"a": ({"b": [1]},)}, 3) and not nested_deeper({"a": ({"b": [1]},)}, 4)
    assert nested_deeper(nested(100_000), MAX_NESTING)  # no recursion


@pytest.mark.parametrize("field, value", [
    ("tools", [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "default": nested(5_000)}}}]),
    ("response_format", {"type": "json_schema", "json_schema": {"name": "f", "schema": {"enum": [nested(300)]}}}),
    ("chat_template_kwargs", {"a": nested(MAX_NESTING)}),
])
def test_the_library_refuses_absurdly_deep_values_by_field(field, value):
    """Python values reach the library unparsed: bounded before anything walks them (was a RecursionError)."""
    with pytest.raises(InvalidRequestError, match=f"{field}: arrays and objects nested too deep") as refused:
        get_chat_completion([{"role": "user", "content": "Hi"}], endpoint_type="llamacpp", endpoint="http://127.0.0.1:9",
                            wrapper="chatml", context_window=4096, **{field: value})
    assert refused.value.param == field


def test_the_library_takes_values_as_deep_as_the_server_does():
    route = Route(name="m", backend=ScriptedBackend(Completion("Hi there.", "stop", 5, 3)), wrapper=load_wrapper("chatml-json").wrapper)
    request = parse_request({"messages": [{"role": "user", "content": "Hi"}],
                             "chat_template_kwargs": {"a": nested(MAX_NESTING - 2)}})
    assert chat_completion(request, route).choices[0].message.content == "Hi there."
