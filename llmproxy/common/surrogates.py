"""Lone surrogates: JSON can carry half a UTF-16 pair (``"\\ud800"``), which is no Unicode text.

No prompt can hold one and no UTF-8 encoder (llama.cpp's, jsonschema-rs's) takes one, so a request
that holds one is refused, naming where.
"""

from __future__ import annotations

from typing import Any

from llmproxy.errors import InvalidRequestError


def refuse_lone_surrogates(value: Any, where: str) -> None:
    """JSON can carry half a UTF-16 pair (``"\\ud800"``); no prompt can hold one, so it is refused by name."""
    stack = [(value, where)]
    while stack:  # not recursive: the depth is the client's
        item, path = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise InvalidRequestError(
                    f"invalid request: {path or 'body'}: holds a lone surrogate ({item[exc.start]!r} at {exc.start}), "
                    "which is not valid Unicode; send the text as UTF-8", param=path or None) from None
        elif isinstance(item, dict):
            stack += [(v, f"{path}.{k}" if path else str(k)) for k, v in item.items()]
            stack += [(k, path) for k in item if isinstance(k, str)]
        elif isinstance(item, (list, tuple)):
            stack += [(v, f"{path}.{i}") for i, v in enumerate(item)]
