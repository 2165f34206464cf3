"""Reading JSON that arrives in pieces: string contents decoded as ``json.loads`` would, and a value
re-written as the response will write it, so what is streamed of it is a prefix of the final text.

Both are pure and synchronous, fed whatever pieces the backend sends (a piece may end in the middle of
an escape or of a surrogate pair).
"""

from __future__ import annotations

import json
import math
import re
from json.encoder import encode_basestring  # type: ignore[attr-defined]  # what json.dumps uses (ensure_ascii off)

_HEX = frozenset("0123456789abcdefABCDEF")
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_PLAIN = re.compile(r'[^"\\\ud800-\udfff]+')  # string characters that decode to themselves
_SEPARATORS = {",": ", ", ":": ": "}  # json.dumps's defaults
_ATOM = frozenset("0123456789+-.eEtrufalsnINfiy")  # numbers, true/false/null, NaN/Infinity


class StringDecoder:
    """Decodes the inside of one JSON string, fed after its opening quote, as ``json.loads`` does:
    escapes (``\\uXXXX`` included) and surrogate pairs joined into one character, across pieces."""

    def __init__(self) -> None:
        self._escape: str | None = None  # "" after a backslash, then the escape so far ("u12")
        self._high_surrogate: str | None = None
        self.closed = False

    def feed(self, text: str, start: int, out: list[str]) -> int:
        """Decode ``text`` from ``start`` into ``out``; returns where reading stopped: after the closing
        quote (``closed`` is then set) or at the end of ``text``."""
        position = start
        while position < len(text) and not self.closed:
            if self._escape is None and self._high_surrogate is None:
                plain = _PLAIN.match(text, position)
                if plain:
                    out.append(plain.group())
                    position = plain.end()
                    continue
            self._char(text[position], out)
            position += 1
        return position

    def _char(self, char: str, out: list[str]) -> None:
        if self._escape is not None:
            self._escaped(char, out)
        elif char == "\\":
            self._escape = ""
        elif char == '"':
            if self._high_surrogate is not None:
                out.append(self._high_surrogate)
                self._high_surrogate = None
            self.closed = True
        else:
            self._emit(char, out)

    def _escaped(self, char: str, out: list[str]) -> None:
        sequence = self._escape + char
        self._escape = None
        if sequence[0] != "u":
            self._emit(_ESCAPES.get(char, "\\" + char), out)
        elif len(sequence) > 1 and char not in _HEX:
            # Not a real \u escape: kept verbatim, as a lenient parser would, and char read on its own.
            self._emit("\\" + sequence[:-1], out)
            self._char(char, out)
        elif len(sequence) < 5:
            self._escape = sequence
        else:
            self._emit(chr(int(sequence[1:], 16)), out)

    def _emit(self, char: str, out: list[str]) -> None:
        # A high surrogate waits for its low half; Python's json joins such a pair into one character.
        if self._high_surrogate is not None:
            high, self._high_surrogate = self._high_surrogate, None
            if "\udc00" <= char <= "\udfff":
                out.append(chr(0x10000 + ((ord(high) - 0xD800) << 10) + (ord(char) - 0xDC00)))
                return
            out.append(high)
        if "\ud800" <= char <= "\udbff":
            self._high_surrogate = char
        else:
            out.append(char)


class CanonicalJSON:
    """Re-writes one JSON value, fed in pieces, as ``json.dumps(value, ensure_ascii=False)`` writes it.

    Whitespace goes, separators become ``", "`` and ``": "``, strings are re-encoded, and a number or
    literal is written once it has ended (``1.50`` becomes ``1.5``; a non-finite one ``null``, as the
    repair reads it). What ``feed`` returns is final: the pieces joined are a prefix of ``json.dumps``
    of the parsed value, whenever its keys are distinct.
    """

    def __init__(self) -> None:
        self._depth = 0
        self._string: StringDecoder | None = None
        self._atom: list[str] = []
        self.done = False

    def feed(self, text: str) -> tuple[str, int]:
        """The canonical text that ``text`` completes, and how much of ``text`` the value took: all of it
        until the value ends (``done``), then the rest is left for whatever follows."""
        out: list[str] = []
        position = 0
        while position < len(text) and not self.done:
            if self._string is not None:
                decoded: list[str] = []
                position = self._string.feed(text, position, decoded)
                out.append(encode_basestring("".join(decoded))[1:-1])
                if self._string.closed:
                    out.append('"')
                    self._string = None
                    self.done = self._depth == 0
                continue
            char = text[position]
            if char in _ATOM:
                self._atom.append(char)
                position += 1
                continue
            if self._atom:
                out.append(self._end_atom())
                if self.done:
                    break
            position += 1
            if char == '"':
                out.append('"')
                self._string = StringDecoder()
            elif char in "{[":
                out.append(char)
                self._depth += 1
            elif char in "}]":
                out.append(char)
                self._depth -= 1
                self.done = self._depth <= 0
            elif char in _SEPARATORS:
                out.append(_SEPARATORS[char])
            # whitespace (and anything a grammar would not have let through) is not part of the value
        return "".join(out), position

    def _end_atom(self) -> str:
        atom, self._atom = "".join(self._atom), []
        self.done = self._depth == 0
        try:
            value = json.loads(atom)
        except ValueError:
            return atom
        if isinstance(value, float) and not math.isfinite(value):
            return "null"
        return json.dumps(value)
