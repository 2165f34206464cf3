"""Escalation: a model names ``escalate_to``; an answer still unusable after its second chances is asked
again of that model, once, and the response, the log line and /metrics say so."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import httpx
import openai
import pytest
from server_helpers import route, running

from llmproxy.backends.base import Backend, Completion, GenerationParams, StreamDelta
from llmproxy.errors import ConfigurationError
from llmproxy.server.config import serving

TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}]
BAD = '{"name": "fly_to_moon", "arguments": {}}'
GOOD = '{"name": "add", "arguments": {"a": 2, "b": 3}}'
MESSAGES = [{"role": "user", "content": "2 + 3?"}]


class Script(Backend):
    """Answers every prompt with ``text``, and counts the prompts."""

    name = "script"

    def __init__(self, text: str) -> None:
        self.text = text
        self.prompts: list[str] = []

    def complete(self, prompt: str, params: GenerationParams) -> Completion:
        self.prompts.append(prompt)
        return Completion(self.text, "stop", 10, 10)

    def stream(self, prompt: str, params: GenerationParams) -> Iterator[StreamDelta]:
        yield StreamDelta(self.complete(prompt, params).text, "stop", 10, 10)


def served(small_model: Script, big_model: Script, **escalations: str):
    routes = {name: route(script, name, wrapper="chatml-json", grammar="none")
              for name, script in (("small", small_model), ("big", big_model))}
    return running(routes, escalations=escalations)


def ask(server):
    api = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
    return api.chat.completions.create(model="small", messages=MESSAGES, tools=TOOLS, tool_choice="required")


def test_an_answer_unusable_after_its_second_chances_is_asked_of_the_bigger_model(caplog):
    small, big = Script(BAD), Script(GOOD)
    with served(small, big, small="big") as server, caplog.at_level(logging.INFO, logger="llmproxy.server"):
        response = ask(server)
        metrics = httpx.get(f"http://127.0.0.1:{server.port}/metrics").text
    assert response.choices[0].message.tool_calls[0].function.name == "add"
    assert response.llmproxy["escalated_from"] == {"model": "small", "error": "invalid_function_call"}
    assert len(small.prompts) == 3 and len(big.prompts) == 1  # its two second chances, then the big model once
    assert "fly_to_moon" not in big.prompts[0]  # asked afresh, not with the small model's mistakes
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("chat.completions"))
    assert "model=big" in line and "escalated=small>big" in line
    assert 'llmproxy_escalations_total{model="small",to="big"} 1.0' in metrics


def test_escalation_happens_once_even_when_the_models_escalate_to_each_other():
    small, big = Script(BAD), Script(BAD)
    with served(small, big, small="big", big="small") as server:
        with pytest.raises(openai.UnprocessableEntityError, match="fly_to_moon"):
            ask(server)
    assert len(small.prompts) == 3 and len(big.prompts) == 3


def test_a_usable_answer_is_not_escalated():
    small, big = Script(GOOD), Script(GOOD)
    with served(small, big, small="big") as server:
        assert ask(server).llmproxy["escalated_from"] is None
    assert big.prompts == []


@pytest.mark.parametrize("target,says", [('"nope"', "'nope' is not a served model"), ('"a"', "names the model itself")])
def test_escalate_to_must_name_another_served_model(tmp_path, target, says):
    path = tmp_path / "models.toml"
    path.write_text(f'[models.a]\nbackend = "llamacpp"\ncontext_window = 64\nescalate_to = {target}\n')
    with pytest.raises(ConfigurationError, match=says):
        serving(path, {})


def ask_streamed(server) -> list:
    api = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
    return list(api.chat.completions.create(model="small", messages=MESSAGES, tools=TOOLS, tool_choice="required",
                                            stream=True))


def test_a_streamed_answer_that_sent_nothing_yet_is_escalated_in_the_same_stream(caplog):
    # Without a grammar a call is sent only once checked: nothing of the small model's answer reached the
    # client when it proved unusable, so the big model's answer is the stream's, from its first event.
    small, big = Script(BAD), Script(GOOD)
    with served(small, big, small="big") as server, caplog.at_level(logging.INFO, logger="llmproxy.server"):
        chunks = ask_streamed(server)
        metrics = httpx.get(f"http://127.0.0.1:{server.port}/metrics").text
    assert len(small.prompts) == 3 and len(big.prompts) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len({chunk.id for chunk in chunks}) == 1  # one answer, whichever model wrote it
    calls = [call for chunk in chunks if chunk.choices for call in chunk.choices[0].delta.tool_calls or []]
    assert calls[0].function.name == "add"
    assert "".join(call.function.arguments or "" for call in calls) == '{"a": 2, "b": 3}'
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("chat.completions"))
    assert "model=big" in line and "escalated=small>big" in line
    assert 'llmproxy_escalations_total{model="small",to="big"} 1.0' in metrics


def test_a_streamed_answer_whose_text_was_sent_is_not_escalated():
    # The small model's words went out before its call proved unusable: they cannot be taken back, so the
    # stream ends with the error event and the big model is not asked.
    small, big = Script('Let me see. {"name": "fly_to_moon", "arguments": {}}'), Script(GOOD)
    with served(small, big, small="big") as server:
        with pytest.raises(openai.APIError, match="fly_to_moon"):
            ask_streamed(server)
    assert len(small.prompts) == 1 and big.prompts == []
