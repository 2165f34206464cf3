"""Both new faces over every call-syntax family: parallel calls, reasoning and a JSON-schema answer, each
answer written by a scripted backend in the family's own syntax (as the syntax writes a past turn), read
back through the official SDKs, whole and streamed. The faces translate; the syntaxes do the reading:
this checks that nothing of a family is lost on the way.
"""

from __future__ import annotations

import json

import anthropic
import openai
import pytest
from server_helpers import ScriptedBackend, route, running

from llmproxy.prompts import load_wrapper
from llmproxy.types import FunctionCall

# One wrapper per call syntax (and the two reasoning families).
WRAPPERS = ["hermes", "mistral", "llama3.1", "chatml-json", "mistral-v11", "qwen3-coder", "llama3.2", "qwen3",
            "magistral"]
REASONING = {"qwen3": ("<think>", "</think>"), "magistral": ("[THINK]", "[/THINK]")}
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
CALLS = [("get_weather", {"city": "Oslo"}), ("get_time", {"city": "Rome"})]


def family_calls(wrapper: str) -> list[tuple[str, dict]]:
    """The calls a family writes at once: both, or the first where it makes one call a turn (Llama 3.1)."""
    return CALLS if load_wrapper(wrapper).wrapper.spec.syntax.parallel_calls else CALLS[:1]


def written(wrapper: str, calls=None, thought: str | None = None) -> str:
    """What a model of ``wrapper``'s family writes to make ``calls`` (after its reasoning, if any)."""
    syntax = load_wrapper(wrapper).wrapper.spec.syntax
    calls = family_calls(wrapper) if calls is None else calls
    turn = syntax.render_turn("", [FunctionCall(name=name, arguments=json.dumps(args)) for name, args in calls])
    text = "\n".join(turn.calls)
    if thought is not None:
        opening, closing = REASONING[wrapper]
        text = f"{opening}{thought}{closing}\n\n{text}"
    return text


@pytest.fixture(scope="module")
def server():
    backend = ScriptedBackend("unused")
    with running({name: route(backend, name, wrapper=name) for name in WRAPPERS}) as running_server:
        running_server.backend = backend
        yield running_server


def openai_client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)


def anthropic_client(server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.base_url.removesuffix("/v1"), api_key="unused", max_retries=0)


def responses_calls(response) -> list[tuple[str, dict]]:
    return [(item.name, json.loads(item.arguments)) for item in response.output if item.type == "function_call"]


def messages_calls(message) -> list[tuple[str, dict]]:
    return [(block.name, block.input) for block in message.content if block.type == "tool_use"]


@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_parallel_calls_through_the_responses_api(server, wrapper):
    server.backend.script = written(wrapper)
    tools = [{"type": "function", "name": name, "parameters": CITY} for name in ("get_weather", "get_time")]
    api = openai_client(server)
    whole = api.responses.create(model=wrapper, input="Oslo weather, Rome time?", tools=tools)
    with api.responses.stream(model=wrapper, input="Oslo weather, Rome time?", tools=tools) as stream:
        streamed = stream.get_final_response()
    assert responses_calls(whole) == responses_calls(streamed) == family_calls(wrapper)


@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_parallel_calls_through_the_messages_api(server, wrapper):
    server.backend.script = written(wrapper)
    tools = [{"name": name, "input_schema": CITY} for name in ("get_weather", "get_time")]
    api = anthropic_client(server)
    question = [{"role": "user", "content": "Oslo weather, Rome time?"}]
    whole = api.messages.create(model=wrapper, max_tokens=200, messages=question, tools=tools)
    with api.messages.stream(model=wrapper, max_tokens=200, messages=question, tools=tools) as stream:
        streamed = stream.get_final_message()
    assert messages_calls(whole) == messages_calls(streamed) == family_calls(wrapper)
    assert whole.stop_reason == streamed.stop_reason == "tool_use"


@pytest.mark.parametrize("wrapper", sorted(REASONING))
def test_reasoning_comes_back_in_each_faces_own_form_and_is_replayed(server, wrapper):
    server.backend.script = written(wrapper, CALLS[:1], thought="Oslo first.")
    tools = [{"type": "function", "name": "get_weather", "parameters": CITY}]
    first = openai_client(server).responses.create(model=wrapper, input="Weather?", tools=tools,
                                                   include=["reasoning.encrypted_content"])
    reasoning, call = first.output
    assert reasoning.type == "reasoning" and reasoning.summary[0].text == "Oslo first."
    server.backend.script = "Sunny."
    history = [{"role": "user", "content": "Weather?"}, *[item.model_dump() for item in first.output],
               {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}]
    openai_client(server).responses.create(model=wrapper, input=history, tools=tools)
    if wrapper == "qwen3":  # its template replays reasoning in the tool loop, as Qwen 3's does
        assert "Oslo first." in server.backend.prompts[-1]

    server.backend.script = written(wrapper, CALLS[:1], thought="Oslo first.")
    message = anthropic_client(server).messages.create(
        model=wrapper, max_tokens=100, messages=[{"role": "user", "content": "Weather?"}],
        tools=[{"name": "get_weather", "input_schema": CITY}], thinking={"type": "enabled", "budget_tokens": 1024})
    thinking, use = message.content
    assert (thinking.type, thinking.thinking, use.name) == ("thinking", "Oslo first.", "get_weather")


SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "temperature": {"type": "integer"}},
          "required": ["city", "temperature"], "additionalProperties": False}


@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_a_json_schema_answer_through_both_faces(server, wrapper):
    answer = '{"city": "Oslo", "temperature": 4}'
    server.backend.script = f"{REASONING[wrapper][0]}Easy.{REASONING[wrapper][1]}{answer}" if wrapper in REASONING \
        else answer
    response = openai_client(server).responses.create(
        model=wrapper, input="Oslo?", text={"format": {"type": "json_schema", "name": "weather", "schema": SCHEMA}})
    assert json.loads(response.output_text) == {"city": "Oslo", "temperature": 4}
    assert "temperature" in server.backend.params[-1].grammar
    message = anthropic_client(server).messages.create(
        model=wrapper, max_tokens=100, messages=[{"role": "user", "content": "Oslo?"}],
        extra_body={"output_config": {"format": {"type": "json_schema", "schema": SCHEMA}}})
    assert json.loads(message.content[-1].text) == {"city": "Oslo", "temperature": 4}
    assert "temperature" in server.backend.params[-1].grammar
