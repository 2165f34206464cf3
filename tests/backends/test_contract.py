"""The backend contract: the same assertions for every backend in the registry.

Each HTTP backend runs against its fake from fakes.py, which speaks that backend's protocol as the
reference describes it. A backend registered without a fake fails here, so a new backend is tested by
adding its fake. The embedded backend runs in-process on its real model: the model-marked tests at the
end of this file hold it to the parts of the contract that apply in-process (connection, timeout and
HTTP errors do not), and test_embedded.py covers the rest of it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import time

import pytest

from llmproxy.backends import BACKEND_NAMES, backend_class, create_backend
from llmproxy.backends.base import AsyncBackend, Backend, GenerationParams
from llmproxy.errors import BackendConnectionError, BackendHTTPError, BackendTimeoutError, UnsupportedRequestError

from .conftest import CALL_PIECES, CALL_TEXT, MEMGPT_PROMPT, Fake
from .fakes import COMPLETION_TOKENS, FAKES, PROMPT_TOKENS, ProtocolFake, Sent, token_count

IN_PROCESS = {"embedded"}  # no server to fake: held to the contract on its real model below
HTTP_BACKENDS = [name for name in BACKEND_NAMES if name not in IN_PROCESS]
STOP = ("\nUSER:", "  }\n}\n")
PARAMS = GenerationParams(max_tokens=300, stop=STOP, temperature=0.5, top_p=0.9, seed=7)
GRAMMAR = 'root ::= "{" [^}]* "}"'
SENT = Sent(MEMGPT_PROMPT, 300, list(STOP), 0.5, 7, None)


def test_every_registered_backend_is_covered():
    assert set(FAKES) | IN_PROCESS == set(BACKEND_NAMES), "add a fake for each new backend to fakes.py"
    assert not set(FAKES) & IN_PROCESS


@pytest.fixture(params=HTTP_BACKENDS)
def server(request, fake: Fake) -> ProtocolFake:
    """The backend's fake server, answering discovery."""
    return protocol_fake(request.param, fake)


@pytest.fixture(params=[name for name in HTTP_BACKENDS if backend_class(name).capabilities.streaming])
def streaming_server(request, fake: Fake) -> ProtocolFake:
    """The same, for the backends that stream."""
    return protocol_fake(request.param, fake)


def protocol_fake(name: str, fake: Fake) -> ProtocolFake:
    if name not in FAKES:
        pytest.fail(f"backend {name!r} is registered but has no fake: add one to tests/backends/fakes.py")
    protocol = FAKES[name](fake)
    protocol.serve_discovery()
    return protocol


def connect(server: ProtocolFake, **options) -> Backend:
    return create_backend(server.backend, endpoint=server.url, **{**server.options, **options})


# --- discovery and capabilities --------------------------------------------------------------


def test_discovery_learns_once_what_only_the_server_can_tell(server):
    backend = connect(server)
    found = backend.discover()
    assert found.up is True and found.model == server.model
    assert backend.context_window() == server.context_window
    assert backend.chat_template() == server.chat_template()
    # A server that answers in full gives the instance every capability its class claims.
    assert backend.capabilities == backend_class(server.backend).capabilities
    asked = list(server.fake.paths)
    assert backend.discover() == found and server.fake.paths == asked


def test_a_server_not_up_at_start_is_asked_again_by_the_first_request(server):
    backend = connect(server)
    server.fake.server.stop()
    try:
        assert backend.discover().up is False
        assert backend.context_window() is None and backend.chat_template() is None
    finally:
        server.fake.server.start()
    server.serve_completion(CALL_TEXT)
    assert backend.complete(MEMGPT_PROMPT, PARAMS).text == CALL_TEXT
    assert backend.context_window() == server.context_window
    assert backend.capabilities == backend_class(server.backend).capabilities


def test_configured_context_window_wins_and_needs_no_server(server):
    backend = connect(server, context_window=1234)
    assert backend.context_window() == 1234 and server.fake.paths == []


# --- generation ------------------------------------------------------------------------------


def test_complete_translates_the_common_parameters(server):
    server.serve_completion(CALL_TEXT)
    result = connect(server).complete(MEMGPT_PROMPT, PARAMS)
    assert result.text == CALL_TEXT and result.finish_reason == "stop" and result.stop_word is None
    counts = (PROMPT_TOKENS, COMPLETION_TOKENS) if server.counts else (None, None)
    assert (result.prompt_tokens, result.completion_tokens) == counts
    (body,) = server.completion_requests()
    assert server.sent(body) == SENT


def test_stream_deltas_join_to_the_same_text(server):
    server.serve_stream(CALL_PIECES)
    deltas = list(connect(server).stream(MEMGPT_PROMPT, PARAMS))
    assert "".join(delta.text for delta in deltas) == CALL_TEXT
    assert deltas[-1].finish_reason == "stop" and all(delta.finish_reason is None for delta in deltas[:-1])
    assert all(delta.stop_word is None for delta in deltas)  # ended by the model, not a stop string
    (body,) = server.completion_requests()
    assert server.sent(body) == SENT


def test_the_stop_string_that_ended_a_whole_answer_where_the_protocol_names_it(server):
    server.serve_completion(CALL_TEXT, stop_word=STOP[1])
    result = connect(server).complete(MEMGPT_PROMPT, PARAMS)
    assert result.text == CALL_TEXT and result.finish_reason == "stop"
    assert result.stop_word == (STOP[1] if server.reports_stop_word else None)
    (awaited,) = run_async(connect(server), lambda backend: backend.acomplete(MEMGPT_PROMPT, PARAMS))
    assert awaited == result


def test_the_stop_string_that_ended_a_stream_where_the_protocol_names_it(server):
    server.serve_stream(CALL_PIECES, stop_word=STOP[1])
    expected = STOP[1] if server.reports_stop_word else None
    deltas = list(connect(server).stream(MEMGPT_PROMPT, PARAMS))
    assert "".join(delta.text for delta in deltas) == CALL_TEXT
    assert deltas[-1].stop_word == expected and all(delta.stop_word is None for delta in deltas[:-1])
    (adeltas,) = run_async(connect(server), astream())
    assert "".join(delta.text for delta in adeltas) == CALL_TEXT and adeltas[-1] == deltas[-1]


def test_grammar_is_sent_where_the_capability_says_so_and_refused_where_not(server):
    backend = connect(server)
    backend.discover()
    server.serve_completion("{}")
    with_grammar = dataclasses.replace(PARAMS, grammar=GRAMMAR)
    if backend.capabilities.grammar:
        assert backend.complete(MEMGPT_PROMPT, with_grammar).text == "{}"
        (body,) = server.completion_requests()
        assert server.sent(body) == dataclasses.replace(SENT, grammar=GRAMMAR)
    else:
        with pytest.raises(UnsupportedRequestError, match="grammar"):
            backend.complete(MEMGPT_PROMPT, with_grammar)
        assert server.completion_requests() == []  # refused, not silently dropped


def test_token_counting_where_the_backend_has_a_tokenizer(server):
    backend = connect(server)
    backend.discover()
    asked = len(server.fake.paths)
    if backend.capabilities.tokenizer:
        server.serve_tokenizer()
        assert backend.count_tokens("one two three") == token_count("one two three")
        assert backend.count_tokens("one two three") == token_count("one two three")  # cached
        assert len(server.fake.paths) == asked + 1
    else:
        assert backend.count_tokens("one two three") is None
        assert len(server.fake.paths) == asked


# --- probe and failures ----------------------------------------------------------------------


def test_probe_of_a_server_that_is_up(server):
    result = connect(server).probe()
    assert (result.backend, result.up, result.model) == (server.backend, True, server.model)
    assert result.grammar == backend_class(server.backend).capabilities.grammar


@pytest.mark.parametrize("name", HTTP_BACKENDS)
def test_probe_of_a_server_that_is_down(name, closed_port):
    result = create_backend(name, endpoint=f"http://127.0.0.1:{closed_port}", model="m").probe()
    assert (result.backend, result.up) == (name, False) and "could not connect" in result.detail


@pytest.mark.parametrize("name", HTTP_BACKENDS)
def test_refused_connection(name, closed_port):
    backend = create_backend(name, endpoint=f"http://127.0.0.1:{closed_port}", model="m")
    with pytest.raises(BackendConnectionError, match="is the server running"):
        backend.complete(MEMGPT_PROMPT, PARAMS)
    with pytest.raises(BackendConnectionError, match="is the server running"):
        list(backend.stream(MEMGPT_PROMPT, PARAMS))


def test_read_timeout(server):
    # The library's sync client has one read limit: the larger of first_token_timeout and read_timeout.
    for path in {server.complete_path, server.stream_path}:
        server.fake.slow(path, 1.0)
    backend = connect(server, first_token_timeout=0.2, read_timeout=0.1)
    with pytest.raises(BackendTimeoutError, match="first_token_timeout"):
        backend.complete(MEMGPT_PROMPT, PARAMS)
    with pytest.raises(BackendTimeoutError, match="first_token_timeout"):
        list(backend.stream(MEMGPT_PROMPT, PARAMS))


def test_http_500(server):
    for path in {server.complete_path, server.stream_path}:
        server.serve_error(path, 500)
    backend = connect(server)
    with pytest.raises(BackendHTTPError, match="HTTP 500") as info:
        backend.complete(MEMGPT_PROMPT, PARAMS)
    assert info.value.status == 500
    with pytest.raises(BackendHTTPError, match="HTTP 500"):
        list(backend.stream(MEMGPT_PROMPT, PARAMS))


# --- the same on an event loop (the server's async client) ----------------------------------


def run_async(backend: Backend, *steps):
    """Run ``steps`` (coroutine functions of the backend) on one event loop, closing its connections."""

    async def run():
        try:
            return [await step(backend) for step in steps]
        finally:
            await backend.aclose()

    return asyncio.run(run())


def astream(prompt: str = MEMGPT_PROMPT, params: GenerationParams = PARAMS):
    async def step(backend):
        return [delta async for delta in backend.astream(prompt, params)]

    return step


def test_every_http_backend_runs_on_an_event_loop(server):
    assert isinstance(connect(server), AsyncBackend)


def test_async_stream_sends_and_reads_the_same_as_the_sync_one(server):
    server.serve_stream(CALL_PIECES)
    (deltas,) = run_async(connect(server), astream())
    assert "".join(delta.text for delta in deltas) == CALL_TEXT and deltas[-1].finish_reason == "stop"
    assert all(delta.finish_reason is None for delta in deltas[:-1])
    synced = list(connect(server).stream(MEMGPT_PROMPT, PARAMS))
    assert "".join(delta.text for delta in synced) == CALL_TEXT and synced[-1] == deltas[-1]
    first, second = server.completion_requests()
    assert server.sent(first) == server.sent(second) == SENT


def relayed(prompt: str = MEMGPT_PROMPT, params: GenerationParams = PARAMS, first_read: threading.Event | None = None):
    """The stream read as the server relays it: its first delta read (then ``first_read`` set), every later
    one handed to a callback sent in (``AsyncBackend.astream``), then what the stream still gives."""

    async def step(backend):
        deltas = backend.astream(prompt, params)
        handed: list = []
        try:
            read = [await anext(deltas)]
            if first_read is not None:
                first_read.set()
            read.append(await deltas.asend(handed.append))
            read += [delta async for delta in deltas]
        finally:
            await deltas.aclose()
        return read, handed

    return step


def test_a_relayed_stream_hands_on_the_same_deltas_as_a_read_one(streaming_server):
    """Every framing (SSE, NDJSON; with or without [DONE]) relays as it reads: the same text and the same
    closing delta, the text after the first delta through the callback, the closing delta given at the end."""
    first_read = threading.Event()
    stall_at = 1 + streaming_server.chunks_before_text  # the first piece alone, the rest once it is read
    streaming_server.fake.stall = (stall_at, first_read)
    streaming_server.serve_stream(CALL_PIECES, stop_word=STOP[1])
    ((read, handed),) = run_async(connect(streaming_server), relayed(first_read=first_read))
    (whole,) = run_async(connect(streaming_server), astream())
    assert handed and "".join(delta.text for delta in read[:1] + handed) == CALL_TEXT
    assert read[1:] == whole[-1:] and all(delta.finish_reason is None for delta in handed)


def test_async_token_counting(server):
    backend = connect(server)

    async def count(backend):
        return [await backend.acount_tokens("one two three"), await backend.acount_tokens("one two three")]

    if backend.capabilities.tokenizer:
        server.serve_tokenizer()
        assert run_async(backend, count) == [[token_count("one two three")] * 2]
        assert len([body for body in server.fake.bodies if body and "three" in json.dumps(body)]) == 1  # cached
    else:
        assert run_async(backend, count) == [[None, None]]


def test_async_errors_are_the_same_errors(server, closed_port):
    for path in {server.complete_path, server.stream_path}:
        server.serve_error(path, 500)
    with pytest.raises(BackendHTTPError, match="HTTP 500"):
        run_async(connect(server), astream())
    down = create_backend(server.backend, endpoint=f"http://127.0.0.1:{closed_port}", model="m")
    with pytest.raises(BackendConnectionError, match="is the server running"):
        run_async(down, astream())


def test_async_first_token_timeout_frees_the_request_in_its_own_time(server):
    for path in {server.complete_path, server.stream_path}:
        server.fake.slow(path, 2.0)
    started = time.monotonic()
    with pytest.raises(BackendTimeoutError, match=r"first_token_timeout.*raise first_token_timeout"):
        run_async(connect(server, first_token_timeout=0.3, read_timeout=5), astream())
    assert time.monotonic() - started < 1.5


def test_async_between_tokens_a_stalled_stream_is_cut_and_a_slow_one_is_not(streaming_server):
    server = streaming_server
    server.fake.stall = (1, 0.6)  # a piece, then a silence twice the read timeout
    server.serve_stream(CALL_PIECES)
    with pytest.raises(BackendTimeoutError, match="read_timeout"):
        run_async(connect(server, first_token_timeout=5, read_timeout=0.3), astream())
    server.fake.stall = (1, 0.3)  # slower than the first token is allowed, within the read timeout
    server.serve_stream(CALL_PIECES)
    (deltas,) = run_async(connect(server, first_token_timeout=0.2, read_timeout=2), astream())
    assert "".join(delta.text for delta in deltas) == CALL_TEXT


# --- the embedded backend: the same contract, in-process -------------------------------------
# Its output is the model's, so each answer below is pinned by a grammar: what it guarantees holds on
# any CPU. The translation is checked on the arguments handed to llama-cpp-python.

EMBEDDED_PROMPT = "<|im_start|>user\nWhat colour is the sky?<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def embedded() -> Backend:
    return create_backend("embedded")


def test_embedded_translates_the_common_parameters():
    arguments = create_backend("embedded")._arguments(dataclasses.replace(PARAMS, extra={"repeat_penalty": 1.0}))
    assert arguments == {"max_tokens": 300, "stop": list(STOP), "temperature": 0.5, "top_p": 0.9, "seed": 7,
                         "repeat_penalty": 1.0}


def test_embedded_discovery(embedded):
    found = embedded.discover()
    assert found.up is True and found.model == "SmolLM2-135M-Instruct.Q4_1"
    assert embedded.context_window() == 8192 and embedded.chat_template() == found.chat_template
    assert embedded.capabilities == backend_class("embedded").capabilities


@pytest.mark.model
def test_embedded_complete_and_stream_agree_with_the_grammar(embedded):
    params = GenerationParams(max_tokens=32, seed=7, stop=("!",), grammar='root ::= "The sky is blue."')
    done = embedded.complete(EMBEDDED_PROMPT, params)
    assert (done.text, done.finish_reason, done.stop_word) == ("The sky is blue.", "stop", None)  # the grammar's end
    assert done.prompt_tokens == embedded.count_tokens(EMBEDDED_PROMPT) and done.completion_tokens >= 1
    deltas = list(embedded.stream(EMBEDDED_PROMPT, params))
    assert "".join(delta.text for delta in deltas) == done.text
    assert deltas[-1].finish_reason == "stop" and all(delta.finish_reason is None for delta in deltas[:-1])
    assert all(delta.stop_word is None for delta in deltas)


@pytest.mark.model
def test_embedded_honours_max_tokens_and_stop(embedded):
    grammar = 'root ::= "alpha beta gamma delta epsilon zeta eta theta"'
    cut = embedded.complete(EMBEDDED_PROMPT, GenerationParams(max_tokens=2, grammar=grammar))
    assert (cut.finish_reason, cut.completion_tokens, cut.stop_word) == ("length", 2, None)
    assert "alpha beta gamma delta epsilon zeta eta theta".startswith(cut.text) and cut.text
    stop = GenerationParams(max_tokens=32, stop=(" omega", " gamma"), grammar=grammar)
    stopped = embedded.complete(EMBEDDED_PROMPT, stop)
    assert (stopped.text, stopped.finish_reason, stopped.stop_word) == ("alpha beta", "stop", " gamma")
    deltas = list(embedded.stream(EMBEDDED_PROMPT, stop))
    assert "".join(delta.text for delta in deltas) == "alpha beta"
    assert (deltas[-1].finish_reason, deltas[-1].stop_word) == ("stop", " gamma")
    assert all(delta.stop_word is None for delta in deltas[:-1])
