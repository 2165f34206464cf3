"""The server on the embedded model (SmolLM2-135M in-process, generated grammars), through the
official OpenAI client; and a MemGPT agent conversation replayed for several turns.

The model is small and the CPU slow: prompts are short, temperature 0, and the answers are checked
for what a grammar guarantees (a valid call to an offered function), not for what they say.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import jsonschema
import pytest
from openai import AsyncOpenAI, OpenAI
from server_helpers import MEMGPT_FUNCTIONS, MEMGPT_TOOLS, running

from llmproxy.route import build_route

pytestmark = pytest.mark.model  # every test here runs the embedded model behind a real server

SCHEMAS = {f["name"]: f["parameters"] for f in MEMGPT_FUNCTIONS}
SYSTEM = {"role": "system", "content": "You are Sam, a friendly companion with a memory. Think in five words or fewer."}
SETTINGS = {"temperature": 0, "seed": 1, "max_tokens": 100}


@pytest.fixture(scope="module")
def server():
    routes = {"smollm2": build_route(name="smollm2", wrapper="chatml"), "auto": build_route(name="auto", wrapper="auto")}
    with running(routes) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def client(server) -> OpenAI:
    return OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=600)


def user(text: str) -> dict:
    return {"role": "user", "content": json.dumps({"type": "user_message", "message": text})}


def assert_valid_call(name: str, arguments: str) -> dict:
    assert name in SCHEMAS
    parsed = json.loads(arguments)
    jsonschema.validate(parsed, SCHEMAS[name])
    return parsed


def test_tools_required(client):
    response = client.chat.completions.create(model="smollm2", messages=[SYSTEM, user("Hi, I am Chad.")],
                                              tools=MEMGPT_TOOLS, tool_choice="required", **SETTINGS)
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert_valid_call(call.function.name, call.function.arguments)
    assert response.usage.prompt_tokens > 100 and response.usage.completion_tokens <= 100
    assert response.llmproxy["grammar"] == "generated"  # the SDK keeps unknown fields


def test_logprobs_from_the_embedded_model(client):
    response = client.chat.completions.create(model="smollm2", messages=[SYSTEM, user("Hi!")], tools=MEMGPT_TOOLS,
                                              tool_choice="required", logprobs=True, top_logprobs=2, **SETTINGS)
    tokens = response.choices[0].logprobs.content
    assert "".join(token.token for token in tokens) == response.llmproxy["raw_output"]
    assert all(token.logprob <= 0 and len(token.top_logprobs) == 2 for token in tokens)


def test_stream_named_legacy_function(client):
    stream = client.chat.completions.create(model="smollm2", messages=[SYSTEM, user("Hi, I am Chad.")],
                                            functions=MEMGPT_FUNCTIONS, function_call={"name": "send_message"},
                                            stream=True, **SETTINGS)
    chunks = list(stream)
    thoughts = [c.choices[0].delta.content for c in chunks if c.choices[0].delta.content]
    assert len(thoughts) > 1  # streamed token by token
    calls = [c.choices[0].delta.function_call for c in chunks if c.choices[0].delta.function_call]
    assert calls[0].name == "send_message"
    assert_valid_call("send_message", "".join(c.arguments for c in calls))
    assert chunks[-1].choices[0].finish_reason == "function_call"


WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}}, "required": ["city"]}


def test_stream_a_call_as_it_is_written_on_the_models_own_template(client):
    chunks = list(client.chat.completions.create(
        model="auto", messages=[{"role": "user", "content": "What is the weather in Paris?"}], stream=True,
        tools=[{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}],
        tool_choice="required", **SETTINGS))
    calls = [c.choices[0].delta.tool_calls[0] for c in chunks if c.choices and c.choices[0].delta.tool_calls]
    assert calls[0].id.startswith("call_") and calls[0].function.name == "get_weather"
    pieces = [call.function.arguments for call in calls if call.function.arguments]
    assert len(pieces) > 2  # token by token, not in one piece once checked
    jsonschema.validate(json.loads("".join(pieces)), WEATHER)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_async_text_answers_one_at_a_time(server):
    async def scenario() -> list:
        async with AsyncOpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=600) as client:
            return await asyncio.gather(
                client.chat.completions.create(model="smollm2", messages=[SYSTEM, {"role": "user", "content": "Hi!"}],
                                               tools=MEMGPT_TOOLS, tool_choice="none", **SETTINGS),
                client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "Say hi."}],
                                               **{**SETTINGS, "max_tokens": 16}),
            )

    for response in asyncio.run(scenario()):
        message = response.choices[0].message
        assert message.content and message.tool_calls is None
        assert response.choices[0].finish_reason in ("stop", "length")


def test_client_that_leaves_frees_the_model(server, client):
    body = {"model": "smollm2", "messages": [SYSTEM, user("Tell me a long story.")], "tools": MEMGPT_TOOLS,
            "stream": True, **SETTINGS, "max_tokens": 400}
    with httpx.stream("POST", server.base_url + "/chat/completions", json=body, timeout=600) as response:
        assert response.status_code == 200
        next(response.iter_lines())
    # The abandoned generation stops and releases the model: the next request is answered normally.
    response = client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "Hi"}],
                                              **{**SETTINGS, "max_tokens": 8})
    assert response.choices[0].message.content


def test_memgpt_agent_conversation(client):
    """MemGPT's loop for several turns: a first message primed to send_message, JSON user events,
    function results, and a heartbeat after a memory edit (MemGPT's heartbeat rule asks for one)."""
    persona = ("You are Sam, MemGPT's default persona. Use send_message to talk to the user. "
               "Think in five words or fewer.\n### Core memory\n<human>Name: Chad</human>")
    history = [
        {"role": "system", "content": persona},
        {"role": "user", "content": json.dumps({"type": "login", "last_login": "Never (first login)"})},
    ]

    def step(choice="auto", **extra) -> tuple[str, dict]:
        response = client.chat.completions.create(model="smollm2", messages=history, functions=MEMGPT_FUNCTIONS,
                                                  function_call=choice, **SETTINGS, **extra)
        message = response.choices[0].message
        assert isinstance(message.content, str) and message.content  # the inner monologue
        call = message.function_call
        arguments = assert_valid_call(call.name, call.arguments)
        history.append({"role": "assistant", "content": message.content,
                        "function_call": {"name": call.name, "arguments": call.arguments}})
        result = json.dumps({"status": "OK", "message": None})
        history.append({"role": "function", "name": call.name, "content": result})
        return call.name, arguments

    assert step(extra_body={"first_message": True})[0] == "send_message"
    history.append(user("I love hiking in the Alps."))
    name, arguments = step({"name": "core_memory_append"})
    assert name == "core_memory_append" and arguments["request_heartbeat"] is True
    history.append({"role": "user", "content": json.dumps({"type": "heartbeat", "reason": "request_heartbeat"})})
    step()
    history.append(user("What do you remember about me?"))
    step()
    assert sum(message["role"] == "assistant" for message in history) >= 4
