"""Sets of characters as GBNF that matches one character *inside a JSON string*.

A regex character (or class) is about the decoded string, but the grammar shapes the JSON text, where
``"``, ``\\`` and the control characters must be escaped. So a set becomes two parts: a GBNF character
class of the characters written as themselves, and the escapes (``\\"``, ``\\\\``, ``\\n``, ``\\u001f``...)
of those that must be escaped: one literal each, or, where the set holds all of them, any such escape.
DEL (U+007F) is escaped too, as in the ``char`` primitive. Sets are lists of inclusive code-point ranges.
"""

from __future__ import annotations

Ranges = list[tuple[int, int]]

MAX_CODE_POINT = 0x10FFFF
# Written escaped in JSON text: the control characters, '"', '\' and DEL.
ESCAPED: Ranges = [(0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C), (0x7F, 0x7F)]
# Every escape of a character in ESCAPED, as json_escape() writes them, and as \u00XX in either case.
_ANY_ESCAPE = r'"\\" ( ["\\bfnrt] | "u00" [01] [0-9a-fA-F] | "u007" [fF] )'
_SHORT_ESCAPES = {0x22: '\\"', 0x5C: "\\\\", 0x08: "\\b", 0x0C: "\\f", 0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t"}


def normalize(ranges: Ranges) -> Ranges:
    """Sorted, disjoint, adjacent ranges merged."""
    out: Ranges = []
    for low, high in sorted(ranges):
        if out and low <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], high))
        else:
            out.append((low, high))
    return out


def complement(ranges: Ranges) -> Ranges:
    out: Ranges = []
    start = 0
    for low, high in normalize(ranges):
        if low > start:
            out.append((start, low - 1))
        start = high + 1
    if start <= MAX_CODE_POINT:
        out.append((start, MAX_CODE_POINT))
    return out


def intersect(a: Ranges, b: Ranges) -> Ranges:
    return complement(complement(a) + complement(b))


def json_escape(code: int) -> str:
    """How a character that JSON (or the ``char`` primitive) wants escaped is written in JSON text."""
    return _SHORT_ESCAPES.get(code, f"\\u{code:04x}")


def json_text(text: str) -> str:
    """``text`` as it is written inside a JSON string, escaping what ``char`` does not admit raw."""
    return "".join(json_escape(ord(ch)) if _escaped(ord(ch)) else ch for ch in text)


def _escaped(code: int) -> bool:
    return code < 0x20 or code in (0x22, 0x5C, 0x7F)


def _class_char(code: int) -> str:
    """A code point inside a GBNF character class: letters and digits as themselves, the rest as hex
    escapes (which llama.cpp reads everywhere), so ']', '-', '^' and '\\' never need thought."""
    ch = chr(code)
    if ch.isascii() and ch.isalnum():
        return ch
    if code <= 0xFF:
        return f"\\x{code:02X}"
    if code <= 0xFFFF:
        return f"\\u{code:04X}"
    return f"\\U{code:08X}"


def _class(ranges: Ranges, negated: bool = False) -> str:
    parts = [_class_char(a) if a == b else f"{_class_char(a)}-{_class_char(b)}" for a, b in ranges]
    return "[" + ("^" if negated else "") + "".join(parts) + "]"


def charset_expr(ranges: Ranges) -> str:
    """GBNF matching one JSON-string character from the set ``ranges`` (raw or escaped); "" for none.

    Large sets (those reaching the top of Unicode, as negated classes do) are written as a negated
    class of what they leave out."""
    ranges = normalize(ranges)
    raw = intersect(ranges, complement(ESCAPED))
    alternatives = []
    if raw:
        reaches_top = raw[-1][1] == MAX_CODE_POINT
        alternatives.append(_class(complement(raw), negated=True) if reaches_top else _class(raw))
    escaped = intersect(ranges, ESCAPED)
    if escaped == ESCAPED:  # all of them (negated classes, '.'): any short or \u00XX escape of one
        alternatives.append(_ANY_ESCAPE)
    else:
        alternatives += [gbnf_literal(json_escape(code)) for low, high in escaped for code in range(low, high + 1)]
    return " | ".join(alternatives)


def gbnf_literal(text: str) -> str:
    """``text`` as a GBNF string literal; everything outside printable ASCII is escaped."""
    out = []
    for ch in text:
        code = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 0x20 <= code < 0x7F:
            out.append(ch)
        elif code <= 0xFF:
            out.append(f"\\x{code:02X}")
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04X}")
        else:
            out.append(f"\\U{code:08X}")
    return '"' + "".join(out) + '"'
