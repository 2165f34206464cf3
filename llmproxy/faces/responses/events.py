"""A streamed response: the chat chunks of the answer as Responses server-sent events.

``ResponsesEvents`` wraps the ``ChatChunks`` of one streamed request (made with the tools form) and
is driven like it: ``opening()``, ``feed(text)`` with each piece of raw backend text, ``closing(completion)``
with the finished answer; ``keepalive()`` while the backend is silent, ``failure(exc)`` when anything
fails. Each gives SSE bytes (``event: <type>``, ``data: <json>``, a blank line), every payload with its
``type`` and a ``sequence_number`` counted over the whole stream, and the one response id.

Items follow the chunks in order, each at the next ``output_index`` (llmproxy.faces.responses._streamed
has their events): reasoning, the message's text, then the calls. An item is closed when the next
one starts, or at the end. A function call streams its arguments as the chunks deliver them; a custom
tool's call (its arguments are JSON around the raw input) is sent whole once the answer is checked.
The stream ends with exactly one terminal event: ``response.completed``, or ``response.incomplete``
(cut at the token limit) carrying the whole response object (``final``, which the server
stores), or ``response.failed``.

A response object, which repeats the request's ``instructions`` and ``tools`` (tens of KB for a
coding agent), is written to JSON once however many events carry it.
"""

from __future__ import annotations

from typing import Any

import orjson

from llmproxy.faces.responses._streamed import (
    Delta,
    Payload,
    StreamedCustomCall,
    StreamedFunctionCall,
    StreamedItem,
    StreamedMessage,
    StreamedReasoning,
)
from llmproxy.faces.responses.output import custom_input, response_object, response_shell
from llmproxy.faces.wire import json_bytes, sse_event
from llmproxy.faces.responses.request import ResponsesRequest
from llmproxy.faces.chat.chunks import ChatChunks
from llmproxy.faces.chat.envelope import envelope
from llmproxy.types import ChatCompletion, ChatCompletionChunk, ToolCallDelta


class ResponsesEvents:
    """The server-sent events of one streamed response."""

    end = b""  # nothing follows the terminal event (no ``[DONE]`` in this API)
    keeps_alive = True  # Codex gives up on a silent stream; a repeated response.in_progress keeps it waiting

    def __init__(self, request: ResponsesRequest, chat_chunks: ChatChunks | None, *, response_id: str,
                 created_at: int) -> None:  # no chat chunks: a stream that fails before its answer starts
        self.request = request
        self.chat_chunks = chat_chunks
        self.response_id = response_id
        self.created_at = created_at
        self.final: dict[str, Any] | None = None  # the response object the terminal event carried
        self._sequence = 0
        self._items: list[StreamedItem] = []  # every item added so far, in output order
        self._open: StreamedItem | None = None  # the item the next pieces go to, until the next one starts
        # Each call by its chat index: a function call's item, or a custom tool's [call id, name, arguments]
        self._calls: dict[int, StreamedFunctionCall | list[str]] = {}

    @property
    def sent_text(self) -> bool:
        """Whether anything of the answer has been sent (then no second chance may follow)."""
        return self.chat_chunks.sent_text

    # --- the stream's steps --------------------------------------------------------------------

    def opening(self) -> list[bytes]:
        """``response.created`` then ``response.in_progress`` (whichever step comes first sends them)."""
        return self._frames([])

    def feed(self, text: str) -> list[bytes]:
        content, chunks = self.chat_chunks.feed_plain(text)
        if content:
            return self._frames(self._content(content))
        if not chunks and self._sequence:  # most pieces of a call add nothing yet
            return []
        return self._frames([event for chunk in chunks for event in self._chunk(chunk)])

    def closing(self, completion: ChatCompletion) -> list[bytes]:
        events = [event for chunk in self.chat_chunks.closing(completion) for event in self._chunk(chunk)]
        events += self._close()
        for entry in self._calls.values():
            if isinstance(entry, list):  # a custom tool's call, whole now the answer is checked
                call_id, name, arguments = entry
                events += self._add(StreamedCustomCall(len(self._items), call_id, name))
                tool_input = custom_input(arguments)
                events += (self._grow(tool_input) if tool_input else []) + self._close()
        if not self._calls and not any(isinstance(item, StreamedMessage) for item in self._items):
            events += self._add(StreamedMessage(len(self._items)))  # an answer always has its message, if empty
            events += self._close()
        self.final = response_object(self.request, completion, response_id=self.response_id,
                                     created_at=self.created_at, output=[item.done for item in self._items])
        terminal = "response.incomplete" if self.final["status"] == "incomplete" else "response.completed"
        return self._frames([*events, {"type": terminal, "response": self.final}])

    def keepalive(self) -> bytes:
        """A repeated ``response.in_progress``: clients' idle timers restart on events, not comments."""
        return b"".join(self._frames([{"type": "response.in_progress", "response": self._shell("in_progress")}]))

    def failure(self, exc: BaseException) -> list[bytes]:
        """The terminal ``response.failed`` for ``exc``: the items finished so far, and the error's code
        and message (``context_length_exceeded`` sends Codex down its compaction path). An item still
        open is not closed: a call half sent must not look whole."""
        status, body = envelope(exc)
        code = "rate_limit_exceeded" if status == 429 else body.error.code or body.error.type
        failed = self._shell("failed")
        failed["output"] = [item.done for item in self._items if item is not self._open]
        failed["error"] = {"code": code, "message": body.error.message, "param": body.error.param}
        return self._frames([{"type": "response.failed", "response": failed}])

    # --- chat chunks to item events ------------------------------------------------------------

    def _chunk(self, chunk: ChatCompletionChunk) -> list[Payload]:
        events: list[Payload] = []
        for choice in chunk.choices:
            delta = choice.delta
            if delta.reasoning_content:
                if not isinstance(self._open, StreamedReasoning):
                    encrypted = self.request.encrypted_reasoning
                    events += self._add(StreamedReasoning(len(self._items), encrypted=encrypted))
                events += self._grow(delta.reasoning_content)
            if delta.content:
                events += self._content(delta.content)
            for call in delta.tool_calls or []:
                events += self._call(call)
        return events

    def _content(self, text: str) -> list[Payload]:
        """A piece of the answer's text, for its message item (opened by the first)."""
        events = [] if isinstance(self._open, StreamedMessage) else self._add(StreamedMessage(len(self._items)))
        return events + self._grow(text)

    def _call(self, call: ToolCallDelta) -> list[Payload]:
        """A call's opening (its id and name) or a piece of its arguments. Calls come one after
        another (ChatChunks sends each whole before the next), so an opening closes the last item."""
        events: list[Payload] = []
        if call.function.name is not None:
            target = self.request.names.target(call.function.name)
            if target.custom:
                events += self._close()
                self._calls[call.index] = [call.id or "", target.name, ""]
            else:
                streamed = StreamedFunctionCall(len(self._items), call.id or "", target)
                self._calls[call.index] = streamed
                events += self._add(streamed)
        pieces = call.function.arguments
        entry = self._calls.get(call.index)
        if pieces and isinstance(entry, list):
            entry[2] += pieces
        elif pieces and entry is not None:
            events += entry.grown(pieces)
        return events

    def _add(self, item: StreamedItem) -> list[Payload]:
        events = self._close()
        self._items.append(item)
        self._open = item
        return events + item.opened()

    def _grow(self, piece: str) -> list[Payload]:
        assert self._open is not None
        return self._open.grown(piece)

    def _close(self) -> list[Payload]:
        item, self._open = self._open, None
        return item.closed() if item is not None else []

    # --- framing -------------------------------------------------------------------------------

    def _shell(self, status: str) -> dict[str, Any]:
        return response_shell(self.request, response_id=self.response_id, created_at=self.created_at,
                              model=self.request.chat.model or (self.chat_chunks.model if self.chat_chunks else ""),
                              status=status)

    def _frames(self, events: list[Payload]) -> list[bytes]:
        """``events`` numbered and framed."""
        if self._sequence == 0:  # the stream opens so whatever step comes first (the SDK requires it)
            shell = orjson.Fragment(json_bytes(self._shell("in_progress")))
            events = [{"type": "response.created", "response": shell},
                      {"type": "response.in_progress", "response": shell}, *events]
        frames = []
        for event in events:
            if type(event) is Delta:
                frames.append(event.frame(self._sequence))
            else:
                event["sequence_number"] = self._sequence
                frames.append(sse_event(event))
            self._sequence += 1
        return frames
