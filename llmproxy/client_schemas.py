"""JSON schemas a client sends (tool parameters, ``response_format``), checked before anything uses them.

Each is refused with a 400 naming its path when it is nested too deep (the grammar builder, the
validator and the metaschema check all recurse), when it is not a well-formed schema (``minLength:
"x"``, ``properties: [null]``: the 2020-12 metaschema decides, checked by jsonschema-rs: Python's
jsonschema took 0.2 ms a property, a second for a 3,000-property tool), or when a ``pattern`` in it cannot be
matched in linear time (llmproxy.grammar.patterns). A schema is also refused when it is larger than a
request's output constraint should be (MAX_PROPERTIES, MAX_VALUES): building, checking and sending
its grammar costs about 0.3 ms a property, and a tool of 3,000 properties would not fit a local
model's prompt anyway.

The checks return the schema's size in JSON values, which the server reads to decide whether drafting
the request is worth a worker thread (llmproxy.server.lanes).
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import jsonschema_rs

from llmproxy.common.bounded_cache import MIB, bounded_cache
from llmproxy.errors import InvalidRequestError
from llmproxy.grammar.patterns import check_patterns
from llmproxy.common.surrogates import refuse_lone_surrogates
from llmproxy.types import FunctionDefinition

MAX_DEPTH = 64  # levels of JSON
MAX_PROPERTIES = 1_000  # in one schema, over all its objects
MAX_VALUES = 20_000  # JSON values in one schema: enum lists, descriptions, keywords


def check_client_schema(schema: Any, where: str) -> int:
    """Raise InvalidRequestError (param ``where`` or deeper) unless ``schema`` can be used safely; else
    its size in JSON values."""
    try:
        key = json.dumps(schema, sort_keys=True)
    except RecursionError:
        key = None
    return _checked(key, where) if key is not None else _measure(schema, where)


def check_tool_parameters(function: FunctionDefinition, where: str) -> int:
    """``check_client_schema`` for a function's parameters, keyed on the definition's JSON, which the
    request makes anyway (serialising the schema again for the key costs as much as the rest)."""
    return _checked_function(function.definition_json, where)


@bounded_cache(8 * MIB)
def _checked_function(definition_json: str, where: str) -> int:
    return _check(json.loads(definition_json)["parameters"], where)


@bounded_cache(8 * MIB)
def _checked(schema_json: str, where: str) -> int:
    """The checks, once per schema: agents send the same tools every turn."""
    return _check(json.loads(schema_json), where)


def _check(schema: Any, where: str) -> int:
    size = _measure(schema, where)
    problem = _metaschema_problem(schema, where)
    if problem is not None:
        path, message = problem
        raise InvalidRequestError(f"invalid request: {where}{path}: not a valid JSON schema: {message}",
                                  param=f"{where}{path}")
    check_patterns(schema, where)
    return size


def _measure(schema: Any, where: str) -> int:
    """The schema's JSON values, counted without recursion (the depth is the client's), within the limits."""
    values = properties = 0
    stack = [(schema, 0)]
    while stack:
        node, depth = stack.pop()
        values += 1
        if depth > MAX_DEPTH:
            raise InvalidRequestError(f"invalid request: {where}: the schema nests deeper than {MAX_DEPTH} levels",
                                      param=where)
        if values > MAX_VALUES:
            raise InvalidRequestError(f"invalid request: {where}: the schema holds more than {MAX_VALUES:,} JSON "
                                      "values; make it smaller", param=where)
        if isinstance(node, dict):
            named = node.get("properties")
            properties += len(named) if isinstance(named, dict) else 0
            if properties > MAX_PROPERTIES:
                raise InvalidRequestError(
                    f"invalid request: {where}: the schema has more than {MAX_PROPERTIES:,} properties (its grammar "
                    "would take seconds to build, and most of a local model's context); make it smaller",
                    param=where)
            stack += [(child, depth + 1) for child in node.values()]
        elif isinstance(node, list):
            stack += [(child, depth + 1) for child in node]
    return values


# Compiled once; it checks against 2020-12 whatever ``$schema`` the client names.
_METASCHEMA = jsonschema_rs.Draft202012Validator(jsonschema.Draft202012Validator.META_SCHEMA)


def _metaschema_problem(schema: Any, where: str) -> tuple[str, str] | None:
    """(path, message) of the first way the schema breaks the 2020-12 metaschema, or None."""
    try:
        error = next(_METASCHEMA.iter_errors(schema), None)
    except UnicodeEncodeError:  # jsonschema-rs takes UTF-8 only
        refuse_lone_surrogates(schema, where)
        raise
    if error is None:
        return None
    path = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error.instance_path)
    return path, error.message[:200]
