"""GBNF for free text that does not contain any of a few words.

Where a call is optional, the answer may be plain text until the call section starts at a trigger
word (``<tool_call>``): the grammar is ``text-without-triggers ( trigger calls )?``, which admits
exactly what llama.cpp's lazy grammar admits, on any backend that takes GBNF. Reasoning blocks are
the same idea: any text until ``</think>``.

The rule is a string-matching automaton (Aho-Corasick) over the words, one GBNF rule per state: a
state is the longest partial word the text ends with. Every character either advances within a word,
falls back to a shorter partial word, or returns to the start; completing a word has no transition,
so the word can never appear. Its size is the total length of the words.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from llmproxy.grammar import RuleSet, gbnf_literal


def text_without(rules: RuleSet, words: Sequence[str], hint: str = "text") -> str:
    """The name of a rule for any text (possibly empty) in which none of ``words`` (non-empty) occurs."""
    goto, fail, final = _automaton([word for word in dict.fromkeys(words) if word])
    states = [state for state in range(len(goto)) if state not in final]
    names: dict[int, str] = {}
    for state in states:  # every state named before any body is written: bodies refer to each other
        names[state] = rules._fresh_name(f"{hint}-{len(names)}")
        rules.rules[names[state]] = ""
    for state in states:
        rules.rules[names[state]] = _state_body(state, goto, fail, final, names)
    return names[0]


def text_without_opening(rules: RuleSet, words: Sequence[str], hint: str = "text") -> str:
    """Like ``text_without``, and besides, the text's first character other than a space or line break is
    none that a word starts with: text that cannot be read as opening with a word, however spaced (an
    answer chosen to be text, where the words open calls)."""
    firsts = "".join(_class_char(char) for char in sorted({word[0] for word in words if word}))
    return rules.rule(f"{hint}-opening", f'( [ \\t\\n]* [^{firsts} \\t\\n] {text_without(rules, words, hint)} )?')


def _automaton(words: list[str]) -> tuple[list[dict[str, int]], list[int], set[int]]:
    """The trie of ``words`` with failure links; ``final``: states where some word ends."""
    goto: list[dict[str, int]] = [{}]
    final: set[int] = set()
    for word in words:
        state = 0
        for char in word:
            if char not in goto[state]:
                goto.append({})
                goto[state][char] = len(goto) - 1
            state = goto[state][char]
        final.add(state)
    fail = [0] * len(goto)
    queue = deque(goto[0].values())
    while queue:
        state = queue.popleft()
        for char, child in goto[state].items():
            queue.append(child)
            back = fail[state]
            while back and char not in goto[back]:
                back = fail[back]
            fail[child] = goto[back][char] if char in goto[back] and goto[back][char] != child else 0
            if fail[child] in final:
                final.add(child)  # a word ends inside this longer partial word
    return goto, fail, final


def _next(state: int, char: str, goto: list[dict[str, int]], fail: list[int]) -> int:
    while state and char not in goto[state]:
        state = fail[state]
    return goto[state].get(char, 0)


def _state_body(state: int, goto: list[dict[str, int]], fail: list[int], final: set[int],
                names: dict[int, str]) -> str:
    # Characters that do something other than return to the start: those continuing any partial word
    # on this state's failure chain, and the first characters of the words.
    special: set[str] = set(goto[0])
    back = state
    while back:
        special |= set(goto[back])
        back = fail[back]
    alternatives = []
    for char in sorted(special):
        target = _next(state, char, goto, fail)
        if target not in final:
            alternatives.append(f"{gbnf_literal(char)} {names[target]}")
    excluded = "".join(_class_char(char) for char in sorted(special))
    alternatives.append(f"[^{excluded}] {names[0]}")
    return "( " + " | ".join(alternatives) + " )?"


def _class_char(char: str) -> str:
    """``char`` written inside a GBNF character class."""
    if char in "\\]^-[":
        return "\\" + char
    literal = gbnf_literal(char)[1:-1]
    return literal
