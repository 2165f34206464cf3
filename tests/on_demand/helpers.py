"""Serving a config file as ``llmproxy serve --config`` does, on a free port in this process."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from llmproxy.server.app import create_app
from llmproxy.server.config import serving
from llmproxy.server.on_demand.sizes import resident_bytes

from server_helpers import RunningServer


@contextlib.contextmanager
def served(config: str, folder: Path, api_key: str | None = None) -> Iterator[RunningServer]:
    path = folder / "server.toml"
    path.write_text(config, encoding="utf-8")
    found = serving(path, {})
    app = create_app(found.routes, default_model=found.server.default_model, api_key=api_key, limits=found.limits,
                     aliases=found.aliases, pools=found.pools, on_demand=found.on_demand)
    server = RunningServer({}, app=app)
    try:
        yield server
    finally:
        server.stop()


class PeakMemory:
    """This process's resident memory, sampled every few milliseconds in a thread: its peak growth."""

    def __init__(self) -> None:
        self.start = resident_bytes() or 0
        self.peak = self.start
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._done.is_set():
            self.peak = max(self.peak, resident_bytes() or 0)
            time.sleep(0.005)

    def stop(self) -> int:
        self._done.set()
        self._thread.join()
        return self.peak - self.start


def wait_for(check, seconds: float = 10.0) -> bool:  # noqa: ANN001 - any callable
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()
