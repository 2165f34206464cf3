"""The last requests the server answered, kept for the inspector and fed live to its open pages.

Bounded twice: by count (``max_entries``) and by the bytes their captured bodies hold (``max_bytes``);
the oldest go first, and a request whose bodies alone are over the byte bound keeps its metadata only.
Recording is on every request's path, so it costs next to nothing when no page listens: the request's
log is kept as it is (no copy), numbered and appended; only with a page open is its summary written,
once, for every page. A page that falls behind is cut off; its browser reconnects and catches up from
the entries kept here (server-sent events' ``Last-Event-ID``).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from llmproxy.server.inspector.steps import Steps
from llmproxy.server.request_log import RequestLog

MIB = 1024 * 1024
DEFAULT_MAX_ENTRIES = 500
DEFAULT_MAX_BYTES = 64 * MIB
BACKLOG = 1000  # events a page may fall behind by before it is cut off


@dataclass(slots=True)
class Entry:
    """One request as the inspector keeps it: its log, numbered, and the bytes its bodies hold."""

    seq: int
    ended: float  # when it ended (seconds since the epoch)
    log: RequestLog
    held: int = 0
    dropped: int = 0  # bytes of bodies too large to keep


class Recent:
    """The last requests; ``steps()`` is what a new request captures into (None unless ``capture``)."""

    def __init__(self, *, capture: bool = False, max_entries: int = DEFAULT_MAX_ENTRIES,
                 max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.capture = capture
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.field_limit = max(1, max_bytes // 16)  # characters of one captured text
        self.entries: deque[Entry] = deque()
        self.bytes = 0  # held by the entries' captured bodies
        self.listeners: set[asyncio.Queue[bytes | None]] = set()
        self.encode: Callable[[Entry], bytes] | None = None  # an entry as a page's event (views.event)
        self._numbers = itertools.count(1)

    def steps(self) -> Steps | None:
        return Steps(self.field_limit) if self.capture else None

    def record(self, log: RequestLog) -> Entry:
        entry = Entry(next(self._numbers), time.time(), log)
        if log.steps is not None:
            held = log.steps.bytes()
            if held > self.max_bytes:
                log.steps, entry.dropped = None, held
            else:
                entry.held = held
                self.bytes += held
        self.entries.append(entry)
        while len(self.entries) > self.max_entries or self.bytes > self.max_bytes:
            self.bytes -= self.entries.popleft().held
        if self.listeners and self.encode is not None:
            self._publish(self.encode(entry))
        return entry

    def get(self, seq: int) -> Entry | None:
        """The entry numbered ``seq``, while it is kept (entries are numbered one by one)."""
        if not self.entries:
            return None
        index = seq - self.entries[0].seq
        return self.entries[index] if 0 <= index < len(self.entries) else None

    def since(self, seq: int) -> Iterator[Entry]:
        """The entries after ``seq``, oldest first."""
        return (entry for entry in self.entries if entry.seq > seq)

    def listen(self) -> asyncio.Queue[bytes | None]:
        """A queue of events for one open page: each request's, as it ends; None once it is cut off."""
        queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.listeners.add(queue)
        return queue

    def leave(self, queue: asyncio.Queue[bytes | None]) -> None:
        self.listeners.discard(queue)

    def _publish(self, event: bytes) -> None:
        for queue in list(self.listeners):
            if queue.qsize() >= BACKLOG:
                self.listeners.discard(queue)
                queue.put_nowait(None)
            else:
                queue.put_nowait(event)
