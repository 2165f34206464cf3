"""The OpenAI wire types: both request forms, every role, normalised choices, clear rejections."""

from __future__ import annotations

import json
import os
import re

import pytest
from pydantic import ValidationError

from llmproxy.errors import InvalidRequestError
from llmproxy.proxy import parse_request
from llmproxy.types import (
    AssistantMessage,
    ChatCompletion,
    ChatCompletionChunk,
    ChatRequest,
    FunctionMessage,
    ToolChoice,
    ToolMessage,
    UserMessage,
    new_id,
)

FN = {"name": "lookup", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}
USER = {"role": "user", "content": "hi"}


def test_every_role_parses_into_its_own_type(conversation_dicts):
    request = ChatRequest.model_validate({"messages": conversation_dicts})
    kinds = [type(m).__name__ for m in request.messages]
    assert kinds == [
        "SystemMessage", "UserMessage", "AssistantMessage", "FunctionMessage", "UserMessage",
        "AssistantMessage", "ToolMessage", "UserMessage", "AssistantMessage", "ToolMessage", "UserMessage",
    ]
    legacy, modern = request.messages[2], request.messages[5]
    assert isinstance(legacy, AssistantMessage) and legacy.calls()[0].name == "send_message"
    assert isinstance(modern, AssistantMessage) and modern.calls()[0].name == "core_memory_append"
    assert isinstance(request.messages[3], FunctionMessage) and isinstance(request.messages[6], ToolMessage)


def test_text_parts_are_joined():
    request = ChatRequest.model_validate(
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]}
    )
    message = request.messages[0]
    assert isinstance(message, UserMessage)
    from llmproxy.types import content_text

    assert content_text(message.content) == "ab"


def test_legacy_request_answers_with_function_call_form():
    request = ChatRequest.model_validate({"messages": [USER], "functions": [FN], "function_call": {"name": "lookup"}})
    assert request.answer_form == "functions"
    assert request.choice() == ToolChoice(mode="named", name="lookup")
    assert [f.name for f in request.function_definitions()] == ["lookup"]


def test_tools_request_answers_with_tool_calls_form():
    request = ChatRequest.model_validate(
        {"messages": [USER], "tools": [{"type": "function", "function": FN}], "tool_choice": "required"}
    )
    assert request.answer_form == "tools"
    assert request.choice() == ToolChoice(mode="required")


@pytest.mark.parametrize(
    "choice,expected",
    [
        (None, ToolChoice(mode="auto")),
        ("none", ToolChoice(mode="none")),
        ("auto", ToolChoice(mode="auto")),
        ({"type": "function", "function": {"name": "lookup"}}, ToolChoice(mode="named", name="lookup")),
    ],
)
def test_tool_choice_normalises(choice, expected):
    fields = {"messages": [USER], "tools": [{"type": "function", "function": FN}]}
    if choice is not None:
        fields["tool_choice"] = choice
    assert ChatRequest.model_validate(fields).choice() == expected


@pytest.mark.parametrize(
    "fields,where",
    [
        ({"messages": []}, "messages"),
        ({}, "messages"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages.0"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages.0.tool.tool_call_id"),
        ({"messages": [USER], "temperature": "hot"}, "temperature"),
        ({"messages": [USER], "functions": [FN], "tools": [{"type": "function", "function": FN}]}, "request"),
        ({"messages": [USER], "functions": [FN, FN]}, "request"),
        ({"messages": [USER], "functions": [FN], "function_call": {"name": "other"}}, "request"),
        ({"messages": [USER], "functions": [{"name": "bad name!"}]}, "functions.0.name"),
        ({"messages": [USER], "functions": [{"name": "f", "parameters": {"type": "string"}}]}, "functions.0.parameters"),
        ({"messages": [USER], "n": 2}, "n"),
    ],
)
def test_bad_requests_name_the_field(fields, where):
    with pytest.raises(InvalidRequestError) as caught:
        parse_request(fields)
    assert caught.value.param == where
    assert caught.value.status_code == 400


def test_unknown_fields_are_ignored_not_rejected():
    request = parse_request({"messages": [USER], "store": True, "metadata": {"a": 1}})
    assert request.messages[0].content == "hi"


def test_stop_and_limits():
    request = parse_request({"messages": [USER], "stop": "END", "max_tokens": 10, "max_completion_tokens": 7})
    assert request.stop_list() == ["END"]
    assert request.answer_limit() == 7


def test_response_and_chunk_models_round_trip():
    completion = ChatCompletion.model_validate(
        {
            "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
        }
    )
    assert completion.id.startswith("chatcmpl-") and completion.object == "chat.completion"
    chunk = ChatCompletionChunk.model_validate(
        {"id": "x", "created": 1, "model": "m", "choices": [{"index": 0, "delta": {"content": "h"}, "finish_reason": None}]}
    )
    assert chunk.choices[0].delta.content == "h"
    with pytest.raises(ValidationError):
        ChatCompletion.model_validate({"model": "m", "choices": [], "usage": {"prompt_tokens": 1}})


def test_ids_are_unique_and_shaped_like_openai_ones():
    ids = {new_id("chatcmpl") for _ in range(10_000)}
    assert len(ids) == 10_000
    assert all(re.fullmatch(r"chatcmpl-[0-9a-f]{24}", id_) for id_ in ids)
    assert re.fullmatch(r"call_[0-9a-f]{24}", new_id("call", "_"))


def test_a_forked_process_does_not_repeat_the_parents_ids():
    """Server worker processes are forks: each must draw its own ids."""
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:
        os.write(writer, new_id("x").encode())
        os._exit(0)
    os.waitpid(child, 0)
    os.close(writer)
    from_child = os.read(reader, 100).decode()
    os.close(reader)
    assert from_child.startswith("x-") and from_child != new_id("x")


def test_tools_sent_again_are_validated_once_and_shared_read_only():
    """An agent sends the same tools every turn: the second request gets the first one's definitions
    (with the JSON they are known by), not a new validation; other tools get their own."""
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}
    first = parse_request({"messages": [USER], "tools": [weather]})
    again = parse_request({"messages": [USER], "tools": [json.loads(json.dumps(weather))]})
    assert again.tools[0].function is first.tools[0].function
    other = dict(weather, function={**weather["function"], "description": "The weather."})
    assert parse_request({"messages": [USER], "tools": [other]}).tools[0].function.description == "The weather."
    legacy = parse_request({"messages": [USER], "functions": [weather["function"]]})
    assert legacy.functions[0].definition_json == first.tools[0].function.definition_json


@pytest.mark.parametrize(("key", "bad", "named"), [
    ("tools", [{"type": "function", "function": {"name": "has space"}}], "tools.0.function.name"),
    ("functions", [{"name": "ok"}, {"name": "ok", "parameters": {"type": "array"}}], "functions.1.parameters"),
])
def test_a_bad_tool_list_is_still_refused_naming_the_field(key, bad, named):
    for _ in range(2):  # a refused list is not kept: the second time is refused alike
        with pytest.raises(InvalidRequestError) as info:
            parse_request({"messages": [USER], key: bad})
        assert named in info.value.message
