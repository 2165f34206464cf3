"""A custom tool's Lark or regex grammar becomes one anchored pattern that RE2 checks and GBNF constrains."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from grammar_walk import accepts
from hypothesis import given, settings
from hypothesis import strategies as st

from llmproxy.faces.lark import custom_tool_pattern
from llmproxy.grammar import MAX_PATTERN_LENGTH, schema_grammar, translate_pattern, validate_grammar
from llmproxy.grammar.patterns import compiled

# Codex's apply_patch tool, exactly as Codex sends it.
APPLY_PATCH = (Path(__file__).parent.parent / "fixtures" / "apply_patch.lark").read_text(encoding="utf-8")

PATCH = custom_tool_pattern("lark", APPLY_PATCH)


def matches(pattern: str, text: str) -> bool:
    """RE2's answer (how llmproxy checks one), which Python's re must share."""
    found = compiled(pattern).search(text) is not None
    assert found == (re.fullmatch(pattern, text) is not None), (pattern, text)
    return found


def lark(definition: str) -> str | None:
    return custom_tool_pattern("lark", definition)


def input_grammar(pattern: str) -> str:
    return schema_grammar({"type": "object", "properties": {"input": {"type": "string", "pattern": pattern}},
                           "required": ["input"]})


# --- apply_patch ------------------------------------------------------------------------------

VALID_PATCHES = {
    "add": "*** Begin Patch\n*** Add File: hello.txt\n+Hello\n+\n+world\n*** End Patch\n",
    "delete": "*** Begin Patch\n*** Delete File: old/file.py\n*** End Patch",
    "update with move": ("*** Begin Patch\n*** Update File: src/a.py\n*** Move to: src/b.py\n"
                         "@@ def f():\n-    return 1\n+    return 2\n     pass\n*** End Patch\n"),
    "bare context": "*** Begin Patch\n*** Update File: a\n@@\n x\n+y\n*** End of File\n*** End Patch\n",
    "rename only": "*** Begin Patch\n*** Update File: a\n*** Move to: b\n*** End Patch\n",
    "several hunks": ("*** Begin Patch\n*** Add File: n.md\n+# New\n*** Delete File: gone.md\n"
                      "*** Update File: x.c\n@@ int main()\n-  return 1;\n+  return 0;\n*** End Patch\n"),
}

INVALID_PATCHES = {
    "empty input": "",
    "no hunk": "*** Begin Patch\n*** End Patch\n",
    "no begin": "*** Add File: a\n+x\n*** End Patch\n",
    "no end": "*** Begin Patch\n*** Add File: a\n+x\n",
    "add line without +": "*** Begin Patch\n*** Add File: a\n+x\ny\n*** End Patch\n",
    "add hunk without lines": "*** Begin Patch\n*** Add File: a\n*** End Patch\n",
    "no file name": "*** Begin Patch\n*** Delete File: \n*** End Patch\n",
    "change line without prefix": "*** Begin Patch\n*** Update File: a\n@@\nx\n*** End Patch\n",
    "text after the end": "*** Begin Patch\n*** Delete File: a\n*** End Patch\nmore",
    "two newlines at the end": "*** Begin Patch\n*** Delete File: a\n*** End Patch\n\n",
}


def test_apply_patch_has_a_pattern_both_engines_and_the_string_grammar_take():
    assert PATCH is not None and PATCH.startswith("^") and PATCH.endswith("$")
    assert len(PATCH) <= MAX_PATTERN_LENGTH
    re.compile(PATCH)
    compiled(PATCH)
    assert translate_pattern(PATCH, lambda body: "r") is not None


@pytest.mark.parametrize("name", VALID_PATCHES)
def test_apply_patch_takes_valid_patches(name):
    assert matches(PATCH, VALID_PATCHES[name])


@pytest.mark.parametrize("name", INVALID_PATCHES)
def test_apply_patch_refuses_invalid_patches(name):
    assert not matches(PATCH, INVALID_PATCHES[name])


def test_llama_cpp_takes_the_grammar_and_it_admits_exactly_the_valid_patches():
    grammar = input_grammar(PATCH)
    validate_grammar(grammar)
    assert accepts(grammar, json.dumps({"input": VALID_PATCHES["update with move"]}))
    assert not accepts(grammar, json.dumps({"input": INVALID_PATCHES["add line without +"]}))


_LINE = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=12)
_NAME = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=12)
_CHANGE = st.one_of(st.just("@@\n"), _NAME.map(lambda text: f"@@ {text}\n"),
                    st.tuples(st.sampled_from("+- "), _LINE).map(lambda pair: f"{pair[0]}{pair[1]}\n"))
_HUNK = st.one_of(
    st.tuples(_NAME, st.lists(_LINE, min_size=1, max_size=3)).map(
        lambda h: f"*** Add File: {h[0]}\n" + "".join(f"+{line}\n" for line in h[1])),
    _NAME.map(lambda name: f"*** Delete File: {name}\n"),
    st.tuples(_NAME, st.none() | _NAME, st.lists(_CHANGE, max_size=3), st.booleans()).map(
        lambda h: f"*** Update File: {h[0]}\n" + (f"*** Move to: {h[1]}\n" if h[1] else "")
        + "".join(h[2]) + ("*** End of File\n" if h[3] and h[2] else "")),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(_HUNK, min_size=1, max_size=4), st.booleans())
def test_patches_built_from_the_grammar_match(hunks, final_newline):
    patch = "*** Begin Patch\n" + "".join(hunks) + "*** End Patch" + ("\n" if final_newline else "")
    assert matches(PATCH, patch)
    assert not matches(PATCH, patch.replace("*** Begin Patch\n", "*** Begin patch\n"))


# --- the Lark subset ----------------------------------------------------------------------------


@pytest.mark.parametrize(("definition", "good", "bad"), [
    ('start: "a" b\nb: "b" | "c"', ["ab", "ac"], ["a", "abc", "b"]),
    ('start: "x"\n    | "y"\n    // a comment\n    | "z"  # another', ["x", "y", "z"], ["xy", ""]),
    ('start: ("a" | "b")+ ["!"]', ["a", "abba!"], ["!", "ab!!"]),
    ('start: "a"? "b"* "c"+', ["c", "abbcc"], ["ab", "aac"]),
    ('start: "ab" ~ 2', ["abab"], ["ab", "ababab"]),
    ('start: "a" ~ 1..3 "b"', ["ab", "aaab"], ["b", "aaaab"]),
    ('start: "a".."c" "0".."9"', ["a0", "c9"], ["d0", "a"]),
    ('start: "select"i " *"', ["SELECT *", "SeLeCt *"], ["select", "select  *"]),
    ('start: /a|b/ "c"', ["ac", "bc"], ["a", "c"]),
    ('start: /(x)+/ /[0-9]{2}/', ["x12", "xxx00"], ["x1", "12"]),
    ('?start: item ("," item)* -> items\n!item.2: "i" | "j" -> other\nSEP.-1: ","', ["i", "i,j,i"], ["i,", ",i"]),
    ('start: "say \\"hi\\"" "\\\\" "\\n" "\\x41" "\\d"', ['say "hi"\\\nA\\d'], ['say "hi"\\\nA5']),
    ('start: "+" "(.*)" "[x]"', ["+(.*)[x]"], ["+anything[x]", "+(.*)x"]),
    ('start: /[é-ü]\\u00e9/ "日本"', ["éé日本", "üé日本"], ["eé日本"]),
    ('start: ""', [""], ["a"]),
])
def test_lark_constructs(definition, good, bad):
    pattern = lark(definition)
    assert pattern is not None, definition
    assert all(matches(pattern, text) for text in good), pattern
    assert not any(matches(pattern, text) for text in bad), pattern


@pytest.mark.parametrize(("definition", "good", "bad"), [
    ("start: INT\n%import common.INT", ["0", "123"], ["", "1a", "-1"]),
    ("start: SIGNED_NUMBER\n%import common.SIGNED_NUMBER", ["-1.5e3", "+2", ".5", "7."], ["e3", "1e", "--1"]),
    ("start: ESCAPED_STRING\n%import common.ESCAPED_STRING", ['""', r'"a\"b"', r'"\\"'], ['"a"b"', r'"\"', '"a\nb"']),
    ("start: CNAME WS_INLINE WORD\n%import common (CNAME, WS_INLINE, WORD)", ["_a1 \tword"], ["1a word", "a word1"]),
    ("start: WORD (NL WORD)*\n%import common.NEWLINE -> NL\n%import common.WORD", ["a\r\nb\n\nc"], ["a\rb"]),
    ("start: HEXDIGIT+ WS\n%import common.HEXDIGIT\n%import common.WS", ["0fA9 \n"], ["0g ", "0f"]),
    ('start: INT DIGIT\nDIGIT: "x"\n%import common.INT', ["12x"], ["123"]),  # common's INT keeps common's DIGIT
])
def test_common_terminals(definition, good, bad):
    pattern = lark(definition)
    assert pattern is not None, definition
    assert all(matches(pattern, text) for text in good), pattern
    assert not any(matches(pattern, text) for text in bad), pattern


@pytest.mark.parametrize("definition", [
    'start: "(" start ")" | "x"',  # directly recursive
    'start: a\na: "[" b? "]"\nb: a ("," a)*',  # indirectly recursive
    "start: x\n",  # undefined
    '_first: "a"',  # no start
])
def test_recursion_and_undefined_names_have_no_pattern(definition):
    assert lark(definition) is None


@pytest.mark.parametrize("definition", [
    'start: WORD+\n%import common.WORD\n%import common.WS\n%ignore WS',  # skipped whitespace
    'start: /abc/i',  # regex flags
    'start: "a".."z"i',
    'start: sep{"a"}\nsep{x}: x ("," x)*',  # templates
    'start: NAME\n%import python.NAME',  # imports beyond common
    'start: NOPE\n%import common.NOPE',
    '%declare FOO\nstart: "a"',
    'start: "a"\nstart: "b"',  # defined twice
    'start: /(?<=a)b/',  # lookbehind: neither RE2 nor the string grammar
    'start: /(/ /)/',  # two halves of a regex are no regex
    'start: "a" ~ 3..1',
    'start: ("a"',
    'start: "a" ** "b"',
    'start: "\\x4"',
    "start: 'a'",
    "",
])
def test_what_has_no_pattern(definition):
    assert lark(definition) is None


def test_results_too_long_give_none_quickly():
    long_literal = '"' + "x" * 300 + '"'
    assert lark(f"start: a a a a\na: {long_literal}") is None
    doubling = "\n".join(f"a{i}: a{i + 1} a{i + 1}" for i in range(25)) + '\na25: "xy"'
    started = time.perf_counter()
    assert lark(f"start: a0\n{doubling}") is None  # 2**25 copies if nothing stopped it
    deep = "\n".join(f"r{i}: r{i + 1}" for i in range(5000)) + '\nr5000: "z"'
    assert lark(f"start: r0\n{deep}") is None  # a chain deeper than the nesting limit
    assert lark("start: " + "(" * 5000 + '"a"' + ")" * 5000) is None
    # Unstopped, the doubling alone takes minutes; 5 s leaves room for a loaded machine (at 1 s this failed
    # once, at 1.13 s, beside two BFCL runs on 2 cores).
    assert time.perf_counter() - started < 5


# --- syntax "regex" ------------------------------------------------------------------------------


def test_regex_syntax_is_anchored():
    pattern = custom_tool_pattern("regex", r"\d+|[a-f]+")
    assert pattern == r"^(?:\d+|[a-f]+)$"
    assert matches(pattern, "123") and matches(pattern, "cafe")
    assert not matches(pattern, "12a") and not matches(pattern, "")


@pytest.mark.parametrize("definition", [r"(a)\1", r"a(?=b)", "(", "a{2,1}", "x" * (MAX_PATTERN_LENGTH + 1)])
def test_regexes_without_a_pattern(definition):
    assert custom_tool_pattern("regex", definition) is None


def test_unknown_syntax_is_free_text():
    assert custom_tool_pattern("ebnf", 'start: "a"') is None


@pytest.mark.parametrize("definition", ['start: "a".."z" ~ 1..8 ("-" INT)?\n%import common.INT',
                                        "start: ESCAPED_STRING\n%import common.ESCAPED_STRING"])
def test_llama_cpp_takes_other_grammars(definition):
    validate_grammar(input_grammar(lark(definition)))
