"""What a chosen call goes on with, proposed as a draft (llmproxy.backends._call_draft) - without the model:
here a token is one character, so a proposal reads as the text it proposes.

Whether the model takes a proposal, and that nothing it does not draw is written, is for the model tests
(tests/test_decide_embedded.py); here: what is proposed after a given text."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from llmproxy.backends._call_draft import ArgumentsScanner, CallDraft, CallStyle
from llmproxy.syntaxes.base import ChoosableFunction

OPENING = '{"name": "get_weather", "arguments": {'
WEATHER = ChoosableFunction("get_weather", "", "root ::= ...", OPENING, {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]},
                   "days": {"type": "integer"}, "hourly": {"type": "boolean"}},
    "required": ["city", "unit"]})
EVENT = ChoosableFunction("create_event", "", "root ::= ...", OPENING.replace("get_weather", "create_event"), {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "start": {"type": "object", "properties": {"date": {"type": "string"}, "time": {"type": "string"}}},
        "guests": {"type": "array", "items": {"type": "object", "properties": {
            "name": {"type": "string"}, "seats": {"type": "integer"}}}},
        "note": {"type": "string"}}})
PROMPT = "PROMPT"


class Answer:
    """A CallDraft fed an answer as llama-cpp-python feeds it: the prompt and the tokens drawn so far."""

    def __init__(self, function: ChoosableFunction | None, style: CallStyle | None = None) -> None:
        self.draft = CallDraft(lambda: function, lambda tokens: "".join(map(chr, tokens)).encode("utf-8"),
                               lambda text: [ord(c) for c in text], style)
        self.written = ""

    def write(self, text: str) -> str:
        """Adds ``text`` to the answer (its first character alone: the first token drawn); what is
        proposed after it."""
        if not self.written and len(text) > 1:
            self.write(text[0])
            text = text[1:]
        self.written += text
        proposal = self.draft(np.array([ord(c) for c in PROMPT + self.written], dtype=np.intc))
        assert self.draft.proposed == len(proposal)
        return "".join(map(chr, proposal))


def _after(function: ChoosableFunction, text: str) -> str:
    return Answer(function).write(text)


# --- the opening ---------------------------------------------------------------------------------


def test_the_rest_of_the_opening_is_proposed_from_the_first_token_on():
    answer = Answer(WEATHER)
    assert answer.write("{") == '"name": "get_weather", "arguments": {'
    assert answer.write('"name": "get_w') == 'eather", "arguments": {'  # a draft the model took in part


@pytest.mark.parametrize("written", ['[{"name": ', '{"name":"get_weather"', '{"name": "get_time", "arguments": {'])
def test_nothing_is_proposed_for_an_answer_that_leaves_the_opening(written):
    answer = Answer(WEATHER)
    assert answer.write(written) == ""
    assert answer.write('"city": "Paris", ') == ""  # and nothing later: these are not its arguments


def test_nothing_is_proposed_where_the_function_is_not_known():
    answer = Answer(None)  # an answer in text, or a call whose function the model names
    assert answer.write("{") == ""
    assert answer.write('"name": "get_weather", "arguments": {"') == ""


# --- the arguments' keys ----------------------------------------------------------------------


def test_the_first_key_is_proposed_once_its_quote_is_written_and_the_next_with_the_spacing_used():
    answer = Answer(WEATHER)
    answer.write(OPENING)
    assert answer.write("\n    ") == ""  # the model's own spacing: not known before it writes a key
    assert answer.write('"') == 'city":'
    assert answer.write('city": "Paris",') == '\n    "unit": "'  # as the model spaced "city"
    assert answer.write('\n    "unit": "celsius"') == ""  # in a value, or after one: a comma or the end
    assert answer.write(",") == '\n    "days":'  # not a string: the model writes the value's own spacing
    assert answer.write('\n    "days": 3,') == '\n    "hourly":'
    assert answer.write('\n    "hourly": true') == ""
    assert answer.write(",") == ""  # no property after the last


@pytest.mark.parametrize(("answer", "proposed"), [
    ('"city":"Paris",', '"unit":"'),  # compact
    ('"city" : "Paris",', '"unit" : "'),  # spaced around the colon
    ('\n\t"city": "Paris"\n,', '\n\t"unit": "'),  # the comma on a line of its own
    ('\n\t"city": "Paris"\n,\n\t', '"unit": "'),  # the spacing written: the key
    ('\n    "city": "Paris",\n\t', ''),  # spaced otherwise than the key before: no guess
    ('"city": "Paris", ', ''),  # compact: "a": 1, "b": 2 - the key after a comma is spaced apart
    ('"city": "Paris", "unit": "celsius", ', '"days":'),  # and once seen, known
])
def test_a_key_is_proposed_with_the_spacing_around_the_key_before_it(answer, proposed):
    assert _after(WEATHER, OPENING + answer) == proposed


def test_keys_follow_the_schemas_order_from_the_last_one_written():
    # The grammar keeps the schema's order and may leave out what is not required: after "unit", "days".
    assert _after(WEATHER, OPENING + '"city": "Paris", "unit": "celsius", ') == '"days":'
    assert _after(WEATHER, OPENING + '"city": "Paris", "days": 3, ') == '"hourly":'
    assert _after(WEATHER, OPENING + '"city": "Paris", "zzz": 3, ') == ""  # a key the schema does not know
    assert _after(WEATHER, OPENING + '"city": "Paris", "') == 'unit": "'
    assert _after(WEATHER, OPENING + '"city": "Paris", "un') == 'it": "'  # a key written in part
    assert _after(WEATHER, OPENING + '"city": "Paris", "x') == ""


def test_nested_objects_and_arrays_of_objects_have_their_own_keys_and_spacing():
    start = OPENING.replace("get_weather", "create_event") + '\n  "title": "Dentist",\n  "start": {\n    "'
    assert _after(EVENT, start) == 'date":'  # the first key at this depth
    assert _after(EVENT, start + 'date": "2024-09-03",') == '\n    "time": "'
    closed = start + 'date": "2024-09-03",\n    "time": "10:00"\n  },'
    assert _after(EVENT, closed) == '\n  "guests":'  # back at the top: its own spacing
    guests = closed + '\n  "guests": [{"'
    assert _after(EVENT, guests) == 'name":'  # an array's objects: the items' keys
    assert _after(EVENT, guests + 'name": "Ana", "') == 'seats":'
    assert _after(EVENT, guests + 'name": "Ana", "seats": 2}, {"') == 'name": "'
    assert _after(EVENT, guests + 'name": "Ana", "seats": 2}, {"name": "Bo", "seats": 1}],') == '\n  "note": "'


def test_the_next_calls_first_key_is_proposed_with_its_opening_spaced_as_the_last_call_was():
    style = CallStyle()  # one per loaded model
    first = Answer(FORECAST, style)
    assert first.write("{") == '"name": "get_weather", "arguments": {'  # no call seen: the opening only
    first.write('"name": "get_weather", "arguments": {\n    "city": "Paris",\n    "unit": "celsius"\n}\n}')
    assert Answer(FORECAST, style).write("{") == '"name": "get_weather", "arguments": {\n    "city": "'
    other = ChoosableFunction("convert", "", "", OPENING.replace("get_weather", "convert"),
                              {"type": "object", "properties": {"amount": {"type": "number"}}})
    assert Answer(other, style).write("{") == '"name": "convert", "arguments": {\n    "amount":'  # not a string
    compact = Answer(FORECAST, style)  # a model that spaces otherwise: what it writes is followed from then on
    compact.write(OPENING + '"city":"Paris",')
    assert compact.write("") == '"unit":"'
    assert Answer(FORECAST, style).write("{") == '"name": "get_weather", "arguments": {"city":"'
    assert Answer(FORECAST).write("{") == '"name": "get_weather", "arguments": {'  # each style its own


# --- what the grammar all but forces: an enum's value, the closing braces ---------------------------

FORECAST = ChoosableFunction("get_weather", "", "root ::= ...", OPENING, {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"]})


def test_an_enum_value_is_proposed_once_only_one_fits_what_was_written():
    assert _after(WEATHER, OPENING + '"city": "Paris", "unit": "') == ""  # two fit: the model's choice
    assert _after(WEATHER, OPENING + '"city": "Paris", "unit": "c') == 'elsius"'
    assert _after(WEATHER, OPENING + '"city": "Paris", "unit": "fahr') == 'enheit"'
    assert _after(WEATHER, OPENING + '"city": "Paris", "unit": "k') == ""  # none fits: the grammar's business
    assert _after(WEATHER, OPENING + '"city": "P') == ""  # no enum


def test_an_enum_with_characters_json_escapes_is_not_proposed():
    odd = ChoosableFunction("f", "", "", OPENING, {"type": "object", "properties": {
        "say": {"enum": ['a "quote"', "a \\ slash", "caf\u00e9"]}}})
    for written in ('"say": "a \\"', '"say": "a \\\\', '"say": "caf'):
        assert _after(odd, OPENING + written) == ""


@pytest.mark.parametrize(("written", "proposed"), [
    ('\n    "city": "Paris",\n    "unit": "celsius"', "\n}\n}"),  # keys on lines of their own: so are the braces
    ('\n    "city": "Paris",\n    "unit": "celsius"\n', "}\n}"),  # the spacing written
    ('"city": "Paris", "unit": "celsius"', "}}"),  # compact
    ('"city": "Paris", "unit": "celsius" ', ""),  # spaced otherwise than guessed: no guess
    ('\n    "city": "Paris",\n    "unit": "c', 'elsius"\n}\n}'),  # the enum's rest, then the braces
    ('\n    "city": "Paris",\n    "unit": "celsius"\n}', "\n}"),  # the call's brace spaced as the arguments'
    ('"city": "Paris", "unit": "celsius"}', "}"),
    ('"city": "Paris", "unit": "celsius"}}', ""),  # all closed
    ('"city": "Paris", "unit": "celsius"} ', ""),  # spaced otherwise
])
def test_after_the_last_property_the_closing_braces_are_proposed_spaced_as_the_keys(written, proposed):
    assert _after(FORECAST, OPENING + written) == proposed


def test_no_closing_is_proposed_before_the_last_property_or_inside_its_value():
    assert _after(FORECAST, OPENING + '"city": "Paris"') == ""  # "unit" may follow
    assert _after(WEATHER, OPENING + '"city": "Paris", "unit": "celsius"') == ""  # "days" may follow
    assert _after(WEATHER, OPENING + '"city": "Paris", "hourly": tru') == ""  # a scalar being written
    assert _after(WEATHER, OPENING + '\n  "city": "Paris",\n  "hourly": true\n') == "}\n}"  # its end shown by spacing
    start = OPENING.replace("get_weather", "create_event") + '"title": "Dentist", "note": "x", "start": {"date": "d"'
    assert _after(EVENT, start) == ""  # the last property of an inner object: only the arguments' end is guessed


def test_text_inside_strings_is_not_read_as_structure():
    tricky = '"city": "Paris, {\\"France\\"}: [1, \\\\",'
    assert _after(WEATHER, OPENING + tricky) == '"unit": "'
    assert _after(WEATHER, OPENING + '"city": "a\\", ') == ""  # still in the string: no key goes there


@pytest.mark.parametrize("rest", ['"city": "Paris", "unit": "celsius"}}', '"city": "Paris"} ,', '"city" "Paris",',
                                  '"city": "Paris": ', "nonsense, "])
def test_nothing_is_proposed_after_the_arguments_or_in_text_that_is_no_json_object(rest):
    assert _after(WEATHER, OPENING + rest) == ""


def test_what_is_proposed_does_not_depend_on_how_the_text_came_in_pieces():
    arguments = {"title": "Lunch, \"big\" {one}", "start": {"date": "2024-09-03", "time": "12:00"},
                 "guests": [{"name": "Ana", "seats": 2}, {"name": "Bo", "seats": 1}], "note": "none"}
    text = OPENING.replace("get_weather", "create_event") + json.dumps(arguments, indent=2)[1:]
    whole = [_after(EVENT, text[:end]) for end in range(1, len(text) + 1)]
    rng = random.Random(7)
    for _ in range(5):
        answer, proposals = Answer(EVENT), {}
        end = 0
        while end < len(text):
            step = rng.randint(1, 6)
            proposals[end + step] = answer.write(text[end:end + step])
            end = min(end + step, len(text))
        for end, proposal in proposals.items():
            assert proposal == whole[min(end, len(text)) - 1]
    keys = [p for end, p in enumerate(whole, start=1) if p and end > len(OPENING)]
    assert len(keys) >= 6  # keys at each depth


def test_a_scanner_needs_no_schema_to_follow_the_text_but_proposes_no_key_without_one():
    scanner = ArgumentsScanner({})
    scanner.feed(b'"a": 1, ')
    assert scanner.next_text() == ""


ODD_SCHEMAS = [
    {"type": "object", "properties": {"a": {"enum": ["x", "xy", 3, None]}, "b": {"const": "k"},
                                      "c": {"type": "array", "items": {"enum": ["p", "q"]}}}},
    {"type": "object", "properties": {"a": {"enum": []}, "b": {"const": 5},
                                      "n": {"type": "object", "properties": {"z": {"enum": ["zz"]}}}}},
    {"type": "object", "properties": {}}, {}, {"properties": "junk"},
    {"type": "object", "properties": {"a": "not a schema", "b": {"enum": "not a list"}}},
]


def test_any_text_under_any_schema_gets_a_proposal_or_none_never_an_error():
    # The scanner runs inside the model's sampling loop: whatever a grammar lets through, and whatever a
    # client's schema says, it must answer with a text (perhaps empty), never raise.
    pieces = list('{}[]":, \n\t\\abxyzkpq0123') + ['"a"', '"b"', '"c"', '"n"', '"z"', "é", "\u2028"]
    rng = random.Random(1)
    style = CallStyle()
    for _ in range(3000):
        scanner = ArgumentsScanner(rng.choice(ODD_SCHEMAS), rng.choice(["", "}", "}}"]),
                                   style if rng.random() < 0.5 else None)
        for _ in range(rng.randint(1, 20)):
            scanner.feed("".join(rng.choice(pieces) for _ in range(rng.randint(1, 4))).encode())
            assert isinstance(scanner.next_text(), str)


def test_a_draft_that_fails_lets_the_answer_go_on_without_drafts(monkeypatch, caplog):
    def broken(self):
        raise KeyError("a bug")

    monkeypatch.setattr(ArgumentsScanner, "next_text", broken)
    answer = Answer(WEATHER)
    assert answer.write(OPENING) == ""  # the opening written, the scanner asked: it fails
    assert "drafting a call failed" in caplog.text
    monkeypatch.undo()
    assert answer.write('"city": "Paris",') == ""  # and is not asked again in this answer
    assert Answer(WEATHER).write(OPENING + '"city": "Paris",') == '"unit": "'  # the next answer drafts again
