"""Models on servers that load and unload them on command: Ollama, and llama.cpp's server in router mode.

Ollama (``/api/generate`` with an empty prompt) loads the model, and keeps it as long as ``keep_alive``
says: the model's ttl and a margin, sent with every request too (else each request would set Ollama's own
5 minutes), so that llmproxy's ttl decides and Ollama's lets the model go only if llmproxy is gone; -1
(until told) for a model that never unloads; ``keep_alive: 0`` unloads it; ``/api/ps`` says how big it is.
llama.cpp's router: ``POST /models/load`` and ``/models/unload`` with ``{"model": id}`` start and stop
the model's own server, and ``GET /models`` gives each model's ``status.value`` (``loading``,
``loaded``, ``unloaded``, with ``failed`` and ``exit_code`` when it could not start), polled until the
load or unload is done.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import httpx

from llmproxy.backends.base import Backend

POLL_SECONDS = 0.25
KEEP_ALIVE_MARGIN = 10  # seconds Ollama keeps a model past its ttl: llmproxy unloads it first, and counts it


class ControlFailed(Exception):
    """The server did not load or unload the model as asked."""


class _Commanded:
    """A model that ``backend``'s server loads on command (its endpoint, model name and key)."""

    def __init__(self, backend: Backend, start_timeout: float) -> None:
        self.backend = backend.name
        self.endpoint: str = getattr(backend, "endpoint")
        self.model: str = getattr(backend, "model") or ""
        if not self.model:
            raise ValueError("a model loaded on command needs its model name")
        self.headers = dict(getattr(getattr(backend, "ahttp", None), "_headers", None) or {})
        self.start_timeout = start_timeout

    async def _call(self, method: str, path: str, body: dict[str, Any] | None = None,
                    timeout: float | None = None) -> Any:
        try:
            async with httpx.AsyncClient(timeout=timeout or self.start_timeout, headers=self.headers) as client:
                response = await client.request(method, self.endpoint + path, json=body)
        except httpx.HTTPError as exc:
            raise ControlFailed(f"{self.backend} at {self.endpoint} did not answer {method} {path}: {exc!r}") from None
        if response.status_code >= 400:
            raise ControlFailed(f"{self.backend} at {self.endpoint} answered {method} {path} with "
                                f"{response.status_code}: {response.text[:300]}")
        try:
            return response.json()
        except ValueError:
            raise ControlFailed(f"{self.backend} at {self.endpoint} answered {method} {path} with no JSON") from None


class OllamaControl(_Commanded):
    """A model that Ollama loads and unloads when told, idle ``ttl`` seconds at most (0: never)."""

    def __init__(self, backend: Backend, start_timeout: float, ttl: float) -> None:
        super().__init__(backend, start_timeout)
        self.keep_alive = keep_alive(ttl)
        backend.keep_alive = self.keep_alive  # type: ignore[attr-defined] - an OllamaBackend's, on every request

    async def load(self) -> int | None:
        answer = await self._call("POST", "/api/generate", {"model": self.model, "keep_alive": self.keep_alive,
                                                            "stream": False})
        if not answer.get("done"):
            raise ControlFailed(f"ollama did not load {self.model!r}: {str(answer)[:300]}")
        listed = await self._call("GET", "/api/ps", timeout=10)
        for entry in listed.get("models") or []:
            if self.model in (entry.get("name"), entry.get("model")):
                return int(entry.get("size") or 0) or None
        return None

    async def unload(self) -> None:
        await self._call("POST", "/api/generate", {"model": self.model, "keep_alive": 0, "stream": False}, timeout=30)


class RouterControl(_Commanded):
    """A model that llama.cpp's router starts and stops."""

    async def load(self) -> int | None:
        await self._call("POST", "/models/load", {"model": self.model})
        await self._until("loaded", self.start_timeout)
        return None

    async def unload(self) -> None:
        await self._call("POST", "/models/unload", {"model": self.model}, timeout=30)
        await self._until("unloaded", 30)

    async def _until(self, wanted: str, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while True:
            status = await self._status()
            if status.get("value") == wanted:
                return
            if status.get("failed"):
                raise ControlFailed(f"llama.cpp's router could not start {self.model!r} "
                                    f"(exit code {status.get('exit_code')})")
            if time.monotonic() > deadline:
                raise ControlFailed(f"{self.model!r} was still {status.get('value')!r} after {seconds:g} s, "
                                    f"not {wanted!r}")
            await asyncio.sleep(POLL_SECONDS)

    async def _status(self) -> dict[str, Any]:
        listed = await self._call("GET", "/models", timeout=10)
        for entry in listed.get("data") or []:
            if entry.get("id") == self.model:
                status = entry.get("status")
                return status if isinstance(status, dict) else {"value": status}
        raise ControlFailed(f"llama.cpp's router does not list {self.model!r}")


def keep_alive(ttl: float) -> int:
    """Ollama's keep_alive (seconds; -1: until told) for a model llmproxy unloads after ``ttl`` idle seconds."""
    return -1 if ttl <= 0 else math.ceil(ttl) + KEEP_ALIVE_MARGIN
