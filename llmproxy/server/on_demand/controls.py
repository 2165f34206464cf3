"""Loading and unloading an embedded model (llama-cpp-python) inside llmproxy's own process.

It loads in a worker thread, one load at a time, so that the growth of the process's memory measured
around it is that model's alone.
"""

from __future__ import annotations

import threading

import anyio

from llmproxy.backends.embedded import EmbeddedBackend
from llmproxy.server.on_demand.sizes import resident_bytes

_one_load = threading.Lock()


class EmbeddedControl:
    """An embedded model, loaded in this process."""

    def __init__(self, backend: EmbeddedBackend) -> None:
        self.embedded = backend
        self.backend = backend.name

    async def load(self) -> int | None:
        return await anyio.to_thread.run_sync(self._load)

    def _load(self) -> int | None:
        with _one_load:
            before = resident_bytes()
            self.embedded.load()
            after = resident_bytes()
        if before is None or after is None:
            return None
        # Never below the file: memory just freed by another model may be reused, and not show as growth.
        return max(after - before, self.embedded.model_path.stat().st_size)

    async def unload(self) -> None:
        await anyio.to_thread.run_sync(self.embedded.unload)

