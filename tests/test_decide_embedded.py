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
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from llama_cpp import Llama
from openai import AsyncOpenAI, OpenAI
from server_helpers import running

from llmproxy.backends._call_draft import ArgumentsScanner, CallDraft
from llmproxy.backends._function_ranking import HEADING, REQUEST_TOKENS, FunctionRanker
from llmproxy.backends._grammar_sampling import GrammarCheckedLlama
from llmproxy.backends.base import GenerationParams
from llmproxy.backends.embedded import EmbeddedBackend, default_model_path
from llmproxy.evaluation import load_scenarios
from llmproxy.proxy import chat_completion, parse_request, plan
from llmproxy.route import build_route
from llmproxy.server.config import serving

pytestmark = pytest.mark.model
DECISIONS = Path(__file__).parent.parent / "scenarios" / "decisions.jsonl"

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


@pytest.fixture(scope="module")
def model():
    """The embedded model as its backend loads it (a small context: these tests read short texts)."""
    return EmbeddedBackend(context_window=1024)._model.llama


@pytest.fixture(scope="module")
def read_whole():
    """The log-likelihood of a request after a function's heading, read the plain way: heading and request
    in one batch in a fresh context, every place's logits kept - what the ranker must agree with."""
    reference = Llama(model_path=str(default_model_path()), n_ctx=128, logits_all=True, flash_attn=False,
                      n_threads=2, n_threads_batch=2, verbose=False)

    def log_likelihood(request_text: str, name: str, description: str) -> float:
        def tokens(text):
            return reference.tokenize(text.encode(), add_bos=False, special=False)
        heading = tokens(HEADING.format(name=name, description=description))
        asked = tokens(request_text)[:REQUEST_TOKENS]
        reference.reset()
        reference.eval(heading + asked)
        logits = np.asarray(reference.scores[len(heading) - 1:len(heading) + len(asked) - 1], dtype=np.float64)
        log_norm = np.log(np.exp(logits - logits.max(axis=1, keepdims=True)).sum(axis=1)) + logits.max(axis=1)
        return float((logits[np.arange(len(asked)), asked] - log_norm).sum())

    yield log_likelihood
    reference.close()


@pytest.mark.parametrize(("request_text", "expected", "functions"), RANKED)
def test_the_ranker_puts_the_function_a_request_is_for_first_by_a_clear_margin(model, request_text, expected,
                                                                               functions):
    # Log-likelihoods read from the raw logits (no sampling); the margins measured were 9.6 nats and more,
    # so 2 leaves room for another CPU's arithmetic.
    ranker = FunctionRanker(model._model, threads=2)
    try:
        scores = dict(zip((name for name, _ in functions), ranker.scores(request_text, functions)))
    finally:
        ranker.close()
    best = max(scores, key=scores.get)
    assert best == expected
    assert scores[best] - max(score for name, score in scores.items() if name != best) > 2.0


def test_a_heading_read_once_scores_as_if_read_afresh_and_a_changed_one_is_read_again(model, read_whole):
    request_text, _, functions = RANKED[0]
    ranker = FunctionRanker(model._model, threads=2)
    try:
        first = ranker.scores(request_text, functions)
        held = ranker.held_bytes()
        again = ranker.scores(request_text, functions)  # every heading from what was kept
        assert ranker.held_bytes() == held > 0
        changed = [(name, description.replace(".", " quickly.")) for name, description in functions]
        redescribed = ranker.scores(request_text, changed)
        assert ranker.held_bytes() > held  # new headings, read and kept beside the old
    finally:
        ranker.close()
    assert again == first
    assert first == pytest.approx([read_whole(request_text, *f) for f in functions], abs=1e-3)
    assert redescribed == pytest.approx([read_whole(request_text, *f) for f in changed], abs=1e-3)
    assert all(abs(a - b) > 1e-3 for a, b in zip(redescribed, first))  # the kept headings were not read for them


def test_headings_kept_stay_within_their_budget_and_the_dropped_are_read_again(model, read_whole):
    budget = 4 * 1024 * 1024  # room for about six of these SmolLM2 headings (0.6 MB each)
    ranker = FunctionRanker(model._model, threads=2, held_bytes=budget)
    request_text = "Turn the kitchen lights off."
    try:
        for n in range(10):
            functions = [(f"tool_{n}_{k}", f"Does task {k} of set {n}.") for k in range(2)]
            scores = ranker.scores(request_text, functions)
            assert 0 < ranker.held_bytes() <= budget
        first = [(f"tool_0_{k}", f"Does task {k} of set 0.") for k in range(2)]  # dropped long ago
        assert ranker.scores(request_text, first) == pytest.approx(
            [read_whole(request_text, *f) for f in first], abs=1e-3)
    finally:
        ranker.close()
    assert scores == pytest.approx([read_whole(request_text, *f) for f in functions], abs=1e-3)


def test_headings_held_for_one_loaded_model_are_not_another_ones(model):
    other = EmbeddedBackend(context_window=768)._model.llama  # the same file loaded again: another model
    request_text, _, functions = RANKED[1]
    first, second = FunctionRanker(model._model, threads=2), FunctionRanker(other._model, threads=2)
    try:
        first.scores(request_text, functions)
        assert first.held_bytes() > 0 and second.held_bytes() == 0
        assert second.scores(request_text, functions) == pytest.approx(first.scores(request_text, functions), abs=1e-3)
    finally:
        first.close()
        second.close()


def test_a_call_among_several_tools_is_to_the_one_the_request_is_for(client):
    tools = [*OTHER_TOOLS, {"type": "function", "function": WEATHER}]
    for seed in (1, 2):
        answer = client.chat.completions.create(model="any", messages=QUESTION, tools=tools, seed=seed, max_tokens=96)
        (call,) = answer.choices[0].message.tool_calls
        assert call.function.name == "get_weather"
        jsonschema.validate(json.loads(call.function.arguments), WEATHER["parameters"])


# --- a chosen call's known text, read in batches -----------------------------------------------


@pytest.fixture(scope="module")
def route():
    """The library's route on the embedded SmolLM2, deciding as ``llmproxy serve`` does by default."""
    return build_route(decide="choose")


@pytest.fixture
def reads(monkeypatch):
    """Each batch the embedded model reads: how many tokens, and how many of them were a proposed draft."""
    seen: list[tuple[int, int]] = []
    read = GrammarCheckedLlama.eval

    def spy(self, tokens):
        draft = self.draft_model
        seen.append((len(tokens), draft.proposed if isinstance(draft, CallDraft) else 0))
        read(self, tokens)

    monkeypatch.setattr(GrammarCheckedLlama, "eval", spy)
    return seen


def _ask_weather(route, **fields):
    tools = [*OTHER_TOOLS, {"type": "function", "function": WEATHER}]
    return chat_completion(parse_request({"messages": QUESTION, "tools": tools, "max_tokens": 96, **fields}), route)


def test_a_chosen_calls_opening_and_keys_are_read_in_batches_not_a_token_at_a_time(route, reads):
    for seed in (1, 2, 3):
        reads.clear()
        response = _ask_weather(route, seed=seed)
        (call,) = response.choices[0].message.tool_calls
        assert call.function.name == "get_weather"
        jsonschema.validate(json.loads(call.function.arguments), WEATHER["parameters"])
        drafted = [(size, proposed) for size, proposed in reads if proposed]
        assert all(size == proposed + 1 for size, proposed in drafted)  # the token drawn, then a draft
        # The opening ('"name": "get_weather", "arguments": {', 12 tokens or so) and a key at least: the
        # grammar forces both keys' names, so a key's rest is taken once its quote is written.
        assert len(drafted) >= 2
        # After the prompt, a read a token but the last, less the proposed ones the sampler drew.
        assert len(reads) - 1 <= response.usage.completion_tokens - 1 - 8 - 1


@pytest.mark.parametrize("guess", ["opening", "key"])
def test_a_draft_the_sampler_does_not_draw_is_never_written(route, reads, monkeypatch, guess):
    # A draft is a guess: a token is kept only where the sampler, under the grammar, draws that very token.
    if guess == "opening":
        monkeypatch.setattr("llmproxy.decide._opening",
                            lambda syntax, name: f'{{"name": "{name}", "arguments": {{"zzz": "zzz')
    else:
        monkeypatch.setattr(ArgumentsScanner, "next_text", lambda self: 'zzz": "zzz", "unit": "kelvin"}')
    response = _ask_weather(route, seed=1)
    (call,) = response.choices[0].message.tool_calls
    jsonschema.validate(json.loads(call.function.arguments), WEATHER["parameters"])
    assert "zzz" not in call.function.arguments and "kelvin" not in call.function.arguments
    assert sum(proposed for _, proposed in reads) > 12  # more was guessed than the opening's dozen tokens


def test_reading_drafts_in_batches_mostly_leaves_a_greedy_answer_as_it_was(route, monkeypatch):
    # The sampler draws what it would have; but llama.cpp's batched read gives logits a little apart from
    # one token's read (as a cached prompt does), which can tip a near tie later in an answer: on this
    # suite's calls at temperature 0, 6 of 8 answers were the same text (these four, each time). Two of four.
    drafting = [True]
    propose = CallDraft.__call__
    monkeypatch.setattr(CallDraft, "__call__",
                        lambda self, ids: propose(self, ids) if drafting[0] else np.array([], dtype=np.intc))
    wanted = ("call-time", "call-search", "call-currency", "call-lights")
    same = 0
    for scenario in [s for s in load_scenarios(DECISIONS) if s.name in wanted]:
        request = scenario.request.model_copy(update={"temperature": 0, "max_tokens": 96})
        # The prompt read once into the cache: both answers then start from the same state.
        route.backend.complete(plan(request, route).rendered.prompt, GenerationParams(max_tokens=1))
        answers = []
        for drafting[0] in (True, False):
            message = chat_completion(request, route).choices[0].message
            answers.append((message.content, [call.function for call in message.tool_calls or ()]))
        same += answers[0] == answers[1]
    assert same >= 2


def test_a_chosen_call_is_drawn_without_the_repetition_penalties_an_answer_keeps(monkeypatch):
    # Its values copy what the request has just written: a penalty on repeats would turn them into others.
    built: list[dict] = []
    init = Llama._init_sampler

    def spy(self, *args, **kwargs):
        built.append(kwargs)
        return init(self, *args, **kwargs)

    monkeypatch.setattr(Llama, "_init_sampler", spy)
    penalties = {"repeat_penalty": 1.3, "presence_penalty": 0.5, "frequency_penalty": 0.5}
    response = _ask_weather(build_route(decide="choose", settings=penalties), seed=1)
    assert response.choices[0].message.tool_calls  # the weather question's first step leans to a call
    drawn = [{name: kwargs[name] for name in penalties} for kwargs in built if kwargs.get("grammar") is None]
    assert drawn == [penalties, {"repeat_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}]
