"""The server through the official OpenAI client, against a fake llama.cpp server and an in-process
backend: tools and legacy functions, every tool_choice, streaming and not, sync and async."""

from __future__ import annotations

import asyncio
import json
import logging
import re

import httpx
import openai
import pytest
from fastapi.middleware.cors import CORSMiddleware
from fastapi.testclient import TestClient
from openai import AsyncOpenAI, OpenAI
from server_helpers import (
    ARGUMENTS,
    MEMGPT_FUNCTIONS,
    MEMGPT_TOOLS,
    TEXT_ANSWER,
    THOUGHTS,
    InstantBackend,
    fake_llamacpp,
    route,
    running,
)

from llmproxy.backends.base import Capabilities
from llmproxy.server.app import create_app

HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def llama():
    with fake_llamacpp() as fake:
        yield fake


@pytest.fixture(autouse=True)
def _reset(llama):
    llama.mode, llama.call, llama.pace, llama.script = "ok", "send_message", 0.0, None
    llama.bodies.clear()


class SchemaBackend(InstantBackend):
    """Constrains output by JSON schema, like Ollama's ``format``; remembers what it was sent."""

    capabilities = Capabilities(json_schema=True)

    def stream(self, prompt, params):
        self.params = params
        return super().stream(prompt, params)


@pytest.fixture(scope="module")
def schema_backend():
    return SchemaBackend()


@pytest.fixture(scope="module")
def server(llama, schema_backend):
    routes = {"llama": route(llama.backend(), "llama"), "instant": route(InstantBackend(), "instant"),
              "schema": route(schema_backend, "schema"), "hermes": route(llama.backend(), "hermes", wrapper="hermes")}
    with running(routes) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def client(server) -> OpenAI:
    return OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)


def arguments(name: str) -> dict:
    return ARGUMENTS[name]


# --- non-streamed ------------------------------------------------------------------------------


def test_tools_call(client, llama):
    response = client.chat.completions.create(model="llama", messages=HI, tools=MEMGPT_TOOLS)
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == THOUGHTS
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "send_message"
    assert json.loads(call.function.arguments) == arguments("send_message")
    assert choice.message.function_call is None
    assert response.model == "llama"
    assert response.usage.prompt_tokens > 100 and response.usage.completion_tokens > 0
    assert response.usage.total_tokens == response.usage.prompt_tokens + response.usage.completion_tokens
    sent = llama.bodies[-1]
    assert "root ::=" in sent["grammar"]  # grammar "auto" on a backend that takes grammars
    assert sent["prompt"].endswith('<|im_start|>assistant\n{\n  "function":')


def test_logprobs_through_the_server(client, llama):
    response = client.chat.completions.create(model="llama", messages=HI, tools=MEMGPT_TOOLS, logprobs=True,
                                              top_logprobs=1)
    tokens = response.choices[0].logprobs.content
    assert "".join(token.token for token in tokens) == response.llmproxy["raw_output"]
    assert all(token.logprob == -0.5 and token.top_logprobs[0].token == token.token for token in tokens)
    assert llama.bodies[-1]["stream"] is False and llama.bodies[-1]["n_probs"] == 1


def test_legacy_functions_call(client):
    response = client.chat.completions.create(model="llama", messages=HI, functions=MEMGPT_FUNCTIONS)
    choice = response.choices[0]
    assert choice.finish_reason == "function_call"
    assert choice.message.tool_calls is None
    assert choice.message.function_call.name == "send_message"
    assert json.loads(choice.message.function_call.arguments) == arguments("send_message")


@pytest.mark.parametrize("tool_choice", ["auto", "required"])
def test_tool_choice_auto_and_required(client, tool_choice):
    response = client.chat.completions.create(model="llama", messages=HI, tools=MEMGPT_TOOLS, tool_choice=tool_choice)
    assert response.choices[0].message.tool_calls[0].function.name == "send_message"


def test_tool_choice_named_primes_the_answer(client, llama):
    choice = {"type": "function", "function": {"name": "core_memory_append"}}
    response = client.chat.completions.create(model="llama", messages=HI, tools=MEMGPT_TOOLS, tool_choice=choice)
    (call,) = response.choices[0].message.tool_calls
    assert call.function.name == "core_memory_append"
    assert json.loads(call.function.arguments) == arguments("core_memory_append")
    assert llama.bodies[-1]["prompt"].endswith('"function": "core_memory_append",')


def test_tool_choice_none_answers_in_text(client, llama):
    response = client.chat.completions.create(model="llama", messages=HI, tools=MEMGPT_TOOLS, tool_choice="none")
    choice = response.choices[0]
    assert (choice.message.content, choice.message.tool_calls, choice.finish_reason) == (TEXT_ANSWER, None, "stop")
    assert "grammar" not in llama.bodies[-1]


@pytest.mark.parametrize("function_call", ["auto", {"name": "pause_heartbeats"}, "none"])
def test_legacy_function_call_choices(client, function_call):
    response = client.chat.completions.create(model="llama", messages=HI, functions=MEMGPT_FUNCTIONS,
                                              function_call=function_call)
    message = response.choices[0].message
    if function_call == "none":
        assert message.content == TEXT_ANSWER and message.function_call is None
    else:
        expected = "send_message" if function_call == "auto" else "pause_heartbeats"
        assert message.function_call.name == expected
        assert json.loads(message.function_call.arguments) == arguments(expected)


def test_no_functions_is_plain_chat(client):
    response = client.chat.completions.create(model="instant", messages=HI)
    assert response.choices[0].message.content == TEXT_ANSWER
    assert response.choices[0].finish_reason == "stop"


def test_request_parameters_reach_the_backend(client, llama):
    client.chat.completions.create(model="llama", messages=HI, tools=MEMGPT_TOOLS, max_tokens=77, temperature=0.3,
                                   seed=42, stop=["###"])
    sent = llama.bodies[-1]
    assert (sent["n_predict"], sent["temperature"], sent["seed"]) == (77, 0.3, 42)
    assert "###" in sent["stop"] and "<|im_end|>" in sent["stop"]


def test_first_message_extension(client, llama):
    events = [{"role": "system", "content": "You are Sam."},
              {"role": "user", "content": json.dumps({"type": "login", "last_login": "Never"})}]
    response = client.chat.completions.create(model="llama", messages=events, functions=MEMGPT_FUNCTIONS,
                                              extra_body={"first_message": True})
    assert response.choices[0].message.function_call.name == "send_message"
    assert llama.bodies[-1]["prompt"].endswith('"function": "send_message",')


def test_model_omitted_uses_the_first_route(server, llama):
    response = httpx.post(f"{server.base_url}/chat/completions", json={"messages": HI, "tools": MEMGPT_TOOLS})
    assert response.status_code == 200 and response.json()["model"] == "llama"


# --- streamed ----------------------------------------------------------------------------------


def test_stream_tools_thoughts_first_then_exact_arguments(client, llama):
    llama.pace = 0.02  # tokens a little apart, as a model writes them
    chunks = list(client.chat.completions.create(model="llama", messages=HI, tools=MEMGPT_TOOLS, stream=True,
                                                 stream_options={"include_usage": True}))
    deltas = [chunk.choices[0].delta for chunk in chunks if chunk.choices]
    assert deltas[0].role == "assistant"
    contents = [d.content for d in deltas if d.content]
    assert len(contents) > 3  # the thoughts arrive piece by piece, as generated
    assert "".join(contents) == THOUGHTS
    calls = [d.tool_calls[0] for d in deltas if d.tool_calls]
    assert deltas.index(next(d for d in deltas if d.tool_calls)) > max(i for i, d in enumerate(deltas) if d.content)
    assert calls[0].id.startswith("call_") and calls[0].function.name == "send_message"
    assert json.loads("".join(c.function.arguments for c in calls)) == arguments("send_message")
    finishing = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert [c.choices[0].finish_reason for c in finishing] == ["tool_calls"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0


def test_stream_joined_arguments_equal_the_non_streamed_ones(client):
    whole = client.chat.completions.create(model="llama", messages=HI, tools=MEMGPT_TOOLS)
    with client.chat.completions.stream(model="llama", messages=HI, tools=MEMGPT_TOOLS) as stream:
        final = stream.get_final_completion()
    streamed, full = final.choices[0].message, whole.choices[0].message
    assert streamed.tool_calls[0].function.arguments == full.tool_calls[0].function.arguments
    assert streamed.content == full.content == THOUGHTS
    assert final.choices[0].finish_reason == "tool_calls"


WEATHER_TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}}]
TWO_CALLS = ('Checking both.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris \\u00e9", "days":2}}\n'
             '</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Nice"}}\n</tool_call>')


def test_stream_parallel_calls_argument_by_argument(client, llama):
    llama.script, llama.pace = TWO_CALLS, 0.01
    whole = client.chat.completions.create(model="hermes", messages=HI, tools=WEATHER_TOOLS)
    chunks = list(client.chat.completions.create(model="hermes", messages=HI, tools=WEATHER_TOOLS, stream=True))
    assert llama.bodies[-1]["grammar"]  # the grammar writes the calls: they stream as they come
    calls = [c.choices[0].delta.tool_calls[0] for c in chunks if c.choices and c.choices[0].delta.tool_calls]
    opening = [c for c in calls if c.id]
    assert [(c.index, c.function.name) for c in opening] == [(0, "get_weather"), (1, "get_weather")]
    assert len({c.id for c in opening}) == 2
    expected = [call.function.arguments for call in whole.choices[0].message.tool_calls]
    assert expected == ['{"city": "Paris \u00e9", "days": 2}', '{"city": "Nice"}']
    for index, arguments in enumerate(expected):
        pieces_of_call = [c.function.arguments for c in calls if c.index == index and c.function.arguments]
        assert len(pieces_of_call) > 3 and "".join(pieces_of_call) == arguments
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content == whole.choices[0].message.content == "Checking both."
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    with client.chat.completions.stream(model="hermes", messages=HI, tools=WEATHER_TOOLS) as stream:
        final = stream.get_final_completion().choices[0].message
    assert [c.function.arguments for c in final.tool_calls] == expected


def test_stream_legacy_function_call(client):
    chunks = list(client.chat.completions.create(model="llama", messages=HI, functions=MEMGPT_FUNCTIONS,
                                                 function_call={"name": "archival_memory_search"}, stream=True))
    calls = [c.choices[0].delta.function_call for c in chunks if c.choices[0].delta.function_call]
    assert calls[0].name == "archival_memory_search"
    assert json.loads("".join(c.arguments for c in calls)) == arguments("archival_memory_search")
    assert chunks[-1].choices[0].finish_reason == "function_call"
    assert all(c.usage is None for c in chunks)


def test_stream_plain_text(client):
    chunks = list(client.chat.completions.create(model="llama", messages=HI, tools=MEMGPT_TOOLS,
                                                 tool_choice="none", stream=True))
    text = [c.choices[0].delta.content for c in chunks if c.choices[0].delta.content]
    assert len(text) > 1 and "".join(text) == TEXT_ANSWER
    assert chunks[-1].choices[0].finish_reason == "stop"


# --- async -------------------------------------------------------------------------------------


def test_async_client_concurrent_requests(server):
    async def scenario() -> None:
        client = AsyncOpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
        plain = [client.chat.completions.create(model=model, messages=HI, tools=MEMGPT_TOOLS)
                 for model in ("llama", "instant") * 3]
        responses = await asyncio.gather(*plain)
        assert {r.choices[0].message.tool_calls[0].function.name for r in responses} == {"send_message"}
        stream = await client.chat.completions.create(model="llama", messages=HI, functions=MEMGPT_FUNCTIONS,
                                                      stream=True)
        arguments_text = "".join([c.choices[0].delta.function_call.arguments async for c in stream
                                  if c.choices and c.choices[0].delta.function_call])
        assert json.loads(arguments_text) == arguments("send_message")
        await client.close()

    asyncio.run(scenario())


# --- the other endpoints -----------------------------------------------------------------------


def test_text_completion(client, llama):
    response = client.completions.create(model="llama", prompt="Once upon a time", max_tokens=12, stop=["\n\n"])
    assert response.object == "text_completion" and response.choices[0].text == TEXT_ANSWER
    assert response.choices[0].finish_reason == "stop" and response.usage.completion_tokens > 0
    sent = llama.bodies[-1]
    assert (sent["prompt"], sent["n_predict"], sent["stop"]) == ("Once upon a time", 12, ["\n\n"])
    assert "grammar" not in sent


def test_text_completion_stream_with_grammar(client, llama):
    chunks = list(client.completions.create(model="llama", prompt="Some JSON please", stream=True,
                                            extra_body={"grammar": "json"}, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == TEXT_ANSWER
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage.prompt_tokens > 0
    assert llama.bodies[-1]["grammar"].startswith("# Any JSON object")


@pytest.mark.parametrize("response_format", [
    {"type": "json_object"},
    {"type": "json_schema", "json_schema": {"name": "pick", "schema": {
        "type": "object", "properties": {"colour": {"enum": ["red", "blue"]}}, "required": ["colour"]}}},
])
def test_response_format_constrains_text_answers(client, llama, response_format):
    with pytest.raises(openai.UnprocessableEntityError, match="response_format"):  # the fake ignores grammars,
        client.chat.completions.create(model="llama", messages=HI, response_format=response_format)  # answers are checked
    grammar = llama.bodies[-1]["grammar"]
    if response_format["type"] == "json_object":
        assert grammar.startswith("# Any JSON object")
    else:
        assert '"\\"red\\""' in grammar  # the enum, as a GBNF literal


def test_response_format_as_json_schema_for_schema_backends(client, schema_backend):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
    with pytest.raises(openai.UnprocessableEntityError, match="response_format"):  # the fake answers in prose
        client.chat.completions.create(model="schema", messages=HI, response_format={
            "type": "json_schema", "json_schema": {"name": "ok", "schema": schema}})
    assert schema_backend.params.json_schema == schema and schema_backend.params.grammar is None
    client.completions.create(model="schema", prompt="Hi", extra_body={"response_format": {"type": "json_object"}})
    assert schema_backend.params.json_schema == {"type": "object"}


def test_tool_schema_keywords_reach_a_schema_backend_as_they_are(client, schema_backend):
    keywords = {"type": "object", "required": ["level", "code"], "properties": {
        "level": {"type": "integer", "minimum": 0, "maximum": 100},
        "code": {"type": "string", "minLength": 2, "maxLength": 4, "pattern": "^[A-Z]+$"},
        "when": {"type": "string", "format": "date"},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "minItems": 1, "maxItems": 2}}}
    tool = {"type": "function", "function": {"name": "set_level", "parameters": keywords}}
    with pytest.raises(openai.APIStatusError):  # the fake answers with a send_message call: not offered
        client.chat.completions.create(model="schema", messages=HI, tools=[tool], tool_choice="required")
    sent = schema_backend.params.json_schema
    (variant,) = sent["anyOf"] if "anyOf" in sent else [sent]
    params = variant["properties"]["params"]  # chatml puts the inner thoughts in them too
    assert {name: rule for name, rule in params["properties"].items() if name != "inner_thoughts"} == \
        keywords["properties"]  # every keyword, for the backend to constrain with
    assert set(keywords["required"]) <= set(params["required"])


def test_response_format_a_backend_cannot_constrain_is_still_checked(client):
    # The backend takes no grammar or schema: its answer is repaired and checked (here: prose, refused).
    with pytest.raises(openai.UnprocessableEntityError, match="not the JSON the response_format asks for"):
        client.chat.completions.create(model="instant", messages=HI, response_format={"type": "json_object"})
    with pytest.raises(openai.BadRequestError) as refused:
        client.completions.create(model="schema", prompt="Hi", extra_body={"grammar": "json"})
    assert refused.value.body["param"] == "grammar"


def test_models_list(client):
    models = client.models.list()
    assert [m.id for m in models.data] == ["llama", "instant", "schema", "hermes"]
    assert all(m.object == "model" and m.owned_by == "llmproxy" for m in models.data)


def test_model_retrieve(client):
    model = client.models.retrieve("instant")
    assert (model.id, model.object, model.owned_by) == ("instant", "model", "llmproxy")
    assert model.model_extra["llmproxy"]["backend"] == "instant"
    with pytest.raises(openai.NotFoundError) as refused:
        client.models.retrieve("gpt-4o-mini")
    assert refused.value.body["code"] == "model_not_found" and "llama, instant, schema" in refused.value.body["message"]


def test_model_retrieve_takes_names_with_slashes():
    with running({"org/model": route(InstantBackend(), "org/model")}) as proxy:
        client = OpenAI(base_url=proxy.base_url, api_key="unused", max_retries=0)
        assert client.models.retrieve("org/model").id == "org/model"


def test_health_probes_the_backends(server):
    response = httpx.get(server.base_url.removesuffix("/v1") + "/health")
    assert response.status_code == 200
    # Without an API key every caller is a stranger: the state, not the backends' addresses.
    names = ("llama", "instant", "schema", "hermes")
    assert response.json() == {"status": "ok", "models": {name: {"up": True} for name in names}}


def test_docs_and_openapi(server):
    root = server.base_url.removesuffix("/v1")
    assert httpx.get(root + "/docs").status_code == 200
    document = httpx.get(root + "/openapi.json").json()
    body = document["paths"]["/v1/chat/completions"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/ChatRequest"}
    assert "messages" in document["components"]["schemas"]["ChatRequest"]["properties"]


def test_served_below_a_path_prefix():
    """Behind a reverse proxy that mounts the server at /proxy (uvicorn --root-path /proxy)."""
    app = create_app({"instant": route(InstantBackend(), "instant")})
    with TestClient(app, root_path="/proxy", base_url="http://localhost") as local:
        answer = local.post("/v1/chat/completions", json={"messages": HI, "tools": MEMGPT_TOOLS})
        assert answer.status_code == 200, answer.text
        assert answer.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "send_message"
        assert local.get("/v1/models").json()["data"][0]["id"] == "instant"


def test_middleware_added_to_the_app_applies_to_every_endpoint():
    app = create_app({"instant": route(InstantBackend(), "instant")})
    app.add_middleware(CORSMiddleware, allow_origins=["https://agent.example"])
    with TestClient(app, base_url="http://localhost") as local:
        answer = local.post("/v1/chat/completions", json={"messages": HI, "tools": MEMGPT_TOOLS},
                            headers={"Origin": "https://agent.example"})
        assert answer.status_code == 200, answer.text
        assert answer.headers["access-control-allow-origin"] == "https://agent.example"


# --- API key -----------------------------------------------------------------------------------


def test_api_key_required_when_set():
    with running({"instant": route(InstantBackend(), "instant")}, api_key="s3cret") as proxy:
        with pytest.raises(openai.AuthenticationError) as refused:
            OpenAI(base_url=proxy.base_url, api_key="wrong", max_retries=0).models.list()
        assert refused.value.body["code"] == "invalid_api_key"
        with pytest.raises(openai.AuthenticationError):
            OpenAI(base_url=proxy.base_url, api_key="wrong", max_retries=0).models.retrieve("instant")
        good = OpenAI(base_url=proxy.base_url, api_key="s3cret", max_retries=0)
        assert good.chat.completions.create(model="instant", messages=HI).choices[0].message.content == TEXT_ANSWER
        health = proxy.base_url.removesuffix("/v1") + "/health"
        assert httpx.get(health).status_code == 401
        answer = httpx.get(health, headers={"Authorization": "Bearer s3cret"})
        assert answer.status_code == 200
        assert answer.json()["models"]["instant"] == {"backend": "instant", "up": True, "model": None,
                                                      "context_window": None, "detail": None}


# --- the request log ---------------------------------------------------------------------------


def test_one_log_line_per_request(client, caplog):
    with caplog.at_level(logging.INFO, logger="llmproxy.server"):
        client.chat.completions.create(model="llama", messages=HI, tools=MEMGPT_TOOLS)
        list(client.chat.completions.create(model="llama", messages=HI, tools=MEMGPT_TOOLS, stream=True))
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model="nope", messages=HI)
    lines = [r.getMessage() for r in caplog.records if r.name == "llmproxy.server"]
    assert len(lines) == 3
    assert re.fullmatch(r"chat\.completions id=req_[0-9a-f]{24} model=llama backend=llamacpp stream=no status=200 "
                        r"tokens=\d+\+\d+ repairs=\S+ grammar=generated attempts=1 fallbacks=- \d+ms", lines[0]), lines[0]
    assert "stream=yes status=200" in lines[1] and "grammar=generated" in lines[1]
    assert "model=- backend=- stream=no status=404 error=model_not_found" in lines[2]
    assert len({line.split()[1] for line in lines}) == 3  # an id each


def test_debug_log_has_the_prompt_and_raw_output(client, caplog):
    with caplog.at_level(logging.DEBUG, logger="llmproxy.server"):
        client.chat.completions.create(model="llama", messages=HI, tools=MEMGPT_TOOLS)
    debug = "\n".join(r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG)
    assert "<|im_start|>user\nhi<|im_end|>" in debug  # the rendered prompt
    assert '"inner_thoughts": "Chad said' in debug  # the raw output
