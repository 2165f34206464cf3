"""Grammars that come with a request are measured by our own code before llama.cpp's recursive, eager
parser sees them: each hostile shape below crashed or stalled the process before the limits existed
(llmproxy/grammar/limits.py says how), and each is now a GrammarError naming the limit."""

from __future__ import annotations

import pytest

from llmproxy.errors import GrammarError
from llmproxy.grammar import validate_grammar
from llmproxy.grammar.limits import GrammarLimits, check_grammar_limits

CHAIN = "\n".join(["root ::= r0"] + [f'r{i} ::= r{i + 1} "x"' for i in range(5000)] + ['r5000 ::= "y"'])

HOSTILE = {
    "nested parentheses": ("root ::= " + "(" * 20_000 + '"a"' + ")" * 20_000, "nests parentheses"),
    "inverted repetition": ('root ::= "a"{3,1}', "minimum above its maximum"),
    "huge repetition": ('root ::= "a"{0,100000}', "repetition"),
    "many alternatives": ("root ::= " + " | ".join(f'"a{i}"' for i in range(30_000)), "alternatives"),
    "left chain": (CHAIN, "chain"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_grammar_is_refused_by_name_before_llama_cpp_parses_it(name):
    text, words = HOSTILE[name]
    with pytest.raises(GrammarError, match=words):
        validate_grammar(text)


def test_ordinary_grammars_pass_and_are_measured():
    text = 'root ::= "{" ws item ("," ws item){0,8} "}"\nitem ::= [a-z]+ | "null"\nws ::= " "?'
    validate_grammar(text)
    size = check_grammar_limits(text)
    assert size.rules >= 3 and size.alternatives >= 2


def test_limits_are_settable_and_each_names_its_own_value():
    with pytest.raises(GrammarError, match="10"):
        check_grammar_limits("root ::= " + "(" * 11 + '"a"' + ")" * 11, GrammarLimits(max_nesting=10))
