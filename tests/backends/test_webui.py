"""text-generation-webui: the OpenAI-compatible API and the 2023 blocking API (reference section 4)."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from werkzeug import Response

from llmproxy.backends.base import IDLE, Completion, GenerationParams
from llmproxy.backends.webui import WebUIBackend, WebUILegacyBackend, legacy_request
from llmproxy.errors import BackendHTTPError, BackendProtocolError
from llmproxy.settings import resolve_settings, to_generation_params

from .conftest import CALL_PIECES, CALL_TEXT, MEMGPT_PROMPT, assert_memgpt_call, dumps, sse

PARAMS = GenerationParams(max_tokens=300, stop=("\nUSER:", "  }\n}\n"), temperature=0.5, top_p=0.9, seed=7,
                          grammar='root ::= "{"', extra={"min_p": 0.05})
MODEL = "TheBloke_dolphin-2.1-mistral-7B-GPTQ"


def completion(text, reason="stop", usage=True):
    body = {"id": "cmpl-1715000000", "object": "text_completion", "created": 1715000000, "model": MODEL,
            "system_fingerprint": None, "choices": [{"index": 0, "finish_reason": reason, "text": text,
                                                     "logprobs": None}]}
    if usage:
        body["usage"] = {"prompt_tokens": 97, "completion_tokens": 41, "total_tokens": 138}
    return body


def chunk(text, reason=None):
    return {"id": "cmpl-1715000000", "object": "text_completion", "created": 1715000000, "model": MODEL,
            "choices": [{"index": 0, "finish_reason": reason, "text": text, "logprobs": None}]}


# --- OpenAI-compatible API -------------------------------------------------------------------


def test_request_body_field_by_field():
    body = WebUIBackend(context_window=4096).request_body("PROMPT", PARAMS, stream=False)
    assert body == {"min_p": 0.05, "prompt": "PROMPT", "max_tokens": 300, "stream": False,
                    "stop": ["\nUSER:", "  }\n}\n"], "temperature": 0.5, "top_p": 0.9, "seed": 7,
                    "grammar_string": 'root ::= "{"', "truncation_length": 4096}


def test_stream_request_asks_for_usage():
    body = WebUIBackend().request_body("p", GenerationParams(max_tokens=5), stream=True)
    assert body == {"prompt": "p", "max_tokens": 5, "stream": True, "stream_options": {"include_usage": True}}


def test_settings_translation():
    params = to_generation_params(resolve_settings("webui", {"max_tokens": 200, "grammar": "root ::= x"}))
    body = WebUIBackend().request_body("p", params, stream=False)
    assert body["max_tokens"] == 200 and body["grammar_string"] == "root ::= x" and "stop" not in body
    assert "grammar" not in body


def test_complete_memgpt_call(fake):
    fake.json("/v1/completions", completion(CALL_TEXT))
    result = WebUIBackend(fake.url + "/v1").complete(MEMGPT_PROMPT, PARAMS)
    assert result == Completion(CALL_TEXT, "stop", 97, 41)
    assert_memgpt_call(result.text)
    assert fake.paths == ["/v1/completions"]


def test_stream_current_lf_usage_chunk_and_done(fake):
    usage = {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": MODEL, "choices": [],
             "usage": {"prompt_tokens": 97, "completion_tokens": 41, "total_tokens": 138}}
    chunks = sse(*[chunk(p) for p in CALL_PIECES], chunk("", "stop"), usage)
    assert chunks[-1] == b"data: [DONE]\n\n"
    fake.stream("/v1/completions", chunks)
    deltas = list(WebUIBackend(fake.url).stream(MEMGPT_PROMPT, PARAMS))
    assert [d.text for d in deltas] == [*CALL_PIECES, ""]
    assert (deltas[-1].finish_reason, deltas[-1].prompt_tokens, deltas[-1].completion_tokens) == ("stop", 97, 41)
    assert_memgpt_call("".join(d.text for d in deltas))


def test_stream_nov_2023_crlf_without_done(fake):
    # sse_starlette's CRLF separator, no [DONE]; the last chunk always carried usage.
    last = {**chunk("", "length"), "usage": {"prompt_tokens": 97, "completion_tokens": 300, "total_tokens": 397}}
    chunks = [b"data: " + dumps(chunk(p)).encode() + b"\r\n\r\n" for p in CALL_PIECES]
    chunks.append(b"data: " + dumps(last).encode() + b"\r\n\r\n")
    fake.stream("/v1/completions", chunks)
    deltas = list(WebUIBackend(fake.url).stream(MEMGPT_PROMPT, PARAMS))
    assert "".join(d.text for d in deltas) == CALL_TEXT
    assert (deltas[-1].finish_reason, deltas[-1].prompt_tokens, deltas[-1].completion_tokens) == ("length", 97, 300)


def test_stream_crlf_cut_without_finish(fake):
    fake.stream("/v1/completions", [b"data: " + dumps(chunk("a")).encode() + b"\r\n\r\n"])
    with pytest.raises(BackendProtocolError, match="without a final one"):
        list(WebUIBackend(fake.url).stream("p", PARAMS))


@pytest.mark.parametrize("status,body,words", [
    (400, {"error": {"message": "max_tokens must be greater than or equal to 0.", "type": "invalid_request_error",
                     "param": None, "code": None}}, "max_tokens must be greater"),
    (422, {"detail": [{"type": "float_parsing", "loc": ["body", "temperature"],
                       "msg": "Input should be a valid number", "input": "hot"}]}, "Input should be a valid number"),
    (401, {"detail": "Unauthorized"}, "Unauthorized.*auth_key"),
    (400, {"detail": "Invalid host header"}, "Invalid host header"),
])
def test_error_shapes(fake, status, body, words):
    fake.json("/v1/completions", body, status=status)
    with pytest.raises(BackendHTTPError, match=words) as info:
        WebUIBackend(fake.url).complete("p", PARAMS)
    assert info.value.status == status


def test_nov_2023_internal_server_error(fake):
    fake.raw("/v1/completions", b"Internal Server Error", status=500, content_type="text/plain")
    with pytest.raises(BackendHTTPError, match="HTTP 500: Internal Server Error.*server's log"):
        WebUIBackend(fake.url).complete("p", PARAMS)


def test_count_tokens(fake):
    fake.json("/v1/internal/token-count", {"length": 12})
    assert WebUIBackend(fake.url).count_tokens("hello") == 12
    assert fake.bodies == [{"text": "hello"}]


def test_probe(fake):
    fake.json("/v1/models", {"object": "list", "data": [{"id": MODEL, "object": "model", "created": 0,
                                                         "owned_by": "user"}]}, method="GET")
    result = WebUIBackend(fake.url).probe()
    assert (result.up, result.model, result.context_window, result.grammar) == (True, MODEL, None, True)


# --- legacy blocking API ---------------------------------------------------------------------


def test_legacy_request_body_field_by_field():
    body = legacy_request("PROMPT", PARAMS, context_window=4096, grammar_fields={"grammar_string": "g"})
    assert body == {"min_p": 0.05, "prompt": "PROMPT", "max_new_tokens": 300,
                    "stopping_strings": ["\nUSER:", "  }\n}\n"], "truncation_length": 4096,
                    "temperature": 0.5, "top_p": 0.9, "seed": 7, "grammar_string": "g"}


def test_legacy_settings_translation():
    params = to_generation_params(resolve_settings("webui-legacy", {"max_tokens": 200}))
    body = WebUILegacyBackend().request_body("p", params)
    assert body["max_new_tokens"] == 200 and "stopping_strings" not in body
    assert not {"stop", "max_tokens", "truncation_length"} & set(body)


def test_legacy_complete_memgpt_call_and_single_delta_stream(fake):
    fake.json("/api/v1/generate", {"results": [{"text": CALL_TEXT}]})
    backend = WebUILegacyBackend(fake.url + "/api", context_window=4096)
    result = backend.complete(MEMGPT_PROMPT, PARAMS)
    assert result == Completion(CALL_TEXT, "stop", None, None)
    assert_memgpt_call(result.text)
    assert backend.capabilities.streaming is False
    assert [(d.text, d.finish_reason) for d in backend.stream(MEMGPT_PROMPT, PARAMS)] == [(CALL_TEXT, "stop")]
    assert fake.paths == ["/api/v1/generate"] * 2
    assert fake.bodies[0]["grammar_string"] == 'root ::= "{"' and fake.bodies[0]["truncation_length"] == 4096


def test_legacy_whole_answer_read_with_idle_after_says_idle_while_it_waits(fake):
    def slow_answer(_):
        time.sleep(0.5)  # the prompt read
        return Response(dumps({"results": [{"text": CALL_TEXT}]}), content_type="application/json")

    fake.route("/api/v1/generate", slow_answer)
    fake.json("/api/v1/model", {"result": MODEL}, method="GET")
    backend = WebUILegacyBackend(fake.url)

    async def read() -> list:
        try:
            return [delta async for delta in backend.astream("p", PARAMS, idle_after=0.05)]
        finally:
            await backend.aclose()

    deltas = asyncio.run(read())
    assert len(deltas) >= 5 and all(delta is IDLE for delta in deltas[:-1])
    assert (deltas[-1].text, deltas[-1].finish_reason) == (CALL_TEXT, "stop")


def test_legacy_unknown_path_is_an_html_404(fake):
    fake.raw("/api/v1/generate", b"<html><body><h1>404</h1></body></html>", status=404, content_type="text/html")
    with pytest.raises(BackendHTTPError, match="HTTP 404.*webui-legacy server"):
        WebUILegacyBackend(fake.url).complete("p", PARAMS)


def test_legacy_exception_drops_the_connection():
    def drop(request: httpx.Request) -> httpx.Response:
        raise httpx.RemoteProtocolError("Server disconnected without sending a response.", request=request)

    with pytest.raises(BackendProtocolError, match="broke off"):
        WebUILegacyBackend(transport=httpx.MockTransport(drop)).complete("p", PARAMS)


def test_legacy_count_tokens_and_probe(fake):
    fake.json("/api/v1/token-count", {"results": [{"tokens": 9}]})
    fake.json("/api/v1/model", {"result": MODEL}, method="GET")
    backend = WebUILegacyBackend(fake.url)
    assert backend.count_tokens("hello") == 9
    assert fake.paths == ["/api/v1/model", "/api/v1/token-count"]  # discovery first, once
    assert fake.bodies[-1] == {"prompt": "hello"}
    result = backend.probe()
    assert (result.up, result.model, result.grammar) == (True, MODEL, True)
