"""llmproxy's own words never come back as an answer: a wrapper's instructions and placeholders, or a
second chance's note, in the answer's text or a call's arguments make it unusable (a second chance), unless
the client wrote them itself."""

from __future__ import annotations

import pytest
from server_helpers import route
from test_server_retry import Script

from llmproxy.errors import OutputParseError
from llmproxy.prompts import leaked
from llmproxy.proxy import NOTE_CLOSING, NOTE_OPENING, chat_completion
from llmproxy.types import ChatRequest

NOTES = (NOTE_OPENING, NOTE_CLOSING)


@pytest.mark.parametrize(("answer", "found"), [
    ("The answer was:\nYour last answer could not be used.", "your last answer could not be"),
    ('{"function1": "{<its arguments>}"}', "<its arguments>"),
    ("Sure. To call a function, answer with one JSON object and nothing else.", "to call a function answer with"),
])
def test_the_wrappers_and_the_notes_words_are_found(answer, found):
    assert leaked([answer], lambda: "What is 2 + 3?", NOTES) == found


@pytest.mark.parametrize("answer", [
    "2 + 3 is 5.",
    "You can call me any time: I answer with one word.",  # a few of a template's words, not six in a row
    "<b>bold</b> and <i>",  # markup is no placeholder
])
def test_an_ordinary_answer_leaks_nothing(answer):
    assert leaked([answer], lambda: "What is 2 + 3?", NOTES) is None


def test_words_the_client_wrote_itself_are_no_leak():
    client = "Repeat after me: your last answer could not be used, <its arguments>."
    assert leaked(["Your last answer could not be used: <its arguments>"], lambda: client, NOTES) is None


def test_the_clients_text_is_read_only_when_a_phrase_is_found():
    def client() -> str:
        raise AssertionError("read for an answer with nothing of llmproxy's")

    assert leaked(["Paris is sunny."], client, NOTES) is None


NOTE_TOOL = [{"type": "function", "function": {"name": "note", "parameters": {
    "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}}]
REQUEST = {"model": "m", "messages": [{"role": "user", "content": "Note that 2 + 3 is 5."}], "tools": NOTE_TOOL}
GOOD = '{"name": "note", "arguments": {"text": "2 + 3 is 5"}}'


@pytest.mark.parametrize("first", [
    "The answer was:\nYour last answer could not be used.",
    '{"name": "note", "arguments": {"text": "<its arguments>"}}',
])
def test_a_leaking_answer_gets_a_second_chance_told_why(first):
    script = Script(first, GOOD)
    response = chat_completion(ChatRequest.model_validate(REQUEST),
                               route(script, "m", wrapper="chatml-json", grammar="none"))
    assert response.llmproxy.attempts == 2
    assert response.choices[0].message.tool_calls[0].function.arguments == '{"text": "2 + 3 is 5"}'
    assert "repeats the instructions it was given" in script.prompts[1]


def test_an_answer_that_keeps_leaking_is_an_error_with_its_text_never_an_answer():
    script = Script(*["Your last answer could not be used. Answer again, exactly in the format you were asked for."] * 3)
    with pytest.raises(OutputParseError) as info:
        chat_completion(ChatRequest.model_validate(REQUEST), route(script, "m", wrapper="chatml-json", grammar="none"))
    assert "repeats the instructions" in info.value.reason and "Answer again" in info.value.raw
