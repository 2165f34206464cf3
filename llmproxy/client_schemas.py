"""JSON schemas a client sends (tool parameters, ``response_format``), checked before anything uses them.

Each is refused with a 400 naming its path when it is nested too deep (the grammar builder, the
validator and the metaschema check all recurse), when it is not a well-formed schema (``minLength:
"x"``, ``properties: [null]``: the 2020-12 metaschema decides), or when a ``pattern`` in it cannot be
matched in linear time (llmproxy.patterns).
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema

from llmproxy._bounded_cache import MIB, bounded_cache
from llmproxy.errors import InvalidRequestError
from llmproxy.patterns import check_patterns
from llmproxy.types import FunctionDefinition

MAX_DEPTH = 64


def check_client_schema(schema: Any, where: str) -> None:
    """Raise InvalidRequestError (param ``where`` or deeper) unless ``schema`` can be used safely."""
    try:
        key = json.dumps(schema, sort_keys=True)
    except RecursionError:
        key = None
    _checked(key, where) if key is not None else _check_depth(schema, where)


def check_tool_parameters(function: FunctionDefinition, where: str) -> None:
    """``check_client_schema`` for a function's parameters, keyed on the definition's JSON, which the
    request makes anyway (serialising the schema again for the key costs as much as the rest)."""
    _checked_function(function.definition_json, where)


@bounded_cache(8 * MIB)
def _checked_function(definition_json: str, where: str) -> bool:
    _check(json.loads(definition_json)["parameters"], where)
    return True


@bounded_cache(8 * MIB)
def _checked(schema_json: str, where: str) -> bool:
    """The checks, once per schema: agents send the same tools every turn."""
    _check(json.loads(schema_json), where)
    return True


def _check(schema: Any, where: str) -> None:
    _check_depth(schema, where)
    problem = _metaschema_problem(schema)
    if problem is not None:
        path, message = problem
        raise InvalidRequestError(f"invalid request: {where}{path}: not a valid JSON schema: {message}",
                                  param=f"{where}{path}")
    check_patterns(schema, where)


def _check_depth(schema: Any, where: str) -> None:
    stack = [(schema, 0)]
    while stack:  # not recursive: the depth is the client's
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise InvalidRequestError(f"invalid request: {where}: the schema nests deeper than {MAX_DEPTH} levels",
                                      param=where)
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        stack += [(child, depth + 1) for child in children if isinstance(child, (dict, list))]


def _metaschema_problem(schema: Any) -> tuple[str, str] | None:
    """(path, message) of the first way the schema breaks the 2020-12 metaschema, or None."""
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(
        jsonschema.Draft202012Validator.META_SCHEMA).iter_errors(schema))
    if error is None:
        return None
    path = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error.absolute_path)
    return path, error.message[:200]
