"""Checks on single fields of a decoded Responses request, each failure a 400 naming the field.

Every helper takes a value and ``where``, the field's path as the client wrote it
(``input[3].call_id``), and gives the value back checked or raises ``InvalidRequestError`` with that
path as ``param``. Only what would make the request meaningless is refused; the rest is read leniently.
"""

from __future__ import annotations

from typing import Any

from llmproxy.errors import InvalidRequestError


def at(parent: str, key: str | int) -> str:
    """``parent`` followed by a list index (``input[3]``) or an object key (``input[3].call_id``)."""
    return f"{parent}[{key}]" if isinstance(key, int) else f"{parent}.{key}"


def fail(where: str, problem: str) -> InvalidRequestError:
    return InvalidRequestError(f"invalid request: {where}: {problem}", param=where)


def an_object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise fail(where, "must be an object")
    return value


def a_list(value: Any, where: str) -> list[Any]:
    """A list; null or absent is an empty one."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise fail(where, "must be an array")
    return value


def a_name(item: dict[str, Any], key: str, where: str) -> str:
    """``item[key]``, a string that may not be empty (a call's ``call_id``, a tool's ``name``)."""
    value = item.get(key)
    if not isinstance(value, str) or not value:
        raise fail(at(where, key), "must be a non-empty string")
    return value


def optional_text(item: dict[str, Any], key: str, where: str) -> str | None:
    """``item[key]``: a string, or None where it is absent or null."""
    value = item.get(key)
    if value is not None and not isinstance(value, str):
        raise fail(at(where, key), "must be a string")
    return value
