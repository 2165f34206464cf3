"""An Anthropic Messages body becomes the internal ChatRequest: every block kind, every tool_choice form,
what is replaced or left out (and said so), and a 400 naming the field for each malformed part."""

from __future__ import annotations

import json

import pytest

from llmproxy.errors import InvalidRequestError
from llmproxy.faces.content import stand_in
from llmproxy.faces.messages import read_request
from llmproxy.types import AssistantMessage, NamedToolChoice, SystemMessage, ToolMessage, UserMessage

WEATHER = {"name": "get_weather", "description": "Weather now.",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
EPHEMERAL = {"type": "ephemeral"}
TIME = {"name": "get_time", "input_schema": {"type": "object", "properties": {}}, "cache_control": EPHEMERAL}


def body(messages=None, **fields):
    return {"model": "claude-sonnet-4-5", "max_tokens": 1024,
            "messages": messages or [{"role": "user", "content": "Hi"}], **fields}


def roles(request):
    return [m.role for m in request.chat.messages]


def test_a_plain_request():
    request = read_request(body(stop_sequences=["END"], temperature=0.5, top_p=0.9, top_k=40, stream=True,
                                metadata={"user_id": "u"}, service_tier="auto", context_management={}))
    chat = request.chat
    assert request.model == chat.model == "claude-sonnet-4-5" and request.stream is chat.stream is True
    assert chat.max_tokens == 1024 and chat.stop == ["END"] and chat.temperature == 0.5 and chat.top_p == 0.9
    assert chat.messages == [UserMessage(role="user", content="Hi")]
    assert chat.tools is None and chat.tool_choice is None and chat.reasoning_effort is None
    assert request.notes == () and request.skipped == ()
    assert read_request(body()).stream is False


def test_system_string_or_blocks_joined_by_a_blank_line():
    assert read_request(body(system="Be brief.")).chat.messages[0] == SystemMessage(role="system", content="Be brief.")
    blocks = [{"type": "text", "text": "You are Claude Code."},
              {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    first = read_request(body(system=blocks)).chat.messages[0]
    assert first.content == "You are Claude Code.\n\nBe brief."


def test_the_billing_attribution_line_is_dropped():
    line = "x-anthropic-billing-header: cc_version=2.1.197.abc; cc_entrypoint=cli; cch=%s;"
    prompts = []
    for cch in ["1a2b3", "9z8y7"]:  # changes every request; the prompt must not
        system = [{"type": "text", "text": line % cch}, {"type": "text", "text": "You are Claude Code."}]
        prompts.append(read_request(body(system=system)).chat.messages[0].content)
    assert prompts == ["You are Claude Code."] * 2
    as_string = read_request(body(system=line % "x" + "\nYou are Claude Code.")).chat.messages[0]
    assert as_string.content == "You are Claude Code."
    only = read_request(body(system=[{"type": "text", "text": line % "x"}]))
    assert roles(only) == ["user"]


def test_system_turns_stay_in_place():
    request = read_request(body([
        {"role": "user", "content": "Hi"},
        {"role": "system", "content": [{"type": "text", "text": "Reminder: be brief."}]},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "More?"},
    ], system="Top."))
    assert roles(request) == ["system", "user", "system", "assistant", "user"]
    assert request.chat.messages[2].content == "Reminder: be brief."


def test_user_blocks_and_a_string_content():
    request = read_request(body([{"role": "user", "content": [
        {"type": "text", "text": "<system-reminder>Plan mode.</system-reminder>", "cache_control": EPHEMERAL},
        {"type": "text", "text": "Fix the bug."},
    ]}]))
    assert request.chat.messages == [UserMessage(role="user", content="<system-reminder>Plan mode.</system-reminder>"
                                                                      "\n\nFix the bug.")]


def test_images_and_documents_stand_in_with_a_note():
    image_b64 = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    image_url = {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}}
    pdf = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}}
    text_doc = {"type": "document", "title": "notes.txt",
                "source": {"type": "text", "media_type": "text/plain", "data": "Buy milk."}}
    content_doc = {"type": "document",
                   "source": {"type": "content", "content": [{"type": "text", "text": "Part one."}]}}
    request = read_request(body([{"role": "user", "content": [
        {"type": "text", "text": "Look:"}, image_b64, image_url, pdf, text_doc, content_doc]}]))
    assert request.chat.messages[0].content == "\n\n".join([
        "Look:", stand_in("an image"), stand_in("an image"), stand_in("a PDF document"),
        "notes.txt\n\nBuy milk.", "Part one."])
    assert request.notes == (
        "messages[0].content[1]: an image replaced by a note; the model reads text only",
        "messages[0].content[2]: an image replaced by a note; the model reads text only",
        "messages[0].content[3]: a PDF document replaced by a note; the model reads text only",
    )


CONVERSATION = [
    {"role": "user", "content": "Weather in Paris and the time?"},
    {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "Two tools.", "signature": "EqQBCkYIBxgCKkA..."},
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT"},
        {"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {"city": "Paris é"}},
        {"type": "tool_use", "id": "toolu_01B", "name": "get_time", "input": {}, "cache_control": EPHEMERAL},
    ]},
    {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_01A", "content": "18°C, sunny"},
        {"type": "tool_result", "tool_use_id": "toolu_01B", "is_error": True,
         "content": [{"type": "text", "text": "clock unavailable"}]},
        {"type": "text", "text": "Thanks. Anything else?"},
    ]},
]


def test_a_tool_loop():
    request = read_request(body(CONVERSATION, tools=[WEATHER, TIME]))
    messages = request.chat.messages
    assert roles(request) == ["user", "assistant", "tool", "tool", "user"]
    assistant = messages[1]
    assert isinstance(assistant, AssistantMessage)
    assert assistant.content == "Let me check." and assistant.reasoning_content == "Two tools."
    assert [(c.id, c.function.name, json.loads(c.function.arguments)) for c in assistant.tool_calls] == [
        ("toolu_01A", "get_weather", {"city": "Paris é"}), ("toolu_01B", "get_time", {})]
    assert assistant.tool_calls[0].function.arguments == '{"city":"Paris é"}'  # non-ASCII as the model writes it
    assert messages[2] == ToolMessage(role="tool", content="18°C, sunny", tool_call_id="toolu_01A")
    assert messages[3] == ToolMessage(role="tool", content="Error: clock unavailable", tool_call_id="toolu_01B")
    assert messages[4] == UserMessage(role="user", content="Thanks. Anything else?")
    assert request.skipped == ("messages[1].content[1]: redacted (encrypted) thinking left out",)


def test_tool_results_come_before_the_turns_own_words_and_may_hold_images():
    request = read_request(body([
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "shot", "input": {}}]},
        {"role": "user", "content": [
            {"type": "text", "text": "Here it is."},
            {"type": "tool_result", "tool_use_id": "t1", "content": [
                {"type": "text", "text": "Screenshot:"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}},
                {"type": "tool_reference", "tool_name": "Bash"}]},
            {"type": "tool_result", "tool_use_id": "t2"},
            {"type": "tool_result", "tool_use_id": "t3", "content": [], "is_error": True},
        ]},
    ]))
    messages = request.chat.messages
    assert roles(request) == ["assistant", "tool", "tool", "tool", "user"]
    assert messages[0].content is None
    assert messages[1].content == "Screenshot:\n\n" + stand_in("an image")
    assert [m.content for m in messages[2:]] == ["", "Error", "Here it is."]
    assert request.notes == (
        "messages[1].content[1].content[1]: an image replaced by a note; the model reads text only",)
    assert request.skipped == ("messages[1].content[1].content[2]: a tool_reference block in a tool result left out",)


def test_unknown_blocks_are_skipped_and_reported():
    request = read_request(body([
        {"role": "user", "content": [{"type": "search_result", "source": "x", "content": []},
                                     {"type": "text", "text": "Q"}]},
        {"role": "assistant", "content": [
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
            {"type": "text", "text": "A"}]},
        {"role": "user", "content": [{"type": "thinking", "thinking": "not a user's"}]},
    ]))
    assert [m.content for m in request.chat.messages] == ["Q", "A", ""]
    assert request.skipped == (
        "messages[0].content[0]: a search_result block left out",
        "messages[1].content[0]: a server_tool_use block left out",
        "messages[1].content[1]: a web_search_tool_result block left out",
        "messages[2].content[0]: a thinking block left out",
    )


def test_an_assistant_turn_of_thinking_only():
    request = read_request(body([{"role": "user", "content": "Hi"},
                                 {"role": "assistant", "content": [{"type": "thinking", "thinking": "Hm."}]},
                                 {"role": "user", "content": "?"}]))
    assistant = request.chat.messages[1]
    assert assistant.content == "" and assistant.reasoning_content == "Hm." and assistant.tool_calls is None


def test_tools_and_server_tools():
    server_tools = [{"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
                    {"type": "bash_20250124", "name": "bash"},
                    {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"}]
    request = read_request(body(tools=[WEATHER, *server_tools, {**TIME, "type": "custom"}]))
    functions = request.chat.function_definitions()
    assert [(f.name, f.description) for f in functions] == [("get_weather", "Weather now."), ("get_time", None)]
    assert functions[0].parameters == WEATHER["input_schema"]
    assert request.skipped == ("tools[1]: server tool web_search_20250305 (web_search) left out",
                               "tools[2]: server tool bash_20250124 (bash) left out",
                               "tools[3]: server tool text_editor_20250728 (str_replace_based_edit_tool) left out")
    assert read_request(body(tools=server_tools)).chat.tools is None


def test_the_tools_translation_is_kept_for_the_next_turn_and_never_stale():
    tools = [{**WEATHER, "name": "cached_weather"}, {"type": "bash_20250124", "name": "bash"}]
    first = read_request(body(tools=tools))
    again = read_request(body(tools=json.loads(json.dumps(tools))))  # the next turn's tools, decoded afresh
    assert again.chat.function_definitions()[0] is first.chat.function_definitions()[0]
    assert again.skipped == first.skipped == ("tools[1]: server tool bash_20250124 (bash) left out",)
    changed = json.loads(json.dumps(tools))
    changed[0]["input_schema"]["required"] = []
    fresh = read_request(body(tools=changed)).chat.function_definitions()[0]
    assert fresh.parameters == changed[0]["input_schema"] and fresh.parameters != WEATHER["input_schema"]
    assert read_request(body(tools=tools)).chat.function_definitions()[0].parameters == WEATHER["input_schema"]
    with pytest.raises(InvalidRequestError):  # a failed translation is never kept: the same error each time
        read_request(body(tools=[WEATHER, WEATHER]))
    with pytest.raises(InvalidRequestError, match="a second tool named 'get_weather'"):
        read_request(body(tools=[WEATHER, WEATHER]))


@pytest.mark.parametrize(("choice", "expected", "parallel"), [
    ({"type": "auto"}, "auto", None),
    ({"type": "any"}, "required", None),
    ({"type": "none"}, "none", None),
    ({"type": "auto", "disable_parallel_tool_use": True}, "auto", False),
    ({"type": "any", "disable_parallel_tool_use": False}, "required", None),
    ({"type": "tool", "name": "get_time", "disable_parallel_tool_use": True},
     NamedToolChoice(function={"name": "get_time"}), False),
])
def test_tool_choice(choice, expected, parallel):
    chat = read_request(body(tools=[WEATHER, TIME], tool_choice=choice)).chat
    assert chat.tool_choice == expected and chat.parallel_tool_calls is parallel
    assert chat.choice().mode == (expected if isinstance(expected, str) else "named")


@pytest.mark.parametrize(("thinking", "config", "effort"), [
    ({"type": "enabled", "budget_tokens": 2048}, None, None),
    ({"type": "adaptive"}, {"effort": "high"}, "high"),
    ({"type": "adaptive", "display": "summarized"}, None, None),
    ({"type": "disabled"}, {"effort": "max"}, "none"),
    (None, {"effort": "low"}, "low"),
])
def test_thinking_and_effort(thinking, config, effort):
    fields = {k: v for k, v in [("thinking", thinking), ("output_config", config)] if v is not None}
    chat = read_request(body(**fields)).chat
    assert chat.reasoning_effort == effort
    assert chat.wants_reasoning() is (effort != "none")


def test_structured_output():
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    for fields in [{"output_config": {"format": {"type": "json_schema", "schema": schema}}},
                   {"output_format": {"type": "json_schema", "schema": schema}}]:
        response_format = read_request(body(**fields)).chat.response_format
        assert response_format.type == "json_schema" and response_format.json_schema["schema"] == schema


def test_count_tokens_bodies_need_no_max_tokens():
    request = read_request({"model": "m", "messages": [{"role": "user", "content": "Hi"}], "stream": True},
                           counting=True)
    assert request.chat.max_tokens is None and request.stream is False


@pytest.mark.parametrize(("fields", "param"), [
    ({"model": None}, "model"),
    ({"model": 3}, "model"),
    ({"max_tokens": None}, "max_tokens"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": True}, "max_tokens"),
    ({"messages": []}, "messages"),
    ({"messages": "Hi"}, "messages"),
    ({"messages": [{"role": "bot", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user"}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": ["x"]}]}, "messages[0].content[0]"),
    ({"messages": [{"role": "user", "content": [{"text": "x"}]}]}, "messages[0].content[0].type"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": 1}]}]}, "messages[0].content[0].text"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "content": "x"}]}]},
     "messages[0].content[0].tool_use_id"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "is_error": "yes"}]}]},
     "messages[0].content[0].is_error"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}]},
     "messages[0].content[0]"),
    ({"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": "{}"}]}]},
     "messages[0].content[0].input"),
    ({"messages": [{"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": {}}]}]},
     "messages[0].content[0].id"),
    ({"messages": [{"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t"}]}]},
     "messages[0].content[0]"),
    ({"messages": [{"role": "user", "content": [{"type": "image"}, {"type": "document", "source": 1}]}]},
     "messages[0].content[1].source"),
    ({"system": 5}, "system"),
    ({"system": [{"type": "text"}]}, "system[0].text"),
    ({"tools": {"name": "x"}}, "tools"),
    ({"tools": [{"name": "f"}]}, "tools[0].input_schema"),
    ({"tools": [{"name": "bad name!", "input_schema": {"type": "object"}}]}, "tools[0].name"),
    ({"tools": [{"name": "f", "input_schema": {"type": "array"}}]}, "tools[0].input_schema"),
    ({"tools": [WEATHER, WEATHER]}, "tools[1].name"),
    ({"tools": [WEATHER], "tool_choice": {"type": "tool", "name": "get_time"}}, "tool_choice.name"),
    ({"tools": [WEATHER], "tool_choice": {"type": "tool"}}, "tool_choice.name"),
    ({"tools": [WEATHER], "tool_choice": {"type": "sometimes"}}, "tool_choice.type"),
    ({"tools": [WEATHER], "tool_choice": "auto"}, "tool_choice"),
    ({"thinking": {"type": "always"}}, "thinking.type"),
    ({"thinking": {"type": "enabled", "budget_tokens": "lots"}}, "thinking.budget_tokens"),
    ({"output_config": {"format": {"type": "regex"}}}, "output_config.format.type"),
    ({"output_config": {"format": {"type": "json_schema"}}}, "output_config.format.schema"),
    ({"output_config": {"effort": 3}}, "output_config.effort"),
    ({"stop_sequences": ["a", 1]}, "stop_sequences[1]"),
    ({"temperature": 1.5}, "temperature"),
    ({"top_p": "high"}, "top_p"),
    ({"stream": "yes"}, "stream"),
])
def test_malformed_fields_are_named(fields, param):
    with pytest.raises(InvalidRequestError) as caught:
        read_request(body(**fields) if "messages" not in fields else {**body(), **fields})
    assert caught.value.param == param and caught.value.status_code == 400
    assert caught.value.message.startswith(param + ":")


def test_a_body_that_is_not_an_object():
    with pytest.raises(InvalidRequestError, match="expected an object"):
        read_request([1, 2])
