"""One output item of a streamed response, and the events that add it, grow it and close it.

Each class holds one item at its ``output_index`` and gives event payloads (dicts with ``type``, or
a ``Delta``; llmproxy.faces.responses.events numbers and frames them) in the canonical order OpenAI
sends: ``opened()`` (``response.output_item.added`` and, for text, the empty part), ``grown(piece)``
(a delta), ``closed()`` (the ``.done`` events, ending with ``response.output_item.done`` carrying
the whole item, which is what Codex acts on). ``done`` is that whole item, the one the terminal
response lists.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, NamedTuple

from llmproxy.faces.responses._reasoning import reasoning_item
from llmproxy.faces.responses.output import message_item, output_text
from llmproxy.faces.responses.tools import ToolTarget
from llmproxy.faces.wire import json_bytes, sse_event
from llmproxy.types import new_id


class Delta(NamedTuple):
    """A delta event: its frame up to the delta's value (``head``; the same for every delta of an
    item), and the piece. Deltas are most of a stream's events: framed from the head, each costs
    half of what a payload written whole does."""

    head: bytes
    piece: str

    def frame(self, sequence_number: int) -> bytes:
        return b"".join((self.head, json_bytes(self.piece), b',"sequence_number":', str(sequence_number).encode(),
                         b"}\n\n"))


Payload = dict[str, Any] | Delta


class StreamedItem(ABC):
    """An item being streamed: its id, its place in ``output``, and the text it has grown by."""

    prefix = ""  # of the item's id: rs, msg, fc, ctc
    delta_type = ""  # the type of the events that grow it
    delta_fields: ClassVar[dict[str, Any]] = {}  # what those carry besides the item and the delta

    def __init__(self, index: int) -> None:
        self.index = index
        self.id = new_id(self.prefix, "_")
        self._pieces: list[str] = []  # what it has grown by (joined into one string, it would be copied a token)
        self._delta_head: bytes | None = None

    @property
    def text(self) -> str:
        return "".join(self._pieces)

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        return {"type": kind, "item_id": self.id, "output_index": self.index, **fields}

    def grown(self, piece: str) -> list[Payload]:
        self._pieces.append(piece)
        if self._delta_head is None:  # the event without its delta, open where the delta goes
            self._delta_head = sse_event(self._event(self.delta_type, **self.delta_fields))[:-3] + b',"delta":'
        return [Delta(self._delta_head, piece)]

    def _added(self, item: dict[str, Any]) -> dict[str, Any]:
        return {"type": "response.output_item.added", "output_index": self.index, "item": item}

    def _item_done(self) -> Payload:
        return {"type": "response.output_item.done", "output_index": self.index, "item": self.done}

    @property
    @abstractmethod
    def done(self) -> Payload: ...

    @abstractmethod
    def opened(self) -> list[Payload]: ...

    @abstractmethod
    def closed(self) -> list[Payload]: ...


class StreamedReasoning(StreamedItem):
    """Reasoning, streamed as one summary part: the events Codex shows and the SDK accumulates. The
    closed item carries the text as ``content`` (and sealed, where asked) for the client to replay."""

    prefix = "rs"
    delta_type = "response.reasoning_summary_text.delta"
    delta_fields: ClassVar[dict[str, Any]] = {"summary_index": 0}

    def __init__(self, index: int, *, encrypted: bool) -> None:
        super().__init__(index)
        self.encrypted = encrypted

    @property
    def done(self) -> Payload:
        return reasoning_item(self.text, encrypted=self.encrypted, item_id=self.id)

    def opened(self) -> list[Payload]:
        return [self._added({"id": self.id, "type": "reasoning", "summary": []}),
                self._event("response.reasoning_summary_part.added", summary_index=0,
                            part={"type": "summary_text", "text": ""})]

    def closed(self) -> list[Payload]:
        return [self._event("response.reasoning_summary_text.done", summary_index=0, text=self.text),
                self._event("response.reasoning_summary_part.done", summary_index=0,
                            part={"type": "summary_text", "text": self.text}),
                self._item_done()]


class StreamedMessage(StreamedItem):
    """The answer's text, as one ``output_text`` part."""

    prefix = "msg"
    delta_type = "response.output_text.delta"
    delta_fields: ClassVar[dict[str, Any]] = {"content_index": 0, "logprobs": []}

    @property
    def done(self) -> Payload:
        return message_item(self.text, item_id=self.id)

    def opened(self) -> list[Payload]:
        return [self._added({"id": self.id, "type": "message", "role": "assistant", "status": "in_progress",
                             "content": []}),
                self._event("response.content_part.added", content_index=0, part=output_text(""))]

    def closed(self) -> list[Payload]:
        return [self._event("response.output_text.done", content_index=0, text=self.text, logprobs=[]),
                self._event("response.content_part.done", content_index=0, part=output_text(self.text)),
                self._item_done()]


class StreamedFunctionCall(StreamedItem):
    """A function call, its arguments streamed as the chat chunks deliver them; ``text`` is the
    arguments so far."""

    prefix = "fc"
    delta_type = "response.function_call_arguments.delta"

    def __init__(self, index: int, call_id: str, target: ToolTarget) -> None:
        super().__init__(index)
        self.call_id = call_id
        self.target = target

    def _item(self, status: str) -> Payload:
        item = {"id": self.id, "type": "function_call", "status": status, "call_id": self.call_id,
                "name": self.target.name, "arguments": self.text}
        if self.target.namespace is not None:
            item["namespace"] = self.target.namespace
        return item

    @property
    def done(self) -> Payload:
        return self._item("completed")

    def opened(self) -> list[Payload]:
        return [self._added(self._item("in_progress"))]

    def closed(self) -> list[Payload]:
        return [self._event("response.function_call_arguments.done", name=self.target.name, arguments=self.text),
                self._item_done()]


class StreamedCustomCall(StreamedItem):
    """A custom tool's call. Its input is known only once its arguments (JSON around it) are whole,
    so the stream sends it at the end, in one piece."""

    prefix = "ctc"
    delta_type = "response.custom_tool_call_input.delta"

    def __init__(self, index: int, call_id: str, name: str) -> None:
        super().__init__(index)
        self.call_id = call_id
        self.name = name

    def _item(self, tool_input: str) -> Payload:
        return {"id": self.id, "type": "custom_tool_call", "call_id": self.call_id, "name": self.name,
                "input": tool_input}

    @property
    def done(self) -> Payload:
        return self._item(self.text)

    def opened(self) -> list[Payload]:
        return [self._added(self._item(""))]

    def closed(self) -> list[Payload]:
        return [self._event("response.custom_tool_call_input.done", input=self.text), self._item_done()]
