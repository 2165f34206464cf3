"""The pure part of streaming: inner thoughts read from partial JSON, text trimmed as it will end,
and the chunk sequence of a streamed chat completion."""

from __future__ import annotations

import json
import random

import pytest

from llmproxy.errors import OutputParseError
from llmproxy.prompts import Rendered
from llmproxy.faces.chat.chunks import ChatChunks, sse
from llmproxy.syntaxes._scanners import TextScanner, ThoughtsScanner
from llmproxy.syntaxes.base import AnswerShape
from llmproxy.syntaxes.memgpt import MemGPTSyntax
from llmproxy.syntaxes.tagged_json import HermesSyntax
from llmproxy.types import ChatCompletion, Choice, FunctionCall, FunctionDefinition, ResponseMessage, ToolCall, Usage

TRICKY = 'quote " slash \\ / tab\t nl\n é \u2028 \U0001f600 \ud800 end'


def every_split(text: str, pieces: int, seed: int) -> list[str]:
    """``text`` cut at random places (cuts inside escapes and surrogate pairs included)."""
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(text)), min(pieces, len(text) - 1)))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]


def scan(parts: list[str]) -> str:
    scanner = ThoughtsScanner()
    return "".join(scanner.feed(part).content for part in parts)


@pytest.mark.parametrize("ensure_ascii", [True, False])
@pytest.mark.parametrize("seed", range(20))
def test_thoughts_decode_like_json_at_any_split(ensure_ascii, seed):
    text = '\n{\n  "function": "send_message",\n  "params": ' + json.dumps(
        {"inner_thoughts": TRICKY, "message": "not this"}, ensure_ascii=ensure_ascii)
    assert scan(every_split(text, 30, seed)) == TRICKY
    assert scan(list(text)) == TRICKY


def test_thoughts_streams_before_the_string_closes():
    scanner = ThoughtsScanner()
    assert scanner.feed('{"inner_thoughts": "Hel').content == "Hel"
    assert scanner.feed("lo \\").content == "lo "
    assert scanner.feed("u00").content == ""
    assert scanner.feed('e9 wor').content == "\u00e9 wor"
    assert scanner.feed('ld", "inner_thoughts": "again"').content == "ld"


@pytest.mark.parametrize("text", [
    '{"message": "the key \\"inner_thoughts\\": \\"is quoted\\"", "x": 1}',  # inside a string value
    '{"inner_thoughts_extra": "no", "note": "inner_thoughts"}',  # another key; a value equal to the key
    '{"params": {"inner_thoughts": 5}}',  # not a string
])
def test_thoughts_only_from_the_real_key(text):
    assert scan([text]) == ""


def test_thoughts_at_the_top_level_and_after_a_prefix():
    assert scan(['{"inner_thoughts":', ' "top", "function": "f"}']) == "top"
    assert scan(['\n{\n  "function":', ' "f",\n  "params": {"inner_thoughts": "in params"}}']) == "in params"


def test_thoughts_keep_invalid_escapes_verbatim():
    assert scan(['{"inner_thoughts": "a\\x b \\u12"}']) == "a\\x b \\u12"


def test_text_scanner_trims_and_cuts_at_markers():
    scanner = TextScanner(["<|im_end|>"])
    out = [scanner.feed(part).content for part in ["\n ", " Hello", " there ", "\n", "friend<|im", "_end|> ignored"]]
    assert out == ["", "Hello", " there", "", " \nfriend", ""]
    partial = TextScanner(["<|im_end|>"])
    assert partial.feed("a <|im").content == "a"
    assert partial.feed("possible").content == " <|impossible"


def response(content, call=None, form="tools", more=(), reason=None) -> ChatCompletion:
    message = ResponseMessage(content=content)
    reason = reason or "stop"
    if call is not None and form == "tools":
        message.tool_calls = [ToolCall(id=f"call_{n}", function=FunctionCall(name=name, arguments=arguments))
                              for n, (name, arguments) in enumerate([call, *more], 1)]
        reason = "tool_calls" if reason == "stop" else reason
    elif call is not None:
        message.function_call = FunctionCall(name=call[0], arguments=call[1])
        reason = "function_call"
    return ChatCompletion(model="m", choices=[Choice(message=message, finish_reason=reason)],
                          usage=Usage(prompt_tokens=3, completion_tokens=4, total_tokens=7))


CALL_SHAPE = MemGPTSyntax().shape("required", [], [], named=False, parallel=False, first_message=False, primed=True)
CALL_RENDERED = Rendered(prompt="..." + CALL_SHAPE.prefix, shape=CALL_SHAPE, stop=("<|im_end|>",))


def test_chat_chunks_for_a_tool_call():
    chunks = ChatChunks(CALL_RENDERED, "m", include_usage=True)
    sent = chunks.opening()
    for piece in [' "send_message", "params": {"inner_th', 'oughts": "Hi ', 'there", "message": "x"}}']:
        sent += chunks.feed(piece)
    sent += chunks.closing(response("Hi there!", ("send_message", '{"message": "x"}')))
    deltas = [c.choices[0].delta for c in sent if c.choices]
    assert deltas[0].role == "assistant" and deltas[0].content == ""
    assert [d.content for d in deltas[1:4]] == ["Hi ", "there", "!"]  # the repaired final text's remainder
    assert deltas[4].tool_calls[0].function.name == "send_message" and deltas[4].tool_calls[0].id == "call_1"
    assert deltas[5].tool_calls[0].function.arguments == '{"message": "x"}' and deltas[5].tool_calls[0].id is None
    assert sent[-2].choices[0].finish_reason == "tool_calls"
    assert sent[-1].choices == [] and sent[-1].usage.total_tokens == 7
    assert len({c.id for c in sent}) == 1


def test_chat_chunks_for_a_legacy_call_without_usage():
    chunks = ChatChunks(CALL_RENDERED, "m", include_usage=False, form="functions")
    sent = chunks.closing(response(None, ("f", "{}"), form="functions"))
    assert [c.choices[0].delta.function_call.arguments for c in sent[:2]] == ["", "{}"]
    assert sent[-1].choices[0].finish_reason == "function_call" and sent[-1].usage is None


def test_chat_chunks_send_nothing_that_contradicts_what_was_streamed():
    chunks = ChatChunks(CALL_RENDERED, "m", include_usage=False)
    chunks.feed(' "f", "params": {"inner_thoughts": "draft')
    sent = chunks.closing(response("something else", ("f", "{}")))
    assert all(c.choices[0].delta.content is None for c in sent)


WEATHER = FunctionDefinition(name="get_weather", parameters={"type": "object", "properties": {"city": {"type": "string"}}})
HERMES_SHAPE = HermesSyntax().shape("optional", [WEATHER], ["get_weather"], named=False, parallel=True,
                                    first_message=False, primed=True)
HERMES_RENDERED = Rendered(prompt="...", shape=HERMES_SHAPE, stop=("<|im_end|>",))
TWO_CALLS = ('Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city":"Paris"}}\n</tool_call>\n'
             '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Nice"}}\n</tool_call>')


def streamed(form="tools", split=7, stream_calls=True):
    chunks = ChatChunks(HERMES_RENDERED, "m", include_usage=False, form=form, stream_calls=stream_calls)
    sent = [c for i in range(0, len(TWO_CALLS), split) for c in chunks.feed(TWO_CALLS[i:i + split])]
    return chunks, sent


def test_chat_chunks_stream_calls_as_they_are_written():
    chunks, sent = streamed()
    calls = [c.choices[0].delta.tool_calls[0] for c in sent if c.choices[0].delta.tool_calls]
    assert [(c.index, c.function.name) for c in calls if c.id] == [(0, "get_weather"), (1, "get_weather")]
    assert all(c.type == "function" and c.id.startswith("call_") for c in calls if c.id)
    assert len(calls) > 6  # the arguments come in pieces, as the model writes them
    for index, city in enumerate(["Paris", "Nice"]):
        assert "".join(c.function.arguments for c in calls if c.index == index) == json.dumps({"city": city})
    rest = chunks.closing(response("Let me look.", ("get_weather", '{"city": "Paris"}'),
                                   more=[("get_weather", '{"city": "Nice"}')]))
    assert [c.choices[0].delta.tool_calls for c in rest] == [None]  # nothing more to add
    assert rest[-1].choices[0].finish_reason == "tool_calls"


def test_chat_chunks_stream_a_legacy_call():
    chunks = ChatChunks(HERMES_RENDERED, "m", include_usage=False, form="functions", stream_calls=True)
    sent = chunks.feed(TWO_CALLS[:TWO_CALLS.index("</tool_call>")])
    legacy = [c.choices[0].delta.function_call for c in sent if c.choices[0].delta.function_call]
    assert legacy[0].name == "get_weather" and "".join(f.arguments for f in legacy) == '{"city": "Paris"}'


def test_chat_chunks_send_the_rest_of_a_call_cut_short():
    chunks = ChatChunks(HERMES_RENDERED, "m", include_usage=False, stream_calls=True)
    chunks.feed(TWO_CALLS[:TWO_CALLS.index("Par") + 2])  # '{"city": "Pa'
    rest = chunks.closing(response("Let me look.", ("get_weather", '{"city": "Pa"}'), reason="length"))
    assert rest[0].choices[0].delta.tool_calls[0].function.arguments == '"}'
    assert rest[-1].choices[0].finish_reason == "length"


def test_chat_chunks_refuse_to_finish_calls_the_check_changed():
    for final in [("get_weather", '{"city": "Lyon"}'), ("other", '{"city": "Paris"}')]:
        chunks, _ = streamed()
        with pytest.raises(OutputParseError, match="streamed so far differ"):
            chunks.closing(response("Let me look.", final, more=[("get_weather", '{"city": "Nice"}')]))
    chunks, _ = streamed()
    with pytest.raises(OutputParseError):  # a streamed call the answer dropped
        chunks.closing(response("Let me look.", ("get_weather", '{"city": "Paris"}')))
    chunks, _ = streamed()  # cut at the token limit, a partial call is OpenAI's way: no error
    assert chunks.closing(response("Let me look.", ("get_weather", '{"city": "Paris"}'), reason="length"))


def test_chat_chunks_without_stream_calls_send_calls_once_checked():
    chunks, sent = streamed(stream_calls=False)
    assert not any(c.choices[0].delta.tool_calls for c in sent)
    rest = chunks.closing(response("Let me look.", ("get_weather", '{"city": "Paris"}')))
    assert [c.choices[0].delta.tool_calls[0].function.arguments for c in rest[:2]] == ["", '{"city": "Paris"}']


def test_a_plain_text_answer_of_a_reasoning_family_streams_its_reasoning_apart():
    """No tools: the answer is text, but a reasoning family (Qwen 3's <think>) still thinks first;
    the reasoning goes out as reasoning, never as content, as the final answer splits it."""
    from llmproxy.prompts import load_wrapper
    from llmproxy.syntaxes.base import AnswerShape
    from llmproxy.types import UserMessage

    wrapper = load_wrapper("qwen3").wrapper
    rendered = wrapper.render([UserMessage(role="user", content="Hi")], AnswerShape(None, "text"))
    chunks = ChatChunks(rendered, "m", include_usage=False)
    sent = [c for piece in ["<thi", "nk>\nLet me ", "greet.</th", "ink>\n\nHel", "lo!<|im_end|>"]
            for c in chunks.feed(piece)]
    reasoning = "".join(c.choices[0].delta.reasoning_content or "" for c in sent)
    content = "".join(c.choices[0].delta.content or "" for c in sent)
    assert (reasoning, content) == ("Let me greet.", "Hello!")


TEXT_RENDERED = Rendered(prompt="...", shape=AnswerShape(None, "text"), stop=("<|im_end|>",))


@pytest.mark.parametrize("model", ["m", 'm"\\u0000"', "模型"])
def test_content_events_are_the_chunks_serialised(model):
    """``feed_events`` writes plain content from a frame: the bytes must be the chunk's own JSON,
    whatever the content holds (quotes, escapes, controls, any script) and the model is named."""
    framed = ChatChunks(TEXT_RENDERED, model, include_usage=False)
    built = ChatChunks(TEXT_RENDERED, model, include_usage=False)
    built.id, built.created = framed.id, framed.created
    pieces = ["Hi", ' "quoted" \\ back', "\x00\x01\x1f\x7f", "\u2028é😀", "\t\n x", "<|im", "possible", "\0",
              " end<|im_end|>", " after"]
    events = [event for piece in pieces for event in framed.feed_events(piece)]
    assert events == [sse(chunk) for piece in pieces for chunk in built.feed(piece)]
    assert framed.streamed == built.streamed


def test_a_content_event_orjson_cannot_write_travels_escaped_as_in_the_other_faces():
    """A lone surrogate (a model's own ``\\ud800`` escape, read back) is no UTF-8: the chunk is written
    ASCII-escaped, not failed (which ended the stream with an error of the server's own)."""
    chunks = ChatChunks(TEXT_RENDERED, "m", include_usage=False)
    [event] = chunks.feed_events("a\ud800b")
    assert b"\\ud800" in event
    assert json.loads(event.removeprefix(b"data: "))["choices"][0]["delta"]["content"] == "a\ud800b"


@pytest.mark.parametrize("seed", range(5))
def test_text_scanner_gives_the_same_text_however_the_answer_is_cut(seed):
    markers = ["<|im_end|>", "</s>", "\n\nUser:"]
    text = "  Hi <b> there </ and\n\nUse a <|im_start> line.\n\nUser: gone"
    expected = "Hi <b> there </ and\n\nUse a <|im_start> line."
    scanner = TextScanner(markers)
    assert "".join(scanner.feed(piece).content for piece in every_split(text, 12, seed)) == expected
