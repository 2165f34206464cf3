"""Streamed chat completions: their chunks, and how OpenAI's chunks (chat and text) travel as server-sent events.

A chunk builder is made once a request is planned and is driven in three steps: ``opening()``,
``feed()`` with each backend delta, ``closing()`` with the finished response. Each step gives the
chunks to send. A chat stream sends the answer's content (a plain answer, or the inner monologue
before a call) as ``content`` deltas while it is generated, as the answer's call syntax scans it out
of the partial output. Calls a grammar writes are streamed as they are written, their arguments as the
response writes them; other calls are only sent once the whole answer has been repaired and validated.
Either way the joined ``arguments`` deltas are exactly the final arguments. Everything here is
synchronous and pure; the server drives it.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

import orjson
from pydantic import BaseModel

from llmproxy.errors import OutputParseError
from llmproxy.faces.chat.envelope import envelope
from llmproxy.faces.wire import model_json
from llmproxy.syntaxes import text_scanner
from llmproxy.syntaxes.base import Scanner, Streamed
from llmproxy.types import (
    AnswerForm,
    ChatCompletion,
    ChatCompletionChunk,
    ChunkChoice,
    Delta,
    FunctionCallDelta,
    ToolCallDelta,
    new_id,
)
from llmproxy.prompts import Rendered

DONE = b"data: [DONE]\n\n"


def sse(payload: BaseModel) -> bytes:
    """One server-sent event carrying ``payload`` as JSON (unset and None fields left out)."""
    return b"data: " + model_json(payload, exclude_none=True) + b"\n\n"


def error_event(envelope: BaseModel) -> bytes:
    """The event that ends a stream which failed after it started (the OpenAI SDK raises on it)."""
    return b"data: " + model_json(envelope) + b"\n\n"


class Chunks(Protocol):
    """Builds the chunks of one streamed response (ChatChunks, TextChunks)."""

    sent_text: bool  # whether any of the answer's text has been sent (a second chance must not follow it)

    def opening(self) -> list[BaseModel]: ...
    def feed(self, text: str) -> list[BaseModel]: ...
    def feed_events(self, text: str) -> list[bytes]: ...  # ``feed``'s chunks as server-sent events
    def closing(self, response: Any) -> list[BaseModel]: ...


class Events(Protocol):
    """The server-sent events of one streamed response, in a face's own framing: OpenAI's chunks
    (``OpenAIEvents``), the Responses API's events, Anthropic's (llmproxy.faces)."""

    sent_text: bool
    end: bytes  # written after everything else, however the stream ended
    keeps_alive: bool  # sends ``keepalive()`` events while the prompt is read (else a client just waits)

    def opening(self) -> list[bytes]: ...
    def feed(self, text: str) -> list[bytes]: ...  # a piece of the backend's raw text
    def closing(self, response: Any) -> list[bytes]: ...
    def failure(self, exc: BaseException) -> list[bytes]: ...  # how a stream that already started ends in error
    def keepalive(self) -> bytes: ...


class OpenAIEvents:
    """Chat and text completion chunks as OpenAI streams them: ``data:`` lines, an error event, ``[DONE]``."""

    end = DONE
    keeps_alive = False  # OpenAI's clients wait for the first chunk as long as their read timeout says

    def __init__(self, chunks: Chunks) -> None:
        self.chunks = chunks
        self.feed = chunks.feed_events  # a token's way out, with no call of ours in between

    @property
    def sent_text(self) -> bool:
        return self.chunks.sent_text

    def opening(self) -> list[bytes]:
        return [sse(chunk) for chunk in self.chunks.opening()]

    def closing(self, response: Any) -> list[bytes]:
        return [sse(chunk) for chunk in self.chunks.closing(response)]

    def failure(self, exc: BaseException) -> list[bytes]:
        return [error_event(envelope(exc)[1])]

    def keepalive(self) -> bytes:
        raise NotImplementedError("OpenAI's chat and text streams send no keep-alive events")


class ChatChunks:
    """The chunks of one streamed chat completion: the role, the content (and reasoning) as it is
    generated, the calls (as they are written where ``stream_calls``, else once checked), then the rest
    of each part, the finish reason and (when asked) the usage."""

    def __init__(self, rendered: Rendered, model: str, *, include_usage: bool, form: AnswerForm = "tools",
                 stream_calls: bool = False) -> None:
        self.id = new_id("chatcmpl")
        self.created = int(time.time())
        self.model = model
        self.include_usage = include_usage
        self.form = form
        shape = rendered.shape
        self._scanner: Scanner = (text_scanner(rendered.stop, shape.reasoning) if shape.call == "text"
                                  else shape.syntax.scanner(shape, calls=stream_calls))
        # The content and the reasoning sent so far, in pieces: one string would be copied for every token.
        self._streamed: list[str] = []
        self._reasoned: list[str] = []
        self.calls: list[tuple[str, list[str]]] = []  # (name, the pieces of its arguments sent) of each call sent
        self._content_frame: tuple[bytes, bytes] | None = None  # (head, tail) of a content chunk's event

    @property
    def sent_text(self) -> bool:
        return bool(self._streamed or self._reasoned or self.calls)

    @property
    def streamed(self) -> str:
        """The content sent so far."""
        return "".join(self._streamed)

    @property
    def reasoned(self) -> str:
        """The reasoning sent so far."""
        return "".join(self._reasoned)

    def _chunk(self, delta: Delta, finish_reason=None) -> ChatCompletionChunk:
        return ChatCompletionChunk(
            id=self.id, created=self.created, model=self.model,
            choices=[ChunkChoice(delta=delta, finish_reason=finish_reason)],
        )

    def _call_chunk(self, index: int, arguments: str, name: str | None = None,
                    call_id: str | None = None) -> ChatCompletionChunk:
        """A call's opening (``name``: its name, no arguments yet) or a piece of its arguments."""
        function = FunctionCallDelta(name=name, arguments=arguments)
        if self.form == "functions":
            return self._chunk(Delta(function_call=function))
        if name is None:
            return self._chunk(Delta(tool_calls=[ToolCallDelta(index=index, function=function)]))
        return self._chunk(Delta(tool_calls=[ToolCallDelta(index=index, id=call_id or new_id("call", "_"),
                                                           type="function", function=function)]))

    def opening(self) -> list[ChatCompletionChunk]:
        return [self._chunk(Delta(role="assistant", content=""))]

    def feed(self, text: str) -> list[ChatCompletionChunk]:
        return self._chunks(self._scanner.feed(text))

    def feed_plain(self, text: str) -> tuple[str, list[ChatCompletionChunk]]:
        """``feed``, but a piece of plain content, most of a stream, comes as its text with no chunk built
        for it: (content, []), or ("", the chunks of anything else). For whoever writes the content's
        event itself: ``feed_events``, and the other faces (llmproxy.faces)."""
        piece = self._scanner.feed(text)
        if piece.content and not piece.reasoning and not piece.calls:
            self._streamed.append(piece.content)
            return piece.content, []
        return "", self._chunks(piece)

    def feed_events(self, text: str) -> list[bytes]:
        """``feed``'s chunks as server-sent events. A piece of plain content is written into its event's
        frame without building the chunk: the same bytes at a tenth of the cost."""
        content, chunks = self.feed_plain(text)
        if content:
            return [self._content_event(content) or sse(self._chunk(Delta(content=content)))]
        return [sse(chunk) for chunk in chunks]

    def _content_event(self, content: str) -> bytes | None:
        """The event of a chunk with ``content``; None where orjson cannot write it (a lone surrogate:
        then the chunk's own serialiser says what is wrong)."""
        try:
            text = orjson.dumps(content)
        except TypeError:
            return None
        if self._content_frame is None:
            # The chunk written with a stand-in: ``content`` is its last field a client could have chosen
            # (the model name comes before it), so the stand-in's last occurrence is the one to replace.
            mark = b'"\\u0000"'
            head, _, tail = sse(self._chunk(Delta(content="\0"))).rpartition(mark)
            self._content_frame = (head, tail)
        head, tail = self._content_frame
        return head + text + tail

    def _chunks(self, piece: Streamed) -> list[ChatCompletionChunk]:
        chunks = []
        if piece.reasoning:
            self._reasoned.append(piece.reasoning)
            chunks.append(self._chunk(Delta(reasoning_content=piece.reasoning, reasoning=piece.reasoning)))
        if piece.content:
            self._streamed.append(piece.content)
            chunks.append(self._chunk(Delta(content=piece.content)))
        for call in piece.calls:
            if call.name is not None:
                self.calls.append((call.name, []))
                chunks.append(self._call_chunk(call.index, "", call.name))
            if call.arguments:
                self.calls[call.index][1].append(call.arguments)
                chunks.append(self._call_chunk(call.index, call.arguments))
        return chunks

    def closing(self, completion: ChatCompletion) -> list[ChatCompletionChunk]:
        choice = completion.choices[0]
        message = choice.message
        chunks: list[ChatCompletionChunk] = []
        # The final text normally continues what was streamed; a repair that changed streamed
        # text cannot be taken back, so only a true continuation is sent.
        reasoning, reasoned = message.reasoning_content or "", self.reasoned
        if reasoning.startswith(reasoned) and len(reasoning) > len(reasoned):
            delta = reasoning[len(reasoned):]
            chunks.append(self._chunk(Delta(reasoning_content=delta, reasoning=delta)))
            self._reasoned = [reasoning]
        content, streamed = message.content or "", self.streamed
        if content.startswith(streamed) and len(content) > len(streamed):
            chunks.append(self._chunk(Delta(content=content[len(streamed):])))
            self._streamed = [content]
        chunks += self._rest_of_calls(completion)
        chunks.append(self._chunk(Delta(), choice.finish_reason))
        if self.include_usage:
            chunks.append(ChatCompletionChunk(id=self.id, created=self.created, model=self.model, choices=[],
                                              usage=completion.usage))
        return chunks

    def _rest_of_calls(self, completion: ChatCompletion) -> list[ChatCompletionChunk]:
        """What the checked calls add to the calls streamed so far: the rest of their arguments, and the
        calls not streamed at all. Streamed calls come from a grammar and are final; should the checked
        answer differ anyway, the stream fails rather than leave the client a call that was changed."""
        choice = completion.choices[0]
        message = choice.message
        if message.function_call is not None:
            final = [(None, message.function_call)]
        else:
            final = [(call.id, call.function) for call in message.tool_calls or []]
        chunks: list[ChatCompletionChunk] = []
        changed = len(self.calls) > len(final)
        for index, (call_id, function) in enumerate(final):
            if index >= len(self.calls):
                chunks.append(self._call_chunk(index, "", function.name, call_id))
                chunks.append(self._call_chunk(index, function.arguments))
                continue
            name, pieces = self.calls[index]
            sent = "".join(pieces)
            if name != function.name or not function.arguments.startswith(sent):
                changed = True
            elif len(function.arguments) > len(sent):
                chunks.append(self._call_chunk(index, function.arguments[len(sent):]))
        if changed and choice.finish_reason != "length":  # cut at the limit, a partial call is OpenAI's way
            raise OutputParseError("The calls streamed so far differ from the checked answer; ask again, or "
                                   "without stream to get the checked answer whole.",
                                   completion.llmproxy.raw_output if completion.llmproxy else "")
        return chunks
