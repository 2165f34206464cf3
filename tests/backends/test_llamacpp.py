"""llama.cpp server: /completion, /tokenize, /props, /health (reference section 1)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from werkzeug import Response

from llmproxy.backends.base import ChatTemplate, Completion, GenerationParams
from llmproxy.backends.llamacpp import (
    LlamaCppBackend,
    completion_request,
    count_token_ids,
    parse_completion,
    parse_props,
    props_chat_template,
)
from llmproxy.errors import BackendError, BackendHTTPError, BackendProtocolError, ContextWindowExceededError
from llmproxy.settings import resolve_settings, to_generation_params

from .conftest import CALL_PIECES, CALL_TEXT, MEMGPT_PROMPT, assert_memgpt_call, dumps

PARAMS = GenerationParams(max_tokens=64, stop=("\nUSER:", "  }\n}\n"), temperature=0.5, top_p=0.9, seed=7,
                          grammar='root ::= "{"', extra={"cache_prompt": True, "mirostat": 2})
FINAL = {"index": 0, "content": CALL_TEXT, "tokens": [], "id_slot": 0, "stop": True, "model": "smol.gguf",
         "tokens_predicted": 41, "tokens_evaluated": 97, "generation_settings": {"n_ctx": 4096},
         "prompt": MEMGPT_PROMPT, "has_new_line": True, "truncated": False, "stop_type": "word",
         "stopping_word": "  }\n}\n", "tokens_cached": 96,
         "timings": {"prompt_n": 1, "prompt_ms": 2.0, "predicted_n": 41, "predicted_ms": 300.0}}


def test_request_body_field_by_field():
    body = completion_request("PROMPT", PARAMS, model=None, stream=False, grammar_fields={"grammar": 'root ::= "{"'})
    assert body == {"prompt": "PROMPT", "n_predict": 64, "stream": False, "stop": ["\nUSER:", "  }\n}\n"],
                    "temperature": 0.5, "top_p": 0.9, "seed": 7, "grammar": 'root ::= "{"',
                    "cache_prompt": True, "mirostat": 2}


def test_translated_common_names_win_over_the_same_native_key_in_settings():
    params = GenerationParams(max_tokens=64, extra={"n_predict": 4000, "stream": True})
    body = completion_request("p", params, model="router-model", stream=False, grammar_fields={})
    assert body == {"prompt": "p", "n_predict": 64, "stream": False, "model": "router-model"}


def test_settings_translation():
    params = to_generation_params(resolve_settings("llamacpp", {"max_tokens": 100, "seed": 3, "top_k": 20}))
    body = LlamaCppBackend().request_body("p", params, stream=False)
    assert body["n_predict"] == 100 and body["seed"] == 3 and body["top_k"] == 20
    assert body["cache_prompt"] is True
    assert "stop" not in body  # the wrapper's stop strings come with the request, none from the defaults
    assert "max_tokens" not in body


def test_complete_memgpt_call(fake):
    fake.json("/completion", FINAL)
    result = LlamaCppBackend(fake.url).complete(MEMGPT_PROMPT, PARAMS)
    assert result == Completion(CALL_TEXT, "stop", 97, 41, stop_word="  }\n}\n")
    assert_memgpt_call(result.text)
    assert fake.paths == ["/completion"]
    assert fake.bodies[0]["prompt"] == MEMGPT_PROMPT and fake.bodies[0]["grammar"] == 'root ::= "{"'


@pytest.mark.parametrize("fields,reason", [
    ({"stop_type": "limit"}, "length"), ({"stop_type": "eos"}, "stop"), ({"stop_type": "word"}, "stop"),
    ({"stopped_eos": False, "stopped_word": False, "stopped_limit": True}, "length"),
    ({"stopped_eos": True, "stopped_word": False, "stopped_limit": False}, "stop"),
])
def test_stop_reason_new_and_old_fields(fake, fields, reason):
    fake.json("/completion", {"content": "x", "stop": True, "tokens_predicted": 1, "tokens_evaluated": 5, **fields})
    assert LlamaCppBackend(fake.url).complete("p", PARAMS).finish_reason == reason


STOP_WORD_FIELDS = [
    ({"stop_type": "word", "stopping_word": "\nUSER:"}, "\nUSER:"),
    ({"stop_type": "eos", "stopping_word": ""}, None),
    ({"stop_type": "limit", "stopping_word": ""}, None),
    ({"stopped_eos": False, "stopped_word": True, "stopped_limit": False, "stopping_word": "\nUSER:"}, "\nUSER:"),
    ({"stopped_eos": True, "stopped_word": False, "stopped_limit": False, "stopping_word": ""}, None),
    ({"stopped_eos": False, "stopped_word": False, "stopped_limit": True, "stopping_word": ""}, None),
    ({"stopped_eos": True}, None),  # no stopping_word at all
]


@pytest.mark.parametrize("fields,word", STOP_WORD_FIELDS)
def test_stop_word_new_and_old_fields(fake, fields, word):
    fake.json("/completion", {"content": "x", "stop": True, "tokens_predicted": 1, "tokens_evaluated": 5, **fields})
    assert LlamaCppBackend(fake.url).complete("p", PARAMS).stop_word == word


@pytest.mark.parametrize("fields,word", STOP_WORD_FIELDS)
def test_stop_word_new_and_old_fields_streamed(fake, fields, word):
    final = {"content": "", "stop": True, "tokens_predicted": 1, "tokens_evaluated": 5, **fields}
    fake.stream("/completion", [b'data: {"content":"x","stop":false}\n\n', b"data: " + dumps(final).encode() + b"\n\n"])
    deltas = list(LlamaCppBackend(fake.url).stream("p", PARAMS))
    assert [(d.text, d.stop_word) for d in deltas] == [("x", None), ("", word)]

    async def collect():
        backend = LlamaCppBackend(fake.url)
        try:
            return [delta async for delta in backend.astream("p", PARAMS)]
        finally:
            await backend.aclose()

    assert asyncio.run(collect()) == deltas


def test_late_2023_zero_prompt_count_means_unknown(fake):
    fake.json("/completion", {"content": "x", "stop": True, "stopped_eos": True, "tokens_predicted": 1,
                              "tokens_evaluated": 0})
    result = LlamaCppBackend(fake.url).complete("p", PARAMS)
    assert (result.prompt_tokens, result.completion_tokens) == (None, 1)


def test_truncated_prompt_is_a_context_error(fake):
    fake.json("/completion", {**FINAL, "truncated": True, "tokens_evaluated": 4096})
    with pytest.raises(ContextWindowExceededError) as info:
        LlamaCppBackend(fake.url).complete("p", PARAMS)
    assert (info.value.prompt_tokens, info.value.context_window) == (4096, 4096)


def test_stream_byte_for_byte(fake):
    events = [{"index": 0, "content": piece, "tokens": [], "stop": False, "id_slot": 0,
               "tokens_predicted": i + 1, "tokens_evaluated": 97} for i, piece in enumerate(CALL_PIECES)]
    chunks = [b"data: " + dumps(e).encode() + b"\n\n" for e in events]
    chunks.insert(2, b": ping\n\n")  # sse_ping_interval comment
    chunks.append(b"data: " + dumps({**FINAL, "content": ""}).encode() + b"\n\n")  # no [DONE] here
    fake.stream("/completion", chunks)
    deltas = list(LlamaCppBackend(fake.url).stream(MEMGPT_PROMPT, PARAMS))
    assert [d.text for d in deltas] == [*CALL_PIECES, ""]
    assert [d.finish_reason for d in deltas] == [None] * 4 + ["stop"]
    assert (deltas[-1].prompt_tokens, deltas[-1].completion_tokens) == (97, 41)
    assert deltas[-1].stop_word == "  }\n}\n" and all(d.stop_word is None for d in deltas[:-1])
    assert_memgpt_call("".join(d.text for d in deltas))
    assert fake.bodies[0]["stream"] is True and fake.bodies[0]["n_predict"] == 64


@pytest.mark.parametrize("chunk", [
    b'error: {"code":500,"message":"slot unavailable","type":"server_error"}\n\n',  # older builds
    b'data: {"error":{"code":500,"message":"slot unavailable","type":"server_error"}}\n\n',  # current
])
def test_stream_error_event(fake, chunk):
    fake.stream("/completion", [b'data: {"content":"a","stop":false}\n\n', chunk])
    with pytest.raises(BackendError, match="in the middle of the stream: slot unavailable"):
        list(LlamaCppBackend(fake.url).stream("p", PARAMS))


def test_stream_cut_before_the_stop_event(fake):
    fake.stream("/completion", [b'data: {"content":"a","stop":false}\n\n'])
    with pytest.raises(BackendProtocolError, match="without a final one"):
        list(LlamaCppBackend(fake.url).stream("p", PARAMS))


@pytest.mark.parametrize("error,prompt,window", [
    ({"code": 400, "message": "the request exceeds the available context size, try increasing it",
      "type": "invalid_request_error"}, 0, 0),
    ({"code": 400, "message": "request (5000 tokens) exceeds the available context size (4096 tokens), try "
      "increasing it", "type": "exceed_context_size_error", "n_prompt_tokens": 5000, "n_ctx": 4096}, 5000, 4096),
])
def test_context_overflow_reply(fake, error, prompt, window):
    fake.json("/completion", {"error": error}, status=400)
    with pytest.raises(ContextWindowExceededError) as info:
        LlamaCppBackend(fake.url).complete("p", PARAMS)
    assert (info.value.prompt_tokens, info.value.context_window) == (prompt, window)


def test_invalid_api_key(fake):
    fake.json("/completion", {"error": {"code": 401, "message": "Invalid API Key", "type": "authentication_error"}},
              status=401)
    with pytest.raises(BackendHTTPError, match="HTTP 401: Invalid API Key.*auth_key") as info:
        LlamaCppBackend(fake.url, auth_type="bearer_token", auth_key="wrong").complete("p", PARAMS)
    assert info.value.status == 401


def test_dropped_connection_of_old_servers():
    # Late-2023 servers closed the socket on an over-long prompt or a bad grammar ("Empty reply from server").
    def drop(request: httpx.Request) -> httpx.Response:
        raise httpx.RemoteProtocolError("Server disconnected without sending a response.", request=request)

    with pytest.raises(BackendProtocolError, match="broke off.*rejected a grammar"):
        LlamaCppBackend(transport=httpx.MockTransport(drop)).complete("p", PARAMS)


def test_count_tokens(fake):
    fake.json("/tokenize", {"tokens": [1, 15, 27, 99]})
    assert LlamaCppBackend(fake.url).count_tokens("hello") == 4
    assert fake.bodies == [{"content": "hello", "add_special": True}]


@pytest.mark.parametrize("reply,count,counted", [
    ('{"tokens":[1,15,27,99]}', 4, True),  # as llama.cpp writes it: counted without parsing the ids
    ('{"tokens":[]}', 0, True),
    (' { "tokens" : [ 1, 15 ] }\n', 2, True),
    ('{"tokens":[{"id":1,"piece":"a,b"},{"id":2,"piece":"c"}]}', 2, False),  # with pieces: read as JSON
    ('{"tokens":[1,2],"extra":3}', 2, False),
])
def test_count_tokens_from_any_reply_layout(fake, reply, count, counted):
    fake.raw("/tokenize", reply.encode())
    assert count_token_ids(reply) == (count if counted else None)
    assert LlamaCppBackend(fake.url).count_tokens("hello") == count

    async def count_async() -> int | None:  # as the server counts
        backend = LlamaCppBackend(fake.url)
        try:
            return await backend.acount_tokens("hello")
        finally:
            await backend.aclose()

    assert asyncio.run(count_async()) == count


def test_probe_current_server(fake):
    fake.json("/health", {"status": "ok"}, method="GET")
    fake.json("/props", {"default_generation_settings": {"n_ctx": 8192, "params": {"temperature": 0.8}},
                         "total_slots": 1, "model_path": "/models/Hermes-2-Pro.Q4_K_M.gguf",
                         "chat_template": "...", "build_info": "b5000"}, method="GET")
    result = LlamaCppBackend(fake.url).probe()
    assert (result.up, result.model, result.context_window, result.grammar) == (
        True, "Hermes-2-Pro.Q4_K_M.gguf", 8192, True)
    backend = LlamaCppBackend(fake.url)
    backend.discover()
    assert backend.context_window() == 8192


def test_probe_while_loading(fake):
    fake.json("/health", {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}},
              status=503, method="GET")
    result = LlamaCppBackend(fake.url).probe()
    assert result.up is False and "Loading model" in result.detail and "busy or still loading" in result.detail


def test_props_early_2024_layout():
    props = {"assistant_name": "", "user_name": "", "total_slots": 1,
             "default_generation_settings": {"n_ctx": 2048, "model": "C:\\models\\mistral.gguf"}}
    assert parse_props(props) == ("mistral.gguf", 2048)


def test_discovery_while_the_model_loads_asks_again_until_it_is_up(fake):
    loading = True

    def health(_):
        if loading:
            return Response(dumps({"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}),
                            status=503, content_type="application/json")
        return Response('{"status": "ok"}', content_type="application/json")

    fake.route("/health", health, method="GET")
    fake.json("/props", {"default_generation_settings": {"n_ctx": 8192}, "model_path": "/m/x.gguf"}, method="GET")
    backend = LlamaCppBackend(fake.url)
    assert backend.discover().up is False and backend.context_window() is None
    loading = False
    assert backend.discover().up is True and backend.context_window() == 8192
    backend.discover()
    assert fake.paths == ["/health", "/health", "/props"]


def test_chat_template_and_bos_eos_from_props(fake):
    fake.json("/health", {"status": "ok"}, method="GET")
    fake.json("/props", {"default_generation_settings": {"n_ctx": 8192}, "model_path": "/m/qwen2.5-7b.gguf",
                         "chat_template": "{{ bos_token }}{{ messages[0].content }}", "bos_token": "<s>",
                         "eos_token": "<|im_end|>", "chat_template_tool_use": "{{ tools | tojson }}"}, method="GET")
    backend = LlamaCppBackend(fake.url)
    assert backend.chat_template() is None  # nothing asked yet, and reading it never asks
    backend.discover()
    assert backend.chat_template() == ChatTemplate(
        text="{{ bos_token }}{{ messages[0].content }}", bos_token="<s>", eos_token="<|im_end|>",
        source=f"GET {fake.url}/props", tool_use_text="{{ tools | tojson }}")


@pytest.mark.parametrize("props", [
    {"default_generation_settings": {"n_ctx": 2048}, "total_slots": 1},  # early 2024: no template field
    {"chat_template": "", "bos_token": "<s>"},  # a model without a template
])
def test_props_without_a_chat_template(props):
    assert props_chat_template(props, "x") is None


def test_props_of_early_2025_have_a_template_but_no_bos_eos():
    template = props_chat_template({"chat_template": "{{ messages }}"}, "GET /props")
    assert (template.text, template.bos_token, template.eos_token) == ("{{ messages }}", None, None)


def _planned_body(tool_choice: str) -> dict:
    """The /completion body for a chat request with one tool, through the hermes wrapper."""
    from llmproxy.prompts import load_wrapper
    from llmproxy.proxy import draft, parse_request, plan_draft
    from llmproxy.route import Route
    from llmproxy.tokens import TokenCount

    route = Route(name="t", backend=LlamaCppBackend("http://127.0.0.1:9"), wrapper=load_wrapper("hermes").wrapper,
                  context_window=4096)
    request = parse_request({"messages": [{"role": "user", "content": "Weather in Paris?"}], "tool_choice": tool_choice,
                             "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {
                                 "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]})
    planned = plan_draft(draft(request, route), TokenCount(10, True))
    return route.backend.request_body(planned.rendered.prompt, planned.params, stream=False)


def test_an_optional_call_goes_as_a_lazy_grammar_from_the_trigger_word():
    body = _planned_body("auto")
    assert body["grammar_lazy"] is True
    assert body["grammar_triggers"] == [{"type": 1, "value": "<tool_call>"}]  # 1: a word trigger
    assert body["preserved_tokens"] == ["<tool_call>", "</tool_call>"]
    from grammar_walk import accepts

    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    assert accepts(body["grammar"], call) and not accepts(body["grammar"], "It is sunny. " + call)


def test_a_required_call_goes_as_a_whole_grammar():
    body = _planned_body("required")
    from grammar_walk import accepts

    assert "grammar_lazy" not in body and "grammar_triggers" not in body
    assert not accepts(body["grammar"], "It is sunny.")


def test_logprobs_ask_for_n_probs_and_read_both_layouts():
    import math

    from llmproxy.backends.base import TokenLogprob

    body = completion_request("p", GenerationParams(logprobs=0), model=None, stream=False, grammar_fields={})
    assert body["n_probs"] == 1  # 0 would report none
    new = {**FINAL, "content": "Hi", "completion_probabilities": [
        {"id": 1, "token": "Hi", "logprob": -0.1, "bytes": [72, 105],
         "top_logprobs": [{"id": 1, "token": "Hi", "logprob": -0.1, "bytes": [72, 105]},
                          {"id": 2, "token": "Hey", "logprob": -2.5, "bytes": [72, 101, 121]}]}]}
    assert parse_completion(new).logprobs == (TokenLogprob("Hi", -0.1, (("Hi", -0.1), ("Hey", -2.5))),)
    old = {**FINAL, "content": "Hi", "completion_probabilities": [
        {"content": "Hi", "probs": [{"tok_str": "Hi", "prob": 0.5}, {"tok_str": "Hey", "prob": 0.25}]}]}
    token = parse_completion(old).logprobs[0]
    assert token.token == "Hi" and math.isclose(token.logprob, math.log(0.5)) and token.top[1][0] == "Hey"
    assert parse_completion(FINAL).logprobs is None
