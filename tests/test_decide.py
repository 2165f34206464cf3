"""tool_choice "auto" decided as a choice (llmproxy.decide): which routes choose, which requests, the three
grammar forms, reading an answer by its first step, and the embedded sampler's choice - all without the model."""

from __future__ import annotations

import json

import numpy as np
import pytest
from grammar_walk import accepts
from scripted_backend import ScriptedBackend

from llmproxy.backends._choice_sampling import ChoosingSampler, call_starts, chooses_call, relevance_bias
from llmproxy.backends._function_ranking import Judgement
from llmproxy.backends.base import Capabilities, Completion
from llmproxy.common.word_overlap import content_words, word_overlap
from llmproxy.decide import (ASKED_FLOOR, ASKED_SHARE, CALL_BIAS, DESCRIPTION_WORDS_WEIGHT, MAX_RANKED_FUNCTIONS,
                             NAME_WORDS_WEIGHT, PARAMETER_WORDS_WEIGHT, RELEVANCE_FLOOR, RELEVANCE_WEIGHT,
                             SEVERAL_BIAS, WORDS_OFFSET, asked_functions, request_decide, route_decide, words_bias)
from llmproxy.types import FunctionDefinition
from llmproxy.errors import ConfigurationError, InvalidRequestError, OutputParseError
from llmproxy.prompts import load_wrapper
from llmproxy.proxy import chat_completion, parse_request, plan, second_chance
from llmproxy.route import Route, build_route

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}}
ASK = [{"role": "user", "content": "Weather in Paris?"}]
CALLED = [*ASK, {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": '{"sky": "sunny"}'}]


class ChoosingBackend(ScriptedBackend):
    """A scripted backend that takes grammars, and the choice form too, as the embedded one does (it follows
    a chosen list of calls too)."""

    def __init__(self, *answers: Completion, choice: bool = True) -> None:
        super().__init__(*answers, grammar=True)
        self.capabilities = Capabilities(grammar=True, choice_grammar=choice, follows_call_lists=choice)


def _route(backend, wrapper="chatml-json", decide="choose") -> Route:
    return Route(name="t", backend=backend, wrapper=load_wrapper(wrapper).wrapper, decide=decide, retries=0)


def _request(messages=ASK, **fields):
    return parse_request({"messages": messages, "tools": [WEATHER, TIME], **fields})


# --- which routes choose ---------------------------------------------------------------------


def test_the_bundled_model_chooses_by_default_and_other_routes_decide_freely():
    assert build_route().decide == "choose"  # the embedded SmolLM2, its own template: json calls
    assert build_route(wrapper="chatml-json").decide == "choose"
    assert build_route(wrapper="chatml").decide == "free"  # MemGPT's: every answer a call, nothing to decide
    assert build_route(grammar="none").decide == "free"
    assert build_route(wrapper="qwen3").decide == "free"  # it thinks first: its first step is the reasoning
    assert build_route(decide="free").decide == "free"


@pytest.mark.parametrize(("options", "reason"), [
    ({"wrapper": "chatml"}, "leaves the model no choice"),
    ({"wrapper": "chatml-noforce"}, "memgpt call syntax cannot"),
    ({"grammar": "none"}, "grammar is 'none'"),
    ({"wrapper": "qwen3"}, "reasons before it answers"),
])
def test_choose_where_it_cannot_be_is_a_configuration_error(options, reason):
    with pytest.raises(ConfigurationError, match=reason):
        build_route(decide="choose", **options)


def test_choose_needs_a_backend_that_chooses():
    backend = ScriptedBackend(grammar=True)
    with pytest.raises(ConfigurationError, match="scripted backend does not choose.*embedded"):
        route_decide("choose", backend, load_wrapper("chatml-json").wrapper, "auto", bundled=False)
    assert route_decide(None, backend, load_wrapper("chatml-json").wrapper, "auto", bundled=True) == "free"


def test_an_unknown_mode_is_refused_by_name():
    with pytest.raises(InvalidRequestError, match="decide must be one of free, choose"):
        build_route(decide="maybe")


# --- which requests --------------------------------------------------------------------------


@pytest.mark.parametrize(("fields", "messages", "decided"), [
    ({}, ASK, "choose"),
    ({}, CALLED, "answer"),  # right after its own call's result: the turn is an answer
    ({"response_format": {"type": "json_object"}}, ASK, "free"),
    ({"tool_choice": "required"}, ASK, "free"),
])
def test_how_each_request_is_decided(fields, messages, decided):
    route = _route(ChoosingBackend())
    request = _request(messages, **fields)
    call = "required" if fields.get("tool_choice") == "required" else "optional"
    assert request_decide(route.decide, request, call) == decided
    assert request_decide("free", request, call) == "free"


# --- what is sent, and how the answer is read -------------------------------------------------


@pytest.mark.parametrize("choice", ["none", "required", {"type": "function", "function": {"name": "get_time"}}])
def test_choices_that_are_no_open_decision_are_constrained_as_before(choice):
    chosen = plan(_request(tool_choice=choice), _route(ChoosingBackend()))
    free = plan(_request(tool_choice=choice), _route(ChoosingBackend(), decide="free"))
    assert chosen.params.choice_grammar is None
    assert (chosen.rendered.prompt, chosen.params.grammar) == (free.rendered.prompt, free.params.grammar)


def test_choose_sends_both_grammars_and_the_calibrated_bias():
    route = _route(ChoosingBackend())
    planned = plan(_request(), route)
    choice = planned.params.choice_grammar
    assert choice is not None and choice.call_bias == CALL_BIAS
    assert choice.triggers == ('{"name"', '[{"name"')
    assert planned.params.grammar is not None  # the whole answer, for anything that reads only that
    call = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
    assert accepts(choice.calls, call) and not accepts(choice.calls, "It is sunny.")
    assert accepts(choice.answer, "It is sunny.") and not accepts(choice.answer, call)
    assert accepts(planned.params.grammar, call) and accepts(planned.params.grammar, "It is sunny.")


def test_an_answer_chosen_as_text_cannot_open_as_a_call_however_spaced():
    answer = plan(_request(), _route(ChoosingBackend())).params.choice_grammar.answer
    for text in ('{\n  "name": "get_weather"}', "  [1, 2]", '\n{"city": "Paris"}'):
        assert not accepts(answer, text)
    for text in ("It is {sunny}.", "", " Hi [there]", "Paris:\n{\"sky\": \"sunny\"}"):
        assert accepts(answer, text)


def test_after_the_results_only_text_is_admitted():
    planned = plan(_request(CALLED), _route(ChoosingBackend()))
    assert planned.params.choice_grammar is None  # nothing to choose: a plain grammar, which any backend takes
    assert not accepts(planned.params.grammar, '{"name": "get_weather", "arguments": {"city": "Paris"}}')
    assert accepts(planned.params.grammar, "It is sunny in Paris.")
    assert "get_weather" in planned.rendered.prompt  # the tools are still shown


def test_a_backend_that_cannot_choose_gets_the_free_constraint():
    route = _route(ChoosingBackend(choice=False), decide="free")
    planned = plan(_request(), route)
    assert planned.params.choice_grammar is None and planned.params.grammar is not None


def test_an_answer_that_starts_with_a_call_is_the_call():
    answer = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
    response = chat_completion(_request(), _route(ChoosingBackend(Completion(answer))))
    (call,) = response.choices[0].message.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == ("get_weather", {"city": "Paris"})


def test_an_answer_chosen_as_text_stays_text_whatever_it_holds():
    # The text grammar keeps out the trigger word, not every spelling a lenient reader would take for a call.
    text = 'Like this:\n{\n  "name": "get_weather", "arguments": {"city": "Paris"}}'
    for messages in (ASK, CALLED):
        response = chat_completion(_request(messages), _route(ChoosingBackend(Completion(text))))
        message = response.choices[0].message
        assert message.tool_calls is None and message.content == text
        assert response.choices[0].finish_reason == "stop"
    free = chat_completion(_request(), _route(ChoosingBackend(Completion(text)), decide="free"))
    assert free.choices[0].message.tool_calls is not None  # free: any call the text holds is read


def test_parallel_calls_still_come_as_several():
    answer = '[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_time", "arguments": {"zone": "CET"}}]'
    route = _route(ChoosingBackend(Completion(answer)))
    planned = plan(_request(), route)
    assert accepts(planned.params.choice_grammar.calls, answer)
    calls = chat_completion(_request(), route).choices[0].message.tool_calls
    assert [c.function.name for c in calls] == ["get_weather", "get_time"]


# --- which function a chosen call is to -------------------------------------------------------


def test_each_offered_function_comes_with_a_grammar_of_answers_that_call_it_first_and_the_request_text():
    choice = plan(_request(), _route(ChoosingBackend())).params.choice_grammar
    assert choice.request == "Weather in Paris?"
    assert [f.name for f in choice.functions] == ["get_weather", "get_time"]
    weather, time = choice.functions
    weather_call = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
    time_call = '{"name": "get_time", "arguments": {"zone": "CET"}}'
    # Calls may be several (parallel_tool_calls is not false): the first to the function, written as one
    # call is, and more after it, to any offered function (the json syntax reads objects back to back).
    assert accepts(weather.calls, weather_call) and not accepts(weather.calls, time_call)
    assert accepts(time.calls, f"{time_call}, {weather_call}") and not accepts(time.calls, weather_call)
    assert accepts(weather.calls, f"{weather_call}, {weather_call},\n{time_call}")
    assert not accepts(weather.calls, "It is sunny.")
    assert weather.opening == '{"name": "get_weather", "arguments": {'
    assert choice.separator == ","  # what more calls follow with (llmproxy.backends._list_continuation)


def test_without_parallel_calls_an_answer_calls_the_function_once():
    choice = plan(_request(parallel_tool_calls=False), _route(ChoosingBackend())).params.choice_grammar
    call = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
    assert accepts(choice.functions[0].calls, call) and not accepts(choice.functions[0].calls, f"{call}, {call}")
    assert choice.separator == ""


def test_the_request_text_is_the_last_user_message_in_whatever_parts():
    parts = [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello!"},
             {"role": "user", "content": [{"type": "text", "text": "Time in Tokyo?"}]}]
    assert plan(_request(parts), _route(ChoosingBackend())).params.choice_grammar.request == "Time in Tokyo?"


def test_more_functions_than_can_be_ranked_leave_the_name_to_the_model():
    tools = [{"type": "function", "function": {"name": f"tool_{n}", "parameters": {"type": "object"}}}
             for n in range(MAX_RANKED_FUNCTIONS + 1)]
    planned = plan(parse_request({"messages": ASK, "tools": tools}), _route(ChoosingBackend()))
    assert planned.params.choice_grammar.functions == ()


@pytest.mark.parametrize("messages", [ASK, [{"role": "system", "content": "Report the weather."}]])
def test_one_function_is_known_before_its_call_is_written_with_or_without_request_text(messages):
    planned = plan(parse_request({"messages": messages, "tools": [WEATHER]}), _route(ChoosingBackend()))
    (weather,) = planned.params.choice_grammar.functions
    assert weather.name == "get_weather" and weather.opening == '{"name": "get_weather", "arguments": {'
    assert weather.parameters == WEATHER["function"]["parameters"]  # whose keys a call's draft proposes


@pytest.mark.parametrize(("wrapper", "opening"), [
    ("chatml-json", '{"name": "get_weather", "arguments": {'),
    ("hermes", '<tool_call>\n{"name": "get_weather", "arguments": {'),  # a call block, or several back to back
])
def test_each_function_opens_its_call_as_the_syntax_writes_calls_and_its_grammar_admits_that(wrapper, opening):
    choice = plan(_request(), _route(ChoosingBackend(), wrapper=wrapper)).params.choice_grammar
    weather, time = choice.functions
    assert weather.opening == opening
    assert time.opening == opening.replace("get_weather", "get_time")
    rest = '"city": "Paris"}}' + ("\n</tool_call>" if wrapper == "hermes" else "")
    assert accepts(weather.calls, weather.opening + rest)


def test_no_user_text_among_several_functions_leaves_the_name_to_the_model():
    messages = [{"role": "system", "content": "Report the weather."}]
    assert plan(_request(messages), _route(ChoosingBackend())).params.choice_grammar.functions == ()


class _Sampler:
    def __init__(self, text, chain): self.text, self.chain = text, chain
    def sample(self, ctx, idx): return 0
    def close(self): pass


@pytest.mark.parametrize(("logits", "relevance", "grammar"), [
    ([9.0, 0.0], 0.0, "get_time"),  # the first step leans to a call: called, to the best function
    ([0.0, 9.0], 0.0, "answer"),  # it leans to text, and no function explains the request
    ([0.0, 9.0], 40.0, "get_time"),  # it leans to text, and the best function explains the request well
])
def test_a_call_is_chosen_by_its_first_step_or_the_requests_relevance_and_is_to_the_best_function(
        monkeypatch, logits, relevance, grammar):
    choice = plan(_request(), _route(ChoosingBackend())).params.choice_grammar
    monkeypatch.setattr("llama_cpp.llama_get_logits_ith", lambda ctx, idx: np.array(logits, dtype=np.single))
    monkeypatch.setattr(np.ctypeslib, "as_array", lambda raw, shape: raw)
    judged = []
    sampler = ChoosingSampler(choice, np.array([True, False]), None, _Sampler,
                              lambda asked: judged.append(asked.request) or Judgement(best=1, relevance=relevance))
    sampler.sample(type("Ctx", (), {"ctx": None})())
    expected = {"get_time": choice.functions[1].calls, "answer": choice.answer}[grammar]
    assert sampler._sampler.text == expected
    assert judged == ["Weather in Paris?"]  # once, for the relevance and the ranking alike


@pytest.mark.parametrize(("asked", "grammar"), [
    ("Weather in Paris?", "get_time"),  # names get_weather: a first step 4 nats short of a call is raised past it
    ("Tell me a joke about cats.", "answer"),  # names no function: the same first step stays text
])
def test_the_requests_own_words_move_the_choice(monkeypatch, asked, grammar):
    choice = plan(_request([{"role": "user", "content": asked}]), _route(ChoosingBackend())).params.choice_grammar
    monkeypatch.setattr("llama_cpp.llama_get_logits_ith", lambda ctx, idx: np.array([0.0, 4.0], dtype=np.single))
    monkeypatch.setattr(np.ctypeslib, "as_array", lambda raw, shape: raw)
    sampler = ChoosingSampler(choice, np.array([True, False]), None, _Sampler,
                              lambda asked: Judgement(best=1, relevance=0.0))
    sampler.sample(type("Ctx", (), {"ctx": None})())
    assert sampler._sampler.text == {"get_time": choice.functions[1].calls, "answer": choice.answer}[grammar]


def test_the_words_bias_weighs_the_best_functions_name_description_and_parameter_words():
    assert plan(_request(), _route(ChoosingBackend())).params.choice_grammar.words_bias == (
        NAME_WORDS_WEIGHT + WORDS_OFFSET)  # "weather" of get_weather; neither "city" nor anything of get_time
    forecast = FunctionDefinition(name="forecast", description="Tomorrow's rain and wind for a city",
                                  parameters={"type": "object", "properties": {"city": {}, "units": {}}})
    assert words_bias("Will rain fall tomorrow in the city?", [forecast]) == pytest.approx(
        DESCRIPTION_WORDS_WEIGHT * 3 / 4 + PARAMETER_WORDS_WEIGHT / 2 + WORDS_OFFSET)  # rain, tomorrow, city of 4
    assert words_bias("Tell me a joke.", [forecast]) == WORDS_OFFSET
    # A request that asks for several things leans to a call by SEVERAL_BIAS more.
    assert words_bias("Tell me a joke, and then another one.", [forecast]) == WORDS_OFFSET + SEVERAL_BIAS
    assert plan(_request([{"role": "system", "content": "Weather?"}]),
                _route(ChoosingBackend())).params.choice_grammar.words_bias == 0.0  # no request text to read


def test_a_second_chance_reads_the_clients_request_not_its_own_note():
    asked = [{"role": "user", "content": "Weather in Paris, and also the time zone of Tokyo."}]
    first = plan(_request(asked), _route(ChoosingBackend())).params.choice_grammar
    again = second_chance(_request(asked), OutputParseError("The call's JSON was cut off.", ""), 1)
    retried = plan(again, _route(ChoosingBackend())).params.choice_grammar
    assert retried.request == first.request == asked[0]["content"]
    assert (retried.words_bias, retried.asked_functions) == (first.words_bias, ("get_weather", "get_time"))


def test_the_functions_a_request_asks_for_are_those_its_words_name_well_where_several_calls_may_follow():
    asked = [{"role": "user", "content": "Weather in Paris, and also the time zone of Tokyo."}]
    choice = plan(_request(asked), _route(ChoosingBackend())).params.choice_grammar
    assert choice.asked_functions == ("get_weather", "get_time")  # "weather"; "time" and "zone"
    only_weather = [{"role": "user", "content": "What is the weather in Paris?"}]
    assert plan(_request(only_weather), _route(ChoosingBackend())).params.choice_grammar.asked_functions == (
        "get_weather",)
    # One call only (parallel_tool_calls false): nothing follows the first, so nothing more is asked for.
    choice = plan(_request(asked, parallel_tool_calls=False), _route(ChoosingBackend())).params.choice_grammar
    assert choice.asked_functions == ()
    # Named too little: under ASKED_FLOOR, or under ASKED_SHARE of the best-named function's score.
    functions = [FunctionDefinition(name=name, parameters={}) for name in ("a", "b", "c")]
    assert asked_functions(functions, [10.0, ASKED_FLOOR - 0.1, ASKED_FLOOR]) == ("a", "c")
    assert asked_functions(functions, [40.0, 40.0 * ASKED_SHARE - 0.1, 40.0 * ASKED_SHARE]) == ("a", "c")


def test_words_are_compared_as_stems_without_the_commonest():
    assert content_words("getCurrentTemperatures") == content_words("the current temperature") == {"curren", "temper"}
    assert content_words("What is it in NY?") == frozenset()  # common, or under three letters
    overlap = word_overlap(content_words("Book two flights to Paris"), "book_flight", "Books a seat on a plane",
                           ["destination", "date"])
    assert (overlap.name, overlap.description, overlap.parameters) == pytest.approx((1.0, 1 / 3, 0.0))  # book of 3


def test_the_relevance_bias_grows_past_its_floor_and_is_never_below_the_call_bias():
    choice = plan(_request(), _route(ChoosingBackend())).params.choice_grammar
    assert (choice.call_bias, choice.relevance_weight, choice.relevance_floor) == (
        CALL_BIAS, RELEVANCE_WEIGHT, RELEVANCE_FLOOR)
    assert relevance_bias(choice, 0.0) == relevance_bias(choice, RELEVANCE_FLOOR) == CALL_BIAS
    assert relevance_bias(choice, RELEVANCE_FLOOR + 20) == max(CALL_BIAS, RELEVANCE_WEIGHT * 20)


@pytest.mark.parametrize(("logits", "called"), [([9.0, 0.0], True), ([0.0, 9.0], False)])
def test_a_chosen_call_draws_from_its_own_chain_and_the_other_outcomes_chain_is_closed(monkeypatch, logits, called):
    class Chain:
        def __init__(self): self.closed = 0
        def close(self): self.closed += 1

    choice = plan(_request(), _route(ChoosingBackend())).params.choice_grammar
    monkeypatch.setattr("llama_cpp.llama_get_logits_ith", lambda ctx, idx: np.array(logits, dtype=np.single))
    monkeypatch.setattr(np.ctypeslib, "as_array", lambda raw, shape: raw)
    answer_chain, call_chain = Chain(), Chain()
    sampler = ChoosingSampler(choice, np.array([True, False]), answer_chain, _Sampler,
                              lambda asked: Judgement(best=1, relevance=0.0), call_chain=call_chain)
    sampler.sample(type("Ctx", (), {"ctx": None})())
    drawn_from, other = (call_chain, answer_chain) if called else (answer_chain, call_chain)
    assert sampler.called is called and sampler._sampler.chain is drawn_from
    assert (drawn_from.closed, other.closed) == (0, 1)  # the chosen grammar's sampler owns its chain now
    sampler.close()
    assert other.closed == 1  # closed once
    # One chain for both outcomes: handed on, never closed by the choice.
    shared = Chain()
    sampler = ChoosingSampler(choice, np.array([True, False]), shared, _Sampler,
                              lambda asked: Judgement(best=1, relevance=0.0))
    sampler.sample(type("Ctx", (), {"ctx": None})())
    assert sampler._sampler.chain is shared and shared.closed == 0


def test_a_choice_never_sampled_closes_both_chains():
    class Chain:
        closed = 0
        def close(self): self.closed += 1

    choice = plan(_request(), _route(ChoosingBackend())).params.choice_grammar
    chains = Chain(), Chain()
    ChoosingSampler(choice, np.array([True, False]), chains[0], _Sampler, lambda asked: None,
                    call_chain=chains[1]).close()
    assert [chain.closed for chain in chains] == [1, 1]


def test_the_one_function_offered_needs_no_ranking():
    choice = plan(parse_request({"messages": ASK, "tools": [WEATHER]}), _route(ChoosingBackend())).params.choice_grammar
    sampler = ChoosingSampler(choice, np.array([True, False]), None, _Sampler, lambda asked: pytest.fail("judged"))
    sampler.called = True
    assert sampler._chosen_grammar() == choice.functions[0].calls and sampler.function == choice.functions[0]


# --- the embedded sampler's choice ------------------------------------------------------------


def test_call_starts_are_the_tokens_a_trigger_word_begins_with():
    pieces = ["{", ' {"', "[", "Hello", " ", '{"name', '{"city', "<tool", "<tool_call>", "\n"]
    json_starts = call_starts(pieces, ('{"name"', '[{"name"'))
    assert [p for p, s in zip(pieces, json_starts) if s] == ["{", ' {"', "[", '{"name']
    tag_starts = call_starts(pieces, ("<tool_call>",))
    assert [p for p, s in zip(pieces, tag_starts) if s] == ["<tool", "<tool_call>"]


def test_the_call_is_chosen_when_its_raised_probability_beats_the_likeliest_other_start():
    starts = np.array([True, True, False, False])
    logits = np.array([1.0, 1.0, 4.0, 0.0])  # starting a call: log(2e) = 1.69 against 4.0
    assert not chooses_call(logits, starts, 2.0)  # 3.69 < 4.0
    assert chooses_call(logits, starts, 2.5)  # 4.19 > 4.0
    assert not chooses_call(logits, np.zeros(4, dtype=bool), 100.0)  # a vocabulary with no way to call
