"""The pipeline's ChatCompletion becomes an Anthropic Message that the anthropic SDK's own types accept:
blocks in order, tool input as an object, stop reasons, usage, llmproxy's account; and the model list."""

from __future__ import annotations

import json

import anthropic
import pytest
from messages_sdk import QUESTION, Replaying

from llmproxy.faces.messages import count_tokens_body, message_object, models_list, new_message_id, read_request
from llmproxy.types import ChatCompletion, Choice, FunctionCall, ProxyInfo, ResponseMessage, ToolCall, Usage

REQUEST = read_request({"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": [
    {"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                 {"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}}]}]})


def completion(content=None, calls=(), reasoning=None, finish="stop", info=True) -> ChatCompletion:
    message = ResponseMessage(content=content, reasoning_content=reasoning, reasoning=reasoning)
    if calls:
        message.tool_calls = [ToolCall(id=f"call_{n}", function=FunctionCall(name=name, arguments=arguments))
                              for n, (name, arguments) in enumerate(calls)]
        finish = "tool_calls" if finish == "stop" else finish
    return ChatCompletion(
        model="route", choices=[Choice(message=message, finish_reason=finish)],
        usage=Usage(prompt_tokens=12, completion_tokens=5, total_tokens=17),
        llmproxy=ProxyInfo(wrapper="qwen3", backend="scripted", notes=["a pipeline note"]) if info else None)


def valid(message: dict) -> anthropic.types.Message:
    """The message as the SDK reads it, both from a dict and off the wire (strict validation)."""
    parsed = anthropic.types.Message.model_validate(message)
    wire = Replaying(200, json.dumps(message).encode()).client.messages.create(
        model="m", max_tokens=100, messages=QUESTION)
    assert wire == parsed
    return parsed


def test_a_text_answer():
    message = message_object(REQUEST, completion("It is a cat."), message_id="msg_1")
    parsed = valid(message)
    assert parsed.id == "msg_1" and parsed.model == "claude-sonnet-4-5" and parsed.role == "assistant"
    assert message["content"] == [{"type": "text", "text": "It is a cat."}]
    assert parsed.stop_reason == "end_turn" and parsed.stop_sequence is None
    assert message["usage"] == {"input_tokens": 12, "output_tokens": 5,
                                "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}


def test_thinking_text_and_tool_use_in_that_order():
    answer = completion("Checking.", [("get_weather", '{"city": "Paris"}'), ("get_time", "{}")], reasoning="Hm.")
    message = message_object(REQUEST, answer, message_id="msg_2")
    parsed = valid(message)
    assert [block.type for block in parsed.content] == ["thinking", "text", "tool_use", "tool_use"]
    thinking, _, weather, clock = parsed.content
    assert thinking.thinking == "Hm." and thinking.signature
    assert (weather.id, weather.name, weather.input) == ("toolu_0", "get_weather", {"city": "Paris"})
    assert (clock.id, clock.input) == ("toolu_1", {})
    assert parsed.stop_reason == "tool_use"
    # The same reasoning always signs the same: a stream and the message agree.
    again = message_object(REQUEST, answer, message_id="msg_3")
    assert again["content"][0]["signature"] == message["content"][0]["signature"]


def test_a_call_only_answer_has_no_empty_text_block():
    parsed = valid(message_object(REQUEST, completion(None, [("get_time", "{}")]), message_id="msg_4"))
    assert [block.type for block in parsed.content] == ["tool_use"]


@pytest.mark.parametrize(("finish", "calls", "stop_sequence", "reason"), [
    ("stop", (), None, "end_turn"),
    ("stop", (), "END", "stop_sequence"),
    ("length", (), None, "max_tokens"),
    ("tool_calls", [("get_time", "{}")], None, "tool_use"),
    ("length", [("get_time", "{}")], None, "max_tokens"),  # a call cut at the limit is not a call to run
])
def test_stop_reasons(finish, calls, stop_sequence, reason):
    answer = completion("x", calls, finish=finish)
    answer.llmproxy.stop_sequence = stop_sequence  # as the pipeline sets it where the backend says
    message = message_object(REQUEST, answer, message_id="msg_5")
    parsed = valid(message)
    assert parsed.stop_reason == reason
    assert parsed.stop_sequence == (stop_sequence if reason == "stop_sequence" else None)


def test_llmproxy_account_with_the_request_notes():
    message = message_object(REQUEST, completion("A cat."), message_id="msg_6")
    info = message["llmproxy"]
    assert info["wrapper"] == "qwen3" and info["backend"] == "scripted"
    assert info["notes"] == ["messages[0].content[1]: an image replaced by a note; the model reads text only",
                             "a pipeline note"]
    copied = completion("A cat.")  # the server may have put the request's notes in already
    copied.llmproxy.notes = list(REQUEST.notes)
    assert message_object(REQUEST, copied, message_id="msg_9")["llmproxy"]["notes"] == list(REQUEST.notes)
    plain = read_request({"model": "m", "max_tokens": 5, "messages": QUESTION})
    assert "llmproxy" not in message_object(plain, completion("A", info=False), message_id="msg_7")
    assert message_object(REQUEST, completion("A", info=False), message_id="msg_8")["llmproxy"] == {
        "notes": list(REQUEST.notes)}


def test_message_ids():
    first, second = new_message_id(), new_message_id()
    assert first.startswith("msg_") and first != second


def test_models_list_in_anthropics_shape():
    listed = models_list([("claude-local", 8192), ("qwen3", 32768)], 1_700_000_000)
    assert listed["data"][0] == {"type": "model", "id": "claude-local", "display_name": "claude-local",
                                 "created_at": "2023-11-14T22:13:20Z", "lifecycle": "active",
                                 "max_input_tokens": 8192, "max_tokens": 8192}
    assert (listed["first_id"], listed["last_id"], listed["has_more"]) == ("claude-local", "qwen3", False)
    page = Replaying(200, json.dumps(listed).encode()).client.models.list()
    assert [model.id for model in page.data] == ["claude-local", "qwen3"]
    assert [model.max_input_tokens for model in page.data] == [8192, 32768]
    assert models_list([]) == {"data": [], "has_more": False, "first_id": None, "last_id": None}


def test_count_tokens_body():
    counted = Replaying(200, json.dumps(count_tokens_body(42)).encode()).client.messages.count_tokens(
        model="m", messages=QUESTION)
    assert counted.input_tokens == 42 and count_tokens_body(42) == {"input_tokens": 42}
