"""How the faces write JSON, and how a translation of a client's JSON value is cached by that JSON:
once per value, afresh for any change, never kept when it fails, bounded in bytes."""

from __future__ import annotations

import json

import pytest

from llmproxy.common.json_cache import cached_by_json
from llmproxy.faces.wire import json_bytes, model_json, sse_event
from llmproxy.types import ErrorDetail, ErrorResponse


def counting_cache(max_bytes: int = 1 << 20):
    """A cached translation (the value, tagged) and the list of values it was made for."""
    made: list = []

    @cached_by_json(max_bytes)
    def translate(value):
        made.append(value)
        if value == "bad":
            raise ValueError("not a tool list")
        return {"translated": value}

    return translate, made


def test_a_value_is_translated_once_and_its_translation_shared():
    translate, made = counting_cache()
    tools = [{"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "string"}}}}]
    first = translate(tools)
    again = translate(json.loads(json.dumps(tools)))  # equal, not the same object: as each request decodes it
    assert first == {"translated": tools} and again is first and made == [tools]


@pytest.mark.parametrize("changed", [
    [{"name": "g", "parameters": {"type": "object", "properties": {"a": {"type": "string"}}}}],
    [{"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}],
    [{"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "string"}}}, "strict": True}],
    [{"parameters": {"type": "object", "properties": {"a": {"type": "string"}}}, "name": "f"}],  # keys reordered
    [{"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "string"}}}}, {"name": "h"}],
    [{"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "string", "default": 1.0}}}}],
])
def test_any_change_is_translated_afresh(changed):
    translate, made = counting_cache()
    translate([{"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "string"}}}}])
    assert translate(changed) == {"translated": changed} and made[-1] == changed and len(made) == 2


def test_a_failed_translation_is_not_kept():
    translate, made = counting_cache()
    for _ in range(2):
        with pytest.raises(ValueError):
            translate("bad")
    assert made == ["bad", "bad"]


def test_the_cache_is_bounded_by_bytes():
    translate, made = counting_cache(max_bytes=64 * 1024)
    values = [[{"name": f"f{n}", "description": "x" * 4000}] for n in range(50)]  # ~200 KB in all
    for value in values:
        translate(value)
    assert translate.cache_bytes() <= 64 * 1024
    translate(values[-1])  # the newest is still held...
    assert len(made) == 50
    translate(values[0])  # ...the oldest was let go, and is made again
    assert len(made) == 51 and made[-1] == values[0]


def test_text_orjson_refuses_is_cached_as_well():
    translate, made = counting_cache()
    value = [{"name": "f", "description": "half a pair \ud800"}]
    assert translate(value) == {"translated": value} and translate(value) == {"translated": value}
    assert made == [value]


def test_events_are_named_after_their_type_and_carry_compact_json():
    assert sse_event({"type": "ping", "n": 1}) == b'event: ping\ndata: {"type":"ping","n":1}\n\n'
    assert json.loads(json_bytes({"t": "\ud800 é"})) == {"t": "\ud800 é"}


@pytest.mark.parametrize("indent", [None, 2])
def test_a_model_is_written_by_pydantic_and_escaped_where_utf8_cannot_hold_it(indent):
    plain = ErrorResponse(error=ErrorDetail(message="no such model 'm'", type="invalid_request_error"))
    assert model_json(plain, indent=indent) == plain.model_dump_json(indent=indent).encode()
    half = ErrorResponse(error=ErrorDetail(message="no such model '\ud800'", type="invalid_request_error"))
    written = model_json(half, exclude_none=True, indent=indent)  # pydantic refuses it: a 500 it was
    assert b"\\ud800" in written and json.loads(written) == half.model_dump(exclude_none=True)
