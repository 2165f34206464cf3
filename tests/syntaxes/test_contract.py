"""The contract every registered call syntax keeps, checked for each one: a new syntax is tested by
registering it.

- its grammars (call required, optional, one or several calls, with a reasoning block) are accepted by
  llama.cpp, and every answer a random walk through them produces parses back into calls that name an
  allowed function and satisfy its schema - valid by construction;
- where the call is optional, plain text is an answer, and the grammar never lets a trigger word
  appear in it;
- past calls written by ``render_turn`` parse back into the same calls (the model is shown what it
  is asked to write);
- the stream scanner never passes a call's text on as content, and where it streams calls (those
  with JSON arguments) what it streams of any answer the grammar admits is the answer's calls exactly,
  as the response writes them.
"""

from __future__ import annotations

import json
import random
from dataclasses import replace

import jsonschema
import pytest
from grammar_walk import accepts, sample

from llmproxy.grammar import validate_grammar
from llmproxy.syntaxes import SYNTAX_NAMES, create_syntax
from llmproxy.syntaxes._sections import split_reasoning
from llmproxy.syntaxes.base import Reasoning
from llmproxy.types import FunctionCall, FunctionDefinition

FUNCTIONS = [
    FunctionDefinition(name="get_weather", description="Weather now", parameters={
        "type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
        "required": ["city"]}),
    FunctionDefinition(name="add", parameters={
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "number"}, "note": {"type": "string"}},
        "required": ["a", "b"]}),
    FunctionDefinition(name="ping"),
]
SCHEMAS = {f.name: f.parameters for f in FUNCTIONS}
# Per syntax, options as a wrapper would give them (the defaults when absent).
OPTIONS = {"memgpt": {"inner_thoughts": "none", "prime": "open"}}


def syntax_of(name):
    return create_syntax(name, OPTIONS.get(name, {}), "test")


def shape(name, call="required", parallel=False, allowed=None, reasoning=None):
    syntax = syntax_of(name)
    allowed = allowed or [f.name for f in FUNCTIONS]
    made = syntax.shape(call, FUNCTIONS, allowed, named=len(allowed) == 1, parallel=parallel, first_message=False,
                        primed=True)
    return replace(made, reasoning=reasoning) if reasoning else made


# Words that end an argument written as raw text (the xml syntax's), where a grammar has them.
VALUE_ENDS = ("\n</parameter>",)


def markers(grammar):
    """The words a random walk must spell whole to leave free text: the call triggers, the end of a
    reasoning block, and the end of a raw-text argument."""
    ends = tuple(word for word in VALUE_ENDS if word.strip() in grammar.text)
    return (*(grammar.lazy.triggers if grammar.lazy else ()), "</think>", *ends)


def check_calls(answer, allowed, *, several: bool) -> None:
    assert answer.calls, answer
    assert several or len(answer.calls) == 1
    for call in answer.calls:
        assert call.name in allowed
        jsonschema.validate(call.arguments, SCHEMAS[call.name])


# MemGPT's optional call is its thoughts-only object, tested in tests/syntaxes/test_memgpt.py.
CASES = [(name, call, parallel) for name in SYNTAX_NAMES for call in ("required", "optional")
         for parallel in (False, True) if not (name == "memgpt" and call == "optional")]


@pytest.mark.parametrize("name,call,parallel", CASES)
def test_every_answer_the_grammar_admits_parses_into_valid_calls(name, call, parallel):
    answer_shape = shape(name, call, parallel)
    grammar = answer_shape.syntax.grammar(answer_shape)
    validate_grammar(grammar.text)
    rng = random.Random(f"{name}/{call}/{parallel}")
    texts = 0
    literals = json.dumps([f.model_dump() for f in FUNCTIONS]) + "".join(grammar.lazy.triggers if grammar.lazy else ())
    for _ in range(16):
        text = answer_shape.prefix + sample(grammar.text, rng, literals, words=markers(grammar))
        answer = answer_shape.syntax.parse(text[len(answer_shape.prefix):], answer_shape)
        if not answer.calls:
            assert call == "optional", f"a required call is missing from {text!r}"
            assert answer_shape.syntax.call_start(text, answer_shape) < 0
            texts += 1
            continue
        check_calls(answer, answer_shape.allowed, several=answer_shape.parallel)


@pytest.mark.parametrize("name", SYNTAX_NAMES)
def test_the_lazy_grammar_starts_at_a_trigger_and_admits_the_same_calls(name):
    answer_shape = shape(name, "optional", parallel=True)
    grammar = answer_shape.syntax.grammar(answer_shape)
    if grammar.lazy is None:
        assert answer_shape.syntax.name == "memgpt"  # one JSON object, no call section
        return
    validate_grammar(grammar.lazy.text)
    rng = random.Random(name)
    for _ in range(8):
        section = sample(grammar.lazy.text, rng, "".join(grammar.lazy.triggers), words=markers(grammar))
        assert any(section.startswith(trigger) for trigger in grammar.lazy.triggers), section
        assert accepts(grammar.text, "Let me see. " + section)
        check_calls(answer_shape.syntax.parse(section, answer_shape), answer_shape.allowed, several=True)


@pytest.mark.parametrize("name", [n for n in SYNTAX_NAMES if n != "memgpt"])
def test_plain_text_is_an_answer_where_the_call_is_optional(name):
    answer_shape = shape(name, "optional")
    grammar = answer_shape.syntax.grammar(answer_shape)
    text = "The weather is fine today; no function needed."
    assert accepts(grammar.text, text)
    assert answer_shape.syntax.parse(text, answer_shape).content == text
    assert not accepts(shape(name, "required").syntax.grammar(shape(name, "required")).text, text)


@pytest.mark.parametrize("name", [n for n in SYNTAX_NAMES if n != "memgpt"])
def test_a_named_choice_admits_only_that_function(name):
    answer_shape = shape(name, "required", allowed=["add"])
    grammar = answer_shape.syntax.grammar(answer_shape)
    rng = random.Random(name)
    for _ in range(6):
        answer = answer_shape.syntax.parse(sample(grammar.text, rng, words=markers(grammar)), answer_shape)
        assert {call.name for call in answer.calls} == {"add"}


@pytest.mark.parametrize("name", [n for n in SYNTAX_NAMES if n != "memgpt"])
def test_reasoning_comes_first_and_is_not_content(name):
    opened = shape(name, "required", reasoning=Reasoning(opened=True))
    grammar = opened.syntax.grammar(opened).text
    rng = random.Random(name)
    for _ in range(6):
        text = sample(grammar, rng, json.dumps([f.model_dump() for f in FUNCTIONS]),
                      words=("</think>", *markers(opened.syntax.grammar(shape(name, "optional")))))
        assert "</think>" in text
        rest = text.split("</think>", 1)[1]
        check_calls(opened.syntax.parse(rest, opened), opened.allowed, several=False)
    closed = shape(name, "optional", reasoning=Reasoning())
    assert accepts(closed.syntax.grammar(closed).text, "<think>Nothing to call.</think>\nHello!")


CALLS = [FunctionCall(name="get_weather", arguments='{"city": "Paris", "unit": "c"}'),
         FunctionCall(name="add", arguments='{"a": 2, "b": 0.5}')]


@pytest.mark.parametrize("name", SYNTAX_NAMES)
def test_past_calls_are_written_as_the_model_is_asked_to_write_them(name):
    syntax = syntax_of(name)
    several = syntax.parallel_calls
    calls = CALLS if several else CALLS[:1]
    answer_shape = shape(name, "required", parallel=several)
    turn = syntax.render_turn("", calls)
    written = turn.text + "\n".join(turn.calls)
    primed = answer_shape.prefix.lstrip()  # the prompt ends with the prefix: the answer continues it
    assert written.startswith(primed)
    answer = syntax.parse(written[len(primed):], answer_shape)
    assert [(c.name, c.arguments) for c in answer.calls] == [(c.name, json.loads(c.arguments)) for c in calls]
    assert accepts(syntax.grammar(answer_shape).text, written[len(primed):])


@pytest.mark.parametrize("name", [n for n in SYNTAX_NAMES if n != "memgpt"])
def test_the_scanner_never_streams_a_call_as_content(name):
    answer_shape = shape(name, "optional", parallel=True)
    turn = answer_shape.syntax.render_turn("", CALLS if answer_shape.parallel else CALLS[:1])
    text = "Checking two things.\n" + "\n".join(turn.calls)
    rng = random.Random(name)
    for _ in range(6):
        scanner = answer_shape.syntax.scanner(answer_shape)
        cuts = sorted(rng.sample(range(1, len(text)), 10))
        streamed = "".join(scanner.feed(text[a:b]).content for a, b in zip([0, *cuts], [*cuts, len(text)]))
        assert streamed == "Checking two things."


# Syntaxes whose calls stream as they are written; the others send a call once it is read and checked.
STREAMS_CALLS = {"json", "llama3", "hermes", "mistral", "mistral-v11"}


def streamed_calls(scanner, text, rng):
    """(content, [name, arguments] of each call) that ``scanner`` streams of ``text`` cut at random places."""
    cuts = sorted(rng.sample(range(1, len(text)), min(12, max(len(text) - 1, 0))))
    content, calls = "", []
    for a, b in zip([0, *cuts], [*cuts, len(text)]):
        piece = scanner.feed(text[a:b])
        content += piece.content
        for call in piece.calls:
            if call.name is not None:
                assert call.index == len(calls)
                calls.append([call.name, ""])
            calls[call.index][1] += call.arguments
    return content, calls


@pytest.mark.parametrize("name,call,parallel", [case for case in CASES if case[0] != "memgpt"])
def test_streamed_calls_are_the_calls_the_answer_holds(name, call, parallel):
    answer_shape = shape(name, call, parallel, reasoning=Reasoning() if parallel else None)
    grammar = answer_shape.syntax.grammar(answer_shape)
    rng = random.Random(f"stream/{name}/{call}/{parallel}")
    literals = json.dumps([f.model_dump() for f in FUNCTIONS]) + "".join(grammar.lazy.triggers if grammar.lazy else ())
    for _ in range(12):
        text = sample(grammar.text, rng, literals, words=markers(grammar))
        scanner = answer_shape.syntax.scanner(answer_shape, calls=True)
        _, calls = streamed_calls(scanner, text, rng)
        answer = answer_shape.syntax.parse(split_reasoning(text, answer_shape.reasoning)[1], answer_shape)
        expected = [[c.name, json.dumps(c.arguments, ensure_ascii=False)] for c in answer.calls]
        assert calls == (expected if name in STREAMS_CALLS else []), text


@pytest.mark.parametrize("name", sorted(STREAMS_CALLS))
def test_calls_stream_only_when_asked(name):
    answer_shape = shape(name, "optional", parallel=True)
    calls = CALLS if answer_shape.parallel else CALLS[:1]
    text = "Checking.\n" + "\n".join(answer_shape.syntax.render_turn("", calls).calls)
    assert streamed_calls(answer_shape.syntax.scanner(answer_shape), text, random.Random(name)) == ("Checking.", [])
    content, streamed = streamed_calls(answer_shape.syntax.scanner(answer_shape, calls=True), text, random.Random(name))
    assert content == "Checking."
    assert streamed == [[c.name, json.dumps(json.loads(c.arguments))] for c in calls]
