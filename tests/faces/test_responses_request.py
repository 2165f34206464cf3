"""A Responses API body becomes the internal ChatRequest: every input item kind, every tool kind and
tool_choice form, the fields echoed, what is replaced or left out (and said so), a 400 naming the field
for what is malformed, and a stored previous response continued."""

from __future__ import annotations

import json
import re

import pytest
from responses_helpers import CODEX_TOOLS, EXEC, FILES, NOTES, PATCH, body, codex_body

from llmproxy.errors import InvalidRequestError, NotFoundError
from llmproxy.faces.content import stand_in
from llmproxy.faces.lark import custom_tool_pattern
from llmproxy.faces.responses import StoredResponse, read_request, stored_record
from llmproxy.types import AssistantMessage, FunctionCall, SystemMessage, ToolCall, ToolMessage, UserMessage


def messages(request_body):
    return read_request(request_body).chat.messages


def call(call_id, name, arguments="{}"):
    return ToolCall(id=call_id, function=FunctionCall(name=name, arguments=arguments))


def refused(request_body, param, previous=None) -> str:
    with pytest.raises(InvalidRequestError) as caught:
        read_request(request_body, previous)
    assert caught.value.param == param and caught.value.status_code == 400
    return caught.value.message


# --- input -----------------------------------------------------------------------------------


def test_a_plain_request():
    request = read_request(body("Hi", temperature=0.2, top_p=0.9, max_output_tokens=64, user="u1"))
    chat = request.chat
    assert chat.messages == [UserMessage(role="user", content="Hi")]
    assert (chat.model, chat.temperature, chat.top_p, chat.max_tokens, chat.user) == ("m", 0.2, 0.9, 64, "u1")
    assert chat.tools is None and chat.tool_choice is None and chat.response_format is None
    assert request.stream is False and request.store is True and request.include == frozenset()
    assert request.notes == [] and request.skipped == []
    assert request.items == [{"type": "message", "role": "user", "content": "Hi"}]


def test_instructions_lead_as_a_system_message():
    assert messages(body("Hi", instructions="Be brief.")) == [SystemMessage(role="system", content="Be brief."),
                                                              UserMessage(role="user", content="Hi")]
    refused(body("Hi", instructions=["no"]), "instructions")


def test_messages_of_every_role_with_or_without_type():
    items = [{"role": "developer", "content": "Codex base prompt"},
             {"type": "message", "role": "system", "content": [{"type": "input_text", "text": "sys"}]},
             {"role": "user", "content": [{"type": "input_text", "text": "one"},
                                          {"type": "input_text", "text": "two"}]},
             {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
              "content": [{"type": "output_text", "text": "Sure.", "annotations": []}]},
             {"role": "assistant", "content": [{"type": "refusal", "refusal": "I cannot."}]},
             {"role": "user", "content": None}]
    assert messages(body(items)) == [
        SystemMessage(role="developer", content="Codex base prompt"),
        SystemMessage(role="system", content="sys"),
        UserMessage(role="user", content="one\ntwo"),
        AssistantMessage(role="assistant", content="Sure."),
        AssistantMessage(role="assistant", content="I cannot."),
        UserMessage(role="user", content=""),
    ]


def test_images_and_files_become_notes_never_failures():
    items = [{"role": "user", "content": [{"type": "input_text", "text": "What is this?"},
                                          {"type": "input_image", "image_url": "data:image/png;base64,AAAA"},
                                          {"type": "input_file", "filename": "report.pdf", "file_data": "AAAA"}]},
             {"type": "function_call", "call_id": "c1", "name": "view_image", "arguments": "{}"},
             {"type": "function_call_output", "call_id": "c1",
              "output": [{"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}]
    request = read_request(body(items))
    assert request.chat.messages[0].content == "\n".join(
        ["What is this?", stand_in("an image"), stand_in("a file (report.pdf)")])
    assert request.chat.messages[2] == ToolMessage(role="tool", content=stand_in("an image"), tool_call_id="c1")
    assert [note.split(":")[0] for note in request.notes] == [
        "input[0].content[1]", "input[0].content[2]", "input[2].output[0]"]


def test_calls_and_the_assistant_message_before_them_make_one_turn():
    items = [{"role": "user", "content": "Look around."},
             {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Looking."}]},
             {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": '{"cmd": "ls"}',
              "id": "fc_1", "status": "completed"},
             {"type": "function_call", "call_id": "c2", "name": "list", "namespace": "mcp__files__",
              "arguments": {"path": "/"}},
             {"type": "custom_tool_call", "call_id": "c3", "name": "apply_patch", "input": "*** Begin Patch\n"},
             {"type": "function_call_output", "call_id": "c1", "output": "a.txt"},
             {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "b.txt"}]},
             {"type": "custom_tool_call_output", "call_id": "c3", "output": "Done."},
             {"type": "function_call", "call_id": "c4", "name": "exec_command"}]
    got = messages(body(items, tools=CODEX_TOOLS))
    assert got[1] == AssistantMessage(role="assistant", content="Looking.", tool_calls=[
        call("c1", "exec_command", '{"cmd": "ls"}'), call("c2", "mcp__files__list", '{"path": "/"}'),
        call("c3", "apply_patch", json.dumps({"input": "*** Begin Patch\n"}))])
    assert got[2:5] == [ToolMessage(role="tool", content="a.txt", tool_call_id="c1"),
                        ToolMessage(role="tool", content="b.txt", tool_call_id="c2"),
                        ToolMessage(role="tool", content="Done.", tool_call_id="c3")]
    assert got[5] == AssistantMessage(role="assistant", tool_calls=[call("c4", "exec_command")])


@pytest.mark.parametrize("reasoning, text", [
    ({"content": [{"type": "reasoning_text", "text": "from content"}],
      "summary": [{"type": "summary_text", "text": "from summary"}]}, "from content"),
    ({"summary": [{"type": "summary_text", "text": "first"}, {"type": "summary_text", "text": "second"}],
      "content": None, "encrypted_content": None}, "first\n\nsecond"),
    ({"summary": [], "encrypted_content": "llmproxy.reasoning.v1:sealed thought"}, "sealed thought"),
])
def test_reasoning_is_replayed_on_the_next_assistant_turn(reasoning, text):
    items = [{"role": "user", "content": "Hi"}, {"type": "reasoning", "id": "rs_1", **reasoning},
             {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{}"}]
    assert messages(body(items))[1] == AssistantMessage(role="assistant", tool_calls=[call("c1", "exec_command")],
                                                        reasoning_content=text)


def test_reasoning_that_cannot_be_read_or_has_no_turn_is_left_out():
    items = [{"type": "reasoning", "summary": [], "encrypted_content": "gAAAAB-openai-sealed"},
             {"role": "assistant", "content": "Hello."},
             {"type": "reasoning", "summary": [{"type": "summary_text", "text": "dangling"}]},
             {"role": "user", "content": "Hi"}]
    request = read_request(body(items))
    assert request.chat.messages == [AssistantMessage(role="assistant", content="Hello.", reasoning_content="dangling"),
                                     UserMessage(role="user", content="Hi")]
    assert request.skipped == ["input[0]: reasoning with no text this server can read left out"]
    lonely = read_request(body([{"role": "user", "content": "Hi"},
                                {"type": "reasoning", "summary": [{"type": "summary_text", "text": "x"}]},
                                {"role": "user", "content": "again"}]))
    assert [m.role for m in lonely.chat.messages] == ["user", "user"]
    assert lonely.skipped == ["input[1]: reasoning with no assistant message or call after it left out"]


def test_reasoning_after_its_turn_already_reasoned_opens_the_next_turn():
    thought = [{"type": "summary_text", "text": "t"}]
    items = [{"type": "reasoning", "summary": thought}, {"role": "assistant", "content": "A"},
             {"type": "reasoning", "summary": thought}, {"role": "assistant", "content": "B"}]
    assert [(m.content, m.reasoning_content) for m in messages(body(items))] == [("A", "t"), ("B", "t")]


def test_unknown_items_parts_and_fields_are_skipped_and_reported():
    items = [{"type": "web_search_call", "id": "ws_1", "status": "completed"},
             {"type": "compaction", "encrypted_content": "..."},
             {"type": "item_reference", "id": "msg_1"},
             {"role": "user", "content": [{"type": "input_audio", "input_audio": {}},
                                          {"type": "input_text", "text": "Hi"}]}]
    request = read_request(body(items, context_management=[{"type": "compaction"}], client_metadata={"a": "b"},
                                service_tier="auto",
                                include=["reasoning.encrypted_content", "web_search_call.results"]))
    assert request.chat.messages == [UserMessage(role="user", content="Hi")]
    assert request.skipped == [
        "field 'context_management' ignored",
        "include 'web_search_call.results' left out: not available here",
        "input[0]: item of type 'web_search_call' left out",
        "input[1]: item of type 'compaction' left out",
        "input[2]: item of type 'item_reference' left out",
        "input[3].content[0]: content part of type 'input_audio' left out",
    ]


@pytest.mark.parametrize("item, param", [
    ("just text", "input[1]"),
    ({"type": "function_call", "name": "f", "arguments": "{}"}, "input[1].call_id"),
    ({"type": "function_call", "call_id": "c1", "arguments": "{}"}, "input[1].name"),
    ({"type": "function_call_output", "output": "x"}, "input[1].call_id"),
    ({"type": "custom_tool_call", "call_id": "c1", "name": "p", "input": 5}, "input[1].input"),
    ({"role": "robot", "content": "x"}, "input[1].role"),
    ({"role": "user", "content": [{"type": "input_text", "text": None}]}, "input[1].content[0].text"),
    ({"role": "user", "content": [7]}, "input[1].content[0]"),
])
def test_malformed_items_are_a_400_naming_the_field(item, param):
    refused(body([{"role": "user", "content": "Hi"}, item]), param)


def test_a_request_with_nothing_to_answer_is_refused():
    refused(body([]), "input")
    refused({"model": "m", "input": {"role": "user"}}, "input")


# --- tools -----------------------------------------------------------------------------------


def test_function_tools_are_flat():
    request = read_request(body(tools=[EXEC, {"type": "function", "name": "ping"}]))
    first, second = request.chat.function_definitions()
    assert (first.name, first.description, first.parameters) == ("exec_command", EXEC["description"],
                                                                 EXEC["parameters"])
    assert second.parameters == {"type": "object", "properties": {}}
    refused(body(tools=[{"type": "function", "name": "f", "parameters": {"type": "array"}}]), "tools[0].parameters")
    refused(body(tools=[{"type": "function"}]), "tools[0].name")
    refused(body(tools={"type": "function"}), "tools")


def test_a_namespace_gives_one_function_per_child_named_for_both():
    request = read_request(body(tools=[FILES, {"type": "namespace", "name": "multi_agent_v1", "tools": [
        {"type": "function", "name": "spawn_agent"}, {"type": "web_search"}]}]))
    assert [f.name for f in request.chat.function_definitions()] == ["mcp__files__list", "multi_agent_v1.spawn_agent"]
    assert request.names.target("mcp__files__list").namespace == "mcp__files__"
    assert request.skipped == ["tools[1].tools[1]: 'web_search' tool in a namespace left out"]


def test_function_names_stay_valid_unique_and_stable():
    long_namespace = "mcp__" + "a_very_long_server_name_" * 3
    tools = [{"type": "namespace", "name": long_namespace, "tools": [{"type": "function", "name": "read file"},
                                                                     {"type": "function", "name": "write"}]},
             {"type": "function", "name": "mcp__files__list"}, FILES]
    request = read_request(body(tools=tools))
    names = [f.name for f in request.chat.function_definitions()]
    assert all(re.fullmatch(r"[A-Za-z0-9_.\-]{1,64}", name) for name in names) and len(set(names)) == 4
    assert names[2] == "mcp__files__list" and names[3] != names[2]  # the namespace's child gets another name
    assert request.names.target(names[3]).namespace == "mcp__files__"
    assert request.names.target(names[0]).name == "read file"
    again = read_request(body(tools=tools))
    assert [f.name for f in again.chat.function_definitions()] == names
    # The history's calls get the offered tools' names.
    items = [{"type": "function_call", "call_id": "c1", "name": "list", "namespace": "mcp__files__"},
             {"type": "function_call", "call_id": "c2", "name": "read file", "namespace": long_namespace}]
    turn = messages(body(items, tools=tools))[0]
    assert [c.function.name for c in turn.tool_calls] == [names[3], names[0]]


def test_custom_tools_take_one_string_in_their_grammar():
    request = read_request(body(tools=[PATCH, NOTES, {**NOTES, "name": "plain", "format": {"type": "text"}}]))
    patch, notes, plain = request.chat.function_definitions()
    pattern = custom_tool_pattern("lark", PATCH["format"]["definition"])
    assert pattern is not None
    assert patch.parameters["properties"]["input"]["pattern"] == pattern
    assert patch.parameters["required"] == ["input"] and patch.parameters["additionalProperties"] is False
    assert PATCH["format"]["definition"] in patch.parameters["properties"]["input"]["description"]
    for free in (notes, plain):
        assert "pattern" not in free.parameters["properties"]["input"]
        assert free.parameters["properties"]["input"]["type"] == "string"
    assert request.names.target("apply_patch").custom
    refused(body(tools=[{**PATCH, "format": {"type": "grammar", "syntax": "lark"}}]), "tools[0].format.definition")
    refused(body(tools=[{**PATCH, "format": {"type": "json"}}]), "tools[0].format.type")


def test_hosted_tools_and_second_tools_of_a_name_are_left_out_and_reported():
    hosted = [{"type": kind} for kind in ("web_search", "file_search", "tool_search", "local_shell",
                                          "image_generation", "mcp", "computer_use_preview", "code_interpreter")]
    request = read_request(body(tools=[EXEC, *hosted, EXEC]))
    assert [f.name for f in request.chat.function_definitions()] == ["exec_command"]
    assert len(request.skipped) == 9 and "'web_search' tool left out" in request.skipped[0]
    assert request.skipped[-1] == "tools[9]: a second tool named 'exec_command' left out"


def test_the_tools_translation_is_kept_for_the_next_turn_and_never_stale():
    tools = [{**EXEC, "name": "cached_exec"}, FILES, {"type": "web_search"}]
    first = read_request(body(tools=tools))
    again = read_request(body(tools=json.loads(json.dumps(tools))))  # the next turn's tools, decoded afresh
    shared = zip(first.chat.function_definitions(), again.chat.function_definitions(), strict=True)
    assert all(a is b for a, b in shared) and again.names is first.names
    assert again.skipped == first.skipped == ["tools[2]: 'web_search' tool left out: hosted tools are not available "
                                              "on this server"]  # reported for every request, not only the first
    changed = json.loads(json.dumps(tools))
    changed[0]["parameters"]["properties"]["cmd"]["description"] = "The command line."
    changed[1]["tools"][0]["name"] = "list_all"
    fresh = read_request(body(tools=changed))
    assert [f.parameters for f in fresh.chat.function_definitions()][0] == changed[0]["parameters"]
    assert [f.name for f in fresh.chat.function_definitions()] == ["cached_exec", "mcp__files__list_all"]
    assert [f.parameters for f in read_request(body(tools=tools)).chat.function_definitions()][0] == EXEC["parameters"]


# --- tool_choice -----------------------------------------------------------------------------


def choice(tool_choice, tools=CODEX_TOOLS):
    request = read_request(body(tools=tools, tool_choice=tool_choice))
    return [f.name for f in request.chat.function_definitions()], request.chat.choice()


def test_tool_choice_modes():
    for mode in ("none", "auto", "required"):
        names, chosen = choice(mode)
        assert len(names) == 4 and chosen.mode == mode
    assert choice(None)[1].mode == "auto"
    refused(body(tools=CODEX_TOOLS, tool_choice="any"), "tool_choice")
    refused(body(tool_choice="required"), "tool_choice")  # nothing to call
    refused(body(tools=[{"type": "web_search"}], tool_choice="required"), "tool_choice")


def test_tool_choice_names_a_function_or_custom_tool():
    assert choice({"type": "function", "name": "exec_command"})[1].name == "exec_command"
    assert choice({"type": "custom", "name": "apply_patch"})[1].name == "apply_patch"
    assert choice({"type": "function", "name": "list", "namespace": "mcp__files__"})[1].name == "mcp__files__list"
    assert choice({"type": "function", "name": "list"})[1].name == "mcp__files__list"  # the only tool so named
    assert "not among the tools offered" in refused(
        body(tools=CODEX_TOOLS, tool_choice={"type": "function", "name": "apply_patch"}), "tool_choice")
    refused(body(tools=CODEX_TOOLS, tool_choice={"type": "custom", "name": "nope"}), "tool_choice")


def test_allowed_tools_offer_only_those():
    allowed = {"type": "allowed_tools", "mode": "required",
               "tools": [{"type": "function", "name": "exec_command"}, {"type": "custom", "name": "take_note"}]}
    names, chosen = choice(allowed)
    assert names == ["exec_command", "take_note"] and chosen.mode == "required"
    names, chosen = choice({**allowed, "mode": "auto", "tools": allowed["tools"][:1]})
    assert names == ["exec_command"] and chosen.mode == "auto"
    for bad in ({**allowed, "mode": "sometimes"}, {**allowed, "tools": []},
                {**allowed, "tools": [{"type": "function", "name": "nope"}]},
                {**allowed, "tools": [{"type": "web_search"}]}):
        refused(body(tools=CODEX_TOOLS, tool_choice=bad), "tool_choice")


@pytest.mark.parametrize("kind", ["web_search", "web_search_preview", "file_search", "mcp", "image_generation",
                                  "code_interpreter", "computer_use_preview", "shell", "apply_patch"])
def test_hosted_tool_choices_are_refused(kind):
    assert "not available here" in refused(body(tools=CODEX_TOOLS, tool_choice={"type": kind}), "tool_choice")


# --- the other fields ------------------------------------------------------------------------


def test_text_format_becomes_the_response_format():
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    form = read_request(body(text={"format": {"type": "json_schema", "name": "final_output", "schema": schema,
                                              "strict": True}, "verbosity": "low"})).chat.response_format
    assert form.type == "json_schema"
    assert form.json_schema == {"name": "final_output", "schema": schema, "strict": True}
    assert read_request(body(text={"format": {"type": "json_object"}})).chat.response_format.type == "json_object"
    assert read_request(body(text={"format": {"type": "text"}})).chat.response_format is None
    assert read_request(body(text={"verbosity": "high"})).chat.response_format is None
    refused(body(text={"format": {"type": "json_schema", "name": "x"}}), "text.format.schema")
    refused(body(text={"format": {"type": "yaml"}}), "text.format.type")
    refused(body(text="json"), "text")


def test_reasoning_effort_and_limits():
    assert read_request(body(reasoning={"effort": "high"})).chat.reasoning_effort == "high"
    for off in ("none", "minimal"):
        assert not read_request(body(reasoning={"effort": off, "summary": "auto"})).chat.wants_reasoning()
    assert read_request(body(reasoning={"summary": "auto"})).chat.wants_reasoning()
    assert read_request(body(parallel_tool_calls=False)).chat.parallel_tool_calls is False
    refused(body(max_output_tokens=0), "max_output_tokens")
    refused(body(temperature=3), "temperature")
    refused(body(reasoning="high"), "reasoning")


def test_state_kept_on_openai_servers_is_refused():
    assert "previous_response_id" in refused(body(conversation="conv_1"), "conversation")
    refused(body(conversation={"id": "conv_1"}), "conversation")
    refused(body(background=True), "background")
    refused(body(prompt={"id": "pmpt_1"}), "prompt")
    assert read_request(body(background=False, conversation=None)).chat.messages


def test_the_fields_the_response_echoes():
    request = read_request(codex_body(instructions="Be brief.", metadata={"k": "v"}, temperature=0.5,
                                      max_output_tokens=100, truncation="auto", text={"verbosity": "low"}))
    echo = request.echo
    assert echo["tools"] == CODEX_TOOLS and echo["tool_choice"] == "auto" and echo["parallel_tool_calls"] is True
    assert echo["instructions"] == "Be brief." and echo["metadata"] == {"k": "v"} and echo["store"] is False
    assert echo["reasoning"] == {"effort": "medium", "summary": "auto"} and echo["text"] == {"verbosity": "low"}
    assert (echo["temperature"], echo["max_output_tokens"], echo["truncation"]) == (0.5, 100, "auto")
    assert echo["prompt_cache_key"] == "conversation-1" and echo["previous_response_id"] is None
    assert request.stream is True and request.store is False and request.encrypted_reasoning
    defaults = read_request(body()).echo
    assert defaults["tools"] == [] and defaults["tool_choice"] == "auto" and defaults["store"] is True
    assert defaults["text"] == {"format": {"type": "text"}} and defaults["truncation"] == "disabled"


# --- previous_response_id --------------------------------------------------------------------


def test_a_stored_response_is_continued_without_its_instructions():
    first = read_request(body("List the files.", instructions="Old instructions.", tools=CODEX_TOOLS))
    response = {"id": "resp_1", "output": [
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Use ls."}]},
        {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "list", "namespace": "mcp__files__",
         "arguments": '{"path": "."}', "status": "completed"}]}
    record = stored_record(first, response)
    assert json.loads(record.data) == {"response": response, "input_items": first.items}
    previous = StoredResponse.from_record(record)
    assert previous == StoredResponse(response, first.items)
    follow = [{"type": "function_call_output", "call_id": "c1", "output": "a.txt"}]
    request = read_request(body(follow, previous_response_id="resp_1", instructions="New.", tools=CODEX_TOOLS),
                           previous)
    assert request.chat.messages == [
        SystemMessage(role="system", content="New."),
        UserMessage(role="user", content="List the files."),
        AssistantMessage(role="assistant", tool_calls=[call("c1", "mcp__files__list", '{"path": "."}')],
                         reasoning_content="Use ls."),
        ToolMessage(role="tool", content="a.txt", tool_call_id="c1"),
    ]
    assert request.items == [*first.items, *response["output"], *follow]
    assert request.echo["previous_response_id"] == "resp_1"


def test_a_stored_response_holding_half_a_surrogate_pair_reads_back():
    first = read_request(body("half a pair \ud800"))  # JSON can carry it; UTF-8 cannot, so it is kept escaped
    response = {"id": "resp_2", "output": [{"type": "message", "role": "assistant",
                                            "content": [{"type": "output_text", "text": "\udc00 too"}]}]}
    record = stored_record(first, response)
    assert StoredResponse.from_record(record) == StoredResponse(response, first.items)


def test_the_instructions_and_tools_every_turn_repeats_are_stored_once():
    turns = [read_request(body(f"Turn {n}.", instructions="You are Codex.", tools=CODEX_TOOLS)) for n in range(3)]
    records = [stored_record(turn, {"id": f"resp_{n}", "output": [], **turn.echo}) for n, turn in enumerate(turns)]
    assert records[0].shared is records[1].shared is records[2].shared  # one copy in memory
    assert b"You are Codex." in records[0].shared.data and b"You are Codex." not in records[0].data
    assert records[0].size == len(records[0].data) + len(records[0].shared.data)
    for n, record in enumerate(records):
        assert StoredResponse.from_record(record).response == {"id": f"resp_{n}", "output": [], **turns[n].echo}
    other = read_request(body("Turn 0.", instructions="You are someone else.", tools=CODEX_TOOLS))
    assert stored_record(other, {"id": "resp_x", **other.echo}).shared is not records[0].shared


def test_a_previous_response_that_is_not_held_is_a_404():
    with pytest.raises(NotFoundError) as caught:
        read_request(body(previous_response_id="resp_gone"), None)
    assert caught.value.param == "previous_response_id" and caught.value.status_code == 404
