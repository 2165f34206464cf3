"""Client schemas are checked before use: each malformed or hostile one is a 400 naming its path."""

from __future__ import annotations

import pytest

from llmproxy.client_schemas import MAX_DEPTH, MAX_PROPERTIES, MAX_VALUES, check_client_schema
from llmproxy.errors import InvalidRequestError

WHERE = "tools[0].function.parameters"


def nested(depth: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def properties(count: int) -> dict:
    return {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(count)}}


@pytest.mark.parametrize("schema,param,words", [
    ({"type": "object", "properties": [None]}, f"{WHERE}.properties", 'is not of type "object"'),
    ({"type": "object", "properties": {"a": {"minLength": "x"}}}, f"{WHERE}.properties.a.minLength", '"integer"'),
    ({"type": "object", "properties": {"a": {"type": "strin"}}}, f"{WHERE}.properties.a.type", "not a valid JSON schema"),
    ({"type": "string", "pattern": "("}, f"{WHERE}.pattern", "not a valid regular expression"),
    (nested(1_000), WHERE, f"deeper than {MAX_DEPTH}"),
    (properties(MAX_PROPERTIES + 1), WHERE, f"more than {MAX_PROPERTIES:,} properties"),
    ({"type": "object", "properties": {"a": properties(MAX_PROPERTIES // 2 + 1), "b": properties(MAX_PROPERTIES // 2)}},
     WHERE, f"more than {MAX_PROPERTIES:,} properties"),  # counted over the whole schema
    ({"enum": list(range(MAX_VALUES))}, WHERE, f"more than {MAX_VALUES:,} JSON values"),
    ({"type": "object", "properties": {"half \ud800 a pair": {"type": "string"}}}, f"{WHERE}.properties",
     "lone surrogate"),  # a name jsonschema-rs reads: it takes no surrogate
])
def test_a_bad_schema_is_refused_by_path(schema, param, words):
    with pytest.raises(InvalidRequestError, match=words) as refused:
        check_client_schema(schema, WHERE)
    assert refused.value.param == param


def test_good_schemas_pass():
    check_client_schema(nested(MAX_DEPTH // 2 - 1), WHERE)  # two levels of JSON a level of schema
    check_client_schema({"type": "object", "properties": {"when": {"type": "string", "format": "date"},
                                                          "n": {"type": "integer", "minimum": 0}}}, WHERE)
    assert check_client_schema(properties(MAX_PROPERTIES), WHERE) == 3 + 2 * MAX_PROPERTIES  # its JSON values: object, "object", properties, 2 a property
