"""The pipeline's answer becomes a Responses response object that the openai SDK's own types accept:
items in order and named back as the client offered its tools, status, usage, and the echoed fields."""

from __future__ import annotations

import json

from openai.types.responses import Response
from responses_helpers import CODEX_TOOLS, CREATED, RESPONSE_ID, answer_call, body, codex_body, sdk_client, whole

from llmproxy.faces.responses import read_request, response_object
from llmproxy.types import ChatCompletion, Choice, ProxyInfo, ResponseMessage, Usage

THINKING = "<think>\nThe user wants files.\n</think>\n\n"


def validated(response: dict) -> Response:
    """The object through the SDK's strict validation, after a JSON round trip (what a client reads)."""
    return Response.model_validate(json.loads(json.dumps(response)))


def test_a_text_answer():
    response = whole(body("Hi", instructions="Be brief.", metadata={"k": "v"}, temperature=0.3),
                     "Hello there!")
    parsed = validated(response)
    assert parsed.id == RESPONSE_ID and parsed.created_at == CREATED and parsed.object == "response"
    assert parsed.status == "completed" and parsed.error is None and parsed.incomplete_details is None
    assert parsed.output_text == "Hello there!" and parsed.model == "m"
    [message] = response["output"]
    assert message["id"].startswith("msg_") and message["status"] == "completed"
    assert message["content"] == [{"type": "output_text", "text": "Hello there!", "annotations": [], "logprobs": []}]
    assert (parsed.instructions, parsed.metadata, parsed.temperature) == ("Be brief.", {"k": "v"}, 0.3)
    assert parsed.usage.input_tokens == 50 and parsed.usage.output_tokens == 20 and parsed.usage.total_tokens == 70
    assert parsed.usage.input_tokens_details.cached_tokens == 0
    assert parsed.usage.output_tokens_details.reasoning_tokens == 0
    assert isinstance(response["completed_at"], int)
    assert response["llmproxy"]["wrapper"] == "qwen3" and response["llmproxy"]["notes"] == []


def test_reasoning_then_text_then_calls_named_back_as_offered():
    raw = THINKING + "Let me look.\n" + "\n".join([
        answer_call("exec_command", {"cmd": "ls"}),
        answer_call("mcp__files__list", {"path": "/"}),
        answer_call("apply_patch", {"input": "*** Begin Patch\nadd\n*** End Patch"})])
    response = whole(codex_body(), raw)
    parsed = validated(response)
    reasoning, message, command, listing, patch = response["output"]
    assert reasoning["type"] == "reasoning" and reasoning["id"].startswith("rs_")
    assert reasoning["summary"] == [{"type": "summary_text", "text": "The user wants files."}]
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "The user wants files."}]
    assert reasoning["encrypted_content"] == "llmproxy.reasoning.v1:The user wants files."
    assert message["content"][0]["text"] == "Let me look." and parsed.output_text == "Let me look."
    assert command["id"].startswith("fc_") and command["status"] == "completed" and "namespace" not in command
    assert (command["name"], json.loads(command["arguments"])) == ("exec_command", {"cmd": "ls"})
    assert (listing["name"], listing["namespace"]) == ("list", "mcp__files__")
    assert patch == {"id": patch["id"], "type": "custom_tool_call", "call_id": patch["call_id"],
                     "name": "apply_patch", "input": "*** Begin Patch\nadd\n*** End Patch"}
    assert parsed.status == "completed"  # a pending call ends completed: there is no "requires action"
    assert 0 < parsed.usage.output_tokens_details.reasoning_tokens < parsed.usage.output_tokens
    assert len({item["id"] for item in response["output"]}) == 5
    assert len({item["call_id"] for item in response["output"][2:]}) == 3
    assert parsed.tools and parsed.tool_choice == "auto" and parsed.store is False


def test_calls_alone_have_no_message_and_reasoning_is_sealed_only_when_asked():
    raw = THINKING + answer_call("exec_command", {"cmd": "pwd"})
    response = whole(body("Where am I?", tools=CODEX_TOOLS), raw)
    validated(response)
    assert [item["type"] for item in response["output"]] == ["reasoning", "function_call"]
    assert "encrypted_content" not in response["output"][0]


def test_an_answer_cut_at_the_token_limit_is_incomplete():
    response = whole(body("Tell me a story.", max_output_tokens=5), "Once upon a", "length")
    parsed = validated(response)
    assert parsed.status == "incomplete" and parsed.incomplete_details.reason == "max_output_tokens"
    assert parsed.output_text == "Once upon a" and parsed.max_output_tokens == 5
    assert "completed_at" not in response


def test_an_empty_answer_still_has_its_message():
    response = whole(body("Hi"), "")
    assert validated(response).output_text == ""
    assert [item["type"] for item in response["output"]] == ["message"]


def test_notes_and_what_was_left_out_ride_in_the_llmproxy_field():
    request_body = body([{"role": "user", "content": [{"type": "input_image", "image_url": "data:,"}]}],
                        tools=[{"type": "web_search"}])
    notes = whole(request_body, "I cannot see it.")["llmproxy"]["notes"]
    assert notes[0].startswith("input[0].content[0]: an image replaced")
    assert "'web_search' tool left out" in notes[1]


def test_a_completion_without_llmproxy_info_and_a_call_never_offered():
    request = read_request(body("Hi"))
    message = ResponseMessage(tool_calls=[{"id": "call_1", "function": {"name": "ghost", "arguments": "{}"}}])
    completion = ChatCompletion(model="m", choices=[Choice(message=message, finish_reason="tool_calls")],
                                usage=Usage(prompt_tokens=1, completion_tokens=2, total_tokens=3))
    response = response_object(request, completion, response_id=RESPONSE_ID, created_at=CREATED, completed_at=5)
    validated(response)
    assert response["output"][0]["name"] == "ghost" and response["completed_at"] == 5
    assert response["llmproxy"] == {"notes": []}
    info = ProxyInfo(wrapper="w", backend="b", notes=["from the pipeline"])
    completion.llmproxy = info
    with_info = response_object(request, completion, response_id=RESPONSE_ID, created_at=CREATED)
    assert with_info["llmproxy"]["notes"] == ["from the pipeline"] and info.notes == ["from the pipeline"]


def test_every_kind_of_tool_echoed_is_one_the_sdk_knows():
    tools = [*CODEX_TOOLS, {"type": "file_search", "vector_store_ids": ["vs_1"]}, {"type": "local_shell"},
             {"type": "tool_search"}]
    validated(whole(body("Hi", tools=tools, tool_choice={"type": "allowed_tools", "mode": "auto",
                                                         "tools": [{"type": "function", "name": "exec_command"}]}),
                    "Hello."))


def test_the_sdk_reads_it_over_http():
    response = whole(codex_body(stream=False), THINKING + "Done.")
    parsed = sdk_client(json.dumps(response).encode(), stream=False).responses.create(model="m", input="Hi")
    assert parsed.output_text == "Done." and parsed.id == RESPONSE_ID
    assert parsed.output[0].type == "reasoning" and parsed.output[0].summary[0].text == "The user wants files."
