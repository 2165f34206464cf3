"""llama-cpp-python's own server (``python -m llama_cpp.server``) as a model's ``command``: started on its
first request on the port llmproxy gives it, started again after it was killed, stopped after its ttl."""

from __future__ import annotations

import os
import signal
import sys

import httpx
import pytest

from backends.real_servers import smollm2_gguf

from .helpers import served, wait_for

pytestmark = pytest.mark.model


def test_a_started_server_serves_comes_back_after_a_kill_and_stops_after_its_ttl(tmp_path):
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(smollm2_gguf()), "--host", "127.0.0.1",
               "--port", "{port}", "--model_alias", "smol", "--n_ctx", "256", "--n_threads", "1"]
    config = f"""
[models.smol]
backend = "vllm"
model = "smol"
wrapper = "chatml"
command = {command!r}
ttl = 2
start_timeout = 120
"""
    with served(config.replace("'", '"'), tmp_path, api_key="k") as server:
        base, key = server.base_url, {"Authorization": "Bearer k"}
        process = server.app.state.service.on_demand.processes["smol"]
        resident = server.app.state.service.on_demand.scheduler.residents["smol"]
        assert process.process is None  # not started before its first request

        def ask() -> httpx.Response:
            return httpx.post(f"{base}/completions", headers=key, timeout=180,
                              json={"model": "smol", "prompt": "Hello", "max_tokens": 2, "temperature": 0})

        assert ask().status_code == 200
        first = process.process.pid
        health = httpx.get(f"http://127.0.0.1:{server.port}/health", headers=key).json()
        assert any("Uvicorn running on" in line for line in health["models"]["smol"]["log"])  # its last lines
        os.kill(first, signal.SIGKILL)
        assert wait_for(lambda: process.exit_code is not None, 10)
        card = httpx.get(f"{base}/models/smol", headers=key).json()
        assert card["state"] == "unloaded" and card["llmproxy"]["on_demand"]["process"]["exit_code"] == -9
        assert ask().status_code == 200  # started again after the kill
        second = process.process.pid
        assert second != first and process.starts == 2
        assert wait_for(lambda: resident.state == "unloaded", 15)  # stopped after its ttl
        with pytest.raises(ProcessLookupError):
            os.kill(second, 0)
