"""What a member's backend says about its own load, read by the pool's background checks.

llama.cpp: ``GET /slots`` (every slot, ``is_processing`` in current servers, ``state`` 0/1 before), else
``GET /metrics`` (``llamacpp:requests_processing`` and ``llamacpp:requests_deferred``; only with
``--metrics``). vLLM: ``GET /metrics`` (``vllm:num_requests_running`` and ``vllm:num_requests_waiting``).
Other backends report nothing: llmproxy's own count of requests in flight is their load. The parsers
are pure, so they are tested without a server.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from llmproxy.backends.base import Backend
from llmproxy.errors import BackendHTTPError

POLL_TIMEOUT = 2.0  # seconds a load report may take; a member slower than that is checked again next round


@dataclass(frozen=True)
class Load:
    """Requests the backend works on (``busy``) and holds waiting (``queued``); ``slots``: how many it
    runs at once, where it says."""

    busy: int
    queued: int = 0
    slots: int | None = None

    @property
    def total(self) -> int:
        return self.busy + self.queued


def parse_slots(payload: Any) -> Load:
    """llama.cpp's ``GET /slots``: a list of slots."""
    if not isinstance(payload, list):
        raise ValueError("GET /slots did not answer with a list of slots")
    busy = sum(1 for slot in payload if slot.get("is_processing", slot.get("state", 0) != 0))
    return Load(busy=busy, slots=len(payload))


def parse_prometheus(text: str, busy_name: str, queued_name: str) -> Load:
    """The sums of two gauges over their label sets (vLLM labels each by model)."""
    sums = {busy_name: 0.0, queued_name: 0.0}
    found = False
    for line in text.splitlines():
        sample = _SAMPLE.match(line)
        if sample is not None and sample.group(1) in sums:
            sums[sample.group(1)] += float(sample.group(2))
            found = True
    if not found:
        raise ValueError(f"GET /metrics has neither {busy_name} nor {queued_name}")
    return Load(busy=int(sums[busy_name]), queued=int(sums[queued_name]))


_SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})?\s+(\S+)")  # name{labels} value


class LoadReader:
    """How one member's load is read: ``None`` from ``read`` means the backend reports none."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.kind = backend.name if backend.name in ("llamacpp", "vllm") else None
        self.slots_missing = False  # llama.cpp started with --no-slots: its /metrics is read instead

    async def read(self) -> Load | None:
        """The member's load now; raises the backend's error when it does not answer (a failed check)."""
        if self.kind is None:
            return None
        if self.kind == "vllm":
            return await self._read("/metrics", lambda text: parse_prometheus(
                text, "vllm:num_requests_running", "vllm:num_requests_waiting"))
        if not self.slots_missing:
            try:
                return await self._read("/slots", lambda text: parse_slots(json.loads(text)))
            except BackendHTTPError as exc:
                if exc.status not in (404, 501):  # 501: started with --no-slots
                    raise
                self.slots_missing = True
        try:
            return await self._read("/metrics", lambda text: parse_prometheus(
                text, "llamacpp:requests_processing", "llamacpp:requests_deferred"))
        except BackendHTTPError as exc:
            if exc.status not in (404, 501):  # 501: started without --metrics: it reports nothing
                raise
            self.kind = None
            return None

    async def _read(self, path: str, parse: Callable[[str], Load]) -> Load:
        http = self.backend.ahttp  # type: ignore[attr-defined]
        text = await http.get_text(path, timeout=POLL_TIMEOUT)
        with http.expect_shape(http.url(path)):
            return parse(text)
