"""BFCL's function docs as the JSON-schema tools its own handlers send (OpenAI's, Anthropic's).

BFCL writes parameter types as Python names (``dict``, ``float``, ``tuple``, ``any``); its handlers map
them onto JSON Schema, mark floats (``format: float`` and a sentence in the description), add a
sentence saying the function is Python's, and turn the dots of a name into underscores (tool names
allow none; the checker compares the underscored name). The result is the same for every face; only
where the schema sits differs (``tool_function``).
"""

from __future__ import annotations

import copy
from typing import Any

PYTHON_HINT = " Note that the provided function is in Python 3 syntax."
FLOAT_HINT = " This is a float type value."

# BFCL's type names (Python's, and Java's and JavaScript's for its other categories) -> JSON Schema.
JSON_TYPES = {
    "integer": "integer", "number": "number", "float": "number", "string": "string", "boolean": "boolean",
    "bool": "boolean", "array": "array", "list": "array", "dict": "object", "object": "object",
    "tuple": "array", "any": "string", "byte": "integer", "short": "integer", "long": "integer",
    "double": "number", "char": "string", "ArrayList": "array", "Array": "array", "HashMap": "object",
    "Hashtable": "object", "Queue": "array", "Stack": "array", "Any": "string", "String": "string",
    "Bigint": "integer",
}


def tool_name(name: str) -> str:
    """A BFCL function name as a tool may carry it: ``math.factorial`` -> ``math_factorial``."""
    return name.replace(".", "_")


def _item_type(name: Any) -> Any:
    return JSON_TYPES.get(name, name)


def _json_properties(properties: dict[str, Any]) -> dict[str, Any]:
    """Each property's type in JSON Schema terms, one level of items (and items of items) and nested
    properties included, as BFCL converts them; an unknown or missing type becomes a string."""
    for prop in properties.values():
        kind = prop.get("type")
        if kind == "float":
            prop["format"] = "float"
            prop["description"] = prop.get("description", "") + FLOAT_HINT
        prop["type"] = JSON_TYPES.get(kind, "string")
        if prop["type"] not in ("array", "object"):
            continue
        if "properties" in prop:
            _json_properties(prop["properties"])
        elif "items" in prop:
            items = prop["items"]
            items["type"] = _item_type(items.get("type"))
            if items["type"] == "array" and "items" in items:
                items["items"]["type"] = _item_type(items["items"].get("type"))
            elif items["type"] == "object" and "properties" in items:
                _json_properties(items["properties"])
    return properties


def tool_function(doc: dict[str, Any]) -> dict[str, Any]:
    """One BFCL function doc as a function definition (``name``, ``description``, ``parameters``: a JSON
    schema); ``doc`` is left as it was."""
    function = copy.deepcopy(doc)
    function["name"] = tool_name(function["name"])
    function["description"] = function.get("description", "") + PYTHON_HINT
    function["parameters"]["type"] = "object"
    _json_properties(function["parameters"].setdefault("properties", {}))
    return function
