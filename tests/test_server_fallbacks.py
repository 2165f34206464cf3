"""Fallback routes through a real server and the official OpenAI client: a model whose backend is down,
busy or silent before its first token hands the request to the next model it names; a failure after
the answer began does not; the response, its headers, the log line and /metrics say what happened."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import httpx
import openai
import pytest
from openai import OpenAI
from server_helpers import MEMGPT_TOOLS, InstantBackend, fake_llamacpp, free_port, route, running

from llmproxy.backends.llamacpp import LlamaCppBackend
from llmproxy.errors import ConfigurationError
from llmproxy.server.config import RouteLimits, serving

HI = [{"role": "user", "content": "hi"}]


def client(server) -> OpenAI:
    return OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)


def test_a_backend_that_is_down_hands_the_request_to_its_fallback(closed_port_url):
    down = route(LlamaCppBackend(closed_port_url, context_window=4096), "primary")
    routes = {"primary": down, "backup": route(InstantBackend(), "backup")}
    with running(routes, fallbacks={"primary": ["backup"]}) as server:
        raw = client(server).chat.completions.with_raw_response.create(model="primary", messages=HI,
                                                                        tools=MEMGPT_TOOLS)
        response = raw.parse()
        assert response.choices[0].message.tool_calls[0].function.name == "send_message"
        assert response.llmproxy["fallbacks"] == [{"model": "primary", "error": "backend_unreachable"}]
        assert response.llmproxy["backend"] == "instant"
        assert raw.headers["x-llmproxy-fallbacks"] == "primary=backend_unreachable"

        streamed = httpx.post(f"{server.base_url}/chat/completions", timeout=30,
                              json={"model": "primary", "messages": HI, "tools": MEMGPT_TOOLS, "stream": True})
        assert streamed.status_code == 200 and streamed.text.endswith("data: [DONE]\n\n")
        assert streamed.headers["x-llmproxy-fallbacks"] == "primary=backend_unreachable"

        metrics = httpx.get(f"http://127.0.0.1:{server.port}/metrics").text
        assert 'llmproxy_fallbacks_total{error="backend_unreachable",model="primary"} 2.0' in metrics


def test_a_backend_silent_before_its_first_token_falls_back_in_its_own_time():
    with fake_llamacpp() as llama:
        llama.mode, llama.hang_seconds = "hang", 3.0
        routes = {"hung": route(llama.backend(first_token_timeout=0.5), "hung"),
                  "backup": route(InstantBackend(), "backup")}
        with running(routes, fallbacks={"hung": ["backup"]}) as server:
            started = time.monotonic()
            response = client(server).chat.completions.create(model="hung", messages=HI, tools=MEMGPT_TOOLS)
            assert time.monotonic() - started < 2.5
            assert response.llmproxy["fallbacks"] == [{"model": "hung", "error": "backend_timeout"}]


class HeldBackend(InstantBackend):
    """Answers only once released, so a test knows its one place is taken for as long as it needs."""

    def __init__(self) -> None:
        super().__init__()
        self.answering, self.release = threading.Event(), threading.Event()

    def complete(self, prompt, params):
        self.answering.set()
        self.release.wait(30)
        return super().complete(prompt, params)

    def stream(self, prompt, params):
        self.answering.set()
        self.release.wait(30)
        yield from super().stream(prompt, params)


def test_a_full_queue_falls_back_and_the_chain_is_tried_in_order(closed_port_url):
    busy = HeldBackend()
    routes = {"busy": route(busy, "busy"), "down": route(LlamaCppBackend(closed_port_url, context_window=4096), "down"),
              "backup": route(InstantBackend(), "backup")}
    limits = {"busy": RouteLimits(max_running=1, max_queue=0)}
    with running(routes, limits=limits, fallbacks={"busy": ["down", "backup"]}) as server:
        first = threading.Thread(target=lambda: client(server).chat.completions.create(
            model="busy", messages=HI, tools=MEMGPT_TOOLS, stream=False))
        first.start()
        assert busy.answering.wait(30)  # the first request holds the busy model's only place
        try:
            response = client(server).chat.completions.create(model="busy", messages=HI, tools=MEMGPT_TOOLS)
        finally:
            busy.release.set()
            first.join()
        assert response.llmproxy["fallbacks"] == [{"model": "busy", "error": "queue_full"},
                                                  {"model": "down", "error": "backend_unreachable"}]


def test_an_error_after_the_answer_began_or_with_no_fallback_left_is_the_requests_own(closed_port_url):
    with fake_llamacpp() as llama:
        llama.mode = "truncate"  # the stream breaks off mid-answer
        routes = {"broken": route(llama.backend(), "broken"), "backup": route(InstantBackend(), "backup"),
                  "down": route(LlamaCppBackend(closed_port_url, context_window=4096), "down")}
        with running(routes, fallbacks={"broken": ["backup"], "down": ["broken"]}) as server:
            with pytest.raises(openai.APIStatusError) as info:
                client(server).chat.completions.create(model="broken", messages=HI, tools=MEMGPT_TOOLS)
            assert info.value.status_code == 502 and "x-llmproxy-fallbacks" not in info.value.response.headers
            with pytest.raises(openai.APIStatusError) as info:  # down, then broken: broken's error is the answer
                client(server).chat.completions.create(model="down", messages=HI, tools=MEMGPT_TOOLS)
            assert info.value.status_code == 502
            assert info.value.response.headers["x-llmproxy-fallbacks"] == "down=backend_unreachable"


def test_time_to_first_token_and_tokens_reach_metrics():
    with running({"m": route(InstantBackend(), "m")}) as server:
        client(server).chat.completions.create(model="m", messages=HI, tools=MEMGPT_TOOLS)
        httpx.post(f"{server.base_url}/chat/completions", timeout=30,
                   json={"model": "m", "messages": HI, "tools": MEMGPT_TOOLS, "stream": True})
        metrics = httpx.get(f"http://127.0.0.1:{server.port}/metrics").text
    assert 'llmproxy_time_to_first_token_seconds_count{endpoint="chat.completions",model="m"} 2.0' in metrics
    counts = {kind: float(re.search(rf'llmproxy_tokens_total{{kind="{kind}",model="m"}} (\S+)', metrics).group(1))
              for kind in ("prompt", "completion")}
    assert counts["prompt"] > 100 and counts["completion"] > 0


@pytest.mark.parametrize("fallbacks,says", [('["nope"]', "'nope' is not a served model"),
                                            ('["a"]', "name the model itself"),
                                            ('["b", "b"]', "name a model twice")])
def test_fallbacks_that_name_no_other_served_model_are_refused(tmp_path: Path, fallbacks, says):
    path = tmp_path / "models.toml"
    path.write_text(f'[models.a]\nbackend = "llamacpp"\ncontext_window = 64\nfallbacks = {fallbacks}\n'
                    '[models.b]\nbackend = "llamacpp"\ncontext_window = 64\n')
    with pytest.raises(ConfigurationError, match=says):
        serving(path, {})


def test_fallbacks_in_a_config_file(tmp_path: Path):
    path = tmp_path / "models.toml"
    path.write_text('[models.a]\nbackend = "llamacpp"\ncontext_window = 64\nfallbacks = ["b"]\n'
                    '[models.b]\nbackend = "llamacpp"\ncontext_window = 64\n')
    assert serving(path, {}).fallbacks == {"a": ("b",)}
    with pytest.raises(ConfigurationError, match="define them in a config file"):
        serving(None, {"backend": "llamacpp", "context_window": 64, "fallbacks": ["b"]})


@pytest.fixture
def closed_port_url() -> str:
    return f"http://127.0.0.1:{free_port()}"

