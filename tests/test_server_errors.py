"""Bad input and failing backends: each gives the right status and OpenAI error envelope (no
traceback), and the next request still succeeds. Also: clients that leave cancel their generation."""

from __future__ import annotations

import json
import threading
import time

import httpx
import openai
import pytest
from fastapi.testclient import TestClient
from openai import OpenAI
from server_helpers import (
    MEMGPT_TOOLS,
    InstantBackend,
    answer_for,
    fake_llamacpp,
    free_port,
    route,
    running,
)

from llmproxy.backends.base import Capabilities, StreamDelta
from llmproxy.backends.llamacpp import LlamaCppBackend
from llmproxy.server.app import create_app

HI = [{"role": "user", "content": "hi"}]
CHAT = {"model": "llama", "messages": HI, "tools": MEMGPT_TOOLS}
MAX_BODY = 64 * 1024


class Broken(InstantBackend):
    """A backend with a bug: it raises something llmproxy does not expect."""

    def stream(self, prompt, params):
        yield from super().stream(prompt, params) if "plain" in prompt else ()
        raise RuntimeError("internal detail that must not leak")


class Babbler(InstantBackend):
    """A model that answers with no JSON at all."""

    def stream(self, prompt, params):
        yield StreamDelta("I would rather not.", "stop")


class OneAtATime(InstantBackend):
    """Serves one generation at a time, like the embedded model; records the most at once."""

    capabilities = Capabilities(concurrent=False)

    def __init__(self, delay: float) -> None:
        super().__init__(delay=delay)
        self.active = self.most = self.calls = 0
        self._lock = threading.Lock()

    def stream(self, prompt, params):
        with self._lock:
            self.calls += 1
            self.active += 1
            self.most = max(self.most, self.active)
        try:
            yield from super().stream(prompt, params)
        finally:
            with self._lock:
                self.active -= 1


class SlowTokenizer(InstantBackend):
    """Counts tokens with its own tokenizer, which takes a while (like an HTTP /tokenize call), and
    does not report how many tokens it generated."""

    capabilities = Capabilities(tokenizer=True)

    def __init__(self) -> None:
        super().__init__()
        self.counted: list[str] = []

    def stream(self, prompt, params):
        yield StreamDelta(answer_for(prompt, self.call), "stop")

    def count_tokens(self, text: str) -> int:
        self.counted.append(text)
        time.sleep(0.5)
        return len(text) // 4


@pytest.fixture(scope="module")
def llama():
    with fake_llamacpp() as fake:
        yield fake


@pytest.fixture(autouse=True)
def _reset(llama):
    llama.mode = "ok"


@pytest.fixture(scope="module")
def backends(llama):
    return {
        "llama": llama.backend(first_token_timeout=1.0),
        "down": LlamaCppBackend(f"http://127.0.0.1:{free_port()}", context_window=4096),
        "tiny": llama.backend(),
        "broken": Broken(),
        "babbler": Babbler(),
        "slow": InstantBackend(delay=0.05),
        "serial": OneAtATime(delay=0.02),
        "tokenizer": SlowTokenizer(),
    }


@pytest.fixture(scope="module")
def server(backends):
    routes = {name: route(backend, name, context_window=64 if name == "tiny" else 4096)
              for name, backend in backends.items()}
    with running(routes, max_body_bytes=MAX_BODY) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def client(server) -> OpenAI:
    return OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)


def post(server, body, path: str = "/chat/completions", **options) -> httpx.Response:
    if isinstance(body, (dict, list)):
        return httpx.post(server.base_url + path, json=body, timeout=10, **options)
    headers = {"Content-Type": "application/json", **options.pop("headers", {})}
    return httpx.post(server.base_url + path, content=body, timeout=10, headers=headers, **options)


def assert_envelope(response: httpx.Response, status: int, *, code=None, param=None, type_=None, says=()) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert "Traceback" not in response.text
    if code is not None:
        assert error["code"] == code
    if param is not None:
        assert error["param"] == param
    if type_ is not None:
        assert error["type"] == type_
    for words in says:
        assert words in error["message"]
    return error


def assert_still_serving(client) -> None:
    response = client.chat.completions.create(model="llama", messages=HI, tools=MEMGPT_TOOLS)
    assert response.choices[0].message.tool_calls[0].function.name == "send_message"


# --- the caller's mistakes ---------------------------------------------------------------------


@pytest.mark.parametrize("body, param, says", [
    (b'{"model": "llama", "messages": [', None, "not valid JSON"),
    (b'["a list"]', None, "must be a JSON object"),
    ({"model": "llama"}, "messages", "Field required"),
    ({"model": "llama", "messages": []}, "messages", "at least 1"),
    ({"model": "llama", "messages": "hi"}, "messages", "valid list"),
    ({"model": "llama", "messages": [{"role": "wizard", "content": "hi"}]}, "messages.0", "wizard"),
    ({"model": "llama", "messages": HI, "temperature": "hot"}, "temperature", "valid number"),
    ({"model": "llama", "messages": HI, "max_tokens": 0}, "max_tokens", "greater than or equal to 1"),
    ({"model": "llama", "messages": HI, "tools": [{"type": "function", "function": {"name": "bad name!"}}]},
     "tools.0.function.name", "pattern"),
    ({"model": "llama", "messages": HI, "first_message": "yes"}, "first_message", "true or false"),
])
def test_invalid_requests_are_400_naming_the_field(server, client, body, param, says):
    assert_envelope(post(server, body), 400, param=param, type_="invalid_request_error", says=[says])
    assert_still_serving(client)


DEEP_ARRAYS = "[" * 20_000 + "]" * 20_000  # 40 KB, under the fixture's body limit
DEEP_SCHEMA = '{"type": "object", "properties": {"a": ' * 1_000 + '{"type": "string"}' + "}}" * 1_000
IN_CONTENT = '{"model": "llama", "messages": [{"role": "user", "content": RAW}]}'
IN_TOOL = ('{"model": "llama", "messages": [{"role": "user", "content": "hi"}], '
           '"tools": [{"type": "function", "function": {"name": "f", "parameters": RAW}}]}')


@pytest.mark.parametrize("body, param", [
    (IN_CONTENT.replace("RAW", "[" * 1_000 + "]" * 1_000), "messages"),
    (IN_CONTENT.replace("RAW", DEEP_ARRAYS), "messages"),
    (IN_TOOL.replace("RAW", DEEP_SCHEMA), "tools"),
    (DEEP_ARRAYS, None),
])
def test_json_nested_too_deep_to_parse_is_400_naming_the_field(server, client, body, param):
    """Python's JSON parser recurses per level: this was a RecursionError, answered 500."""
    response = post(server, body.encode())
    assert_envelope(response, 400, param=param, type_="invalid_request_error", says=["nested too deep"])
    assert_envelope(post(server, body.encode(), "/completions"), 400, param=param)
    assert_still_serving(client)


def test_invalid_completion_request(server, client):
    assert_envelope(post(server, {"model": "llama", "prompt": 7}, "/completions"), 400, param="prompt")
    assert_envelope(post(server, {"model": "llama", "prompt": "x", "grammar": "nonsense"}, "/completions"), 400,
                    param="grammar", says=["neither a grammar name"])
    assert_envelope(post(server, {"model": "llama", "prompt": "x", "grammar": 'root ::= "a"{3,1}'}, "/completions"),
                    400, param="grammar", says=["minimum above its maximum"])
    assert_still_serving(client)


def test_unknown_model_is_404_listing_the_known_ones(server, client):
    with pytest.raises(openai.NotFoundError) as refused:
        client.chat.completions.create(model="gpt-4", messages=HI)
    assert refused.value.body["code"] == "model_not_found"
    assert "llama, down, tiny" in refused.value.body["message"]
    assert_still_serving(client)


def test_oversize_body_is_413(server, client):
    big = {"model": "llama", "messages": [{"role": "user", "content": "x" * MAX_BODY}]}
    assert_envelope(post(server, big), 413, code="request_too_large")
    # Without a Content-Length (chunked upload) the limit holds while reading.
    chunked = post(server, iter([json.dumps(big).encode()[i:i + 4096] for i in range(0, MAX_BODY + 200, 4096)]))
    assert_envelope(chunked, 413, code="request_too_large")
    assert_still_serving(client)


def test_context_overflow_is_400_context_length_exceeded(server, client):
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="tiny", messages=HI, tools=MEMGPT_TOOLS)
    assert refused.value.body["code"] == "context_length_exceeded"
    assert "maximum context length" in refused.value.body["message"]  # what MemGPT-era agents look for
    assert_still_serving(client)


def test_unknown_path_and_method_use_the_envelope(server):
    assert_envelope(httpx.get(server.base_url + "/nothing"), 404, type_="invalid_request_error")
    assert_envelope(httpx.get(server.base_url + "/chat/completions"), 405)


# --- the backend's failures --------------------------------------------------------------------


@pytest.mark.parametrize("mode, status, code, says", [
    ("http500", 502, "backend_http_error", ["llamacpp", "HTTP 500", "slot crashed"]),
    ("garbage", 502, "backend_protocol_error", ["llamacpp"]),
    ("hang", 504, "backend_timeout", ["llamacpp", "sent no answer for 1 s", "raise first_token_timeout"]),
    ("truncate", 502, "backend_protocol_error", ["llamacpp", "incomplete"]),
    ("error_event", 502, None, ["llamacpp", "out of memory"]),
])
def test_backend_failures(server, client, llama, mode, status, code, says):
    llama.mode = mode
    error = assert_envelope(post(server, CHAT), status, code=code, type_="backend_error", says=says)
    assert error["message"]
    llama.mode = "ok"
    assert_still_serving(client)


def test_backend_down_is_503_naming_it(server, client):
    body = {**CHAT, "model": "down"}
    assert_envelope(post(server, body), 503, code="backend_unreachable", says=["llamacpp", "is the server running"])
    assert_envelope(post(server, {**body, "stream": True}), 503, code="backend_unreachable")
    assert_still_serving(client)


def test_health_reports_a_down_backend(server):
    response = httpx.get(server.base_url.removesuffix("/v1") + "/health", timeout=30)
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["models"]["down"]["up"] is False and body["models"]["llama"]["up"] is True


@pytest.mark.parametrize("mode", ["truncate", "error_event"])
def test_failure_mid_stream_ends_with_an_error_event(server, client, llama, mode):
    llama.mode = mode
    stream = client.chat.completions.create(model="llama", messages=HI, tools=MEMGPT_TOOLS, stream=True)
    received = []
    with pytest.raises(openai.APIError) as failed:
        for chunk in stream:
            received.append(chunk)
    assert received and received[0].choices[0].delta.role == "assistant"
    assert failed.value.body["type"] == "backend_error" and "llamacpp" in failed.value.body["message"]
    raw = post(server, {**CHAT, "stream": True})
    assert raw.status_code == 200 and raw.text.endswith('}\n\ndata: [DONE]\n\n')
    assert '"code":"backend_protocol_error"' in raw.text or "out of memory" in raw.text
    llama.mode = "ok"
    assert_still_serving(client)


def test_failure_before_the_stream_starts_is_a_plain_error(server, llama):
    llama.mode = "http500"
    assert_envelope(post(server, {**CHAT, "stream": True}), 502, code="backend_http_error")


def test_unparseable_model_output_is_422_with_the_raw_text(server, client):
    # Not a 5xx, which OpenAI's SDK would retry twice (three generations for one bad output).
    error = assert_envelope(post(server, {**CHAT, "model": "babbler"}), 422, type_="model_output_error")
    assert "I would rather not." in error["message"]
    assert_still_serving(client)


def test_unexpected_failures_never_show_a_traceback(server, client):
    error = assert_envelope(post(server, {**CHAT, "model": "broken"}), 500, code="internal_error")
    assert "internal detail" not in error["message"]
    plain = [{"role": "user", "content": "plain"}]
    streamed = post(server, {**CHAT, "model": "broken", "messages": plain, "stream": True})
    assert streamed.status_code == 200 and "internal detail" not in streamed.text
    assert '"code":"internal_error"' in streamed.text and streamed.text.endswith("data: [DONE]\n\n")
    assert_still_serving(client)


# --- clients that leave, and one-at-a-time backends --------------------------------------------


def wait_for(condition, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)


def test_stream_client_disconnect_closes_the_backend_stream(server, client, backends):
    slow = backends["slow"]
    before = slow.closed_early
    body = {**CHAT, "model": "slow", "stream": True}
    with httpx.stream("POST", server.base_url + "/chat/completions", json=body) as response:
        next(response.iter_lines())  # the stream has started; now leave
    wait_for(lambda: slow.closed_early == before + 1)
    assert_still_serving(client)


def test_non_stream_client_disconnect_cancels_the_generation(server, backends):
    slow = backends["slow"]
    before = slow.closed_early
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server.base_url + "/chat/completions", json={**CHAT, "model": "slow"}, timeout=0.3)
    wait_for(lambda: slow.closed_early == before + 1)


def test_one_at_a_time_backend_queues_requests(server, backends):
    serial = backends["serial"]
    results = []

    def ask() -> None:
        results.append(post(server, {**CHAT, "model": "serial", "stream": len(results) % 2 == 0}).status_code)

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [200] * 4
    assert serial.most == 1


def test_queued_request_whose_client_left_never_runs(server, backends):
    serial = backends["serial"]
    before = serial.calls
    running_first = threading.Thread(target=post, args=(server, {**CHAT, "model": "serial"}))
    running_first.start()
    wait_for(lambda: serial.active == 1)
    with pytest.raises(httpx.ReadTimeout):  # queued behind the first, then gone
        httpx.post(server.base_url + "/chat/completions", json={**CHAT, "model": "serial"}, timeout=0.2)
    running_first.join()
    time.sleep(0.2)
    assert serial.calls == before + 1


def test_a_waiting_tokenizer_does_not_stall_other_requests(server, backends):
    """Counting by a backend's tokenizer (prompt, then answer) runs off the event loop."""
    slow = backends["tokenizer"]
    slow.counted.clear()
    results = []
    first = threading.Thread(target=lambda: results.append(post(server, {**CHAT, "model": "tokenizer"})))
    first.start()
    for counts in (1, 2):  # the prompt's count, then the answer's
        wait_for(lambda: len(slow.counted) == counts)
        started = time.monotonic()
        assert httpx.get(server.base_url + "/models", timeout=5).status_code == 200
        assert time.monotonic() - started < 0.3  # answered while the tokenizer works for the first request
    first.join()
    assert results[0].status_code == 200, results[0].text
    prompt, answer = slow.counted
    usage = results[0].json()["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (len(prompt) // 4, len(answer) // 4)


def test_framework_validation_errors_use_the_envelope():
    """A route that lets FastAPI validate (none of llmproxy's own do) still answers with the envelope."""
    app = create_app({"instant": route(InstantBackend(), "instant")})

    @app.get("/v1/echo")
    def echo(n: int) -> int:
        return n

    with TestClient(app, base_url="http://localhost") as local:
        assert_envelope(local.get("/v1/echo?n=abc"), 400, param="query.n", type_="invalid_request_error")
