"""A custom tool's grammar (OpenAI Responses ``custom`` tools) as one anchored regular expression.

A custom tool's call input is raw text that should match its grammar, ``{"type": "grammar",
"syntax": "lark" | "regex", "definition": ...}``. llmproxy holds such a tool as a function with one
string argument, ``input``, whose schema ``pattern`` is what custom_tool_pattern() returns, so the
pattern machinery both constrains generation (llmproxy.grammar.translate_pattern) and checks the answer (RE2).

A Lark grammar whose rules never refer to themselves is regular: its rules are inlined from ``start``
down. Supported: rules and terminals (``?``/``!`` prefixes and priorities ignored), string literals
(``"..."``, ``"..."i``), regex literals without flags (``/.../``), ``"a".."z"``, ``|``, ``( )``,
``[ ]``, ``? * +``, ``~ n``, ``~ n..m``, aliases (``-> name``, ignored), comments, and
``%import common.X`` of the terminals in COMMON. Each piece is matched in sequence, as a scannerless
parser would. Recursion, ``%ignore`` (skipped whitespace changes the language), templates, other
statements and imports, or a result the pattern machinery cannot take (too long, beyond RE2 or the
grammar subset) give None: the input is then free text.
"""

from __future__ import annotations

import re
from typing import NamedTuple

import re2

from llmproxy.errors import GrammarError
from llmproxy.grammar import MAX_PATTERN_LENGTH, MAX_PATTERN_NESTING, translate_pattern
from llmproxy.grammar.patterns import compiled

# Lark's common.lark terminals, with the same languages (ESCAPED_STRING without its lookbehind).
COMMON = r"""
DIGIT: "0".."9"
HEXDIGIT: "a".."f" | "A".."F" | DIGIT
INT: DIGIT+
SIGNED_INT: ["+" | "-"] INT
DECIMAL: INT "." INT? | "." INT
_EXP: ("e" | "E") SIGNED_INT
FLOAT: INT _EXP | DECIMAL _EXP?
SIGNED_FLOAT: ["+" | "-"] FLOAT
NUMBER: FLOAT | INT
SIGNED_NUMBER: ["+" | "-"] NUMBER
ESCAPED_STRING: "\"" /(?:[^"\\\n]|\\.)*/ "\""
LCASE_LETTER: "a".."z"
UCASE_LETTER: "A".."Z"
LETTER: UCASE_LETTER | LCASE_LETTER
WORD: LETTER+
CNAME: ("_" | LETTER) ("_" | LETTER | DIGIT)*
WS_INLINE: /[ \t]/+
WS: /[ \t\f\r\n]/+
CR: "\r"
LF: "\n"
NEWLINE: (CR? LF)+
"""

_TOKEN = re.compile(r"""
    (?P<space> [ \t\f\r]+ | (?://|\#)[^\n]* )
  | (?P<nl> \n )
  | (?P<string> "(?:\\.|[^"\\\n])*"i? )
  | (?P<regexp> /(?!/)(?:\\.|[^/\\\n])*/[a-z]* )
  | (?P<directive> %[a-z]+ )
  | (?P<name> [!?]?[_A-Za-z][_A-Za-z0-9]* )
  | (?P<number> -?\d+ )
  | (?P<op> -> | \.\. | [:|()\[\]?*+~.,{}] )
""", re.VERBOSE)
_STRING_ESCAPE = re.compile(r"\\(?:x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|.)")
_WIDE_ESCAPE = re.compile(r"\\(?:u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|.)")  # RE2 lacks \u; Lark reads it
_NAMED = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "\\": "\\", '"': '"'}  # Lark's string escapes
_METACHARACTERS = set(r"\.^$|?*+()[]{}-")
_WRITTEN = {"\n": r"\n", "\t": r"\t", "\r": r"\r"}

_ATOM, _SEQUENCE, _ALTERNATION = range(3)  # how loosely a piece binds: what it needs a group for


class _NoPattern(Exception):
    """The grammar has no regular expression here (or is not valid Lark)."""


class _Piece(NamedTuple):
    text: str
    binding: int


def custom_tool_pattern(syntax: str, definition: str) -> str | None:
    """The anchored regular expression a custom tool's input must match, or None where its grammar has none
    (recursive Lark rules, constructs outside the supported subset, or a result too long): the input is then free text."""
    if syntax == "regex":
        return _usable(f"^(?:{definition})$")
    if syntax != "lark":
        return None
    try:
        start = _Inliner({**_COMMON_DEFINITIONS, **_definitions(definition)}).rule("start")
    except _NoPattern:
        return None
    return _usable(f"^{_grouped(start) if start.binding == _ALTERNATION else start.text}$")


def _usable(pattern: str) -> str | None:
    """``pattern`` where RE2 runs it and the string grammar takes it (its length limit included)."""
    try:
        compiled(pattern)
        return pattern if translate_pattern(pattern, lambda body: "r") is not None else None
    except (re2.error, GrammarError, UnicodeError):
        return None


# --- reading the grammar ---------------------------------------------------------------------


def _tokens(text: str) -> list[tuple[str, str]]:
    tokens, pos = [], 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if not match:
            raise _NoPattern(f"unexpected {text[pos]!r}")
        if match.lastgroup != "space":
            tokens.append((match.lastgroup, match[0]))
        pos = match.end()
    return tokens


def _statements(text: str) -> list[list[tuple[str, str]]]:
    """The grammar's statements; a line that begins with ``|`` continues the one before."""
    statements, current, line_ended = [], [], False
    for token in _tokens(text):
        if token[0] == "nl":
            line_ended = True
            continue
        if line_ended and current and token != ("op", "|"):
            statements.append(current)
            current = []
        line_ended = False
        current.append(token)
    return statements + [current] if current else statements


def _definitions(text: str) -> dict[str, list[tuple[str, str]]]:
    """Each defined (or imported) name with the tokens of its expansions."""
    definitions = {}
    for statement in _statements(text):
        values = [value for _, value in statement]
        if values[0] == "%import":
            named = _imports(values[1:])
        elif statement[0][0] == "name" and ":" in values:
            head = values[:values.index(":")]
            if len(head) != 1 and not (len(head) == 3 and head[1] == "." and statement[2][0] == "number"):
                raise _NoPattern("a rule with parameters or a malformed head")
            named = [(head[0].lstrip("!?"), statement[len(head) + 1:])]
        else:  # %ignore, %declare, %override...
            raise _NoPattern(f"unsupported statement {values[0]!r}")
        for name, body in named:
            if name in definitions:
                raise _NoPattern(f"{name} is defined twice")
            definitions[name] = body
    return definitions


def _imports(values: list[str]) -> list[tuple[str, list[tuple[str, str]]]]:
    """``common.X``, ``common.X -> Y`` or ``common (X, Y)``: each name defined as common's own."""
    if values[:2] == ["common", "."] and (len(values) == 3 or len(values) == 5 and values[3] == "->"):
        pairs = [(values[-1], values[2])]
    elif values[:2] == ["common", "("] and values[-1] == ")" and set(values[3:-1:2]) <= {","}:
        pairs = [(name, name) for name in values[2:-1:2]]
    else:
        raise _NoPattern("only common terminals can be imported")
    if any(f"common.{remote}" not in _COMMON_DEFINITIONS for _, remote in pairs):
        raise _NoPattern("an unknown common terminal")
    return [(local, [("name", f"common.{remote}")]) for local, remote in pairs]


# Kept under names a grammar cannot write, so a grammar's own DIGIT does not change common's INT.
_COMMON_DEFINITIONS = {
    f"common.{name}": [(kind, f"common.{value}" if kind == "name" else value) for kind, value in body]
    for name, body in _definitions(COMMON).items()
}


# --- inlining --------------------------------------------------------------------------------


class _Cursor:
    def __init__(self, tokens: list[tuple[str, str]]) -> None:
        self.tokens = tokens
        self.pos = 0

    def peek(self) -> str | None:
        return self.tokens[self.pos][1] if self.pos < len(self.tokens) else None

    def next(self) -> tuple[str, str]:
        if self.pos >= len(self.tokens):
            raise _NoPattern("an expansion ends too early")
        self.pos += 1
        return self.tokens[self.pos - 1]

    def take(self, op: str) -> bool:
        if self.peek() == op:
            self.pos += 1
            return True
        return False

    def expect(self, op: str) -> None:
        if not self.take(op):
            raise _NoPattern(f"{op!r} expected")

    def number(self) -> int:
        kind, value = self.next()
        if kind != "number" or int(value) < 0:
            raise _NoPattern("a repetition count expected")
        return int(value)


class _Inliner:
    """Expands names into their definitions' regular expressions, each definition once."""

    def __init__(self, definitions: dict[str, list[tuple[str, str]]]) -> None:
        self.definitions = definitions
        self.done: dict[str, _Piece] = {}
        self.open: set[str] = set()  # names being expanded: meeting one again is recursion
        self.depth = 0  # nested groups and names together, so Python's own stack stays shallow

    def rule(self, name: str) -> _Piece:
        if name in self.done:
            return self.done[name]
        if name in self.open or name not in self.definitions:
            raise _NoPattern(f"{name} is recursive or undefined")
        self.open.add(name)
        self.enter()
        cursor = _Cursor(self.definitions[name])
        piece = self.expansions(cursor)
        if cursor.peek() is not None:
            raise _NoPattern(f"unexpected {cursor.peek()!r} in {name}")
        self.depth -= 1
        self.open.discard(name)
        self.done[name] = piece
        return piece

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_PATTERN_NESTING:
            raise _NoPattern("nested too deep")

    def expansions(self, cursor: _Cursor) -> _Piece:
        options = [self.alias(cursor)]
        while cursor.take("|"):
            options.append(self.alias(cursor))
        return options[0] if len(options) == 1 else _piece("|".join(option.text for option in options), _ALTERNATION)

    def alias(self, cursor: _Cursor) -> _Piece:
        items = []
        while cursor.peek() not in (None, "|", ")", "]", "->"):
            items.append(self.expression(cursor))
        if cursor.take("->") and cursor.next()[0] != "name":  # an alias names a tree node: no text
            raise _NoPattern("an alias without a name")
        if len(items) == 1:
            return items[0]
        return _piece("".join(_grouped(item) if item.binding == _ALTERNATION else item.text for item in items), _SEQUENCE)

    def expression(self, cursor: _Cursor) -> _Piece:
        piece = self.atom(cursor)
        if cursor.peek() in ("?", "*", "+"):
            return _repeated(piece, cursor.next()[1])
        if cursor.take("~"):
            low = cursor.number()
            high = cursor.number() if cursor.take("..") else low
            if high < low:
                raise _NoPattern("a repetition range out of order")
            return _repeated(piece, f"{{{low}}}" if low == high else f"{{{low},{high}}}")
        return piece

    def atom(self, cursor: _Cursor) -> _Piece:
        kind, value = cursor.next()
        if value in ("(", "["):
            self.enter()
            inner = self.expansions(cursor)
            cursor.expect(")" if value == "(" else "]")
            self.depth -= 1
            return inner if value == "(" else _repeated(inner, "?")
        if kind == "string" and cursor.take(".."):
            return _range(value, cursor.next())
        if kind == "string":
            return _literal(value)
        if kind == "regexp":
            return _regexp(value)
        if kind == "name":
            return self.rule(value)
        raise _NoPattern(f"unexpected {value!r}")


# --- writing regular expressions -------------------------------------------------------------


def _piece(text: str, binding: int) -> _Piece:
    if len(text) > MAX_PATTERN_LENGTH:  # every piece ends up in the pattern: stop before it grows on
        raise _NoPattern("the pattern is too long")
    return _Piece(text, binding)


def _grouped(piece: _Piece) -> str:
    return f"(?:{piece.text})"


def _repeated(piece: _Piece, quantifier: str) -> _Piece:
    # _SEQUENCE: a second quantifier must not stick to this one (``a*?`` is lazy, not optional).
    return _piece((piece.text if piece.binding == _ATOM else _grouped(piece)) + quantifier, _SEQUENCE)


def _char(ch: str) -> str:
    if 0xD800 <= ord(ch) <= 0xDFFF:
        raise _NoPattern("a lone surrogate")
    if ch in _WRITTEN:
        return _WRITTEN[ch]
    if ord(ch) < 0x20:
        return f"\\x{ord(ch):02x}"
    return "\\" + ch if ch in _METACHARACTERS else ch


def _string(token: str) -> str:
    """A Lark string literal's text: its known escapes read, any other backslash kept."""
    def read(match: re.Match) -> str:
        escape = match[0]
        if len(escape) > 2:
            if int(escape[2:], 16) > 0x10FFFF:
                raise _NoPattern("an escape past Unicode")
            return chr(int(escape[2:], 16))
        if escape[1] in "xuU":
            raise _NoPattern("a malformed escape")
        return _NAMED.get(escape[1], escape)
    return _STRING_ESCAPE.sub(read, token[1:token.rindex('"')])


def _literal(token: str) -> _Piece:
    chars = []
    folded = token.endswith("i")  # "..."i: each letter as a class of its cases (those one character long)
    for ch in _string(token):
        cases = sorted({ch} | {case for case in (ch.lower(), ch.upper()) if len(case) == 1}) if folded else [ch]
        chars.append("[" + "".join(map(_char, cases)) + "]" if len(cases) > 1 else _char(ch))
    return _piece("".join(chars), _ATOM if len(chars) == 1 else _SEQUENCE)


def _range(low: str, token: tuple[str, str]) -> _Piece:
    kind, high = token
    if kind != "string" or low.endswith("i") or high.endswith("i"):
        raise _NoPattern("a range needs two plain strings")
    first, last = _string(low), _string(high)
    if len(first) != 1 or len(last) != 1 or first > last:
        raise _NoPattern("a range needs two characters in order")
    return _piece(f"[{_char(first)}-{_char(last)}]", _ATOM)


def _regexp(token: str) -> _Piece:
    end = token.rindex("/")
    if token[end + 1:]:
        raise _NoPattern("regex flags")
    try:  # Lark reads \u and \U itself (RE2 cannot); any other escape is the regex's own
        body = _WIDE_ESCAPE.sub(lambda m: chr(int(m[0][2:], 16)) if len(m[0]) > 2 else m[0], token[1:end])
        re.compile(body)  # Lark's regexes are Python's: one malformed alone must not pair up with the next
    except (re.error, ValueError, OverflowError) as exc:
        raise _NoPattern(f"a malformed regex: {exc}") from None
    return _piece(f"(?:{body})", _ATOM)
