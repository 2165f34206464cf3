"""How deep a client's JSON may nest: ``MAX_NESTING`` levels of arrays and objects, in a request body
and in the JSON text a request carries in its strings (a past call's arguments, a tool's result).

Code that walks a value goes down a level at a time: llmproxy's own walkers, the faces' translations,
Jinja's ``tojson``, ``json.dumps`` (Python's limit is about 1,000 frames, shared with the stack below the
walker), orjson and pydantic (which refuse to write more than 255 levels). Bounded at 200, a value
leaves every walker room, and every face room to wrap it in its own objects.

``client_json`` reads JSON text under that bound with pydantic-core's parser, which stops at exactly
200 levels and reads a request body in half the time of ``json.loads``: the bound costs nothing.
What that parser refuses and ``json.loads`` reads (a lone surrogate, escaped ``"\\ud800"`` or in a str,
a byte-order mark, UTF-16, a control character under ``strict=False``) is read by ``json.loads`` and then
measured; what neither reads raises ``json.loads``'s own error.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel
from pydantic_core import from_json

MAX_NESTING = 200  # pydantic-core's own limit (tests/test_nesting.py holds it to this)


class TooDeep(ValueError):
    """JSON nested deeper than ``MAX_NESTING`` levels."""

    def __init__(self) -> None:
        super().__init__(f"arrays and objects nested deeper than {MAX_NESTING} levels")


def client_json(text: str | bytes, *, strict: bool = True) -> Any:
    """The value of the JSON ``text``; ``TooDeep`` past ``MAX_NESTING`` levels, else ``ValueError``
    where it is not JSON. ``strict=False`` lets strings hold control characters, as in ``json.loads``."""
    try:
        return from_json(text, cache_strings="keys")
    except ValueError as exc:
        if str(exc).startswith("recursion limit exceeded"):
            raise TooDeep() from None
    except TypeError:  # a str holding a lone surrogate, which it cannot take as UTF-8
        pass
    try:
        value = json.loads(text, strict=strict)
    except RecursionError:
        raise TooDeep() from None
    if nested_deeper(value):
        raise TooDeep()
    return value


def nested_deeper(value: Any, limit: int = MAX_NESTING) -> bool:
    """Whether ``value`` holds arrays or objects (lists, tuples, dicts, pydantic models) more than
    ``limit`` levels deep, counted as pydantic-core counts them (an empty one holds nothing to walk: it
    adds no level); a level at a time, with no recursion."""
    level = [value]
    for _ in range(limit + 1):
        level = [child for node in level if isinstance(node, _CONTAINERS) and node for child in _children(node)]
        if not level:
            return False
    return True


_CONTAINERS = (dict, list, tuple, BaseModel)


def _children(node: Any) -> Any:
    if isinstance(node, dict):
        return node.values()
    return node.__dict__.values() if isinstance(node, BaseModel) else node
