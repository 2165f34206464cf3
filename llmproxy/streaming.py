"""Streaming: a backend's text deltas as OpenAI chat completion chunks and server-sent events.

While the model writes a call, its inner monologue is streamed as ``content`` deltas as it is
generated: ``ThoughtsScanner`` reads the ``inner_thoughts`` JSON string out of the partial output.
The call itself is only sent once the whole answer has been repaired and validated, so the joined
``arguments`` deltas are exactly the final arguments. Plain-text answers stream as they come
(``TextScanner``). Everything here is synchronous and pure; the server drives it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from pydantic import BaseModel

from llmproxy.types import (
    ChatCompletion,
    ChatCompletionChunk,
    ChunkChoice,
    Delta,
    FunctionCallDelta,
    ToolCallDelta,
    new_id,
)
from llmproxy.wrappers import INNER_THOUGHTS_KEY, Rendered

DONE = b"data: [DONE]\n\n"

_HEX = frozenset("0123456789abcdefABCDEF")
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def sse(payload: BaseModel) -> bytes:
    """One server-sent event carrying ``payload`` as JSON (unset and None fields left out)."""
    return b"data: " + payload.model_dump_json(exclude_none=True).encode() + b"\n\n"


class ThoughtsScanner:
    """Reads the value of the first ``"inner_thoughts"`` key out of JSON text fed in pieces.

    A small JSON lexer: it follows strings (so a key inside a string value is not mistaken for one)
    and decodes escapes, including ``\\uXXXX`` and surrogate pairs split across pieces. Text that is
    not yet decidable (half an escape) waits for the next piece.
    """

    def __init__(self) -> None:
        self._in_string = False
        self._capturing = False  # inside the inner_thoughts value
        self._done = False
        self._escape: str | None = None  # "" after a backslash, then the escape so far ("u12")
        self._high_surrogate: str | None = None
        self._key: list[str] = []  # raw text of the string being read (keys are short)
        self._last_string: str | None = None  # the last string closed outside any value capture
        self._expect_value = False  # just read '"inner_thoughts":'

    def feed(self, text: str) -> str:
        """The part of the inner thoughts that ``text`` completes."""
        out: list[str] = []
        for char in text:
            if self._done:
                break
            if self._in_string:
                self._string_char(char, out)
            elif char == '"':
                self._in_string, self._capturing, self._key = True, self._expect_value, []
                self._expect_value = False
            elif char == ":" and self._last_string == INNER_THOUGHTS_KEY:
                self._expect_value, self._last_string = True, None
            elif not char.isspace():
                self._expect_value, self._last_string = False, None
        return "".join(out)

    def _string_char(self, char: str, out: list[str]) -> None:
        if self._escape is not None:
            self._escaped_char(char, out)
        elif char == "\\":
            self._escape = ""
        elif char == '"':
            self._close_string(out)
        elif self._capturing:
            self._emit(char, out)
        elif len(self._key) <= len(INNER_THOUGHTS_KEY):
            self._key.append(char)

    def _escaped_char(self, char: str, out: list[str]) -> None:
        sequence = self._escape + char
        self._escape = None
        if sequence[0] != "u":
            if self._capturing:
                self._emit(_ESCAPES.get(char, "\\" + char), out)
            return
        if len(sequence) > 1 and char not in _HEX:
            # Not a real \u escape: keep it verbatim, as a lenient parser would, and read on from char.
            if self._capturing:
                self._emit("\\" + sequence[:-1], out)
            self._string_char(char, out)
        elif len(sequence) < 5:
            self._escape = sequence
        elif self._capturing:
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

    def _close_string(self, out: list[str]) -> None:
        self._in_string = False
        if self._capturing:
            if self._high_surrogate is not None:
                out.append(self._high_surrogate)
            self._done = True
        else:
            self._last_string = "".join(self._key)


class TextScanner:
    """Plain text as the final answer will read: leading and trailing whitespace trimmed, cut at the
    first end-of-turn marker. Whitespace and what could be the start of a marker wait until the next
    piece shows whether they belong to the answer."""

    def __init__(self, markers: Sequence[str]) -> None:
        self._markers = tuple(m for m in markers if m)
        self._pending = ""
        self._started = False
        self._done = False

    def feed(self, text: str) -> str:
        if self._done:
            return ""
        pending = self._pending + text
        if not self._started:
            pending = pending.lstrip()
            self._started = bool(pending)
        cut = min((i for i in (pending.find(m) for m in self._markers) if i != -1), default=-1)
        if cut != -1:
            self._done, self._pending = True, ""
            return pending[:cut].rstrip()
        keep = max((n for m in self._markers for n in range(1, len(m)) if pending.endswith(m[:n])), default=0)
        ready = pending[: len(pending) - keep].rstrip()
        self._pending = pending[len(ready):]
        return ready


class ChatChunks:
    """The chunks of one streamed chat completion, built as the generation proceeds.

    ``opening()`` first, ``feed()`` per backend delta, then ``closing()`` with the finished response;
    each gives the chunks to send (llmproxy.completions.TextChunks has the same three methods).
    """

    def __init__(self, rendered: Rendered, model: str, *, include_usage: bool) -> None:
        self.id = new_id("chatcmpl")
        self.created = int(time.time())
        self.model = model
        self.include_usage = include_usage
        if rendered.call == "text":
            self._scanner: ThoughtsScanner | TextScanner = TextScanner(rendered.stop)
        else:
            self._scanner = ThoughtsScanner()
            self._scanner.feed(rendered.prefix)  # the answer continues the prompt's prefix
        self.streamed = ""  # content sent so far

    def _chunk(self, delta: Delta, finish_reason=None) -> ChatCompletionChunk:
        return ChatCompletionChunk(
            id=self.id, created=self.created, model=self.model,
            choices=[ChunkChoice(delta=delta, finish_reason=finish_reason)],
        )

    def opening(self) -> list[ChatCompletionChunk]:
        return [self._chunk(Delta(role="assistant", content=""))]

    def feed(self, text: str) -> list[ChatCompletionChunk]:
        piece = self._scanner.feed(text)
        if not piece:
            return []
        self.streamed += piece
        return [self._chunk(Delta(content=piece))]

    def closing(self, completion: ChatCompletion) -> list[ChatCompletionChunk]:
        """The rest of the content, the call, the finish reason and (when asked) the usage."""
        choice = completion.choices[0]
        message = choice.message
        chunks: list[ChatCompletionChunk] = []
        content = message.content or ""
        # The final content normally continues what was streamed; a repair that changed streamed
        # text cannot be taken back, so only a true continuation is sent.
        if content.startswith(self.streamed) and len(content) > len(self.streamed):
            chunks.append(self._chunk(Delta(content=content[len(self.streamed):])))
            self.streamed = content
        for index, call in enumerate(message.tool_calls or []):
            opening = FunctionCallDelta(name=call.function.name, arguments="")
            chunks.append(self._chunk(Delta(tool_calls=[ToolCallDelta(
                index=index, id=call.id, type="function", function=opening,
            )])))
            chunks.append(self._chunk(Delta(tool_calls=[ToolCallDelta(
                index=index, function=FunctionCallDelta(arguments=call.function.arguments),
            )])))
        if message.function_call is not None:
            legacy = message.function_call
            chunks.append(self._chunk(Delta(function_call=FunctionCallDelta(name=legacy.name, arguments=""))))
            chunks.append(self._chunk(Delta(function_call=FunctionCallDelta(arguments=legacy.arguments))))
        chunks.append(self._chunk(Delta(), choice.finish_reason))
        if self.include_usage:
            chunks.append(ChatCompletionChunk(id=self.id, created=self.created, model=self.model, choices=[],
                                              usage=completion.usage))
        return chunks


def error_event(envelope: BaseModel) -> bytes:
    """The event that ends a stream which failed after it started (the OpenAI SDK raises on it)."""
    return b"data: " + envelope.model_dump_json().encode() + b"\n\n"

