"""tool_choice "auto" decided as ``choose`` on the default server (``llmproxy serve``: the embedded SmolLM2):
agent tool loops that end - the openai SDK's own and openai-agents' - and a plain answer streamed as it
is written.

What the grammar guarantees is asserted as such: after the results of its call the answer is text, and
every call is valid. Whether the model calls at all is its first step's choice, which reads the raw
logits and so is the same for every seed: the requests here are ones whose choice is clear (the weather
question: starting a call is e**1.1 likelier than it must be; the poem: e**2.3 less likely).
"""

from __future__ import annotations

import asyncio
import json
import time

import jsonschema
import pytest
from openai import AsyncOpenAI, OpenAI
from server_helpers import running

from llmproxy.server.config import serving

pytestmark = pytest.mark.model

WEATHER = {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"]}}
QUESTION = [{"role": "user", "content": "What's the weather in Paris, in celsius?"}]
POEM = [{"role": "user", "content": "Write a two-line poem about the sea."}]
OTHER_TOOLS = [{"type": "function", "function": {"name": name, "description": description, "parameters": {
    "type": "object", "properties": {"to": {"type": "string"}}, "required": ["to"]}}}
    for name, description in (("send_email", "Send an email."), ("get_time", "Current local time in a time zone."))]


@pytest.fixture(scope="module")
def server():
    """What ``llmproxy serve`` serves with no options."""
    served = serving(None, {})
    assert [route.decide for route in served.routes.values()] == ["choose"]
    with running(served.routes, default_model=served.server.default_model, limits=served.limits) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def client(server) -> OpenAI:
    return OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=600)


def test_the_openai_sdk_tool_loop_calls_then_answers(client):
    tools = [{"type": "function", "function": WEATHER}]
    for seed in (1, 2):
        first = client.chat.completions.create(model="any", messages=QUESTION, tools=tools, seed=seed, max_tokens=128)
        assert first.choices[0].finish_reason == "tool_calls"
        (call,) = first.choices[0].message.tool_calls
        assert call.function.name == "get_weather"
        jsonschema.validate(json.loads(call.function.arguments), WEATHER["parameters"])
        turn = [*QUESTION, first.choices[0].message.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 24 C."}]
        final = client.chat.completions.create(model="any", messages=turn, tools=tools, seed=seed, max_tokens=128)
        assert final.choices[0].message.tool_calls is None  # right after its call's result: an answer
        assert final.choices[0].message.content.strip()


def test_an_openai_agents_loop_runs_the_tool_and_ends_with_text(server):
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
    from agents.items import MessageOutputItem, ToolCallItem, ToolCallOutputItem

    set_tracing_disabled(True)
    asked: list[str] = []

    @function_tool
    def get_weather(city: str, unit: str) -> str:
        """Today's weather in a city, in celsius or fahrenheit."""
        asked.append(city)
        return f"Sunny and 24 degrees {unit} in {city}."

    async def run():
        client = AsyncOpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
        try:
            agent = Agent(name="assistant", instructions="Answer in one sentence.", tools=[get_weather],
                          model=OpenAIChatCompletionsModel(model="local", openai_client=client))
            return await Runner.run(agent, QUESTION[0]["content"], max_turns=4)
        finally:
            await client.close()

    result = asyncio.run(run())
    kinds = [type(item) for item in result.new_items]
    assert kinds == [ToolCallItem, ToolCallOutputItem, MessageOutputItem] and asked
    assert result.final_output.strip()


def test_a_chosen_answer_streams_as_content_while_it_is_written_and_as_it_is_whole(client):
    asked = {"model": "any", "messages": POEM, "tools": OTHER_TOOLS, "max_tokens": 64}
    # The embedded model reuses the prompt it last read; one read afresh gives logits a little apart, and
    # so, sampled, another text for the same seed (streamed or not, decided freely or chosen). Read once
    # first, the prompt is then reused alike by both.
    client.chat.completions.create(**asked, seed=0)
    for seed in (1, 2):
        whole = client.chat.completions.create(**asked, seed=seed).choices[0].message
        assert whole.tool_calls is None and whole.content
        arrivals: list[tuple[float, str]] = []
        for chunk in client.chat.completions.create(**asked, seed=seed, stream=True):
            delta = chunk.choices[0].delta if chunk.choices else None
            assert delta is None or not delta.tool_calls
            if delta is not None and delta.content:
                arrivals.append((time.monotonic(), delta.content))
        assert "".join(text for _, text in arrivals) == whole.content  # plain text: no JSON escapes to undo
        assert len(arrivals) >= 5 and arrivals[-1][0] - arrivals[0][0] > 0.1  # piece by piece, not at the end


RANKED = [
    ("Convert 250 US dollars to euros.", "convert_currency", [
        ("add_numbers", "Add two numbers."), ("convert_currency", "Convert an amount between currencies."),
        ("get_time", "Current local time in a time zone.")]),
    ("Search the web for news about the James Webb telescope.", "web_search", [
        ("get_weather", "Current weather for a city."), ("web_search", "Search the web.")]),
    ("Where is my parcel 1Z999AA1?", "track_package", [
        ("get_weather", "Current weather for a city."), ("track_package", "Where a parcel is, by tracking number."),
        ("lookup_contact", "Find a contact's phone number.")]),
]


@pytest.mark.parametrize(("request_text", "expected", "functions"), RANKED)
def test_the_ranker_puts_the_function_a_request_is_for_first_by_a_clear_margin(request_text, expected, functions):
    # Log-likelihoods read from the raw logits (no sampling); the margins measured were 9.6 nats and more,
    # so 2 leaves room for another CPU's arithmetic.
    from llmproxy.backends._function_ranking import FunctionRanker
    from llmproxy.backends.embedded import default_model_path

    ranker = FunctionRanker(str(default_model_path()), threads=2)
    try:
        scores = dict(zip((name for name, _ in functions), ranker.scores(request_text, functions)))
    finally:
        ranker.close()
    best = max(scores, key=scores.get)
    assert best == expected
    assert scores[best] - max(score for name, score in scores.items() if name != best) > 2.0


def test_a_call_among_several_tools_is_to_the_one_the_request_is_for(client):
    tools = [*OTHER_TOOLS, {"type": "function", "function": WEATHER}]
    for seed in (1, 2):
        answer = client.chat.completions.create(model="any", messages=QUESTION, tools=tools, seed=seed, max_tokens=96)
        (call,) = answer.choices[0].message.tool_calls
        assert call.function.name == "get_weather"
        jsonschema.validate(json.loads(call.function.arguments), WEATHER["parameters"])
