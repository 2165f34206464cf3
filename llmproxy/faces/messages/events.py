"""A streamed Messages answer: the chat stream's chunks as Anthropic's server-sent events.

``MessagesEvents`` wraps the request's ``ChatChunks`` and is driven like it: ``opening()``, ``feed()``
with each piece of the backend's raw text, ``closing()`` with the finished ChatCompletion; each gives
the events to send as bytes (``event: <type>`` and ``data: <json>``; the SDK dispatches on the event
name, the JSON repeats it as ``type``). ``keepalive()`` is a ping, ``failure()`` the error event that
ends a stream which failed after it started.

The chat chunks' reasoning, content and calls become content blocks, opened as they first appear and
each closed when the next one opens, with dense indices in that order: ``thinking`` (its signature
sent just before it closes), ``text``, and ``tool_use`` whose arguments arrive as ``input_json_delta``
pieces joining into the input object. The message they rebuild equals ``message_object`` for the same
completion.
"""

from __future__ import annotations

from typing import Any

from llmproxy.errors import OutputParseError
from llmproxy.faces.messages.errors import error_response
from llmproxy.faces.messages.message import ended_by, signature, stop_reason, tool_use_id, usage
from llmproxy.faces.messages.request import MessagesRequest
from llmproxy.faces.wire import sse_event
from llmproxy.faces.chat.chunks import ChatChunks
from llmproxy.types import ChatCompletion, ChatCompletionChunk


class MessagesEvents:
    """The events of one streamed Messages answer."""

    end = b""  # nothing follows message_stop (or the error event)
    keeps_alive = True  # Claude Code gives up on a silent stream; a ping every few seconds keeps it waiting

    def __init__(self, request: MessagesRequest, chat_chunks: ChatChunks, *, message_id: str,
                 input_tokens: int) -> None:
        self.request = request
        self.chat_chunks = chat_chunks
        self.message_id = message_id
        self.input_tokens = input_tokens
        self._index = -1  # the index of the block opened last
        self._open: str | None = None  # its type, while one is open
        self._thinking: list[str] = []  # the open thinking block's text, which its signature is made from
        self._call_blocks: dict[int, int] = {}  # a chat call's index -> its tool_use block's index

    @property
    def sent_text(self) -> bool:
        return self.chat_chunks.sent_text

    def opening(self) -> list[bytes]:
        message = {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": self.request.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": self.input_tokens, "output_tokens": 1,
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
        }
        return [sse_event({"type": "message_start", "message": message}), *self._translate(self.chat_chunks.opening())]

    def feed(self, text: str) -> list[bytes]:
        content, chunks = self.chat_chunks.feed_plain(text)
        return self._text(content) if content else self._translate(chunks)

    def closing(self, completion: ChatCompletion) -> list[bytes]:
        """The rest of the answer, the last block's end, the stop reason and usage, and the end."""
        sent = self._translate(self.chat_chunks.closing(completion))
        sent += self._close()
        reason = stop_reason(completion)
        sent.append(sse_event({
            "type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": ended_by(completion) if reason == "stop_sequence" else None},
            "usage": usage(completion),  # the real counts, output_tokens cumulative as Anthropic sends it
        }))
        sent.append(sse_event({"type": "message_stop"}))
        return sent

    def keepalive(self) -> bytes:
        return sse_event({"type": "ping"})

    def failure(self, exc: BaseException) -> list[bytes]:
        return [sse_event(error_response(exc)[1])]

    # --- chat chunks -> block events -------------------------------------------------------------

    def _translate(self, chunks: list[ChatCompletionChunk]) -> list[bytes]:
        sent: list[bytes] = []
        for chunk in chunks:
            if not chunk.choices:  # the usage chunk: closing() sends the usage itself
                continue
            delta = chunk.choices[0].delta
            if delta.reasoning_content:
                sent += self._delta("thinking", {"type": "thinking_delta", "thinking": delta.reasoning_content})
                self._thinking.append(delta.reasoning_content)
            if delta.content:
                sent += self._text(delta.content)
            for call in delta.tool_calls or []:
                if call.id is not None:  # a call's opening: its id and name, no arguments yet
                    sent += self._start({"type": "tool_use", "id": tool_use_id(call.id),
                                         "name": call.function.name, "input": {}})
                    self._call_blocks[call.index] = self._index
                if call.function.arguments:
                    sent += self._arguments(call.index, call.function.arguments)
        return sent

    def _text(self, text: str) -> list[bytes]:
        return self._delta("text", {"type": "text_delta", "text": text})

    def _delta(self, kind: str, delta: dict[str, Any]) -> list[bytes]:
        """``delta`` for the open block of ``kind``, opening one first where another kind is open."""
        sent = [] if self._open == kind else self._start({"type": "text", "text": ""} if kind == "text" else
                                                         {"type": "thinking", "thinking": "", "signature": ""})
        sent.append(sse_event({"type": "content_block_delta", "index": self._index, "delta": delta}))
        return sent

    def _arguments(self, call_index: int, piece: str) -> list[bytes]:
        block = self._call_blocks.get(call_index)
        # Calls stream one after another; a piece for a call whose block has closed cannot be sent, and
        # leaving it out would break the input the pieces join into, so the stream fails instead.
        if block != self._index or self._open != "tool_use":
            raise OutputParseError("A piece of a call's arguments arrived after the call was closed in the "
                                   "stream; ask again, or without stream.", "")
        return [sse_event({"type": "content_block_delta", "index": block,
                       "delta": {"type": "input_json_delta", "partial_json": piece}})]

    def _start(self, block: dict[str, Any]) -> list[bytes]:
        sent = self._close()
        self._index += 1
        self._open = block["type"]
        return [*sent, sse_event({"type": "content_block_start", "index": self._index, "content_block": block})]

    def _close(self) -> list[bytes]:
        """The open block's end; a thinking block's signature comes just before it."""
        if self._open is None:
            return []
        sent = []
        if self._open == "thinking":
            thinking, self._thinking = "".join(self._thinking), []
            sent.append(sse_event({"type": "content_block_delta", "index": self._index,
                                   "delta": {"type": "signature_delta", "signature": signature(thinking)}}))
        sent.append(sse_event({"type": "content_block_stop", "index": self._index}))
        self._open = None
        return sent
