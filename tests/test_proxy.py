"""The pipeline with a scripted in-process backend: budgets, stops, forms, choices, usage, errors."""

from __future__ import annotations

import json

import pytest
from scripted_backend import ScriptedBackend

from llmproxy.backends.base import Capabilities, Completion
from llmproxy.errors import (
    ContextWindowExceededError,
    FunctionCallError,
    InvalidRequestError,
    OutputParseError,
    UnsupportedRequestError,
)
from llmproxy.prompts import load_wrapper
from llmproxy.proxy import chat_completion, parse_request, plan, streams_calls
from llmproxy.route import Route

SEND = ' "send_message",\n  "params": {\n    "inner_thoughts": "Say hello.",\n    "message": "Hello!"\n  }\n}'


def _route(backend, wrapper="chatml", context_window=4096, **kw) -> Route:
    return Route(name="test", backend=backend, wrapper=load_wrapper(wrapper).wrapper, grammar="none",
                 context_window=context_window, **kw)


def _request(memgpt_functions, **fields):
    base = {
        "messages": [
            {"role": "system", "content": "You are a test agent."},
            {"role": "user", "content": json.dumps({"type": "user_message", "message": "hi"})},
        ],
        "tools": [{"type": "function", "function": f} for f in memgpt_functions],
    }
    return parse_request({**base, **fields})


def test_tools_request_gets_tool_calls(memgpt_functions):
    backend = ScriptedBackend(Completion(SEND, "stop", 100, 20))
    response = chat_completion(_request(memgpt_functions), _route(backend))
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Say hello."
    assert choice.message.tool_calls[0].function.name == "send_message"
    assert json.loads(choice.message.tool_calls[0].function.arguments) == {"message": "Hello!"}
    assert response.usage.model_dump() == {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
    assert response.llmproxy.usage_estimated is False
    assert backend.calls[0][0].endswith('<|im_start|>assistant\n{\n  "function":')


def test_legacy_request_gets_function_call(memgpt_functions):
    backend = ScriptedBackend(Completion(SEND))
    request = parse_request({**_request(memgpt_functions).model_dump(exclude={"tools"}, exclude_none=True),
                             "functions": memgpt_functions})
    choice = chat_completion(request, _route(backend)).choices[0]
    assert choice.finish_reason == "function_call"
    assert choice.message.function_call.name == "send_message" and choice.message.tool_calls is None


def test_prompt_over_the_window_fails_before_anything_is_sent(memgpt_functions):
    backend = ScriptedBackend(tokenizer=True)
    with pytest.raises(ContextWindowExceededError, match="maximum context length") as caught:
        chat_completion(_request(memgpt_functions), _route(backend, context_window=50))
    assert caught.value.context_window == 50 and caught.value.prompt_tokens > 50
    assert caught.value.code == "context_length_exceeded"
    assert backend.calls == []


def test_answer_budget_never_passes_the_window(memgpt_functions):
    backend = ScriptedBackend(tokenizer=True)
    request = _request(memgpt_functions, max_tokens=100000)
    prepared = plan(request, _route(backend, context_window=2000))
    assert prepared.params.max_tokens == 2000 - prepared.prompt_tokens.tokens
    prepared = plan(_request(memgpt_functions, max_tokens=33), _route(backend, context_window=2000))
    assert prepared.params.max_tokens == 33


def test_stops_merge_wrapper_settings_and_request(memgpt_functions):
    backend = ScriptedBackend()
    prepared = plan(_request(memgpt_functions, stop=["END"]), _route(backend, settings={"stop": ["\nUSER:"]}))
    assert prepared.params.stop == ("<|im_end|>", "<|im_start|>", "  }\n}\n", "\nUSER:", "END")


@pytest.mark.parametrize("stop", ["END", ["STOP", "END"]])
@pytest.mark.parametrize("stop_word,named", [
    ("END", "END"),  # the request's own stop string
    ("<|im_end|>", None),  # the wrapper's end of the turn: how every answer ends
    ("\nUSER:", None),  # from the route's settings, not the request
    (None, None),  # ended otherwise, or the backend does not say
])
def test_stop_sequence_names_only_the_requests_own_stop_string(memgpt_functions, stop, stop_word, named):
    backend = ScriptedBackend(Completion("\nJust chatting.", "stop", stop_word=stop_word))
    route = _route(backend, settings={"stop": ["\nUSER:"]})
    response = chat_completion(_request(memgpt_functions, tool_choice="none", stop=stop), route)
    assert response.choices[0].message.content == "Just chatting."
    assert response.llmproxy.stop_sequence == named


def test_a_streamed_stop_string_is_collected_for_finish(memgpt_functions):
    """The server reads every generation as deltas; the stop string on the closing one reaches finish()."""
    from llmproxy.backends.base import StreamDelta
    from llmproxy.proxy import finish
    from llmproxy.server.lanes import Collector

    collector = Collector()
    for delta in (StreamDelta("\nJust"), StreamDelta(" chatting.", "stop", stop_word="END"),
                  StreamDelta("", None, 10, 3)):  # the counts after the finish (an OpenAI usage chunk)
        collector.add(delta)
    completion = collector.completion()
    assert completion == Completion("\nJust chatting.", "stop", 10, 3, stop_word="END")
    request = _request(memgpt_functions, tool_choice="none", stop=["END"])
    assert finish(plan(request, _route(ScriptedBackend())), completion).llmproxy.stop_sequence == "END"


def test_a_plain_text_answer_is_cut_only_at_the_end_of_the_turn(memgpt_functions):
    """Markdown headings, shell comments and JSON in a plain answer are text, not a call's end."""
    prepared = plan(_request(memgpt_functions, tool_choice="none"), _route(ScriptedBackend()))
    assert prepared.params.stop == ("<|im_end|>", "<|im_start|>")
    markdown = "# Cats\n\nCats are small.\n## Care\n```sh\n#!/bin/bash\n```\n  }\n}\n"
    backend = ScriptedBackend(Completion(markdown + "<|im_end|>"))
    response = chat_completion(_request(memgpt_functions, tool_choice="none"), _route(backend))
    assert response.choices[0].message.content == markdown.strip()


def test_settings_do_not_leak_between_requests(memgpt_functions):
    route = _route(ScriptedBackend())
    hot = plan(_request(memgpt_functions, temperature=1.5), route)
    plain = plan(_request(memgpt_functions), route)
    assert hot.params.temperature == 1.5 and plain.params.temperature is None
    assert route.settings == {}


def test_tool_choice_none_answers_in_plain_text(memgpt_functions):
    backend = ScriptedBackend(Completion("\nJust chatting.", "stop"))
    response = chat_completion(_request(memgpt_functions, tool_choice="none"), _route(backend))
    assert response.choices[0].message.content == "Just chatting."
    assert response.choices[0].finish_reason == "stop"
    assert "Available functions" not in backend.calls[0][0]


def test_named_choice_primes_the_function_name(memgpt_functions):
    answer = ' "query": "tea",\n    "inner_thoughts": "look",\n    "page": 0, "request_heartbeat": false}\n}'
    backend = ScriptedBackend(Completion('\n  "params": {' + answer, "stop"))
    choice = {"type": "function", "function": {"name": "archival_memory_search"}}
    response = chat_completion(_request(memgpt_functions, tool_choice=choice), _route(backend, function_correction=False))
    assert backend.calls[0][0].endswith('"function": "archival_memory_search",')
    call = response.choices[0].message.tool_calls[0].function
    assert call.name == "archival_memory_search"
    assert json.loads(call.arguments) == {"query": "tea", "page": 0, "request_heartbeat": False}


def test_required_choice_with_no_call_is_an_error(memgpt_functions):
    backend = ScriptedBackend(Completion(' "nothing to do"\n}'))
    with pytest.raises(OutputParseError, match="no function call"):
        chat_completion(_request(memgpt_functions, tool_choice="required"),
                        _route(backend, wrapper="chatml-noforce", retries=0))


def test_text_only_wrapper_refuses_a_required_call(memgpt_functions):
    with pytest.raises(UnsupportedRequestError, match="plain text only"):
        plan(_request(memgpt_functions, tool_choice="required"), _route(ScriptedBackend(), wrapper="summary"))


def test_named_grammar_on_a_backend_without_grammars_is_refused(memgpt_functions):
    route = _route(ScriptedBackend(grammar=False))
    route.grammar = "json"
    with pytest.raises(UnsupportedRequestError, match="cannot take grammars.*use a backend that can \\(embedded, llamacpp"):
        plan(_request(memgpt_functions), route)


def test_auto_grammar_is_skipped_where_the_backend_cannot_take_one(memgpt_functions):
    route = _route(ScriptedBackend(grammar=False))
    route.grammar = "auto"
    prepared = plan(_request(memgpt_functions), route)
    assert prepared.params.grammar is None and prepared.grammar is None


def test_a_call_cut_at_the_token_limit_comes_back_as_openai_does_it(memgpt_functions):
    backend = ScriptedBackend(Completion(' "send_message",\n  "params": {\n    "inner_th', "length"))
    response = chat_completion(_request(memgpt_functions), _route(backend))
    assert response.choices[0].finish_reason == "length"  # the SDKs know it: raise max_tokens
    assert response.choices[0].message.tool_calls is None
    assert response.llmproxy.repairs == ["cut_at_token_limit"] and response.llmproxy.attempts == 1
    assert len(backend.calls) == 1  # the same limit would cut a second try too


def test_a_call_cut_while_going_round_in_a_loop_gets_a_second_chance(memgpt_functions):
    loop = ' "send_message",\n  "params": {\n    "message": "Hello' + " and hello again," * 6
    backend = ScriptedBackend(Completion(loop, "length"), Completion(SEND))
    response = chat_completion(_request(memgpt_functions), _route(backend))
    assert response.choices[0].finish_reason == "tool_calls" and response.llmproxy.attempts == 2
    assert "went round in a loop: it wrote ' and hello again,' over and over" in backend.calls[1][0]


def test_an_answer_that_loops_every_time_is_an_error_saying_so(memgpt_functions):
    loop = Completion(' "send_message",\n  "params": {\n    "message": "' + "na " * 40, "length")
    with pytest.raises(OutputParseError, match=r"loop: it wrote 'na ' over and over until the token limit \(\d+\)"):
        chat_completion(_request(memgpt_functions), _route(ScriptedBackend(loop, loop, loop)))


def test_length_finish_is_reported_even_when_repaired(memgpt_functions):
    backend = ScriptedBackend(Completion(' "send_message",\n  "params": {\n    "message": "Hello', "length"))
    response = chat_completion(_request(memgpt_functions), _route(backend))
    assert response.choices[0].finish_reason == "length"
    assert json.loads(response.choices[0].message.tool_calls[0].function.arguments) == {"message": "Hello"}


def test_usage_is_counted_and_flagged_when_the_backend_reports_none(memgpt_functions):
    backend = ScriptedBackend(Completion(SEND), tokenizer=True)
    response = chat_completion(_request(memgpt_functions), _route(backend))
    assert response.usage.completion_tokens == len(SEND.split())
    assert response.usage.total_tokens == response.usage.prompt_tokens + response.usage.completion_tokens
    assert response.llmproxy.usage_estimated is False
    response = chat_completion(_request(memgpt_functions), _route(ScriptedBackend(Completion(SEND))))
    assert response.llmproxy.usage_estimated is True


def test_a_bad_answer_does_not_harm_the_next_request(memgpt_functions):
    backend = ScriptedBackend(Completion(' "fly_to_moon",\n  "params": {}\n}'), Completion(SEND))
    route = _route(backend, retries=0)
    with pytest.raises(FunctionCallError, match="fly_to_moon"):
        chat_completion(_request(memgpt_functions), route)
    assert chat_completion(_request(memgpt_functions), route).choices[0].finish_reason == "tool_calls"


def test_empty_answer_is_an_error_after_every_chance(memgpt_functions):
    backend = ScriptedBackend(*[Completion("  ")] * 3)
    with pytest.raises(OutputParseError, match="empty answer"):
        chat_completion(_request(memgpt_functions), _route(backend))
    assert len(backend.calls) == 3  # one try and the two default second chances


def test_an_unusable_answer_gets_a_second_chance_told_what_was_wrong(memgpt_functions):
    backend = ScriptedBackend(Completion(' "fly_to_moon",\n  "params": {}\n}'), Completion(SEND))
    response = chat_completion(_request(memgpt_functions, seed=5), _route(backend))
    assert response.choices[0].finish_reason == "tool_calls" and response.llmproxy.attempts == 2
    (first_prompt, first), (second_prompt, second) = backend.calls
    assert "fly_to_moon" not in first_prompt and "fly_to_moon" in second_prompt  # the checker's message
    assert second_prompt.index("could not be used") > first_prompt.rindex("<|im_start|>user")
    assert (first.seed, second.seed) == (5, 6)


def test_json_schema_backends_get_the_call_schema_and_an_unprimed_prompt(memgpt_functions):
    import jsonschema

    backend = ScriptedBackend(Completion('{"function": "send_message", "params": {"inner_thoughts": "hi", "message": "Hello!"}}'))
    backend.capabilities = Capabilities(json_schema=True)
    route = _route(backend)
    route.grammar = "auto"
    response = chat_completion(_request(memgpt_functions), route)
    prompt, params = backend.calls[0]
    assert prompt.endswith("<|im_start|>assistant") and params.grammar is None
    assert response.llmproxy.grammar == "json_schema"
    assert response.choices[0].message.tool_calls[0].function.name == "send_message"
    good = {"function": "send_message", "params": {"inner_thoughts": "x", "message": "y"}}
    jsonschema.validate(good, params.json_schema)
    for bad in ({"function": "send_message", "params": {"message": "y"}},
                {"function": "nope", "params": {"inner_thoughts": "x"}},
                {"function": "send_message", "params": {"inner_thoughts": "x", "message": "y"}, "extra": 1}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, params.json_schema)


def test_call_schema_allows_thoughts_only_when_the_call_is_optional(memgpt_functions):
    import jsonschema

    backend = ScriptedBackend()
    backend.capabilities = Capabilities(json_schema=True)

    def schema(wrapper, **fields):
        route = _route(backend, wrapper=wrapper)
        route.grammar = "auto"
        return plan(_request(memgpt_functions, **fields), route).params.json_schema

    jsonschema.validate({"inner_thoughts": "nothing to do"}, schema("chatml-noforce"))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"inner_thoughts": "nothing to do"}, schema("chatml-noforce", tool_choice="required"))
    named = schema("dolphin", tool_choice={"type": "function", "function": {"name": "send_message"}})
    assert named["properties"]["function"] == {"const": "send_message"}


SCHEMA_FORMAT = {"type": "json_schema", "json_schema": {"name": "city", "schema": {
    "type": "object", "properties": {"city": {"type": "string"}, "population": {"type": "integer", "minimum": 0}},
    "required": ["city", "population"]}}}


def test_response_format_answers_are_repaired_and_checked_on_a_backend_that_ignores_the_format():
    backend = ScriptedBackend(Completion('{"city": "Paris", "population": 2100000,'))  # cut short, no grammar
    response = chat_completion(parse_request({"messages": [{"role": "user", "content": "Paris?"}],
                                              "response_format": SCHEMA_FORMAT}), _route(backend))
    assert json.loads(response.choices[0].message.content) == {"city": "Paris", "population": 2100000}
    assert response.llmproxy.repairs  # named, e.g. close_brackets


def test_a_response_format_violation_gets_a_second_chance_then_is_an_error():
    backend = ScriptedBackend(*[Completion('{"city": "Paris", "population": -3}')] * 2)
    request = parse_request({"messages": [{"role": "user", "content": "Paris?"}], "response_format": SCHEMA_FORMAT})
    with pytest.raises(OutputParseError, match="population: -3 is less than the minimum of 0"):
        chat_completion(request, _route(backend, retries=1))
    assert len(backend.calls) == 2


def test_with_tools_and_a_response_format_a_text_answer_must_follow_the_format(memgpt_functions):
    backend = ScriptedBackend(Completion("Paris is big."), Completion('{"city": "Paris", "population": 1}'))
    request = _request(memgpt_functions, response_format=SCHEMA_FORMAT)
    response = chat_completion(request, _route(backend, wrapper="chatml-json"))
    assert json.loads(response.choices[0].message.content)["city"] == "Paris"
    assert response.llmproxy.attempts == 2


@pytest.mark.parametrize("fields,words", [({"logprobs": True}, "does not report them; use a backend that does "
                                                                 "\\(embedded, llamacpp\\)"),
                                          ({"top_logprobs": 3}, "top_logprobs needs logprobs")])
def test_logprobs_are_refused_clearly_where_the_backend_has_none(fields, words):
    request = parse_request({"messages": [{"role": "user", "content": "hi"}], **fields})
    with pytest.raises(InvalidRequestError, match=words):
        plan(request, _route(ScriptedBackend()))
    plan(parse_request({"messages": [{"role": "user", "content": "hi"}], "logprobs": False}), _route(ScriptedBackend()))


def test_logprobs_come_back_where_the_backend_reports_them():
    from llmproxy.backends.base import Capabilities, TokenLogprob

    backend = ScriptedBackend(Completion("Hi", logprobs=(TokenLogprob("Hi", -0.1, (("Hi", -0.1), ("Hey", -2.5))),)))
    backend.capabilities = Capabilities(logprobs=True)
    request = parse_request({"messages": [{"role": "user", "content": "hi"}], "logprobs": True, "top_logprobs": 1})
    response = chat_completion(request, _route(backend))
    assert backend.calls[0][1].logprobs == 1
    token = response.choices[0].logprobs.content[0]
    assert (token.token, token.logprob, token.bytes) == ("Hi", -0.1, [72, 105])
    assert [(t.token, t.logprob) for t in token.top_logprobs] == [("Hi", -0.1)]


WEATHER = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


@pytest.mark.parametrize("grammar,wrapper,tools,choice,streams", [
    ("auto", "hermes", WEATHER, "auto", True),  # the syntax's own grammar writes the calls
    ("none", "hermes", WEATHER, "auto", False),  # unconstrained: repaired and checked before they are sent
    ("json", "hermes", WEATHER, "auto", False),  # a grammar file of the route's, not the syntax's
    ("auto", "hermes", WEATHER, "none", False),  # plain text
    ("auto", "chatml", None, "auto", False),  # MemGPT's tools: the heartbeat rule may add an argument
])
def test_calls_stream_as_written_only_when_a_grammar_writes_them(memgpt_functions, grammar, wrapper, tools, choice,
                                                                 streams):
    tools = tools or [{"type": "function", "function": f} for f in memgpt_functions]
    route = Route(name="test", backend=ScriptedBackend(grammar=True), wrapper=load_wrapper(wrapper).wrapper,
                  grammar=grammar, context_window=4096)
    planned = plan(_request(memgpt_functions, tools=tools, tool_choice=choice), route)
    assert streams_calls(planned) is streams


def test_magistral_reasons_in_think_tags_then_calls(memgpt_functions):
    answer = '[THINK]The user wants the weather.[/THINK]Checking.[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}'
    backend = ScriptedBackend(Completion(answer + "</s>"))
    response = chat_completion(_request(memgpt_functions, tools=WEATHER), _route(backend, "magistral"))
    message = response.choices[0].message
    assert message.reasoning_content == message.reasoning == "The user wants the weather."
    assert message.content == "Checking."
    assert [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls] == [
        ("get_weather", {"city": "Paris"})]


def test_parallel_calls_cut_at_the_token_limit_keep_the_whole_ones(memgpt_functions):
    whole = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "%s"}}\n</tool_call>\n'
    answer = whole % "Paris" + whole % "Rome" + '<tool_call>\n{"name": "get_weather", "arguments": {"ci'
    backend = ScriptedBackend(Completion(answer, "length"))
    response = chat_completion(_request(memgpt_functions, tools=WEATHER), _route(backend, "hermes"))
    assert response.choices[0].finish_reason == "length" and len(backend.calls) == 1
    assert [json.loads(c.function.arguments) for c in response.choices[0].message.tool_calls] == [
        {"city": "Paris"}, {"city": "Rome"}]
    assert response.llmproxy.repairs[-1] == "drop_cut_call"


def test_a_cut_last_call_that_is_still_whole_is_kept(memgpt_functions):
    whole = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "%s"}}\n</tool_call>\n'
    answer = whole % "Paris" + '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Ro'
    response = chat_completion(_request(memgpt_functions, tools=WEATHER),
                               _route(ScriptedBackend(Completion(answer, "length")), "hermes"))
    assert [json.loads(c.function.arguments) for c in response.choices[0].message.tool_calls] == [
        {"city": "Paris"}, {"city": "Ro"}]  # a repair closed it: schema-valid, so OpenAI's partial call
    assert "drop_cut_call" not in response.llmproxy.repairs
