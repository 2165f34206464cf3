"""koboldcpp's KoboldAI API (reference section 2)."""

from __future__ import annotations

import threading

import pytest
from werkzeug import Response

from llmproxy.backends.base import Completion, GenerationParams
from llmproxy.backends.koboldcpp import KoboldCppBackend, generate_request
from llmproxy.errors import BackendHTTPError, BackendProtocolError
from llmproxy.settings import resolve_settings, to_generation_params

from .conftest import CALL_PIECES, CALL_TEXT, MEMGPT_PROMPT, assert_memgpt_call, dumps

PARAMS = GenerationParams(max_tokens=300, stop=("\nUSER:", "  }\n}\n"), temperature=0.5, top_p=0.9, seed=7,
                          grammar='root ::= "{"', extra={"rep_pen": 1.1})


def test_request_body_field_by_field():
    body = generate_request("PROMPT", PARAMS, context_window=4096, grammar_fields={"grammar": 'root ::= "{"'},
                            genkey="KCPP1234")
    assert body == {"prompt": "PROMPT", "max_length": 300, "trim_stop": True,
                    "stop_sequence": ["\nUSER:", "  }\n}\n"], "max_context_length": 4096, "genkey": "KCPP1234",
                    "temperature": 0.5, "top_p": 0.9, "sampler_seed": 7, "grammar": 'root ::= "{"', "rep_pen": 1.1}


def test_no_context_length_sent_when_none_is_configured():
    body = KoboldCppBackend().request_body("p", GenerationParams(max_tokens=10))
    assert body == {"prompt": "p", "max_length": 10, "trim_stop": True}


def test_settings_translation():
    params = to_generation_params(resolve_settings("koboldcpp", {"max_tokens": 250, "seed": 11}))
    body = KoboldCppBackend(context_window=8192).request_body("p", params)
    assert body["max_length"] == 250 and body["sampler_seed"] == 11 and body["max_context_length"] == 8192
    assert "stop_sequence" not in body  # the wrapper's stop strings come with the request
    assert not {"stop", "max_tokens", "seed"} & set(body)  # MemGPT sent "stop", which Kobold ignores


def test_complete_v176_without_counts(fake):
    fake.json("/api/v1/generate", {"results": [{"text": CALL_TEXT, "finish_reason": "stop"}]})
    result = KoboldCppBackend(fake.url, context_window=4096).complete(MEMGPT_PROMPT, PARAMS)
    assert result == Completion(CALL_TEXT, "stop", None, None)
    assert_memgpt_call(result.text)
    assert fake.bodies[0]["max_context_length"] == 4096 and "genkey" not in fake.bodies[0]


def test_complete_newer_with_counts_and_length(fake):
    fake.json("/api/v1/generate", {"results": [{"text": "abc", "finish_reason": "length", "logprobs": None,
                                                "prompt_tokens": 120, "completion_tokens": 300}]})
    assert KoboldCppBackend(fake.url).complete("p", PARAMS) == Completion("abc", "length", 120, 300)


def test_stream_byte_for_byte(fake):
    chunks = [b"event: message\ndata: " + dumps({"token": p, "finish_reason": "null"}).encode() + b"\n\n"
              for p in CALL_PIECES]
    chunks.append(b'event: message\ndata: {"token": "", "finish_reason": "stop"}\n\n')  # then the server hangs up
    fake.stream("/api/extra/generate/stream", chunks)
    deltas = list(KoboldCppBackend(fake.url).stream(MEMGPT_PROMPT, PARAMS))
    assert [d.text for d in deltas] == [*CALL_PIECES, ""]
    assert [d.finish_reason for d in deltas] == [None] * 4 + ["stop"]
    assert_memgpt_call("".join(d.text for d in deltas))
    assert fake.paths == ["/api/extra/generate/stream"]
    assert fake.bodies[0]["genkey"].startswith("KCPP") and fake.bodies[0]["stop_sequence"][-1] == "  }\n}\n"


def test_stream_final_token_with_text_and_length(fake):
    fake.stream("/api/extra/generate/stream", [b'event: message\ndata: {"token": "a", "finish_reason": "null"}\n\n',
                                               b'event: message\ndata: {"token": "b", "finish_reason": "length"}\n\n'])
    deltas = list(KoboldCppBackend(fake.url).stream("p", PARAMS))
    assert [(d.text, d.finish_reason) for d in deltas] == [("a", None), ("b", None), ("", "length")]


def test_stream_cut_off_without_a_finish_reason(fake):
    fake.stream("/api/extra/generate/stream", [b'event: message\ndata: {"token": "a", "finish_reason": "null"}\n\n'])
    with pytest.raises(BackendProtocolError, match="ended after 1 events"):
        list(KoboldCppBackend(fake.url).stream("p", PARAMS))


def test_abandoned_stream_is_aborted_on_the_server(fake):
    release = threading.Event()

    def endless():
        for i in range(1000):
            yield b'event: message\ndata: {"token": "t%d", "finish_reason": "null"}\n\n' % i
            if i == 1:
                release.wait(5)  # hold the stream open until the client has gone

    fake.route("/api/extra/generate/stream", lambda _: Response(endless(), content_type="text/event-stream"))
    fake.json("/api/extra/abort", {"success": "true", "done": "true"})
    stream = KoboldCppBackend(fake.url).stream("p", PARAMS)
    assert next(stream).text == "t0"
    stream.close()
    release.set()
    assert fake.paths == ["/api/extra/generate/stream", "/api/extra/abort"]
    assert fake.bodies[1] == {"genkey": fake.bodies[0]["genkey"]}


def test_abort_failure_does_not_mask_the_close(fake, caplog):
    fake.stream("/api/extra/generate/stream", [b'event: message\ndata: {"token": "a", "finish_reason": "null"}\n\n'] * 3)
    fake.raw("/api/extra/abort", b"", status=404, content_type="text/html")
    stream = KoboldCppBackend(fake.url).stream("p", PARAMS)
    next(stream)
    stream.close()
    assert "could not stop the abandoned koboldcpp generation" in caplog.text


@pytest.mark.parametrize("status,body,words", [
    (503, {"detail": {"msg": "Server is busy; please try again later.", "type": "service_unavailable"}},
     "Server is busy"),
    (401, {"detail": {"error": "Unauthorized", "msg": "Authentication key is missing or invalid.",
                      "type": "unauthorized"}}, "Authentication key is missing"),
    (500, {"detail": {"msg": "Error parsing input.", "type": "bad_input"}}, "Error parsing input"),
    (500, {"detail": {"msg": "Payload is too big. Max payload size is 32MB.", "type": "bad_input"}}, "too big"),
])
def test_error_shapes(fake, status, body, words):
    fake.json("/api/v1/generate", body, status=status)
    with pytest.raises(BackendHTTPError, match=words) as info:
        KoboldCppBackend(fake.url).complete("p", PARAMS)
    assert info.value.status == status


def test_unknown_path_404_with_empty_html(fake):
    fake.raw("/api/v1/generate", b"", status=404, content_type="text/html")
    with pytest.raises(BackendHTTPError, match="HTTP 404.*is this a koboldcpp server"):
        KoboldCppBackend(fake.url).complete("p", PARAMS)


def test_count_tokens(fake):
    fake.json("/api/extra/tokencount", {"value": 5, "ids": [1, 2, 3, 4, 5]})
    assert KoboldCppBackend(fake.url).count_tokens("hello") == 5
    assert fake.bodies == [{"prompt": "hello"}]


def test_probe(fake):
    fake.json("/api/v1/model", {"result": "koboldcpp/mistral-7b-instruct"}, method="GET")
    fake.json("/api/extra/true_max_context_length", {"value": 8192}, method="GET")
    result = KoboldCppBackend(fake.url).probe()
    assert (result.up, result.model, result.context_window, result.grammar) == (
        True, "mistral-7b-instruct", 8192, True)


def test_probe_old_version_without_true_max_context(fake):
    fake.json("/api/v1/model", {"result": "koboldcpp/protected-model"}, method="GET")
    fake.raw("/api/extra/true_max_context_length", b"", status=404, method="GET", content_type="text/html")
    result = KoboldCppBackend(fake.url).probe()
    assert (result.up, result.model, result.context_window) == (True, "protected-model", None)
