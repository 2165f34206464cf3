"""JSON-schema ``pattern`` -> GBNF for the content of a JSON string.

The regular-expression subset that maps onto a grammar is translated: literals and escapes (``\\d \\w
\\s \\D \\W \\S \\n \\t \\xHH \\uHHHH``, ``\\.`` and other escaped punctuation), ``.``, classes (``[a-z_]``,
negated ``[^...]``), groups (capturing, ``(?:...)``, named), alternation, the quantifiers ``* + ?
{m} {m,} {m,n}`` (lazy forms too: they match the same strings), and anchors. As JSON Schema says
(ECMA-262 semantics), a pattern is unanchored: ``abc`` matches anywhere in the string, so each
top-level alternative is padded with any characters on a side without ``^``/``$``; ``\\d`` and ``\\w``
are ASCII. Every character is matched as the JSON text writes it (``"`` as ``\\"``).

What has no grammar (backreferences, lookaround, ``\\b``, anchors inside the pattern, flags, Unicode
properties...) makes translate() return None: the caller falls back to a plain string and the
validation after generation checks the pattern. A malformed pattern (``(``, ``a**``, ``[z-a]``) raises
GrammarError naming it. Repetition counts above MAX_REPEAT are loosened (``{2,5000}`` -> ``{2,}``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from llmproxy.errors import GrammarError
from llmproxy.grammar._charsets import Ranges, charset_expr, complement, gbnf_literal, json_text, normalize

MAX_PATTERN_LENGTH = 1000  # longer patterns are left to the validation
MAX_NESTING = 32
MAX_REPEAT = 1000  # llama.cpp expands S{m,n} into n rules and refuses counts past 2000

_DIGIT: Ranges = [(0x30, 0x39)]
_WORD: Ranges = [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)]
# ECMA-262 WhiteSpace and LineTerminator.
_SPACE: Ranges = normalize([(0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
                            (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF)])
_CLASS_ESCAPES = {"d": _DIGIT, "w": _WORD, "s": _SPACE}
_CHAR_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v", "0": "\0"}
_QUANTIFIER = re.compile(r"\{(\d+)(,(\d*))?\}")
_PYTHON_ONLY_QUANTIFIER = re.compile(r"\{,\d*\}")  # {,n}: a literal in ECMA-262, a quantifier in Python
_NAMED_GROUP = re.compile(r"\?P?<[A-Za-z_][A-Za-z0-9_]*>")  # (?<name>...) and Python's (?P<name>...)
_ATOM = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|\[(?:\\.|[^\]\\])*\]|[a-z0-9-]+')  # literal, class, rule


class _Unsupported(Exception):
    """A construct without a grammar: the pattern is left to the validation."""


class _Malformed(Exception):
    pass


# --- the syntax tree -------------------------------------------------------------------------


@dataclass
class _Chars:  # one character from a set
    ranges: Ranges


@dataclass
class _Seq:
    items: list


@dataclass
class _Alt:
    options: list


@dataclass
class _Repeat:
    item: object
    low: int
    high: int | None


@dataclass
class _Anchor:
    start: bool  # ^ (True) or $ (False)


# --- parsing ---------------------------------------------------------------------------------


class _Parser:
    def __init__(self, pattern: str) -> None:
        self.text = pattern
        self.pos = 0
        self.depth = 0

    def peek(self, n: int = 1) -> str:
        return self.text[self.pos:self.pos + n]

    def take(self) -> str:
        if self.pos >= len(self.text):
            raise _Malformed("it ends too early")
        ch = self.text[self.pos]
        self.pos += 1
        return ch

    def parse(self) -> object:
        tree = self.alternation()
        if self.pos < len(self.text):  # only an unmatched ')' stops the alternation early
            raise _Malformed(f"unmatched ')' at position {self.pos}")
        return tree

    def alternation(self) -> object:
        options = [self.sequence()]
        while self.peek() == "|":
            self.pos += 1
            options.append(self.sequence())
        return options[0] if len(options) == 1 else _Alt(options)

    def sequence(self) -> _Seq:
        items: list = []
        while self.pos < len(self.text) and self.peek() not in "|)":
            if self.peek() in "*+?" or _QUANTIFIER.match(self.text, self.pos):
                raise _Malformed(f"a quantifier at position {self.pos} has nothing to repeat")
            item = self.atom()
            quantified = self.quantifier(item)
            if quantified is not item and isinstance(item, _Anchor):
                raise _Malformed(f"an anchor cannot be repeated (position {self.pos})")
            items.append(quantified)
        return _Seq(items)

    def quantifier(self, item: object) -> object:
        bounds = self.bounds()
        if bounds is None:
            return item
        if self.peek() == "?":  # lazy: the same strings
            self.pos += 1
        if self.peek() == "+":
            raise _Unsupported("possessive quantifier")
        if self.bounds() is not None:
            raise _Malformed(f"two quantifiers in a row before position {self.pos}")
        return _Repeat(item, *bounds)

    def bounds(self) -> tuple[int, int | None] | None:
        ch = self.peek()
        if ch and ch in "*+?":
            self.pos += 1
            return {"*": (0, None), "+": (1, None), "?": (0, 1)}[ch]
        if _PYTHON_ONLY_QUANTIFIER.match(self.text, self.pos):
            raise _Unsupported("{,n}")
        match = _QUANTIFIER.match(self.text, self.pos)
        if not match:
            return None  # a '{' that starts no quantifier is a literal
        self.pos = match.end()
        low = int(match[1])
        high = low if match[2] is None else int(match[3]) if match[3] else None
        if high is not None and high < low:
            raise _Malformed(f"quantifier {match[0]} has its maximum below its minimum")
        return low, high

    def atom(self) -> object:
        ch = self.take()
        if ch == "(":
            return self.group()
        if ch == "[":
            return _Chars(self.char_class())
        if ch == ".":
            return _Chars(complement([(0x0A, 0x0A)]))  # any character but a newline
        if ch in "^$":
            return _Anchor(ch == "^")
        if ch == "\\":
            escaped = self.escape(in_class=False)
            return _Chars(escaped) if isinstance(escaped, list) else _Chars([(ord(escaped),) * 2])
        return _Chars([(ord(ch), ord(ch))])

    def group(self) -> object:
        start = self.pos - 1
        if self.peek() == "?":
            if self.peek(2) == "?:":
                self.pos += 2
            elif _NAMED_GROUP.match(self.text, self.pos):
                self.pos = _NAMED_GROUP.match(self.text, self.pos).end()
            else:
                raise _Unsupported("lookaround or inline flags")
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise _Unsupported("groups nested too deep")
        inner = self.alternation()
        self.depth -= 1
        if self.peek() != ")":
            raise _Malformed(f"the group opened at position {start} is not closed")
        self.pos += 1
        return inner

    def escape(self, in_class: bool) -> Ranges | str:
        """A class escape (ranges) or one character (str)."""
        ch = self.take()
        if ch.lower() in _CLASS_ESCAPES:
            ranges = _CLASS_ESCAPES[ch.lower()]
            return complement(ranges) if ch.isupper() else ranges
        if ch in _CHAR_ESCAPES and not (ch == "0" and self.peek().isdigit()):
            return _CHAR_ESCAPES[ch]
        if ch == "b" and in_class:
            return "\b"
        if ch in "xu":
            digits = 2 if ch == "x" else 4
            code = self.text[self.pos:self.pos + digits]
            if len(code) == digits and all(c in "0123456789abcdefABCDEF" for c in code):
                self.pos += digits
                if 0xD800 <= int(code, 16) <= 0xDFFF:
                    raise _Unsupported("a surrogate (pairs are one character in ECMA-262, two here)")
                return chr(int(code, 16))
            raise _Unsupported(f"\\{ch} without {digits} hex digits")
        if ch.isascii() and ch.isalnum():
            raise _Unsupported(f"escape \\{ch}")  # \b \B, backreferences, \p{...}, \k<...>, \cX...
        return ch  # escaped punctuation stands for itself

    def char_class(self) -> Ranges:
        start = self.pos - 1
        negated = self.peek() == "^"
        if negated:
            self.pos += 1
        if self.peek() == "]":
            raise _Unsupported("empty class")  # ECMA: matches nothing; Python: a literal ']'
        ranges: Ranges = []
        while True:
            if self.pos >= len(self.text):
                raise _Malformed(f"the class opened at position {start} is not closed")
            ch = self.take()
            if ch == "]":
                break
            low = self.escape(in_class=True) if ch == "\\" else ch
            if self.peek() == "-" and self.pos + 1 < len(self.text) and self.text[self.pos + 1] != "]":
                self.pos += 1
                end = self.take()
                high = self.escape(in_class=True) if end == "\\" else end
                if isinstance(low, list) or isinstance(high, list):
                    raise _Unsupported("a class escape as a range end")
                if ord(low) > ord(high):
                    raise _Malformed(f"range {low}-{high} is out of order")
                ranges.append((ord(low), ord(high)))
            elif isinstance(low, list):
                ranges += low
            else:
                ranges.append((ord(low), ord(low)))
        ranges = complement(ranges) if negated else normalize(ranges)
        if not ranges:
            raise _Unsupported("a class that matches nothing")
        return ranges


# --- translation -----------------------------------------------------------------------------


def translate(pattern: str, name_rule: Callable[[str], str]) -> str | None:
    """GBNF for the JSON text *inside the quotes* of strings that ``pattern`` matches (search
    semantics), or None when the pattern has no grammar. ``name_rule(body)`` names a rule (repeated
    groups become rules of their own: llama.cpp limits repetitions of groups holding repetitions)."""
    if not isinstance(pattern, str):
        raise GrammarError(f"pattern {pattern!r} must be a string")
    try:
        tree = _Parser(pattern).parse()
        if len(pattern) > MAX_PATTERN_LENGTH:
            return None
        return _Writer(name_rule).top(tree)
    except _Malformed as exc:
        raise GrammarError(f"pattern {pattern!r} is not a valid regular expression: {exc}") from None
    except _Unsupported:
        return None


class _Writer:
    def __init__(self, name_rule: Callable[[str], str]) -> None:
        self.name_rule = name_rule

    def top(self, tree: object) -> str:
        options = tree.options if isinstance(tree, _Alt) else [tree]
        anything = "char*"  # the primitive: any character, any escape
        written = []
        for option in options:
            items = list(option.items) if isinstance(option, _Seq) else [option]
            starts = ends = False
            while items and isinstance(items[0], _Anchor) and items[0].start:
                starts = bool(items.pop(0))
            while items and isinstance(items[-1], _Anchor) and not items[-1].start:
                ends = bool(items.pop())
            body = self.expr(_Seq(items))
            parts = [p for p in ("" if starts else anything, body, "" if ends else anything) if p]
            written.append(" ".join(parts) or '""')
        return written[0] if len(written) == 1 else "( " + " | ".join(written) + " )"

    def expr(self, node: object) -> str:
        """GBNF for ``node``: "" when it matches only the empty string."""
        if isinstance(node, _Anchor):
            raise _Unsupported("an anchor inside the pattern")
        if isinstance(node, _Chars):  # never empty: classes that match nothing are refused when parsed
            chars = charset_expr(node.ranges)
            return f"( {chars} )" if " | " in chars else chars
        if isinstance(node, _Alt):
            options = [self.expr(option) or '""' for option in node.options]
            return "( " + " | ".join(options) + " )"
        if isinstance(node, _Repeat):
            return self.repeat(node)
        return self.sequence(node.items)

    def sequence(self, items: list) -> str:
        parts, literal = [], ""
        while any(isinstance(item, _Seq) for item in items):  # a group in a sequence is part of it
            items = [inner for item in items for inner in (item.items if isinstance(item, _Seq) else [item])]
        for item in items:
            if isinstance(item, _Chars) and item.ranges[0][0] == item.ranges[-1][1]:  # a single character
                literal += chr(item.ranges[0][0])
                continue
            if literal:
                parts.append(gbnf_literal(json_text(literal)))
                literal = ""
            parts.append(self.expr(item))
        if literal:
            parts.append(gbnf_literal(json_text(literal)))
        return " ".join(p for p in parts if p)

    def repeat(self, node: _Repeat) -> str:
        body = self.expr(node.item)
        low = min(node.low, MAX_REPEAT)
        high = node.high if node.high is None or node.high <= MAX_REPEAT else None
        if body in ("", '""') or high == 0:
            return ""
        if not _ATOM.fullmatch(body):
            body = self.name_rule(body)
        if (low, high) == (1, 1):
            return body
        suffix = {(0, None): "*", (1, None): "+", (0, 1): "?"}.get((low, high))
        if suffix is None:
            suffix = f"{{{low}}}" if low == high else f"{{{low},{'' if high is None else high}}}"
        return body + suffix  # a quantifier after a literal repeats the whole literal
