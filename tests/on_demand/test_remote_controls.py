"""Models that their own server loads on command, against fakes speaking the real protocols: Ollama
(``keep_alive`` on an empty /api/generate and on every request, /api/ps), llama.cpp's router (/models/load,
/models/unload, GET /models with each model's ``status``) and LM Studio (``ttl`` on every request, each
model's ``state`` in /api/v0/models). A stream that waits for its model sends its face's keep-alives."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

import llmproxy.server.responses
from llmproxy.backends.llamacpp import LlamaCppBackend
from llmproxy.server.on_demand.remote import ControlFailed, RouterControl

from .helpers import served

MODEL = "qwen3:0.6b"


class FakeOllama:
    """Ollama's load (an empty prompt with keep_alive), unload (keep_alive 0), /api/ps and a raw generation."""

    def __init__(self, server: HTTPServer, load_seconds: float) -> None:
        self.loaded = False
        self.calls: list[str] = []
        self.load_seconds = load_seconds
        server.expect_request("/api/version").respond_with_json({"version": "0.6.8"})
        server.expect_request("/api/show").respond_with_json({"parameters": "num_ctx 2048", "template": "{{ .Prompt }}"})
        server.expect_request("/api/ps").respond_with_handler(
            lambda request: Response(json.dumps({"models": [{"name": MODEL, "model": MODEL, "size": 523_000_000}]
                                                 if self.loaded else []}), content_type="application/json"))
        server.expect_request("/api/generate", method="POST").respond_with_handler(self.generate)

    def generate(self, request: Request) -> Response:
        body = json.loads(request.get_data())
        assert body["model"] == MODEL
        if not body.get("prompt"):
            if body["keep_alive"] == 0:
                self.loaded = False
                self.calls.append("unload")
                reason = "unload"
            else:
                time.sleep(self.load_seconds)
                self.loaded = True
                self.calls.append(f"load keep_alive={body['keep_alive']}")
                reason = "load"
            return Response(json.dumps({"model": MODEL, "response": "", "done": True, "done_reason": reason}),
                            content_type="application/json")
        self.calls.append(f"generate keep_alive={body.get('keep_alive')}" if self.loaded else "generate while unloaded")
        lines = [{"model": MODEL, "response": "Hello", "done": False},
                 {"model": MODEL, "response": "", "done": True, "done_reason": "stop", "prompt_eval_count": 5,
                  "eval_count": 1}]
        return Response("".join(json.dumps(line) + "\n" for line in lines), content_type="application/x-ndjson")


@pytest.fixture
def ollama():
    server = HTTPServer(host="127.0.0.1", port=0, threaded=True)
    server.start()
    yield server
    server.clear()
    server.stop()


def test_an_ollama_model_is_loaded_and_unloaded_by_keep_alive_and_a_waiting_stream_gets_pings(
        ollama, tmp_path, monkeypatch):
    fake = FakeOllama(ollama, load_seconds=1.0)
    monkeypatch.setattr(llmproxy.server.responses, "KEEPALIVE_SECONDS", 0.2)
    config = f"""
[models.qwen]
backend = "ollama"
endpoint = "{ollama.url_for('/')}"
model = "{MODEL}"
wrapper = "chatml"
ttl = 0.5
"""
    with served(config, tmp_path) as server:
        started = time.monotonic()
        with httpx.stream("POST", f"http://127.0.0.1:{server.port}/v1/messages", timeout=30,
                          headers={"anthropic-version": "2023-06-01"},
                          json={"model": "qwen", "max_tokens": 5, "stream": True,
                                "messages": [{"role": "user", "content": "Hi"}]}) as response:
            assert response.status_code == 200
            events = [(line[7:], time.monotonic() - started) for line in response.iter_lines()
                      if line.startswith("event: ")]
        names = [name for name, _ in events]
        assert names[0] == "message_start" and names[-1] == "message_stop"
        pings_before_answer = names[:names.index("content_block_start")].count("ping")
        assert pings_before_answer >= 3  # a second of loading, a ping every 0.2 s
        assert fake.calls[:2] == ["load keep_alive=11", "generate keep_alive=11"]  # its ttl, and a margin
        root = f"http://127.0.0.1:{server.port}"
        overview = httpx.get(f"{root}/inspect/api/overview").json()["models"][0]
        assert overview["on_demand"]["state"] == "loaded" and overview["running"] == 0
        request = httpx.get(f"{root}/inspect/api/requests").json()
        entries = request["requests"] if isinstance(request, dict) else request
        assert entries[-1]["model_wait_seconds"] >= 0.9  # the inspector shows its wait for the model
        card = httpx.get(f"{server.base_url}/models/qwen").json()
        assert card["state"] == "loaded" and card["llmproxy"]["on_demand"]["memory_bytes"] == 523_000_000
        deadline = time.monotonic() + 5
        while fake.loaded and time.monotonic() < deadline:
            time.sleep(0.05)
        assert fake.calls[-1] == "unload"  # its ttl passed: Ollama told to let it go
        assert httpx.get(f"{server.base_url}/models/qwen").json()["state"] == "unloaded"


class FakeRouter:
    """llama.cpp's router: POST /models/load starts a model ("loading", then "loaded" a poll later, or
    "unloaded" with failed and exit_code), POST /models/unload stops it."""

    def __init__(self, server: HTTPServer, fails: bool = False) -> None:
        self.status = {"value": "unloaded"}
        self.polls = 0
        self.calls: list[str] = []
        self.fails = fails
        server.expect_request("/models", method="GET").respond_with_handler(self.models)
        server.expect_request("/models/load", method="POST").respond_with_handler(lambda r: self.command(r, "load"))
        server.expect_request("/models/unload", method="POST").respond_with_handler(lambda r: self.command(r, "unload"))

    def command(self, request: Request, verb: str) -> Response:
        assert json.loads(request.get_data()) == {"model": "gemma-3-270m"}
        assert request.headers.get("Authorization") == "Bearer router-key"
        self.calls.append(verb)
        self.status = {"value": "loading" if verb == "load" else "unloaded", "args": ["llama-server", "-c", "4096"]}
        self.polls = 0
        return Response(json.dumps({"success": True}), content_type="application/json")

    def models(self, request: Request) -> Response:
        self.polls += 1
        if self.status["value"] == "loading" and self.polls > 1:
            self.status = ({"value": "unloaded", "failed": True, "exit_code": 1} if self.fails
                           else {"value": "loaded", "args": ["llama-server", "-c", "4096"]})
        return Response(json.dumps({"data": [{"id": "gemma-3-270m", "path": "/models/gemma.gguf",
                                              "status": self.status}]}), content_type="application/json")


@pytest.mark.parametrize("fails", [False, True], ids=["loads", "fails"])
def test_llama_cpp_router_loads_and_unloads_the_model_on_command(fails):
    with HTTPServer(host="127.0.0.1", port=0) as server:
        fake = FakeRouter(server, fails=fails)
        backend = LlamaCppBackend(server.url_for("/"), model="gemma-3-270m", auth_type="bearer_token",
                                  auth_key="router-key")
        control = RouterControl(backend, start_timeout=10)

        async def run() -> None:
            await control.load()
            assert fake.status["value"] == "loaded"
            await control.unload()

        if fails:
            with pytest.raises(ControlFailed, match="could not start 'gemma-3-270m' \\(exit code 1\\)"):
                asyncio.run(run())
            assert fake.calls == ["load"]
        else:
            asyncio.run(run())
            assert fake.calls == ["load", "unload"] and fake.status["value"] == "unloaded"


class FakeLMStudio:
    """LM Studio with just-in-time loading: a completion loads its model (kept ``ttl`` idle seconds, as the
    request says), /api/v0/models lists each model's ``state``."""

    def __init__(self, server: HTTPServer) -> None:
        self.state = "not-loaded"
        self.ttls: list[object] = []
        server.expect_request("/v1/models").respond_with_json({"object": "list", "data": [{"id": "qwen3-4b"}]})
        server.expect_request("/api/v0/models").respond_with_handler(lambda request: Response(json.dumps({
            "object": "list", "data": [{"id": "other", "state": "loaded"},
                                       {"id": "qwen3-4b", "state": self.state, "max_context_length": 4096}]}),
            content_type="application/json"))
        server.expect_request("/v1/completions", method="POST").respond_with_handler(self.complete)

    def complete(self, request: Request) -> Response:
        body = json.loads(request.get_data())
        self.ttls.append(body.get("ttl"))
        self.state = "loaded"
        chunks = [{"choices": [{"index": 0, "text": "Hello", "finish_reason": None}]},
                  {"choices": [{"index": 0, "text": "", "finish_reason": "stop"}],
                   "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}]
        events = "".join(f"data: {json.dumps(chunk)}\n\n" for chunk in chunks) + "data: [DONE]\n\n"
        return Response(events, content_type="text/event-stream")


def test_lm_studio_gets_the_models_ttl_with_each_request_and_its_state_is_read_for_v1_models(ollama, tmp_path):
    fake = FakeLMStudio(ollama)  # the same fake HTTP server, speaking LM Studio's protocol
    config = f'[models.qwen]\nbackend = "lmstudio"\nendpoint = "{ollama.url_for("/")}"\nmodel = "qwen3-4b"\n' \
             f'wrapper = "chatml"\nttl = 300\n'
    with served(config, tmp_path) as server:
        def state() -> str:
            card = httpx.get(f"{server.base_url}/models").json()["data"][0]
            assert card["llmproxy"]["on_demand"]["loaded_by"] == "lmstudio"
            return card["state"]

        assert state() == "unloaded"
        answer = httpx.post(f"{server.base_url}/completions", timeout=30,
                            json={"model": "qwen", "prompt": "Hi", "max_tokens": 5})
        assert answer.status_code == 200 and answer.json()["choices"][0]["text"] == "Hello"
        assert fake.ttls == [300] and state() == "loaded"
        fake.state = "not-loaded"  # its ttl passed in LM Studio
        assert state() == "unloaded"
