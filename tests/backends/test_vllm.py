"""vLLM's OpenAI-compatible server (reference section 6)."""

from __future__ import annotations

import pytest

from llmproxy.backends.base import Completion, GenerationParams
from llmproxy.backends.vllm import VLLMBackend
from llmproxy.errors import (
    BackendError,
    BackendHTTPError,
    BackendProtocolError,
    ContextWindowExceededError,
    UnsupportedRequestError,
)
from llmproxy.settings import resolve_settings, to_generation_params

from .conftest import CALL_PIECES, CALL_TEXT, MEMGPT_PROMPT, assert_memgpt_call, dumps, sse

MODEL = "NousResearch/Hermes-2-Pro-Mistral-7B"
GRAMMAR = 'root ::= "{" [^}]* "}"'
PARAMS = GenerationParams(max_tokens=300, stop=("\nUSER:", "  }\n}\n"), temperature=0.5, top_p=0.9, seed=7,
                          grammar=GRAMMAR, extra={"min_p": 0.05})
USAGE = {"prompt_tokens": 97, "completion_tokens": 41, "total_tokens": 138, "prompt_tokens_details": None}
MODELS = {"object": "list", "data": [{"id": MODEL, "object": "model", "created": 1, "owned_by": "vllm",
                                      "root": MODEL, "parent": None, "max_model_len": 32768, "permission": []}]}


def chunk(text, reason=None, usage=None, stop_reason=None):
    return {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": MODEL,
            "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": reason,
                         "stop_reason": stop_reason}], "usage": usage}


def test_request_body_field_by_field_new_structured_outputs():
    body = VLLMBackend(model=MODEL, grammar_field="structured_outputs").request_body("PROMPT", PARAMS, stream=False)
    assert body == {"min_p": 0.05, "prompt": "PROMPT", "max_tokens": 300, "stream": False,
                    "stop": ["\nUSER:", "  }\n}\n"], "model": MODEL, "temperature": 0.5, "top_p": 0.9, "seed": 7,
                    "structured_outputs": {"grammar": GRAMMAR}}


def test_old_guided_grammar_field():
    body = VLLMBackend(model=MODEL, grammar_field="guided_grammar").request_body("p", PARAMS, stream=False)
    assert body["guided_grammar"] == GRAMMAR and "structured_outputs" not in body


def test_grammar_merges_with_other_structured_output_settings():
    params = GenerationParams(grammar=GRAMMAR, extra={"structured_outputs": {"disable_any_whitespace": True}})
    body = VLLMBackend(model=MODEL, grammar_field="structured_outputs").request_body("p", params, stream=False)
    assert body["structured_outputs"] == {"disable_any_whitespace": True, "grammar": GRAMMAR}
    assert params.extra == {"structured_outputs": {"disable_any_whitespace": True}}  # not mutated


def test_the_type_takes_grammars_but_an_instance_only_once_it_knows_the_field():
    assert VLLMBackend.capabilities.grammar is True  # what `llmproxy render --backend vllm` reads
    assert VLLMBackend(model=MODEL).capabilities.grammar is False
    assert VLLMBackend(model=MODEL, grammar_field="guided_grammar").capabilities.grammar is True


@pytest.mark.parametrize("version,field", [("0.11.0", "structured_outputs"), ("0.10.2", "structured_outputs"),
                                           ("0.9.2", "guided_grammar"), ("0.10.1.1", "guided_grammar")])
def test_grammar_field_is_read_off_the_server_version(fake, version, field):
    fake.json("/v1/models", MODELS, method="GET")
    fake.json("/version", {"version": version}, method="GET")
    backend = VLLMBackend(fake.url, model=MODEL)
    assert backend.discover().grammar_field == field
    assert backend.capabilities.grammar is True
    body = backend.request_body("p", PARAMS, stream=False)
    assert (body.get("structured_outputs") or {}).get("grammar", body.get("guided_grammar")) == GRAMMAR
    assert field in body
    backend.discover()
    assert fake.paths == ["/v1/models", "/version"]  # asked once


def test_unknown_server_takes_no_grammar_and_says_what_to_set(fake):
    fake.json("/v1/models", MODELS, method="GET")
    fake.raw("/version", b"", status=404, method="GET")
    backend = VLLMBackend(fake.url, model=MODEL)
    backend.discover()
    assert backend.capabilities.grammar is False  # so grammar "auto" falls back to repair alone
    with pytest.raises(UnsupportedRequestError, match="Set grammar_field: 'structured_outputs'.*'grammar' for llama.cpp"):
        backend.request_body("p", PARAMS, stream=False)
    backend.discover()
    assert fake.paths == ["/v1/models", "/version"]  # asked once


def test_reading_capabilities_never_asks_the_server(fake):
    backend = VLLMBackend(fake.url, model=MODEL)
    for _ in range(3):
        assert backend.capabilities.grammar is False
    assert fake.paths == []


def test_a_server_not_up_yet_is_asked_again_once_it_is(fake):
    """llmproxy often starts before the vLLM server it fronts: discovery at start finds nothing, and
    the first request (in its worker thread) asks again."""
    backend = VLLMBackend(fake.url)
    fake.server.stop()
    try:
        assert backend.discover().up is False
        assert backend.capabilities.grammar is False and backend.model is None
    finally:
        fake.server.start()
    fake.json("/v1/models", MODELS, method="GET")
    fake.json("/version", {"version": "0.11.0"}, method="GET")
    fake.json("/v1/completions", {"choices": [{"index": 0, "text": "ok", "finish_reason": "stop"}]})
    assert backend.complete("p", PARAMS).text == "ok"
    assert fake.paths == ["/v1/models", "/version", "/v1/completions"]
    assert fake.bodies[-1]["model"] == MODEL and fake.bodies[-1]["structured_outputs"] == {"grammar": GRAMMAR}
    assert backend.capabilities.grammar is True and backend.context_window() == 32768


def test_a_server_listing_no_model_is_a_clear_error(fake):
    fake.json("/v1/models", {"object": "list", "data": []}, method="GET")
    backend = VLLMBackend(fake.url)
    with pytest.raises(BackendProtocolError, match="names no model.*lists no model.*set the model name"):
        backend.complete("p", GenerationParams())
    assert fake.paths == ["/v1/models"]


def test_max_tokens_always_sent_because_vllm_defaults_to_16():
    body = VLLMBackend(model=MODEL).request_body("p", GenerationParams(), stream=True)
    assert body == {"prompt": "p", "max_tokens": 1024, "stream": True, "stream_options": {"include_usage": True},
                    "model": MODEL}


def test_settings_translation():
    params = to_generation_params(resolve_settings("vllm", {"max_tokens": 200, "top_k": 20}))
    body = VLLMBackend(model=MODEL).request_body("p", params, stream=False)
    assert body["max_tokens"] == 200 and body["top_k"] == 20 and "stop" not in body
    assert body["temperature"] == 0.7


def test_complete_resolves_the_served_model_and_gives_the_memgpt_call(fake):
    fake.json("/version", {"version": "0.11.0"}, method="GET")
    fake.json("/v1/models", MODELS, method="GET")
    fake.json("/v1/completions", {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": MODEL,
                                  "choices": [{"index": 0, "text": CALL_TEXT, "logprobs": None,
                                               "finish_reason": "stop", "stop_reason": "  }\n}\n",
                                               "prompt_logprobs": None}], "usage": USAGE})
    backend = VLLMBackend(fake.url)
    result = backend.complete(MEMGPT_PROMPT, PARAMS)
    assert result == Completion(CALL_TEXT, "stop", 97, 41, stop_word="  }\n}\n")
    assert_memgpt_call(result.text)
    assert fake.paths == ["/v1/models", "/version", "/v1/completions"]
    assert fake.bodies[-1]["model"] == MODEL and fake.bodies[-1]["structured_outputs"] == {"grammar": GRAMMAR}
    backend.complete(MEMGPT_PROMPT, PARAMS)
    assert fake.paths[3:] == ["/v1/completions"]  # resolved once


def test_stream_with_usage_chunk_and_done(fake):
    chunks = sse(*[chunk(p) for p in CALL_PIECES], chunk("", "length"),
                 {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": MODEL, "choices": [],
                  "usage": USAGE})
    fake.stream("/v1/completions", chunks)
    deltas = list(VLLMBackend(fake.url, model=MODEL, grammar_field="structured_outputs").stream(MEMGPT_PROMPT, PARAMS))
    assert [d.text for d in deltas] == [*CALL_PIECES, ""]
    assert (deltas[-1].finish_reason, deltas[-1].prompt_tokens, deltas[-1].completion_tokens) == ("length", 97, 41)
    assert fake.bodies[0]["stream_options"] == {"include_usage": True}


# vLLM's stop_reason: the stop string that matched, a stop token's id, or null (EOS, or the length).
STOP_REASONS = [("stop", "\nUSER:", "\nUSER:"), ("stop", None, None), ("stop", 32000, None), ("length", None, None)]


@pytest.mark.parametrize("finish,stop_reason,word", STOP_REASONS)
def test_stop_reason_names_the_stop_string(fake, finish, stop_reason, word):
    fake.json("/v1/completions", chunk("x", finish, USAGE, stop_reason))
    result = VLLMBackend(fake.url, model=MODEL, grammar_field="structured_outputs").complete("p", PARAMS)
    assert (result.finish_reason, result.stop_word) == (finish, word)


@pytest.mark.parametrize("finish,stop_reason,word", STOP_REASONS)
def test_stop_reason_names_the_stop_string_streamed(fake, finish, stop_reason, word):
    fake.stream("/v1/completions", sse(chunk("x"), chunk("", finish, stop_reason=stop_reason),
                                       {**chunk("", usage=USAGE), "choices": []}))
    deltas = list(VLLMBackend(fake.url, model=MODEL, grammar_field="structured_outputs").stream("p", PARAMS))
    assert [(d.text, d.finish_reason, d.stop_word) for d in deltas] == [("x", None, None), ("", finish, word)]


def test_stream_error_event(fake):
    fake.stream("/v1/completions", [b"data: " + dumps(chunk("a")).encode() + b"\n\n",
                                    b'data: {"error": {"message": "engine died", "type": "InternalServerError", '
                                    b'"param": null, "code": 500}}\n\n'])
    with pytest.raises(BackendError, match="middle of the stream: engine died"):
        list(VLLMBackend(fake.url, model=MODEL, grammar_field="structured_outputs").stream("p", PARAMS))


@pytest.mark.parametrize("body", [
    {"object": "error", "message": "This model's maximum context length is 32768 tokens. However, you requested "
     "33068 tokens (32768 in the messages, 300 in the completion). Please reduce the length of the messages or "
     "completion.", "type": "BadRequestError", "param": None, "code": 400},
    {"error": {"message": "This model's maximum context length is 32768 tokens. However, you requested 33068 tokens "
               "(32768 in the messages, 300 in the completion). Please reduce the length of the messages or "
               "completion.", "type": "BadRequestError", "param": None, "code": 400}},
])
def test_context_overflow_old_and_new_error_shapes(fake, body):
    fake.json("/v1/completions", body, status=400)
    with pytest.raises(ContextWindowExceededError) as info:
        VLLMBackend(fake.url, model=MODEL, grammar_field="structured_outputs").complete("p", PARAMS)
    assert (info.value.prompt_tokens, info.value.context_window) == (32768, 32768)


def test_context_overflow_by_string_code(fake):
    fake.json("/v1/completions", {"error": {"message": "prompt too long", "type": "BadRequestError", "param": None,
                                            "code": "context_length_exceeded"}}, status=400)
    with pytest.raises(ContextWindowExceededError, match="prompt too long"):
        VLLMBackend(fake.url, model=MODEL, grammar_field="structured_outputs").complete("p", PARAMS)


def test_wrong_model_name(fake):
    fake.json("/v1/completions", {"object": "error", "message": "The model `gpt-4` does not exist.",
                                  "type": "NotFoundError", "param": None, "code": 404}, status=404)
    with pytest.raises(BackendHTTPError, match="gpt-4` does not exist.*model name") as info:
        VLLMBackend(fake.url, model="gpt-4", grammar_field="structured_outputs").complete("p", PARAMS)
    assert info.value.status == 404


def test_count_tokens(fake):
    fake.json("/tokenize", {"count": 6, "max_model_len": 32768, "tokens": [1, 2, 3, 4, 5, 6]})
    assert VLLMBackend(fake.url, model=MODEL).count_tokens("hello") == 6
    assert fake.paths == ["/tokenize"] and fake.bodies == [{"model": MODEL, "prompt": "hello"}]


def test_probe(fake):
    fake.json("/v1/models", MODELS, method="GET")
    fake.json("/version", {"version": "0.11.0"}, method="GET")
    result = VLLMBackend(fake.url).probe()
    assert (result.up, result.model, result.context_window, result.grammar) == (True, MODEL, 32768, True)


def test_probe_of_a_server_with_no_version_reports_no_grammar(fake):
    fake.json("/v1/models", MODELS, method="GET")
    fake.raw("/version", b"", status=404, method="GET")
    assert VLLMBackend(fake.url).probe().grammar is False
    backend = VLLMBackend(fake.url, model=MODEL)
    assert backend.context_window() is None  # nothing asked yet
    backend.discover()
    assert backend.context_window() == 32768


def test_probe_flags_a_model_name_the_server_does_not_serve(fake):
    fake.json("/v1/models", MODELS, method="GET")
    result = VLLMBackend(fake.url, model="gpt-4").probe()
    assert result.up is False and "'gpt-4' is not served" in result.detail and MODEL in result.detail
