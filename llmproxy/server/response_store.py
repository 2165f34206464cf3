"""Stored responses of the Responses API (``store``, ``previous_response_id``, GET and DELETE
/v1/responses/{id}): in this process's memory, bounded by bytes and by age.

A client that continues a conversation by ``previous_response_id`` sends only its new input; the
server prepends what the earlier turn was sent and answered. The store keeps each turn whole (its
input items and the response, as JSON bytes: a third of the memory of the same Python objects), so
one turn is enough to continue from. It holds at most
``max_bytes`` of them (the least recently used go first) and each for ``ttl`` seconds after it was
last used: state that outlives a request must never grow without bound. A server restart forgets
them all; a client then gets a 404 naming the id, never a silently shorter conversation.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_TTL = 3600.0  # seconds: an agent's turns come seconds to minutes apart


@dataclass(slots=True)
class _Entry:
    record: Any
    size: int
    expires: float


class ResponseStore:
    """Records by response id, least recently used first out."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES, ttl: float = DEFAULT_TTL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_bytes = max_bytes
        self.ttl = ttl
        self._clock = clock
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, response_id: str, record: Any, size: int) -> bool:
        """Keep ``record`` (``size`` bytes, as the caller measures it); False when it alone is over the
        bound and is not kept."""
        self.delete(response_id)
        if size > self.max_bytes:
            return False
        self._entries[response_id] = _Entry(record, size, self._clock() + self.ttl)
        self.bytes += size
        while self.bytes > self.max_bytes:
            self._drop(next(iter(self._entries)))
        return True

    def get(self, response_id: str) -> Any | None:
        """The record, which counts as a use; None when unknown or expired."""
        self._expire()
        entry = self._entries.get(response_id)
        if entry is None:
            return None
        entry.expires = self._clock() + self.ttl
        self._entries.move_to_end(response_id)
        return entry.record

    def delete(self, response_id: str) -> bool:
        if response_id not in self._entries:
            return False
        self._drop(response_id)
        return True

    def _drop(self, response_id: str) -> None:
        self.bytes -= self._entries.pop(response_id).size

    def _expire(self) -> None:
        now = self._clock()
        # Least recently used first: every entry's expiry is later than the one before it.
        while self._entries and next(iter(self._entries.values())).expires <= now:
            self._drop(next(iter(self._entries)))
