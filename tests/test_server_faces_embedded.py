"""The Responses and Messages faces on the embedded model (SmolLM2-135M in-process, wrapper "auto": its
own ChatML template, taught the json call syntax), through the official SDKs.

The model is small and the CPU slow: prompts are short and answers are checked for what the grammar
guarantees (a call to the function the choice allows, schema-valid arguments, a schema-valid JSON
answer), never for what they say.
"""

from __future__ import annotations

import json

import anthropic
import jsonschema
import openai
import pytest
from server_helpers import running

from llmproxy.route import build_route

pytestmark = pytest.mark.model

CITY = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40},
                                         "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}
TIME = {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 40}}, "required": ["zone"],
        "additionalProperties": False}
WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                                    "temperature": {"type": "integer", "minimum": -50, "maximum": 50}},
                  "required": ["city", "temperature"], "additionalProperties": False}
QUESTION = "What's the weather in Paris, in celsius?"


@pytest.fixture(scope="module")
def server():
    with running({"smol": build_route(name="smol", wrapper="auto")}, default_model="smol") as proxy:
        yield proxy


@pytest.fixture(scope="module")
def responses(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=600)


@pytest.fixture(scope="module")
def messages(server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.base_url.removesuffix("/v1"), api_key="unused", max_retries=0,
                               timeout=600)


@pytest.mark.parametrize("tool_choice, allowed", [("required", {"get_weather", "get_time"}),
                                                  ({"type": "function", "name": "get_time"}, {"get_time"})])
def test_a_responses_call_on_the_embedded_model_is_valid_and_allowed(responses, tool_choice, allowed):
    tools = [{"type": "function", "name": "get_weather", "parameters": CITY},
             {"type": "function", "name": "get_time", "parameters": TIME}]
    response = responses.responses.create(model="gpt-5-codex", input=QUESTION, tools=tools, tool_choice=tool_choice,
                                          temperature=0, max_output_tokens=80)
    calls = [item for item in response.output if item.type == "function_call"]
    assert calls and response.status == "completed"
    for call in calls:
        assert call.name in allowed
        jsonschema.validate(json.loads(call.arguments), CITY if call.name == "get_weather" else TIME)


def test_a_streamed_messages_tool_use_on_the_embedded_model_is_the_chosen_tool_with_valid_input(messages):
    tools = [{"name": "get_weather", "input_schema": CITY}, {"name": "get_time", "input_schema": TIME}]
    with messages.messages.stream(model="claude-haiku-4-5", max_tokens=80, tools=tools,
                                  tool_choice={"type": "tool", "name": "get_weather"},
                                  messages=[{"role": "user", "content": QUESTION}]) as stream:
        message = stream.get_final_message()
    uses = [block for block in message.content if block.type == "tool_use"]
    assert uses and message.stop_reason == "tool_use"
    for use in uses:
        assert use.name == "get_weather"
        jsonschema.validate(use.input, CITY)


def test_a_json_schema_answer_through_both_faces_on_the_embedded_model(responses, messages):
    response = responses.responses.create(
        model="smol", input="The weather in Paris as JSON.", temperature=0, max_output_tokens=60,
        text={"format": {"type": "json_schema", "name": "weather", "schema": WEATHER_SCHEMA, "strict": True}})
    jsonschema.validate(json.loads(response.output_text), WEATHER_SCHEMA)
    message = messages.messages.create(
        model="smol", max_tokens=60, messages=[{"role": "user", "content": "The weather in Paris as JSON."}],
        extra_body={"output_config": {"format": {"type": "json_schema", "schema": WEATHER_SCHEMA}}})
    jsonschema.validate(json.loads(message.content[-1].text), WEATHER_SCHEMA)
