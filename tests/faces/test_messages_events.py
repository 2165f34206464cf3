"""A streamed Messages answer: real chat chunks (a request planned for a real wrapper, the backend's
raw text fed in pieces) become Anthropic's events in the documented order, with dense block indices,
and the anthropic SDK's stream helper rebuilds from them the message ``message_object`` gives."""

from __future__ import annotations

import json

import anthropic
import pytest
from messages_sdk import final_message
from scripted_backend import ScriptedBackend

from llmproxy import proxy
from llmproxy.backends.base import Completion
from llmproxy.errors import BackendConnectionError, OutputParseError
from llmproxy.faces.messages import MessagesEvents, message_object, read_request
from llmproxy.prompts import load_wrapper
from llmproxy.route import Route
from llmproxy.faces.chat.chunks import ChatChunks
from llmproxy.types import ChatCompletionChunk, ChunkChoice, Delta, FunctionCallDelta, ToolCallDelta

WEATHER = {"name": "get_weather", "description": "Weather now.",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
BODY = {"model": "claude-sonnet-4-5", "max_tokens": 500, "stream": True, "tools": [WEATHER],
        "thinking": {"type": "adaptive"}, "stop_sequences": ["END"],
        "messages": [{"role": "user", "content": "Weather in Paris and Nice?"}]}
THINK = "<think>\nThe user wants two cities \u2014 two calls. \U0001f600\n</think>\n\n"
CALL = '<tool_call>\n{{"name": "get_weather", "arguments": {{"city": "{}"}}}}\n</tool_call>'
TWO_CALLS = THINK + "Let me look both up.\n" + CALL.format("Paris") + "\n" + CALL.format("Nice")


def stream(raw: str, *, grammar: bool = True, split: int = 5, stop_sequence: str | None = None,
           body: dict = BODY) -> tuple[dict, list[bytes], MessagesEvents]:
    """The events of ``raw`` answering ``body`` on the qwen3 wrapper, and the message object for the
    same finished answer. ``grammar``: the backend takes a grammar, so calls stream as written."""
    request = read_request(body)
    backend = ScriptedBackend(Completion(text=raw, prompt_tokens=30, completion_tokens=11), grammar=grammar)
    route = Route(name="local", backend=backend, wrapper=load_wrapper("qwen3").wrapper, grammar="auto",
                  context_window=4096)
    plan = proxy.plan(request.chat, route)
    chunks = ChatChunks(plan.rendered, "local", include_usage=True, stream_calls=proxy.streams_calls(plan))
    events = MessagesEvents(request, chunks, message_id="msg_stream", input_tokens=plan.prompt_tokens.tokens)
    sent = events.opening()
    for start in range(0, len(raw), split):
        sent += events.feed(raw[start:start + split])
        if start == split:
            sent.append(events.keepalive())  # a ping may come anywhere
    completion = proxy.finish(plan, backend.complete(plan.rendered.prompt, plan.params))
    completion.llmproxy.stop_sequence = stop_sequence  # as the pipeline sets it where the backend says
    sent += events.closing(completion)
    return message_object(request, completion, message_id="msg_stream"), sent, events


def decoded(sent: list[bytes]) -> list[dict]:
    """Each event's JSON, after checking its framing: the event name repeats the JSON's type."""
    found = []
    for raw in sent:
        text = raw.decode()
        assert text.endswith("\n\n") and text.count("\n") == 3
        name, data = text[:-2].split("\n")
        payload = json.loads(data.removeprefix("data: "))
        assert name == "event: " + payload["type"]
        found.append(payload)
    return found


def check_order(events: list[dict]) -> list[str]:
    """The documented order: message_start, then each block's start, deltas and stop with indices
    0, 1, 2... (a thinking block's signature last before its stop), message_delta, message_stop.
    Gives the blocks' types."""
    events = [e for e in events if e["type"] != "ping"]
    assert events[0]["type"] == "message_start" and events[0]["message"]["content"] == []
    assert [e["type"] for e in events[-2:]] == ["message_delta", "message_stop"]
    blocks: list[str] = []
    open_index = None
    previous = None
    for event in events[1:-2]:
        if event["type"] == "content_block_start":
            assert open_index is None and event["index"] == len(blocks)
            open_index = event["index"]
            blocks.append(event["content_block"]["type"])
        elif event["type"] == "content_block_delta":
            assert event["index"] == open_index
        else:
            assert event == {"type": "content_block_stop", "index": open_index}
            if blocks[open_index] == "thinking":
                assert previous["delta"]["type"] == "signature_delta" and previous["delta"]["signature"]
            open_index = None
        previous = event
    assert open_index is None
    return blocks


def same_message(final: anthropic.types.Message, expected: dict) -> None:
    expected = {key: value for key, value in expected.items() if key != "llmproxy"}
    assert final.model_dump() == anthropic.types.Message.model_validate(expected).model_dump()


@pytest.mark.parametrize("split", [1, 4, 9, 1000])
def test_thinking_text_and_calls_streamed_as_written(split):
    expected, sent, _ = stream(TWO_CALLS, split=split)
    events = decoded(sent)
    assert check_order(events) == ["thinking", "text", "tool_use", "tool_use"]
    pieces = [e["delta"]["partial_json"] for e in events
              if e["type"] == "content_block_delta" and e["delta"]["type"] == "input_json_delta"]
    if split < 10:
        assert len(pieces) > 4  # the arguments arrive as they are written
    final, text = final_message(b"".join(sent))
    assert text == "Let me look both up."
    # The calls were sent before the answer was checked, under ids of their own: the same in every
    # event of a call, and in the message the client rebuilds.
    streamed_ids = [block.id for block in final.content if block.type == "tool_use"]
    starts = [e["content_block"]["id"] for e in events if e["type"] == "content_block_start"
              and e["content_block"]["type"] == "tool_use"]
    assert streamed_ids == starts and len(set(starts)) == 2 and all(i.startswith("toolu_") for i in starts)
    for block, streamed_id in zip([b for b in expected["content"] if b["type"] == "tool_use"], streamed_ids):
        block["id"] = streamed_id
    same_message(final, expected)
    assert [block.input for block in final.content[2:]] == [{"city": "Paris"}, {"city": "Nice"}]
    assert final.stop_reason == "tool_use" and final.usage.output_tokens == 11 and final.usage.input_tokens == 30


def test_calls_checked_before_they_are_sent_keep_the_messages_ids():
    expected, sent, _ = stream(TWO_CALLS, grammar=False)
    assert check_order(decoded(sent)) == ["thinking", "text", "tool_use", "tool_use"]
    final, _ = final_message(b"".join(sent))
    same_message(final, expected)  # ids included


def test_a_text_answer_ended_by_a_stop_sequence():
    body = {**BODY, "thinking": {"type": "disabled"}}
    expected, sent, events = stream("Sunny in Paris. \u00e9\u2028\U0001f600", body=body, stop_sequence="END")
    assert check_order(decoded(sent)) == ["text"]
    final, text = final_message(events.keepalive() + b"".join(sent))  # a ping even before message_start
    assert text == "Sunny in Paris. \u00e9\u2028\U0001f600"
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", "END")
    same_message(final, expected)
    assert events.sent_text


def test_message_start_and_delta_usage():
    _, sent, events = stream(TWO_CALLS)
    first, *_, delta, stop = decoded(sent)
    assert first["message"]["id"] == "msg_stream" and first["message"]["model"] == "claude-sonnet-4-5"
    assert first["message"]["stop_reason"] is None and first["message"]["usage"]["output_tokens"] == 1
    assert first["message"]["usage"]["input_tokens"] == events.input_tokens > 0
    assert delta["usage"]["output_tokens"] == 11
    assert delta["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert stop == {"type": "message_stop"}
    assert events.end == b""


def test_nothing_sent_before_the_answer_starts():
    request = read_request(BODY)
    backend = ScriptedBackend(grammar=True)
    route = Route(name="local", backend=backend, wrapper=load_wrapper("qwen3").wrapper, grammar="auto",
                  context_window=4096)
    plan = proxy.plan(request.chat, route)
    events = MessagesEvents(request, ChatChunks(plan.rendered, "local", include_usage=False), message_id="msg_x",
                            input_tokens=3)
    assert len(events.opening()) == 1 and not events.sent_text
    assert events.keepalive() == b'event: ping\ndata: {"type":"ping"}\n\n'


def test_a_failure_after_the_start_is_an_error_event_the_sdk_raises():
    _, sent, events = stream(TWO_CALLS)
    cut = sent[:6] + events.failure(BackendConnectionError("the backend went away", backend="llamacpp"))
    assert decoded(cut)[-1] == {"type": "error", "error": {"type": "overloaded_error",
                                                            "message": "the backend went away"}}
    with pytest.raises(anthropic.APIStatusError) as caught:
        final_message(b"".join(cut))
    assert caught.value.body["error"]["type"] == "overloaded_error"


class ScriptedChunks:
    """Stands in for ChatChunks with chunks given by the test (an order the real scanners never make)."""

    sent_text = True

    def __init__(self, *fed: Delta) -> None:
        self.fed = fed

    def opening(self):
        return []

    def feed_plain(self, text):
        return "", [ChatCompletionChunk(id="c", created=0, model="m", choices=[ChunkChoice(delta=d)]) for d in self.fed]


def test_an_argument_piece_for_a_closed_call_fails_the_stream():
    def call(index, name=None, arguments=""):
        return Delta(tool_calls=[ToolCallDelta(index=index, id=f"call_{index}" if name else None,
                                               function=FunctionCallDelta(name=name, arguments=arguments))])

    chunks = ScriptedChunks(call(0, "f"), call(0, arguments='{"a": '), call(1, "g"), call(0, arguments="1}"))
    events = MessagesEvents(read_request(BODY), chunks, message_id="msg_y", input_tokens=1)
    with pytest.raises(OutputParseError, match="after the call was closed"):
        events.feed("anything")


def test_text_after_a_call_opens_a_new_block():
    chunks = ScriptedChunks(Delta(content="Before."),
                            Delta(tool_calls=[ToolCallDelta(index=0, id="call_9", function=FunctionCallDelta(
                                name="f", arguments=""))]),
                            Delta(tool_calls=[ToolCallDelta(index=0, function=FunctionCallDelta(arguments="{}"))]),
                            Delta(content="After."), Delta(reasoning_content="Late thought."))
    events = MessagesEvents(read_request(BODY), chunks, message_id="msg_z", input_tokens=1)
    fed = decoded(events.feed("anything"))
    starts = [(e["index"], e["content_block"]["type"]) for e in fed if e["type"] == "content_block_start"]
    assert starts == [(0, "text"), (1, "tool_use"), (2, "text"), (3, "thinking")]
    assert fed[3]["content_block"]["id"] == "toolu_9"


def test_a_lone_surrogate_travels_escaped():
    events = MessagesEvents(read_request(BODY), ScriptedChunks(Delta(content="half \ud800 a pair")),
                            message_id="msg_s", input_tokens=1)
    sent = events.feed("anything")
    assert b"\\ud800" in sent[-1]
    assert decoded(sent)[-1]["delta"]["text"] == "half \ud800 a pair"
