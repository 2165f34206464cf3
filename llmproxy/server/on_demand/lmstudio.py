"""Models that LM Studio loads by itself: on their first request (its just-in-time loading), and unloaded
after the ``ttl`` that llmproxy sends with each request (LM Studio 0.3.9+, the request body's ``ttl``;
without one, LM Studio's own default of an hour), so that a model's ttl holds there as for the models
llmproxy loads. Their state, for /v1/models and the inspector, is what LM Studio says when a client
asks: ``GET /api/v0/models`` lists each model's ``state``, "loaded" or "not-loaded".

They are not scheduled in the memory budget: LM Studio decides what it holds (its auto-evict unloads
one model it loaded for a request before it loads another).
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Iterable
from typing import Any

from llmproxy.backends.lmstudio import LMStudioBackend
from llmproxy.errors import LLMProxyError

LISTING = "/api/v0/models"
READ_SECONDS = 2.0  # a listing slower than that: its state is unknown this time
STATES = {"loaded": "loaded", "not-loaded": "unloaded"}  # LM Studio's words -> llmproxy's


class LMStudioModel:
    """A model on LM Studio (``backend``) that unloads there after ``ttl`` idle seconds (0: LM Studio's default)."""

    def __init__(self, backend: LMStudioBackend, ttl: float) -> None:
        self.backend = backend
        self.ttl = ttl
        backend.ttl = math.ceil(ttl) if ttl > 0 else None
        self.state = "unknown"  # until read
        self.error: str | None = None  # why it could not be read

    def facts(self) -> dict[str, Any]:
        return {"state": self.state, "ttl": self.ttl, "loaded_by": "lmstudio", "error": self.error}

    def read(self, listing: Any) -> None:
        """Its state in a ``GET /api/v0/models`` answer."""
        entries = listing.get("data") if isinstance(listing, dict) else None
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, dict) and entry.get("id") == self.backend.model:
                self.state, self.error = STATES.get(entry.get("state"), "unknown"), None
                return
        self.state, self.error = "unknown", f"LM Studio does not list {self.backend.model!r} in {LISTING}"


async def refresh(models: Iterable[LMStudioModel]) -> None:
    """Read each model's state: one listing per LM Studio server, all at once."""
    servers: dict[str, list[LMStudioModel]] = {}
    for model in models:
        servers.setdefault(model.backend.endpoint, []).append(model)
    await asyncio.gather(*(_read(listed) for listed in servers.values()))


async def _read(models: list[LMStudioModel]) -> None:
    try:
        listing = json.loads(await models[0].backend.ahttp.get_text(LISTING, timeout=READ_SECONDS))
    except (LLMProxyError, ValueError) as exc:
        for model in models:
            model.state = "unknown"
            model.error = f"{LISTING} did not answer: {getattr(exc, 'message', None) or exc}"
        return
    for model in models:
        model.read(listing)
