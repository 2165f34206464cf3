"""Limits on GBNF text that comes with a request, checked by our own code before llama.cpp parses it.

llama.cpp's grammar parser and its set-up of the parse stacks are recursive and expand repetitions
eagerly, so a small hostile grammar crashes or stalls the process that parses it (measured with the
llama.cpp in llama-cpp-python 0.3.36):

* parentheses nested 20,000 deep overflow the parser's C stack (SIGSEGV);
* ``"a"{3,1}`` makes it generate rules without end (``max - min`` wraps around) until it is OOM-killed;
* a leftmost chain of rules (``r1 ::= r2 "x"``, ``r2 ::= r3 "x"``...) is followed recursively with
  stack copies: 5,000 rules take 0.4 s, 15,000 take 6.6 s, 20,000 crash;
* every alternative reachable at the start of a rule becomes one parse stack, deduplicated by linear
  search: 100,000 alternatives take 18 s, and leftmost references to alternatives multiply them;
* a left recursion hidden behind a rule that is empty only indirectly escapes llama.cpp's own check
  and makes its stacks grow without end.

check_grammar_limits() reads the text once, without recursion, into an outline (rules, alternatives,
items with their repetitions), measures it and raises GrammarError naming the first limit passed. It is
not a syntax check: llama.cpp's parser runs afterwards and rejects what is malformed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from llmproxy.errors import GrammarError

__all__ = ["GRAMMAR_LIMITS", "GrammarLimits", "GrammarSize", "check_grammar_limits"]


@dataclass(frozen=True)
class GrammarLimits:
    max_bytes: int = 1 << 20
    max_nesting: int = 64  # parentheses inside parentheses
    max_repeat: int = 2000  # m and n in S{m,n}; llama.cpp's own bound for m
    max_rules: int = 10_000  # named rules, parenthesised groups and the rules repetitions generate
    max_alternatives: int = 20_000  # over all rules and groups
    max_symbols: int = 1_000_000  # grammar elements once repetitions are expanded (8 bytes each)
    max_left_depth: int = 256  # longest chain of rules each starting with the next (1,000: 24 ms)
    max_start_stacks: int = 4096  # parse stacks one rule can open at its start (4,000: 31 ms)


GRAMMAR_LIMITS = GrammarLimits()


@dataclass(frozen=True)
class GrammarSize:
    """What check_grammar_limits() measured (estimates of what llama.cpp builds)."""

    rules: int
    alternatives: int
    nesting: int
    symbols: int
    left_depth: int
    start_stacks: int


# Blanks, comments, items and repetitions. Quantifiers are possessive and literals unrolled, so the
# scan is linear; a literal, class or token without its end is no item.
_BLANKS = r"[ \t\r\n]*+(?:\#[^\r\n]*+[ \t\r\n]*+)*+"
_NAME = r"[a-zA-Z0-9-]++(?![ \t]*::=)"
_TERMINAL = r"""(?:"[^"\\]*+(?:\\[\s\S][^"\\]*+)*+"|\[[^\]\\]*+(?:\\[\s\S][^\]\\]*+)*+\]|!?<[^>]*+>|\.)"""
_REPEAT = r"(?:[*+?]|\{[^{}]*+\})"
# One token per match: a rule's head; an item or a ')' with the repetitions after it; a run of items
# none of which is repeated (the common case, handled whole); an item before a malformed repetition; or
# one character: punctuation, an unterminated literal, or anything else (llama.cpp's parser refuses it).
# \Z ends the text, so trailing blanks are not rescanned.
_TOKEN = re.compile(
    rf"""{_BLANKS}(
      [a-zA-Z0-9-]++[ \t]*::=
    | (?:{_NAME}|{_TERMINAL}|\)){_BLANKS}(?:{_REPEAT}{_BLANKS})++
    | (?:(?:{_NAME}|{_TERMINAL}){_BLANKS}(?![*+?{{]))++
    | {_NAME}|{_TERMINAL}
    | [\s\S]
    | \Z)""",
    re.VERBOSE,
)
_ITEM = re.compile(rf"{_NAME}|{_TERMINAL}|\)")
_REPEATS = re.compile(rf"{_BLANKS}({_REPEAT})")
# The start of a run of items, up to its first terminal that matches something.
_LEADING_REFERENCES = re.compile(rf"""(?:(?:{_NAME}|""|\[\]){_BLANKS})*+""")
_REFERENCE = re.compile(r"[a-zA-Z0-9-]+")
_BOUNDS = re.compile(r"\{[ \t\r\n]*(\d{1,9})[ \t\r\n]*(?:(,)[ \t\r\n]*(\d{1,9})?[ \t\r\n]*)?\}")
_ESCAPE = re.compile(r"\\(?:x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[\s\S])")
_SIMPLE_REPEATS = {"*": (0, None), "+": (1, None), "?": (0, 1)}
_REPEAT_ENDS = frozenset("*+?}")
_NAME_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-")
_ITEM_START = frozenset('abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-"[<!.')


class _Item:
    """One element of an alternative: a terminal, or a reference to a rule (named or a group)."""

    __slots__ = ("target", "lo", "hi", "size", "empty")

    def __init__(self, target: int | str | None, size: int) -> None:
        self.target = target  # None: terminal; int: rule id; str: rule name, resolved at the end
        self.lo, self.hi = 1, 1  # how often it occurs (hi None: without bound)
        self.size = size  # grammar elements it expands to in its alternative
        self.empty = size == 0  # "" and [] match nothing: llama.cpp emits no element for them


class _Outline:
    """Rules as lists of alternatives of items; groups are rules of their own, as in llama.cpp."""

    def __init__(self, limits: GrammarLimits) -> None:
        self.limits = limits
        self.rules: list[list[list[_Item]]] = []
        self.names: dict[str, int] = {}
        self.defined: set[int] = set()
        self.generated_rules = 0  # by repetitions
        self.alternatives = 0
        self.symbols = 0
        self.nesting = 0

    def new_rule(self) -> int:
        self.rules.append([])
        if len(self.rules) + self.generated_rules > self.limits.max_rules:
            raise GrammarError(f"grammar has more than {self.limits.max_rules} rules and groups")
        return len(self.rules) - 1

    def rule_id(self, name: str) -> int:
        if name not in self.names:
            self.names[name] = self.new_rule()
        return self.names[name]

    def add_symbols(self, count: int) -> None:
        self.symbols += count
        if self.symbols > self.limits.max_symbols:
            raise GrammarError(
                f"grammar expands to more than {self.limits.max_symbols} elements (repetitions such as S{{m,n}}"
                " are expanded into copies of S); use fewer or smaller repetitions"
            )

    def add_alternative(self) -> None:
        self.alternatives += 1
        if self.alternatives > self.limits.max_alternatives:
            raise GrammarError(f"grammar has more than {self.limits.max_alternatives} alternatives")

    def repeat(self, item: _Item, lo: int, hi: int | None, text: str) -> None:
        """Apply a repetition to ``item`` as llama.cpp does: S{m,n} -> m copies of S, then n-m optional
        copies, each in a rule of its own; a repetition of a repetition copies the copies."""
        limits = self.limits
        if hi is not None and lo > hi:
            raise GrammarError(f"repetition {text} has its minimum above its maximum")
        if lo > limits.max_repeat or (hi or 0) > limits.max_repeat:
            raise GrammarError(f"repetition {text} is over the limit of {limits.max_repeat}")
        optional = 1 if hi is None else hi - lo
        self.generated_rules += optional
        if len(self.rules) + self.generated_rules > limits.max_rules:
            raise GrammarError(f"repetition {text} makes the grammar more than {limits.max_rules} rules")
        size = item.size * lo + (1 if optional else 0)
        self.add_symbols(size - item.size + optional * (item.size + 3))
        item.size = size
        item.lo *= lo
        item.hi = None if hi is None or item.hi is None else item.hi * hi


_ANY_TERMINAL = _Item(None, 1)  # the rest of a run of items, from its first real terminal on


def check_grammar_limits(text: str, limits: GrammarLimits = GRAMMAR_LIMITS) -> GrammarSize:
    """Raise GrammarError if parsing ``text`` would cost llama.cpp more than ``limits`` allow."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > limits.max_bytes:
        raise GrammarError(f"grammar is {size} bytes, over the limit of {limits.max_bytes}")
    outline = _read(text, limits)
    left_depth, start_stacks = _leftmost(outline)
    return GrammarSize(
        rules=len(outline.rules) + outline.generated_rules,
        alternatives=outline.alternatives,
        nesting=outline.nesting,
        symbols=outline.symbols,
        left_depth=left_depth,
        start_stacks=start_stacks,
    )


def _read(text: str, limits: GrammarLimits) -> _Outline:
    outline = _Outline(limits)
    # The open rule and its open groups: (rule id, its alternatives; the last is the current one).
    open_rules: list[tuple[int, list[list[_Item]]]] = []
    alternative: list[_Item] = []

    def close_group() -> None:
        nonlocal alternative
        if len(open_rules) < 2:
            raise GrammarError("grammar has a ')' without its '('")
        group = open_rules.pop()[0]
        alternative = open_rules[-1][1][-1]
        alternative.append(_Item(group, 1))
        outline.add_symbols(2)

    for token in _TOKEN.findall(text):
        first = token[:1]
        if not token:  # the end of the text
            continue
        if token.endswith("::="):
            if len(open_rules) > 1:
                raise GrammarError(f"grammar has an unclosed '(' before the rule {token[:-3].strip()!r}")
            rule = outline.rule_id(token[:-3].strip())
            outline.defined.add(rule)
            alternative = []
            outline.rules[rule] = [alternative]  # llama.cpp keeps the last definition
            open_rules[:] = [(rule, outline.rules[rule])]
            outline.add_alternative()
        elif token[-1:] in _REPEAT_ENDS and token not in _SIMPLE_REPEATS:  # an item and its repetitions
            item = _ITEM.match(token)
            if first == ")":
                close_group()
            else:
                alternative.append(_item(item[0]))
                outline.add_symbols(alternative[-1].size)
            for repeat in _REPEATS.findall(token, item.end()):
                outline.repeat(alternative[-1], *_bounds(repeat), repeat)
        elif first in _ITEM_START and (len(token) > 1 or first == "." or first in _NAME_START):
            # A run of items: what it can start with matters below; its first real terminal ends that.
            leading = _LEADING_REFERENCES.match(token)
            alternative.extend(_Item(name, 1) for name in _REFERENCE.findall(leading[0]))
            if leading.end() < len(token):
                alternative.append(_ANY_TERMINAL)
            outline.add_symbols(len(token))
        elif first == "|" or first == "(":
            if not open_rules:
                raise GrammarError(f"grammar has {first!r} before its first rule")
            alternative = []
            if first == "|":
                open_rules[-1][1].append(alternative)
            else:
                group = outline.new_rule()
                outline.rules[group].append(alternative)
                open_rules.append((group, outline.rules[group]))
                outline.nesting = max(outline.nesting, len(open_rules) - 1)
                if outline.nesting > limits.max_nesting:
                    raise GrammarError(f"grammar nests parentheses more than {limits.max_nesting} deep")
            outline.add_alternative()
            outline.add_symbols(1)
        elif first == ")":
            close_group()
        elif first in _SIMPLE_REPEATS or first == "{":
            raise GrammarError(f"grammar has a repetition {token!r} with nothing before it, or a malformed one")
        elif first in '"[<':
            kind = {'"': "string", "[": "character class", "<": "token"}[first]
            raise GrammarError(f"grammar has an unterminated {kind}: {text[text.rindex(first):][:40]!r}")
    if len(open_rules) > 1:
        raise GrammarError("grammar has a '(' without its ')'")
    return outline


def _item(text: str) -> _Item:
    if text[0] == '"' or text[0] == "[":
        body = _ESCAPE.sub(".", text[1:-1]) if "\\" in text else text[1:-1]
        return _Item(None, len(body))
    if text[0] in "<!.":
        return _Item(None, 1)
    return _Item(text, 1)


def _bounds(repeat: str) -> tuple[int, int | None]:
    if repeat in _SIMPLE_REPEATS:
        return _SIMPLE_REPEATS[repeat]
    bounds = _BOUNDS.fullmatch(repeat)
    if bounds is None:
        raise GrammarError(f"grammar has a malformed repetition {repeat[:40]!r}; write {{m}}, {{m,}} or {{m,n}}")
    lo = int(bounds[1])
    return lo, lo if bounds[2] is None else None if bounds[3] is None else int(bounds[3])


def _leftmost(outline: _Outline) -> tuple[int, int]:
    """The longest chain of rules each starting with the next, and the most parse stacks one rule opens
    at its start; raises on left recursion, which llama.cpp cannot parse."""
    for name, rule in outline.names.items():
        if rule not in outline.defined:
            raise GrammarError(f"grammar uses the rule {name!r} but never defines it")
    rules = outline.rules
    for alternatives in rules:
        for alternative in alternatives:
            for item in alternative:
                if isinstance(item.target, str):
                    # An undefined name is llama.cpp's to report (with its own message); here it leads nowhere.
                    item.target = outline.names.get(item.target)
    empty = _empty_rules(rules)

    def may_be_empty(item: _Item) -> bool:
        return item.lo == 0 or item.empty or (item.target is not None and empty[item.target])

    # The items each alternative can start with: up to and including its first that cannot be empty.
    starts: list[list[_Item]] = []
    for alternatives in rules:
        leading = []
        for alternative in alternatives:
            for item in alternative:
                leading.append(item)
                if not may_be_empty(item):
                    break
        starts.append(leading)

    limits = outline.limits
    depth = [0] * len(rules)
    stacks = [0] * len(rules)
    state = [0] * len(rules)  # 0 unseen, 1 in progress, 2 done
    for root in range(len(rules)):
        if state[root]:
            continue
        todo = [root]
        while todo:
            rule = todo[-1]
            if state[rule] == 0:
                state[rule] = 1
                for item in starts[rule]:
                    if item.target is not None:
                        if state[item.target] == 1:
                            raise GrammarError("grammar is left-recursive: a rule can start with itself")
                        if state[item.target] == 0:
                            todo.append(item.target)
                continue
            todo.pop()
            if state[rule] == 2:
                continue
            state[rule] = 2
            deepest, count = 0, sum(1 for alternative in rules[rule] if all(map(may_be_empty, alternative)))
            for item in starts[rule]:
                repeated = item.hi != 1 or item.lo != 1
                if item.target is None:
                    deepest, count = max(deepest, int(repeated)), count + 1
                    continue
                copies = 1
                if repeated and empty[item.target]:  # copies of a possibly empty S all start together
                    copies = item.hi if item.hi is not None else item.lo + 1
                deepest = max(deepest, depth[item.target] + int(repeated) * copies)
                count += stacks[item.target] * copies
            depth[rule] = deepest + 1
            stacks[rule] = count
            if depth[rule] > limits.max_left_depth:
                raise GrammarError(
                    f"grammar chains more than {limits.max_left_depth} rules that each start with the next"
                )
            if count > limits.max_start_stacks:
                raise GrammarError(
                    f"grammar has a rule that can start in more than {limits.max_start_stacks} ways"
                    " (alternatives, and alternatives of the rules they start with)"
                )
    return max(depth, default=0), max(stacks, default=0)


def _empty_rules(rules: list[list[list[_Item]]]) -> list[bool]:
    """Which rules can match the empty string, by propagation from the rules that plainly can."""
    empty = [False] * len(rules)
    waiting: list[int] = []  # per alternative: items that may not be empty, as far as known yet
    owner: list[int] = []
    users: list[list[int]] = [[] for _ in rules]  # rule -> alternatives waiting on it
    ready: list[int] = []
    for rule, alternatives in enumerate(rules):
        for alternative in alternatives:
            index = len(waiting)
            blocking = 0
            for item in alternative:
                if item.lo == 0 or item.empty:
                    continue
                if item.target is None:
                    blocking = -1  # a terminal: never empty
                    break
                blocking += 1
                users[item.target].append(index)
            waiting.append(blocking)
            owner.append(rule)
            if blocking == 0:
                ready.append(rule)
    while ready:
        rule = ready.pop()
        if empty[rule]:
            continue
        empty[rule] = True
        for index in users[rule]:
            if waiting[index] > 0:
                waiting[index] -= 1
                if waiting[index] == 0:
                    ready.append(owner[index])
    return empty
