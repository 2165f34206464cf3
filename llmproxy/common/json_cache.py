"""Caching what is made from a client's JSON value (a request's ``tools``, which agents send unchanged every
turn) by the value's JSON bytes."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any, TypeVar

from llmproxy.common.bounded_cache import bounded_cache
from llmproxy.common.json_bytes import json_bytes

T = TypeVar("T")


def cached_by_json(max_bytes: int) -> Callable[[Callable[[Any], T]], Callable[[Any], T]]:
    """Cache a translation of one decoded JSON value (a request's ``tools``, which agents send
    unchanged every turn) by the value's JSON bytes, keeping at most ``max_bytes`` of them
    (llmproxy.common.bounded_cache). The translation is made from the bytes decoded again, so what it gives
    depends on the key alone: equal bytes, equal translation. (orjson writes NaN and the infinities
    as null, as pydantic writes them into the pipeline's own caches: nothing downstream tells them
    apart.) A translation that raises is not kept. What it gives is shared by every request with that
    value: it must be read only."""

    def decorate(translate: Callable[[Any], T]) -> Callable[[Any], T]:
        @bounded_cache(max_bytes)
        def from_json(text: bytes) -> T:
            return translate(json.loads(text))

        @functools.wraps(translate)
        def cached(value: Any) -> T:
            return from_json(json_bytes(value))

        cached.cache_clear = from_json.cache_clear  # type: ignore[attr-defined]
        cached.cache_bytes = from_json.cache_bytes  # type: ignore[attr-defined]
        return cached

    return decorate
