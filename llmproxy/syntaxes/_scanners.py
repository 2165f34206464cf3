"""Streaming scanners: read a model's answer piece by piece and say which part is content so far.

``ThoughtsScanner`` reads one JSON string value (MemGPT's inner monologue) out of a JSON object being
written; ``TextScanner`` passes plain text through, trimmed and cut at the first end-of-turn marker;
``CallScanner`` reads calls with JSON arguments out of a call section. All are pure and synchronous:
whoever streams drives them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from llmproxy.syntaxes._json_stream import CanonicalJSON, StringDecoder
from llmproxy.syntaxes.base import NOTHING, CallPiece, Streamed

MAX_HEAD = 1024  # text kept while waiting for a call's head: longer than any head a grammar writes


class ThoughtsScanner:
    """Reads the value of the first ``key`` (``"inner_thoughts"``) out of JSON text fed in pieces.

    It follows strings (so a key inside a string value is not mistaken for one) and decodes them as
    JSON does; text that is not yet decidable (half an escape) waits for the next piece.
    """

    def __init__(self, key: str = "inner_thoughts") -> None:
        self._wanted = key
        self._string: StringDecoder | None = None  # the string being read
        self._capturing = False  # it is the inner_thoughts value
        self._done = False
        self._key: list[str] = []  # the start of a string that is not captured (keys are short)
        self._last_string: str | None = None  # the last string closed outside any value capture
        self._expect_value = False  # just read '"inner_thoughts":'

    def feed(self, text: str) -> Streamed:
        """The part of the inner thoughts (the answer's content) that ``text`` completes."""
        out: list[str] = []
        position = 0
        while position < len(text) and not self._done:
            if self._string is not None:
                position = self._string.feed(text, position, out if self._capturing else self._key)
                if not self._capturing:  # only a key equal to the wanted one matters: keep no more of it
                    self._key = ["".join(self._key)[: len(self._wanted) + 1]]
                if self._string.closed:
                    self._string = None
                    self._done = self._capturing
                    self._last_string = "".join(self._key)
                continue
            char = text[position]
            position += 1
            if char == '"':
                self._string, self._capturing, self._key = StringDecoder(), self._expect_value, []
                self._expect_value = False
            elif char == ":" and self._last_string == self._wanted:
                self._expect_value, self._last_string = True, None
            elif not char.isspace():
                self._expect_value, self._last_string = False, None
        return Streamed(content="".join(out))


class TextScanner:
    """Plain text as the final answer will read: leading and trailing whitespace trimmed, cut at the
    first end-of-turn marker. Whitespace and what could be the start of a marker wait until the next
    piece shows whether they belong to the answer."""

    def __init__(self, markers: Sequence[str]) -> None:
        self._markers = tuple(m for m in markers if m)
        # What text holding a marker, or the start of one, has: most pieces have none.
        self._opening = re.compile("|".join(sorted({re.escape(m[0]) for m in self._markers})) or "(?!)")
        self._pending = ""
        self._started = False
        self._done = False

    def feed(self, text: str) -> Streamed:
        if self._done:
            return NOTHING
        pending = self._pending + text
        if not self._started:
            pending = pending.lstrip()
            self._started = bool(pending)
        if self._opening.search(pending) is None:  # most pieces: all but trailing whitespace is ready
            ready = pending.rstrip()
            self._pending = pending[len(ready):]
            return Streamed(ready)
        cut = min((i for i in (pending.find(m) for m in self._markers) if i != -1), default=-1)
        if cut != -1:
            self._done, self._pending = True, ""
            return Streamed(pending[:cut].rstrip())
        keep = max((n for m in self._markers for n in range(1, len(m)) if pending.endswith(m[:n])), default=0)
        ready = pending[: len(pending) - keep].rstrip()
        self._pending = pending[len(ready):]
        return Streamed(ready)


class CallScanner:
    """Streams the calls of a call section while they are written: a call's name once its head is
    read, then its arguments re-written as the response writes them (``CanonicalJSON``), piece by piece.

    ``head`` matches what a call starts with, up to where its JSON arguments begin, and captures the
    function's ``name`` (a JSON string's inside). Meant for calls a grammar wrote: their final
    arguments continue what was streamed.
    """

    def __init__(self, head: re.Pattern[str]) -> None:
        self._head = head
        self._pending = ""
        self._arguments: CanonicalJSON | None = None  # the arguments being read
        self._count = 0  # calls read in full

    def feed(self, text: str) -> tuple[CallPiece, ...]:
        pieces: list[CallPiece] = []
        self._pending += text
        while self._pending:
            if self._arguments is None:
                found = self._head.search(self._pending)
                if found is None:
                    self._pending = self._pending[-MAX_HEAD:]
                    break
                pieces.append(CallPiece(self._count, name=self._name(found.group("name"))))
                self._pending = self._pending[found.end():]
                self._arguments = CanonicalJSON()
                continue
            written, used = self._arguments.feed(self._pending)
            self._pending = self._pending[used:]
            if written:
                pieces.append(CallPiece(self._count, arguments=written))
            if not self._arguments.done:
                break
            self._arguments = None
            self._count += 1
        return tuple(pieces)

    @staticmethod
    def _name(name: str) -> str:
        try:
            return json.loads(f'"{name}"')
        except ValueError:
            return name
