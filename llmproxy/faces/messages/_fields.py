"""Reading a decoded JSON body one field at a time, each mistake a 400 that names the field.

Every helper takes the value, and ``where`` — the field's path as the client wrote it
(``messages[2].content[0].tool_use_id``) — and gives the value back checked, or raises
``InvalidRequestError`` with that path as ``param``. Missing optional fields are None.
"""

from __future__ import annotations

from typing import Any

from llmproxy.errors import InvalidRequestError


def path(parent: str, key: str | int) -> str:
    """``parent`` followed by an object key (``tools[0].name``) or a list index (``messages[3]``)."""
    if isinstance(key, int):
        return f"{parent}[{key}]"
    return f"{parent}.{key}" if parent else key


def fail(where: str, problem: str) -> InvalidRequestError:
    return InvalidRequestError(f"{where}: {problem}", param=where)


def required(body: dict[str, Any], key: str, parent: str = "") -> Any:
    """``body[key]``, which must be present and not null."""
    value = body.get(key)
    if value is None:
        raise fail(path(parent, key), "field required")
    return value


def string_field(body: dict[str, Any], key: str, where: str) -> str:
    """``body[key]``, a string that must be there (its path is only spelled out for an error: these
    checks run for every block of every message, on every turn)."""
    value = body.get(key)
    if isinstance(value, str):
        return value
    raise fail(path(where, key), "field required" if value is None else "expected a string")


def an_object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise fail(where, "expected an object")
    return value


def a_list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise fail(where, "expected a list")
    return value


def a_string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise fail(where, "expected a string")
    return value


def a_bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise fail(where, "expected true or false")
    return value


def an_integer(value: Any, where: str, *, least: int | None = None) -> int:
    # JSON's true is a Python int too; a count that says "true" is a mistake all the same.
    if not isinstance(value, int) or isinstance(value, bool):
        raise fail(where, "expected an integer")
    if least is not None and value < least:
        raise fail(where, f"must be at least {least}")
    return value


def a_number(value: Any, where: str, *, low: float, high: float) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise fail(where, "expected a number")
    if not low <= value <= high:
        raise fail(where, f"must be between {low:g} and {high:g}")
    return float(value)


def optional(body: dict[str, Any], key: str, check: Any, parent: str = "", **limits: Any) -> Any:
    """``check(body[key])`` when the field is present and not null, else None."""
    value = body.get(key)
    return None if value is None else check(value, path(parent, key), **limits)


def block_type(block: Any, where: str) -> str:
    """The ``type`` of a content block (an object with a string ``type``)."""
    return string_field(an_object(block, where), "type", where)
