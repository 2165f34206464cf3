"""The server gives an unusable answer its second chances, streamed or not, and says so; a pool member that
fails one hands it to another."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest
from pool_helpers import SlotServer, check, pool_of
from server_helpers import MEMGPT_TOOLS, route, running
from werkzeug import Request, Response

from llmproxy.backends.base import Backend, Completion, GenerationParams, StreamDelta

TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}]
BAD = '{"name": "fly_to_moon", "arguments": {}}'
GOOD = '{"name": "add", "arguments": {"a": 2, "b": 3}}'


class Script(Backend):
    """Answers with the next text of its script, and keeps the prompts it was sent."""

    name = "script"

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.prompts: list[str] = []

    def complete(self, prompt: str, params: GenerationParams) -> Completion:
        self.prompts.append(prompt)
        return Completion(self.answers.pop(0), "stop", 10, 10)

    def stream(self, prompt: str, params: GenerationParams) -> Iterator[StreamDelta]:
        text = self.complete(prompt, params).text
        yield StreamDelta(text[:10])
        yield StreamDelta(text[10:], "stop", 10, 10)


def ask(script: Script, *, stream: bool):
    with running({"m": route(script, "m", wrapper="chatml-json", grammar="none")}) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
        messages = [{"role": "user", "content": "2 + 3?"}]
        if not stream:
            return client.chat.completions.create(model="m", messages=messages, tools=TOOLS, tool_choice="required")
        chunks = list(client.chat.completions.create(model="m", messages=messages, tools=TOOLS,
                                                     tool_choice="required", stream=True))
        return chunks


def test_a_second_chance_is_told_what_was_wrong():
    script = Script(BAD, GOOD)
    response = ask(script, stream=False)
    assert response.choices[0].message.tool_calls[0].function.name == "add"
    assert response.model_extra["llmproxy"]["attempts"] == 2
    assert "fly_to_moon" in script.prompts[1] and "fly_to_moon" not in script.prompts[0]


def test_after_the_last_chance_the_error_is_a_422():
    with pytest.raises(openai.UnprocessableEntityError, match="fly_to_moon"):
        ask(Script(BAD, BAD, BAD), stream=False)


def test_a_stream_retries_before_anything_of_the_answer_was_sent():
    chunks = ask(Script(BAD, GOOD), stream=True)
    calls = [c.choices[0].delta.tool_calls for c in chunks if c.choices and c.choices[0].delta.tool_calls]
    assert calls[0][0].function.name == "add"


class FailsItsSecondChance(SlotServer):
    """A pool member whose first answer is no call at all, and which then fails (HTTP 500)."""

    def _completion(self, request: Request) -> Response:
        if self.bodies:
            self.bodies.append(request.get_json())
            return Response("overloaded", status=500)
        return super()._completion(request)


@pytest.mark.parametrize("stream", [False, True])
def test_a_member_that_fails_a_second_chance_hands_that_second_chance_to_another(stream):
    """One rule, streamed or not: the second chance (told what was wrong) moves to another member as
    it is; it does not start the request over."""
    first, other = FailsItsSecondChance(), SlotServer()
    first.unusable = 1
    other.busy = other.slots - 1  # the busier one: the request starts on ``first``
    try:
        routes, pools = pool_of([first, other])
        with running(routes, pools=pools) as server:
            check(server)
            client = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
            asked = {"model": "pool", "messages": [{"role": "user", "content": "hi"}], "tools": MEMGPT_TOOLS}
            if stream:
                chunks = list(client.chat.completions.create(**asked, stream=True))
                names = [call.function.name for chunk in chunks if chunk.choices and chunk.choices[0].delta.tool_calls
                         for call in chunk.choices[0].delta.tool_calls if call.function.name]
            else:
                message = client.chat.completions.create(**asked).choices[0].message
                names = [call.function.name for call in message.tool_calls]
    finally:
        first.stop()
        other.stop()
    assert names == ["send_message"]
    assert len(first.bodies) == 2 and len(other.bodies) == 1
    assert "I would rather chat." in other.bodies[0]["prompt"]  # the second chance itself
