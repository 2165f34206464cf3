"""The JSON schema of the whole answer object a wrapper asks for.

Backends that constrain output with a JSON schema instead of a grammar (Ollama's ``format``) get this:
``{"function": <one of the names>, "params": {...that function's parameters...}}``, with the inner
monologue where the wrapper puts it, and the thoughts-only object allowed when the call is optional.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from llmproxy.types import FunctionDefinition
from llmproxy.wrappers import INNER_THOUGHTS_KEY, InnerThoughts

_THOUGHTS = {"type": "string"}


def call_json_schema(
    functions: Sequence[FunctionDefinition], *, inner_thoughts: InnerThoughts, optional: bool, only: str | None = None
) -> dict[str, Any]:
    """Schema for an answer calling one of ``functions`` (only ``only`` when given)."""
    variants = []
    for function in functions:
        if only is not None and function.name != only:
            continue
        params = copy.deepcopy(function.parameters)
        params.setdefault("type", "object")
        if inner_thoughts == "params":
            params["properties"] = {INNER_THOUGHTS_KEY: _THOUGHTS, **params.get("properties", {})}
            params["required"] = [INNER_THOUGHTS_KEY, *params.get("required", [])]
        properties: dict[str, Any] = {}
        if inner_thoughts == "top":
            properties[INNER_THOUGHTS_KEY] = _THOUGHTS
        properties["function"] = {"const": function.name}
        properties["params"] = params
        variants.append(
            {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}
        )
    if optional and inner_thoughts == "top":
        variants.append(
            {"type": "object", "properties": {INNER_THOUGHTS_KEY: _THOUGHTS}, "required": [INNER_THOUGHTS_KEY],
             "additionalProperties": False}
        )
    return variants[0] if len(variants) == 1 else {"anyOf": variants}
