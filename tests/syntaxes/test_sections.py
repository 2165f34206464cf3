"""What every call-section syntax shares: text that avoids trigger words, the reasoning block, and the
stream scanner that sends reasoning and content as they come and stops at the calls."""

from __future__ import annotations

import random

import pytest
from grammar_walk import accepts, sample

from llmproxy.grammar import RuleSet, validate_grammar
from llmproxy.syntaxes._free_text import text_without
from llmproxy.syntaxes._sections import SectionScanner, split_reasoning
from llmproxy.syntaxes.base import Reasoning

WORDS = ["<tool_call>", "</think>", "[TOOL_CALLS]", "aab"]


def free_text_grammar(words):
    rules = RuleSet()
    return rules.render(text_without(rules, words))


@pytest.mark.parametrize(
    "text,ok",
    [
        ("", True), ("hello world", True), ("a <tool_cal> b", True), ("<<tool_call>", False),
        ("x </think", True), ("</thin</think>", False), ("[TOOL_CALLS", True), ("[[TOOL_CALLS]", False),
        ("aaab", False), ("abab", True), ("ab aab", False), ("日本 🎉 \n\t\\ \"q\"", True),
    ],
)
def test_text_without_words_admits_exactly_the_texts_without_them(text, ok):
    grammar = free_text_grammar(WORDS)
    validate_grammar(grammar)
    assert accepts(grammar, text) is ok
    assert ok == (not any(word in text for word in WORDS))


def test_random_free_texts_never_hold_a_word():
    grammar = free_text_grammar(WORDS)
    rng = random.Random(5)
    for _ in range(30):
        text = sample(grammar, rng, "".join(WORDS))
        assert not any(word in text for word in WORDS)


@pytest.mark.parametrize(
    "text,opened,expected",
    [
        ("<think>hmm</think>\nHello", False, ("hmm", "\nHello")),
        ("  <think>\nhmm\n</think>Hi", False, ("hmm", "Hi")),
        ("Hello <think>x</think>", False, (None, "Hello <think>x</think>")),  # not a leading block
        ("hmm</think>Hi", True, ("hmm", "Hi")),
        ("still thinking", True, ("still thinking", "")),  # an unclosed block is all reasoning
        ("<think>never closed", False, ("never closed", "")),
    ],
)
def test_split_reasoning(text, opened, expected):
    assert split_reasoning(text, Reasoning(opened=opened)) == expected


def test_no_reasoning_block_means_no_split():
    assert split_reasoning("<think>x</think>y", None) == (None, "<think>x</think>y")


def scan(pieces, triggers=("<tool_call>",), reasoning=None):
    scanner = SectionScanner(triggers, reasoning)
    content, thought = "", ""
    for piece in pieces:
        out = scanner.feed(piece)
        content, thought = content + out.content, thought + out.reasoning
    return content, thought


def splits(text: str, rng: random.Random) -> list[str]:
    cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, 12)))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]


@pytest.mark.parametrize("seed", range(12))
def test_scanner_streams_what_the_final_answer_says_at_any_split(seed):
    rng = random.Random(seed)
    text = "  <think>\nFirst, the weather.\n</think>\n\nLet me check < that.\n<tool_call>\n{\"name\": \"x\"}"
    assert scan(splits(text, rng), reasoning=Reasoning()) == ("Let me check < that.", "First, the weather.")
    plain = "\nJust an answer with <tool_ in it, and more.\n"
    assert scan(splits(plain, rng), reasoning=Reasoning()) == ("Just an answer with <tool_ in it, and more.", "")
    opened = "I think.</think>Answer."
    assert scan(splits(opened, rng), reasoning=Reasoning(opened=True)) == ("Answer.", "I think.")


def test_scanner_holds_back_what_may_be_a_marker():
    scanner = SectionScanner(("<tool_call>",), None)
    assert scanner.feed("Hello <tool").content == "Hello"
    assert scanner.feed("box> there").content == " <toolbox> there"
    assert scanner.feed(" <tool_call>{...}").content == ""
    assert scanner.feed(" more").content == ""  # the call section is not content


def test_a_trigger_inside_the_reasoning_ends_the_streamed_text():
    assert scan(["<think>I will call <tool_", "call>{\"name\""], reasoning=Reasoning()) == ("", "I will call")
