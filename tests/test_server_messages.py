"""POST /v1/messages end to end: Anthropic's official SDK against a real running server whose backend
writes scripted answers (Hermes call syntax; Qwen 3's for reasoning), so every assertion is about what
the face made of a known answer. The translations themselves are tested in tests/faces/.
"""

from __future__ import annotations

import json
import re

import anthropic
import httpx
import pytest
from server_helpers import ScriptedBackend, route, running

WEATHER = {"name": "get_weather", "description": "The weather in a city.",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
TIME = {"name": "get_time", "description": "The time in a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
USER = [{"role": "user", "content": "Weather in Paris?"}]


def call(name: str, arguments: dict) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def serve(backend: ScriptedBackend, wrapper: str = "hermes", *, context_window: int = 4096, **options):
    # As `llmproxy serve` with flags: the one model answers every name (Claude Code sends Claude's).
    return running({"local": route(backend, "local", wrapper=wrapper, context_window=context_window)},
                   default_model="local", **options)


def client(server, **options) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.base_url.removesuffix("/v1"), api_key=options.pop("api_key", "unused"),
                               max_retries=0, **options)


def test_a_text_answer_is_a_message_that_ends_its_turn():
    with serve(ScriptedBackend("Bonjour!")) as server:
        message = client(server).messages.create(model="claude-sonnet-4-6", max_tokens=100, messages=USER)
    assert message.id.startswith("msg_") and message.model == "claude-sonnet-4-6"
    assert [(block.type, block.text) for block in message.content] == [("text", "Bonjour!")]
    assert message.stop_reason == "end_turn" and message.usage.input_tokens > 0 and message.usage.output_tokens > 0


def test_a_tool_loop_uses_the_tool_then_answers_with_the_result_in_the_prompt():
    backend = ScriptedBackend(["Let me check.\n" + call("get_weather", {"city": "Paris"}), "21 degrees."])
    with serve(backend) as server:
        api = client(server)
        first = api.messages.create(model="claude-x", max_tokens=100, messages=USER, tools=[WEATHER])
        assert first.stop_reason == "tool_use"
        text, use = first.content
        assert text.text == "Let me check." and (use.name, use.input) == ("get_weather", {"city": "Paris"})
        second = api.messages.create(model="claude-x", max_tokens=100, tools=[WEATHER], messages=[
            *USER, {"role": "assistant", "content": [block.model_dump() for block in first.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny, 21",
                                          "cache_control": {"type": "ephemeral"}}]}])
    assert second.content[0].text == "21 degrees." and second.stop_reason == "end_turn"
    assert "sunny, 21" in backend.prompts[1]


@pytest.mark.parametrize("answer", ["Just text.", "Both.\n" + call("get_weather", {"city": "Oslo"}) + "\n"
                                    + call("get_time", {"city": "Oslo"})])
def test_the_streamed_final_message_equals_the_whole_one(answer):
    with serve(ScriptedBackend(lambda prompt: answer)) as server:
        api = client(server)
        whole = api.messages.create(model="m", max_tokens=200, messages=USER, tools=[WEATHER, TIME])
        with api.messages.stream(model="m", max_tokens=200, messages=USER, tools=[WEATHER, TIME]) as stream:
            final = stream.get_final_message()
    shape = lambda message: [block.model_dump(exclude={"id", "citations"}) for block in message.content]  # noqa: E731
    assert shape(final) == shape(whole) and final.stop_reason == whole.stop_reason
    assert final.usage.output_tokens == whole.usage.output_tokens


@pytest.mark.parametrize("tool_choice, offered, grammar_names", [
    ({"type": "none"}, set(), None),
    ({"type": "auto"}, {"get_weather", "get_time"}, {"get_weather", "get_time"}),
    ({"type": "any"}, {"get_weather", "get_time"}, {"get_weather", "get_time"}),
    ({"type": "tool", "name": "get_time"}, {"get_weather", "get_time"}, {"get_time"}),
])
def test_every_tool_choice_does_what_it_says(tool_choice, offered, grammar_names):
    backend = ScriptedBackend(call("get_time", {"city": "Oslo"}) if grammar_names else "No tools.")
    with serve(backend) as server:
        message = client(server).messages.create(model="m", max_tokens=100, messages=USER, tools=[WEATHER, TIME],
                                                 tool_choice=tool_choice)
    prompt, grammar = backend.prompts[0], backend.params[0].grammar
    assert {name for name in ("get_weather", "get_time") if name in prompt} == offered
    if grammar_names is None:
        assert grammar is None and message.content[0].text == "No tools."
    else:
        assert {name for name in ("get_weather", "get_time") if name in grammar} == grammar_names
        assert message.content[-1].type == "tool_use" and message.content[-1].name == "get_time"


def test_disable_parallel_tool_use_keeps_one_call():
    two = call("get_time", {"city": "Oslo"}) + "\n" + call("get_time", {"city": "Rome"})
    with serve(ScriptedBackend([two, two])) as server:
        api = client(server)
        one = api.messages.create(model="m", max_tokens=100, messages=USER, tools=[TIME],
                                  tool_choice={"type": "auto", "disable_parallel_tool_use": True})
        both = api.messages.create(model="m", max_tokens=100, messages=USER, tools=[TIME])
    assert [block.input["city"] for block in one.content if block.type == "tool_use"] == ["Oslo"]
    assert [block.input["city"] for block in both.content if block.type == "tool_use"] == ["Oslo", "Rome"]


def test_reasoning_comes_back_as_a_signed_thinking_block_and_thinking_off_reaches_the_template():
    backend = ScriptedBackend(["<think>The user greets me.</think>\n\nHello!", "Hi."])
    with serve(backend, wrapper="qwen3") as server:
        api = client(server)
        message = api.messages.create(model="m", max_tokens=100, messages=[{"role": "user", "content": "Hi"}],
                                      thinking={"type": "enabled", "budget_tokens": 1024})
        api.messages.create(model="m", max_tokens=100, messages=[{"role": "user", "content": "Hi"}],
                            thinking={"type": "disabled"})
    thinking, text = message.content
    assert (thinking.type, thinking.thinking) == ("thinking", "The user greets me.") and thinking.signature
    assert text.text == "Hello!"
    assert backend.prompts[1].endswith("<think>\n\n</think>\n\n")


def test_count_tokens_answers_input_tokens_only():
    with serve(ScriptedBackend("unused")) as server:
        api = client(server)
        short = api.messages.count_tokens(model="m", messages=USER)
        long = api.messages.count_tokens(model="m", messages=USER, tools=[WEATHER, TIME], system="Be brief.")
        raw = httpx.post(server.base_url + "/messages/count_tokens", json={"model": "m", "messages": USER}).json()
    assert 0 < short.input_tokens < long.input_tokens and raw == {"input_tokens": short.input_tokens}


def test_models_list_in_anthropics_shape_and_the_root_answers_head():
    with serve(ScriptedBackend("unused")) as server:
        models = list(client(server).models.list())
        heads = [httpx.head(server.base_url.removesuffix("/v1") + path).status_code for path in ("/", "/api/hello")]
    assert [model.id for model in models] == ["local"] and models[0].type == "model"
    assert heads == [200, 200]


def test_a_prompt_over_the_context_window_is_a_413_saying_prompt_is_too_long():
    with serve(ScriptedBackend("unused"), context_window=64) as server:
        api = client(server)
        for stream in (False, True):
            with pytest.raises(anthropic.APIStatusError) as error:
                api.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "word " * 300}],
                                    stream=stream)
            assert error.value.status_code == 413
            assert re.fullmatch(r"prompt is too long: \d+ tokens > 64 maximum", error.value.body["error"]["message"])
            assert error.value.body["error"]["type"] == "request_too_large"


def test_the_key_is_read_from_x_api_key_or_bearer_and_a_wrong_one_is_an_anthropic_401():
    with serve(ScriptedBackend("Yes."), api_key="sk-right") as server:
        assert client(server, api_key="sk-right").messages.create(model="m", max_tokens=9, messages=USER).content
        assert client(server, api_key=None, auth_token="sk-right").messages.create(
            model="m", max_tokens=9, messages=USER).content
        with pytest.raises(anthropic.AuthenticationError) as error:
            client(server, api_key="sk-wrong").messages.create(model="m", max_tokens=9, messages=USER)
    assert error.value.body["type"] == "error" and error.value.body["error"]["type"] == "authentication_error"


def test_claude_codes_changing_attribution_block_leaves_the_prompt_unchanged_and_beta_query_is_served():
    backend = ScriptedBackend(["a", "b"])
    with serve(backend) as server:
        for cch in ("1a2b3", "9f8e7"):
            system = [{"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1.3; cc_entrypoint=cli; cch={cch};"},
                      {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}]
            answer = httpx.post(server.base_url + "/messages?beta=true", headers={"anthropic-version": "2023-06-01"},
                                json={"model": "claude-opus-4", "max_tokens": 10, "system": system,
                                      "messages": [*USER, {"role": "system", "content": "Mind the date."}]})
            assert answer.status_code == 200, answer.text
    assert backend.prompts[0] == backend.prompts[1] and "You are Claude Code." in backend.prompts[0]
    assert "Mind the date." in backend.prompts[0]


def test_a_long_prompt_read_gets_ping_events(monkeypatch):
    monkeypatch.setattr("llmproxy.server.responses.KEEPALIVE_SECONDS", 0.05)
    with serve(ScriptedBackend("Done.", first_delay=0.5)) as server:
        with httpx.stream("POST", server.base_url + "/messages", timeout=10, json={
                "model": "m", "max_tokens": 10, "messages": USER, "stream": True}) as answer:
            names = [line[7:] for line in answer.iter_lines() if line.startswith("event: ")]
    assert names[0] == "message_start" and names.count("ping") >= 4 and names[-1] == "message_stop"
