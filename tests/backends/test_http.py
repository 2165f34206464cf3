"""The shared HTTP layer: endpoints, auth, line/SSE readers, error translation, stream hygiene."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from llmproxy.backends import backend_class, create_backend
from llmproxy.backends._http import (
    PROBE_TIMEOUT,
    EventReader,
    HTTPClient,
    Timeouts,
    auth_headers,
    normalize_endpoint,
)
from llmproxy.backends._replies import context_overflow, error_message
from llmproxy.backends.base import IDLE, GenerationParams
from llmproxy.errors import (
    BackendConnectionError,
    BackendError,
    BackendHTTPError,
    BackendProtocolError,
    BackendTimeoutError,
    ConfigurationError,
    ContextWindowExceededError,
)

from .conftest import sse

PARAMS = GenerationParams(max_tokens=8)

# --- endpoints -------------------------------------------------------------------------------


@pytest.mark.parametrize("typed", [
    "http://localhost:5000", "http://localhost:5000/", "http://localhost:5000/v1", "http://localhost:5000/v1/",
    "  http://localhost:5000/v1//  ",
])
def test_endpoint_forms_normalise_to_the_base_url(typed):
    assert normalize_endpoint(typed, "webui", "http://localhost:5000") == "http://localhost:5000"


def test_endpoint_keeps_a_path_prefix_and_https():
    assert normalize_endpoint("https://gpu.example.com/llm/v1", "vllm", "x") == "https://gpu.example.com/llm"


def test_api_prefix_is_stripped_only_for_backends_whose_paths_start_with_it():
    assert create_backend("koboldcpp", endpoint="http://h:5001/api").endpoint == "http://h:5001"
    assert create_backend("koboldcpp", endpoint="http://h:5001/api/v1/").endpoint == "http://h:5001"
    assert create_backend("ollama", endpoint="http://h:11434/api", model="m").endpoint == "http://h:11434"
    assert create_backend("vllm", endpoint="http://h/api").endpoint == "http://h/api"


def test_endpoint_without_scheme_says_what_to_type():
    with pytest.raises(ConfigurationError) as info:
        normalize_endpoint("localhost:5000", "webui", "http://localhost:5000")
    assert "type it as http://localhost:5000" in str(info.value)
    assert "no scheme" in str(info.value)


@pytest.mark.parametrize("typed", ["ftp://localhost:21", "http://", "http:///v1"])
def test_endpoint_that_is_not_http_is_refused(typed):
    with pytest.raises(ConfigurationError, match="not an http.*http://localhost:8000"):
        normalize_endpoint(typed, "vllm", "http://localhost:8000")


@pytest.mark.parametrize("backend,port", [
    ("webui", 5000), ("webui-legacy", 5000), ("lmstudio", 1234), ("lmstudio-legacy", 1234),
    ("llamacpp", 8080), ("koboldcpp", 5001), ("ollama", 11434), ("vllm", 8000),
])
def test_default_endpoint_per_backend(backend, port):
    assert backend_class(backend).default_port == port
    assert create_backend(backend, model="m").endpoint == f"http://localhost:{port}"


# --- auth ------------------------------------------------------------------------------------


def test_auth_header_styles():
    assert auth_headers(None, None) == {}
    assert auth_headers("bearer_token", "s3cret") == {"Authorization": "Bearer s3cret"}
    assert auth_headers("api_key", "s3cret") == {"api-key": "s3cret"}


@pytest.mark.parametrize("auth_type,key,words", [("bearer_token", None, "needs an auth_key"),
                                                 ("basic", "k", "unknown auth_type"),
                                                 ("bearer_token", "k1\r\nX-Injected: 1", "one line"),
                                                 ("api_key", "k\u00e9y", "printable ASCII")])
def test_bad_auth_configuration(auth_type, key, words):
    with pytest.raises(ConfigurationError, match=words):
        auth_headers(auth_type, key)


@pytest.mark.parametrize("auth_type,header,value", [("bearer_token", "Authorization", "Bearer k1"),
                                                    ("api_key", "Api-Key", "k1")])
def test_auth_header_reaches_the_server(fake, auth_type, header, value):
    fake.json("/completion", {"content": "x", "stop": True, "stop_type": "eos"})
    create_backend("llamacpp", endpoint=fake.url, auth_type=auth_type, auth_key="k1").complete("p", PARAMS)
    assert fake.headers[0][header] == value


# --- line and SSE readers --------------------------------------------------------------------


def read(chunks, framing="sse"):
    reader = EventReader(framing)
    return [data for chunk in chunks for data in reader.feed(chunk)] + reader.end()


def test_lines_split_on_lf_and_crlf_even_across_network_chunks():
    chunks = [b"data: a\r", b"\n\r\ndata: b\n", b"\ndata: c"]
    assert read(chunks) == ["a", "b", "c"]


def test_lines_do_not_split_at_unicode_line_separators():
    text = "{\"t\": \"a\u2028b\u0085c\x0cd\"}"
    assert read([f"data: {text}\n\n".encode()]) == [text]
    assert read([f"{text}\n".encode()], "ndjson") == [text]


def test_lines_survive_a_multibyte_character_split_across_chunks():
    raw = "data: é\n".encode()
    assert read([raw[:7], raw[7:]]) == ["é"]


def test_sse_events_types_comments_multiline_and_missing_final_blank_line():
    lines = [": ping", "event: message", "data: {\"a\": 1}", "", "data: x", "data: y", "", "data: [DONE]"]
    assert read(["\n".join(lines).encode()]) == ['{"a": 1}', "x\ny", "[DONE]"]


def test_sse_old_llamacpp_error_line_is_an_error_event():
    assert read([b'error: {"message": "boom"}\n\n']) == ['{"error": {"message": "boom"}}']


def test_ndjson_skips_blank_lines():
    assert read([b'{"a": 1}\n\n  \n{"b"', b': 2}'], "ndjson") == ['{"a": 1}', '{"b": 2}']


# --- error translation -----------------------------------------------------------------------


def test_refused_connection_names_backend_url_and_what_to_check(closed_port):
    backend = create_backend("webui", endpoint=f"http://127.0.0.1:{closed_port}")
    with pytest.raises(BackendConnectionError) as info:
        backend.complete("p", PARAMS)
    message = str(info.value)
    assert f"127.0.0.1:{closed_port}/v1/completions" in message
    assert "webui" in message and "is the server running" in message
    assert info.value.backend == "webui" and info.value.url.endswith("/v1/completions")


def test_read_timeout(fake):
    fake.slow("/completion", 1.5)
    backend = create_backend("llamacpp", endpoint=fake.url, first_token_timeout=0.2, read_timeout=0.3)
    with pytest.raises(BackendTimeoutError) as info:
        backend.complete("p", PARAMS)
    assert "0.3 s" in str(info.value) and "read_timeout" in str(info.value)


def test_connect_timeout_is_its_own_message():
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectTimeout("timed out", request=request)

    backend = create_backend("vllm", model="m", connect_timeout=0.5, transport=httpx.MockTransport(refuse))
    with pytest.raises(BackendTimeoutError, match="did not accept a connection within 0.5 s"):
        backend.complete("p", PARAMS)


@pytest.mark.parametrize("status,hint", [(500, "server's log"), (502, "server's log"),
                                         (503, "busy or still loading"), (401, "auth_key"),
                                         (404, "backend type")])
def test_http_error_status(fake, status, hint):
    fake.raw("/v1/completions", b"upstream exploded", status=status, content_type="text/plain")
    with pytest.raises(BackendHTTPError) as info:
        create_backend("vllm", endpoint=fake.url, model="m").complete("p", PARAMS)
    error = info.value
    assert error.status == status and error.body == "upstream exploded"
    assert f"HTTP {status}" in str(error) and "upstream exploded" in str(error) and hint in str(error)


def test_garbage_body(fake):
    fake.raw("/v1/completions", b"<html><body>It works!</body></html>", content_type="text/html")
    with pytest.raises(BackendProtocolError, match="not JSON.*vllm server"):
        create_backend("vllm", endpoint=fake.url, model="m").complete("p", PARAMS)


def test_json_of_the_wrong_shape(fake):
    fake.json("/v1/completions", {"results": [{"text": "kobold shape"}]})
    with pytest.raises(BackendProtocolError, match="shape"):
        create_backend("vllm", endpoint=fake.url, model="m").complete("p", PARAMS)


def test_stream_that_ends_early_is_an_error_not_a_short_answer(fake):
    fake.stream("/v1/completions", sse({"choices": [{"index": 0, "text": "Hel", "finish_reason": None}]},
                                       done=False))
    backend = create_backend("vllm", endpoint=fake.url, model="m")
    got = []
    with pytest.raises(BackendProtocolError, match="ended after 1 events"):
        for delta in backend.stream("p", PARAMS):
            got.append(delta.text)
    assert got == ["Hel"]


def test_stream_whose_connection_breaks_mid_body(fake):
    fake.stream("/v1/completions", sse({"choices": [{"index": 0, "text": "Hel", "finish_reason": None}]},
                                       done=False), then_fail=True)
    with pytest.raises(BackendProtocolError, match="broke off"):
        list(create_backend("vllm", endpoint=fake.url, model="m").stream("p", PARAMS))


def test_stream_event_that_is_not_json(fake):
    fake.stream("/v1/completions", [b"data: {\"choices\": [\n\n"])
    with pytest.raises(BackendProtocolError, match="not JSON"):
        list(create_backend("vllm", endpoint=fake.url, model="m").stream("p", PARAMS))


def test_stream_http_error_status_before_the_stream(fake):
    fake.json("/v1/completions", {"error": {"message": "bad", "type": "BadRequestError", "code": 400}}, status=400)
    with pytest.raises(BackendHTTPError, match="HTTP 400: bad"):
        list(create_backend("vllm", endpoint=fake.url, model="m").stream("p", PARAMS))


@pytest.mark.parametrize("payload,message", [
    ({"error": {"message": "m1", "type": "t"}}, "m1"),
    ({"error": "m2"}, "m2"),
    ({"detail": {"msg": "m3", "type": "service_unavailable"}}, "m3"),
    ({"detail": "m4"}, "m4"),
    ({"detail": [{"loc": ["body", "x"], "msg": "m5", "type": "value_error"}]}, "m5"),
    ({"object": "error", "message": "m6", "type": "BadRequestError", "param": None, "code": 400}, "m6"),
    ({"ok": True}, None),
    ([1, 2], None),
])
def test_error_message_from_every_body_shape(payload, message):
    assert error_message(payload) == message


@pytest.mark.parametrize("message,payload,prompt,window", [
    ("request (5000 tokens) exceeds the available context size (4096 tokens), try increasing it", None, 5000, 4096),
    ("the request exceeds the available context size, try increasing it",
     {"error": {"code": 400, "message": "x", "type": "exceed_context_size_error", "n_prompt_tokens": 4100,
                "n_ctx": 4096}}, 4100, 4096),
    ("the request exceeds the available context size, try increasing it", None, 0, 0),
    ("This model's maximum context length is 2048 tokens. However, you requested 2100 tokens (2000 in the "
     "messages, 100 in the completion). Please reduce the length of the messages or completion.", None, 2000, 2048),
    ("This model's maximum context length is 2048 tokens, however you requested 2116 tokens (2100 in your "
     "prompt; 16 for the completion). Please reduce your prompt; or completion length.", None, 2100, 2048),
    ("This model's maximum context length is 8192 tokens. However, you requested 9000 tokens.", None, 9000, 8192),
    ("The number of tokens to keep from the initial prompt is greater than the context length (n_keep: 13055>= "
     "n_ctx: 4096). Try to load the model with a larger context length, or provide a shorter input.", None,
     13055, 4096),
    ("Context length exceeded. Tokens in context: 8000, Context length: 8000", None, 8000, 8000),
])
def test_context_overflow_wordings(message, payload, prompt, window):
    error = context_overflow(message, payload, "x at http://h")
    assert isinstance(error, ContextWindowExceededError)
    assert (error.prompt_tokens, error.context_window) == (prompt, window)
    assert "maximum context length" in str(error) and message in str(error)


def test_other_errors_are_not_context_overflow():
    assert context_overflow("Model \"default\" not found.", None, "x") is None
    assert context_overflow("max_tokens must be greater than or equal to 0.", None, "x") is None


def test_error_reported_with_status_200_is_raised(fake):
    fake.json("/v1/completions", {"error": "something went wrong in the engine"})
    with pytest.raises(BackendError, match="reported an error in its answer: something went wrong"):
        create_backend("lmstudio", endpoint=fake.url).complete("p", PARAMS)


# --- stream hygiene and shared behaviour -----------------------------------------------------


class _TrackedStream(httpx.SyncByteStream):
    def __init__(self, chunks):
        self.chunks = chunks
        self.closed = False

    def __iter__(self):
        yield from self.chunks

    def close(self):
        self.closed = True


def _completions_only(body: _TrackedStream) -> httpx.MockTransport:
    """A server whose only working endpoint streams ``body`` (discovery gets a 404)."""
    return httpx.MockTransport(lambda request: httpx.Response(200, stream=body) if request.url.path == "/v1/completions"
                               else httpx.Response(404))


def test_abandoned_stream_closes_the_http_response():
    body = _TrackedStream(sse(*({"choices": [{"index": 0, "text": str(i), "finish_reason": None}]}
                                for i in range(50))))
    stream = create_backend("vllm", model="m", transport=_completions_only(body)).stream("p", PARAMS)
    assert next(stream).text == "0"
    assert not body.closed
    stream.close()
    assert body.closed


def test_finished_stream_closes_the_response_after_done():
    body = _TrackedStream(sse({"choices": [{"index": 0, "text": "x", "finish_reason": "stop"}]}) + [b"junk after"])
    deltas = list(create_backend("vllm", model="m", transport=_completions_only(body)).stream("p", PARAMS))
    assert [d.text for d in deltas] == ["x", ""] and deltas[-1].finish_reason == "stop"
    assert body.closed


def test_client_uses_explicit_connect_and_read_timeouts():
    backend = create_backend("vllm", model="m", connect_timeout=1.5, first_token_timeout=9, read_timeout=42.0)
    timeout = backend.http._client.timeout
    assert (timeout.connect, timeout.read) == (1.5, 42.0)  # the sync client: one read limit, the larger


@pytest.mark.parametrize("setting", ["connect_timeout", "first_token_timeout", "read_timeout"])
@pytest.mark.parametrize("seconds", [0, -1, float("nan")])
def test_a_timeout_that_is_not_positive_is_refused(setting, seconds):
    with pytest.raises(ConfigurationError, match=f"{setting} must be a number of seconds above 0"):
        create_backend("llamacpp", **{setting: seconds})


def test_http_client_builds_urls_from_the_normalised_base():
    client = HTTPClient("vllm", "http://h:1/x", default_url="http://localhost:8000", headers={}, timeouts=Timeouts())
    assert client.url("/v1/models") == "http://h:1/x/v1/models"
    client.close()


def test_grammar_field_on_a_backend_without_grammar_is_refused():
    with pytest.raises(ConfigurationError, match="takes no grammar"):
        create_backend("lmstudio", grammar_field="grammar")


def test_token_counts_are_cached_per_text(fake):
    fake.json("/tokenize", {"tokens": [1, 2, 3]})
    backend = create_backend("llamacpp", endpoint=fake.url)
    assert [backend.count_tokens("abc"), backend.count_tokens("abc")] == [3, 3]
    assert len(fake.bodies) == 1
    backend.count_tokens("abcd")
    assert [body["content"] for body in fake.bodies] == ["abc", "abcd"]


def test_a_prompt_that_extends_a_counted_one_sends_only_the_new_text(fake):
    fake.json("/tokenize", {"tokens": [1, 2, 3]})
    backend = create_backend("llamacpp", endpoint=fake.url)
    history = "<|im_start|>system\n" + "x" * 300 + "<|im_end|>\n"
    assert backend.count_tokens(history) == 3
    assert backend.count_tokens(history + "<|im_start|>user\nhi<|im_end|>\n") == 6
    assert [body["content"] for body in fake.bodies] == [history, "<|im_start|>user\nhi<|im_end|>\n"]


def test_missing_tokenizer_endpoint_means_none_and_is_not_asked_again(fake):
    fake.raw("/tokenize", b'{"detail":"Not Found"}', status=404)
    backend = create_backend("vllm", endpoint=fake.url, model="m")
    assert backend.count_tokens("abc") is None
    assert backend.count_tokens("abcd") is None
    assert len(fake.bodies) == 1


def test_request_bodies_are_sent_as_utf8_json(fake):
    fake.json("/completion", {"content": "ok", "stop": True, "stop_type": "eos"})
    create_backend("llamacpp", endpoint=fake.url).complete("héllo \u2028", PARAMS)
    assert fake.bodies[0]["prompt"] == "héllo \u2028"
    assert fake.headers[0]["Content-Type"] == "application/json"
    assert json.dumps(fake.bodies[0])  # round-trips


def test_a_probe_bounds_the_read_but_keeps_the_configured_connect_timeout():
    seen = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.extensions["timeout"])
        return httpx.Response(200, json={"object": "list", "data": [{"id": "m", "object": "model"}]})

    create_backend("webui", connect_timeout=1.5, read_timeout=600, transport=httpx.MockTransport(answer)).probe()
    assert seen[0]["connect"] == 1.5 and seen[0]["read"] == PROBE_TIMEOUT


def test_the_servers_discovery_of_a_hung_backend_is_one_probe_waited_for_a_first_token_at_most(fake):
    fake.slow("/health", 2.0, method="GET")  # a server that accepts connections and says nothing
    backend = create_backend("llamacpp", endpoint=fake.url, first_token_timeout=0.3)

    async def twenty_requests_discover():
        started = time.monotonic()
        await asyncio.gather(*(backend._discover_off_loop() for _ in range(20)))
        waited = time.monotonic() - started
        started = time.monotonic()
        await backend._discover_off_loop()  # the probe still hangs: a later request does not wait again
        return waited, time.monotonic() - started

    waited, later = asyncio.run(twenty_requests_discover())
    assert 0.25 < waited < 1.0 and later < 0.05
    assert fake.paths.count("/health") == 1


@pytest.mark.parametrize("chunk", [
    b'data: {"content": "a"}\n\n',
    b'data: {"content": "\xc3\xa9"}\n\ndata: {"content": "b"}\n\ndata: [DONE]\n\n',
    b"data: a\r\n\r\n", b"data:a\n\n", b"data: x\ndata: y\n\n", b"event: error\ndata: {}\n\n", b": ping\n\ndata: z\n\n",
    b"data: a\n\n\ndata: b\n\n",
])
def test_whole_events_in_one_read_give_what_the_line_reader_gives(chunk):
    """A read of whole one-line ``data:`` events takes a shorter way; byte by byte takes the long one."""
    assert read([chunk]) == read([chunk[i:i + 1] for i in range(len(chunk))])


LLAMA_ANSWER = [b'data: {"content":"Hi","stop":false}\n\n',
                b'data: {"content":"","stop":true,"tokens_predicted":1,"tokens_evaluated":3}\n\n']


def _read_idling(backend, idle_after: float) -> tuple[list, BaseException | None]:
    """The deltas of a stream opened with ``idle_after``, and the error that ended it, if any."""
    seen: list = []

    async def read() -> None:
        try:
            async for delta in backend.astream("p", PARAMS, idle_after=idle_after):
                seen.append(delta)
        finally:
            await backend.aclose()

    try:
        asyncio.run(read())
    except BackendError as exc:
        return seen, exc
    return seen, None


def test_a_stream_opened_with_idle_after_says_idle_until_its_first_token(fake):
    fake.stall = (0, 0.6)  # the prompt read: nothing at all comes for 0.6 s
    fake.stream("/completion", LLAMA_ANSWER)
    seen, error = _read_idling(create_backend("llamacpp", endpoint=fake.url, first_token_timeout=10), 0.05)
    idle = next(index for index, delta in enumerate(seen) if delta is not IDLE)
    assert error is None and idle >= 4  # about one every 0.05 s; fewer where a slow machine wakes late
    assert [delta.text for delta in seen[idle:]] == ["Hi", ""] and IDLE not in seen[idle:]


def test_idling_does_not_stretch_the_first_token_timeout(fake):
    fake.stall = (0, 3.0)
    fake.stream("/completion", LLAMA_ANSWER)
    started = time.monotonic()
    seen, error = _read_idling(create_backend("llamacpp", endpoint=fake.url, first_token_timeout=0.4), 0.05)
    assert isinstance(error, BackendTimeoutError) and "first_token_timeout" in str(error)
    assert time.monotonic() - started < 2.0 and len(seen) >= 3 and all(delta is IDLE for delta in seen)


def test_a_stream_opened_without_idle_after_never_says_idle(fake):
    fake.stall = (0, 0.3)
    fake.stream("/completion", LLAMA_ANSWER)
    seen, error = _read_idling(create_backend("llamacpp", endpoint=fake.url), None)
    assert error is None and [delta.text for delta in seen] == ["Hi", ""] and IDLE not in seen
