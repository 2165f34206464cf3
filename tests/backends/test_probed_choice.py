"""``choose`` on llama.cpp's server: the first token's likeliest alternatives asked for first (n_probs),
then the answer under the grammar chosen from them (llmproxy.backends._probed_choice)."""

from __future__ import annotations

import asyncio
import json
import math

import pytest
from grammar_walk import accepts
from werkzeug import Response

from llmproxy.backends._probed_choice import PROBE_TOKENS, TEXT_REPEAT_PENALTY, call_margin, chosen_grammar
from llmproxy.proxy import chat_completion, parse_request
from llmproxy.route import _cached_backend, build_route
from llmproxy.syntaxes.base import ChoosableFunction, GrammarChoice

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
STOCK = {"type": "function", "function": {
    "name": "get_stock_price", "description": "Get the latest price of a company's stock.",
    "parameters": {"type": "object", "properties": {"ticker": {"type": "string"}}, "required": ["ticker"]}}}
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
STOCK_CALL = '<tool_call>\n{"name": "get_stock_price", "arguments": {"ticker": "ACME"}}\n</tool_call>'
TEXT = "It is sunny."


def test_the_call_margin_is_every_listed_call_start_against_the_likeliest_other():
    first = [("<tool_call>", math.log(0.2)), (" <", math.log(0.1)), ("The", math.log(0.25)), ("I", math.log(0.2))]
    assert call_margin(first, ("<tool_call>",)) == pytest.approx(math.log(0.3 / 0.25))
    # A call start not listed is taken to be as likely as the least likely listed token, at most.
    assert call_margin([("The", -1.0), ("I", -3.0)], ("<tool_call>",)) == pytest.approx(-2.0)
    assert call_margin([], ("<tool_call>",)) == -math.inf


def _choice(words_best: int | None = None, words_bias: float = 0.0) -> GrammarChoice:
    functions = tuple(ChoosableFunction(name, "", f"calls-{name}") for name in ("get_weather", "get_stock_price"))
    return GrammarChoice("calls", "answer", ("<tool_call>",), call_bias=1.0, words_bias=words_bias,
                         functions=functions, request="r", words_best=words_best)


def test_the_chosen_grammar_follows_the_margin_the_bias_and_the_words():
    leans_text = [("The", -0.5), ("<tool_call>", -3.0)]
    assert chosen_grammar(_choice(), leans_text) == "answer"  # -2.5 + 1.0
    assert chosen_grammar(_choice(words_bias=2.0), leans_text) == "calls"  # -2.5 + 1.0 + 2.0: the model names it
    assert chosen_grammar(_choice(words_best=1, words_bias=2.0), leans_text) == "calls-get_stock_price"
    assert chosen_grammar(_choice(words_best=0), [("<tool_call>", -0.1), ("The", -2.0)]) == "calls-get_weather"
    assert chosen_grammar(_choice(words_bias=5.0), []) == "answer"  # nothing reported: no call made up


class FakeLlamaServer:
    """llama.cpp's /completion (reference section 1): a one-token request with n_probs gets ``first`` as
    its likeliest tokens; any other gets ``answer``, streamed or whole."""

    def __init__(self, httpserver, model_path: str = "/models/other.gguf") -> None:
        self.first: list[tuple[str, float]] = []
        self.answer = CALL
        self.bodies: list[dict] = []
        httpserver.expect_request("/completion", method="POST").respond_with_handler(self._completion)
        httpserver.expect_request("/tokenize", method="POST").respond_with_json({"tokens": list(range(20))})
        httpserver.expect_request("/health").respond_with_json({"status": "ok"})
        httpserver.expect_request("/props").respond_with_json(
            {"model_path": model_path, "default_generation_settings": {"n_ctx": 4096}})
        self.url = httpserver.url_for("/").rstrip("/")

    def _completion(self, request) -> Response:
        body = request.get_json()
        self.bodies.append(body)
        if body["n_predict"] == 1 and "n_probs" in body:
            token = self.first[0][0] if self.first else ""
            probabilities = [{"id": 0, "token": token, "logprob": self.first[0][1] if self.first else 0.0,
                              "top_logprobs": [{"id": i, "token": t, "logprob": lp}
                                               for i, (t, lp) in enumerate(self.first[:body["n_probs"]])]}]
            return _json({"content": token, "stop": True, "stop_type": "limit", "tokens_predicted": 1,
                          "tokens_evaluated": 20, "completion_probabilities": probabilities})
        final = {"content": "" if body["stream"] else self.answer, "stop": True, "stop_type": "eos",
                 "tokens_predicted": 9, "tokens_evaluated": 20}
        if not body["stream"]:
            return _json(final)
        events = [{"content": self.answer, "stop": False}, final]
        return Response("".join(f"data: {json.dumps(event)}\n\n" for event in events), content_type="text/event-stream")


def _json(payload: dict) -> Response:
    return Response(json.dumps(payload), content_type="application/json")


@pytest.fixture
def llama(httpserver) -> FakeLlamaServer:
    return FakeLlamaServer(httpserver)


def _route(llama: FakeLlamaServer, decide: str | None = "choose"):
    _cached_backend.cache_clear()  # routes share backends by endpoint; other tests' fake servers had this port
    return build_route(endpoint_type="llamacpp", endpoint=llama.url, wrapper="hermes", decide=decide)


def _ask(text: str, tools=(WEATHER,)):
    return parse_request({"messages": [{"role": "user", "content": text}], "tools": list(tools)})


def test_a_call_is_chosen_from_the_first_tokens_and_written_under_the_calls_grammar(llama):
    llama.first = [("<tool_call>", -0.4), ("The", -1.2)]
    message = chat_completion(_ask("Weather in Paris?"), _route(llama)).choices[0].message
    assert [(call.function.name, json.loads(call.function.arguments)) for call in message.tool_calls] == [
        ("get_weather", {"city": "Paris"})]
    probe, answer = llama.bodies
    assert probe["n_predict"] == 1 and probe["n_probs"] == PROBE_TOKENS
    assert not {"grammar", "grammar_lazy", "stop"} & probe.keys()  # the model's own first step, unconstrained
    assert answer["prompt"] == probe["prompt"] and "grammar_lazy" not in answer
    assert accepts(answer["grammar"], CALL) and not accepts(answer["grammar"], TEXT)
    assert not accepts(answer["grammar"], f"{CALL}\n{CALL}")  # one call: a list is not followed here
    # No penalties on a call, whatever the settings: a penalty on the request's words bends values.
    assert (answer["repeat_penalty"], answer["presence_penalty"], answer["frequency_penalty"]) == (1.0, 0.0, 0.0)
    route = build_route(endpoint_type="llamacpp", endpoint=llama.url, wrapper="hermes", decide="choose",
                        settings={"repeat_penalty": 1.3, "presence_penalty": 0.5})
    chat_completion(_ask("Weather in Paris?"), route)
    assert (llama.bodies[-1]["repeat_penalty"], llama.bodies[-1]["presence_penalty"]) == (1.0, 0.0)


def test_text_is_chosen_where_the_first_tokens_lean_to_it_and_the_words_name_no_function(llama):
    llama.first = [("The", -0.3), ("I", -1.5), ("<tool_call>", -6.0)]
    llama.answer = TEXT
    message = chat_completion(_ask("Tell me a joke."), _route(llama)).choices[0].message
    assert message.content == TEXT and not message.tool_calls
    grammar = llama.bodies[-1]["grammar"]
    assert accepts(grammar, TEXT) and not accepts(grammar, CALL)
    assert llama.bodies[-1]["repeat_penalty"] == TEXT_REPEAT_PENALTY  # text is not written over and over
    # A penalty the settings set is theirs, text or not.
    route = build_route(endpoint_type="llamacpp", endpoint=llama.url, wrapper="hermes", decide="choose",
                        settings={"repeat_penalty": 1.0})
    chat_completion(_ask("Tell me a joke."), route)
    assert llama.bodies[-1]["repeat_penalty"] == 1.0


def test_a_call_is_to_the_function_the_requests_words_name(llama):
    llama.first = [("<tool_call>", -0.2), ("The", -2.0)]
    llama.answer = STOCK_CALL
    message = chat_completion(_ask("What is the stock price of ACME?", (WEATHER, STOCK)), _route(llama)).choices[0].message
    assert message.tool_calls[0].function.name == "get_stock_price"
    grammar = llama.bodies[-1]["grammar"]
    assert accepts(grammar, STOCK_CALL) and not accepts(grammar, CALL)


def test_the_servers_async_paths_choose_too(llama):
    from llmproxy.proxy import draft, plan_draft
    from llmproxy.tokens import TokenCount

    llama.first = [("<tool_call>", -0.4), ("The", -1.2)]
    route = _route(llama)
    planned = plan_draft(draft(_ask("Weather in Paris?"), route), TokenCount(10, True))
    assert planned.params.choice_grammar is not None

    async def both():
        whole = await route.backend.acomplete(planned.rendered.prompt, planned.params)
        streamed = [delta.text async for delta in route.backend.astream(planned.rendered.prompt, planned.params)]
        return whole.text, "".join(streamed)

    assert asyncio.run(both()) == (CALL, CALL)
    assert [body["n_predict"] == 1 for body in llama.bodies] == [True, False, True, False]
    assert accepts(llama.bodies[3]["grammar"], CALL) and not accepts(llama.bodies[3]["grammar"], TEXT)


@pytest.mark.parametrize(("model_path", "decide"), [
    ("/models/SmolLM2-135M-Instruct.Q4_1.gguf", "choose"),  # the bundled model's file, served by llama.cpp
    ("/models/qwen2.5-7b-instruct-q4_k_m.gguf", "free"),
])
def test_choose_is_the_default_where_llama_cpp_serves_the_bundled_model(httpserver, model_path, decide):
    assert _route(FakeLlamaServer(httpserver, model_path), decide=None).decide == decide
