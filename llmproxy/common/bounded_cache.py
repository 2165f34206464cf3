"""A least-recently-used cache bounded by bytes, not by entries.

Caches here are keyed on client text (a message, a tool list, a grammar): an entry-count bound lets a
few thousand large requests pin gigabytes, so these count the characters of their keys and values and
evict the oldest entries past a budget. An entry bigger than a quarter of the budget is not kept.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])
MIB = 1 << 20


def _size(value: Any) -> int:
    """Characters of the strings in ``value`` (and in its tuples, lists and dict values), plus a little for
    the entry itself."""
    if isinstance(value, (str, bytes)):
        return len(value) + 64
    if isinstance(value, (tuple, list)):
        return sum(_size(item) for item in value) + 64
    if isinstance(value, dict):  # a template's view of a message: its texts
        return sum(_size(item) for item in value.values()) + 64
    return 256  # an object built from the key (a validator): the key's size stands for it


def bounded_cache(max_bytes: int) -> Callable[[F], F]:
    """Cache a function of hashable positional arguments, keeping at most ``max_bytes`` of keys and values."""

    def decorate(function: F) -> F:
        entries: OrderedDict[tuple, tuple[Any, int]] = OrderedDict()
        lock = threading.Lock()
        total = 0

        @functools.wraps(function)
        def cached(*args: Any) -> Any:
            nonlocal total
            with lock:
                hit = entries.get(args)
                if hit is not None:
                    entries.move_to_end(args)
                    return hit[0]
            value = function(*args)  # outside the lock: two threads may compute the same entry, once each
            size = _size(args) + _size(value)
            if size > max_bytes // 4:
                return value
            with lock:
                if args not in entries:
                    entries[args] = (value, size)
                    total += size
                while total > max_bytes:
                    _, (_, dropped) = entries.popitem(last=False)
                    total -= dropped
            return value

        def cache_bytes() -> int:
            return total

        def cache_clear() -> None:
            nonlocal total
            with lock:
                entries.clear()
                total = 0

        cached.cache_bytes = cache_bytes  # type: ignore[attr-defined]
        cached.cache_clear = cache_clear  # type: ignore[attr-defined]
        return cached  # type: ignore[return-value]

    return decorate
