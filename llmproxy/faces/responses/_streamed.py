"""One output item of a streamed response, and the events that add it, grow it and close it.

Each class holds one item at its ``output_index`` and gives event payloads (dicts with ``type``;
llmproxy.faces.responses.events numbers and frames them) in the canonical order OpenAI sends:
``opened()`` (``response.output_item.added`` and, for text, the empty part), ``grown(piece)`` (a
delta), ``closed()`` (the ``.done`` events, ending with ``response.output_item.done`` carrying the
whole item, which is what Codex acts on). ``done`` is that whole item, the one the terminal
response lists.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from llmproxy.faces.responses._reasoning import reasoning_item
from llmproxy.faces.responses.output import message_item, output_text
from llmproxy.faces.responses.tools import ToolTarget
from llmproxy.types import new_id

Payload = dict[str, Any]


class StreamedItem(ABC):
    """An item being streamed: its id, its place in ``output``, and the text it has grown by."""

    prefix = ""  # of the item's id: rs, msg, fc, ctc

    def __init__(self, index: int) -> None:
        self.index = index
        self.id = new_id(self.prefix, "_")
        self.text = ""

    def _event(self, kind: str, **fields: Any) -> Payload:
        return {"type": kind, "item_id": self.id, "output_index": self.index, **fields}

    def _added(self, item: Payload) -> Payload:
        return {"type": "response.output_item.added", "output_index": self.index, "item": item}

    def _item_done(self) -> Payload:
        return {"type": "response.output_item.done", "output_index": self.index, "item": self.done}

    @property
    @abstractmethod
    def done(self) -> Payload: ...

    @abstractmethod
    def opened(self) -> list[Payload]: ...

    @abstractmethod
    def grown(self, piece: str) -> list[Payload]: ...

    @abstractmethod
    def closed(self) -> list[Payload]: ...


class StreamedReasoning(StreamedItem):
    """Reasoning, streamed as one summary part: the events Codex shows and the SDK accumulates. The
    closed item carries the text as ``content`` (and sealed, where asked) for the client to replay."""

    prefix = "rs"

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

    def grown(self, piece: str) -> list[Payload]:
        self.text += piece
        return [self._event("response.reasoning_summary_text.delta", summary_index=0, delta=piece)]

    def closed(self) -> list[Payload]:
        return [self._event("response.reasoning_summary_text.done", summary_index=0, text=self.text),
                self._event("response.reasoning_summary_part.done", summary_index=0,
                            part={"type": "summary_text", "text": self.text}),
                self._item_done()]


class StreamedMessage(StreamedItem):
    """The answer's text, as one ``output_text`` part."""

    prefix = "msg"

    @property
    def done(self) -> Payload:
        return message_item(self.text, item_id=self.id)

    def opened(self) -> list[Payload]:
        return [self._added({"id": self.id, "type": "message", "role": "assistant", "status": "in_progress",
                             "content": []}),
                self._event("response.content_part.added", content_index=0, part=output_text(""))]

    def grown(self, piece: str) -> list[Payload]:
        self.text += piece
        return [self._event("response.output_text.delta", content_index=0, delta=piece, logprobs=[])]

    def closed(self) -> list[Payload]:
        return [self._event("response.output_text.done", content_index=0, text=self.text, logprobs=[]),
                self._event("response.content_part.done", content_index=0, part=output_text(self.text)),
                self._item_done()]


class StreamedFunctionCall(StreamedItem):
    """A function call, its arguments streamed as the chat chunks deliver them; ``text`` is the
    arguments so far."""

    prefix = "fc"

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

    def grown(self, piece: str) -> list[Payload]:
        self.text += piece
        return [self._event("response.function_call_arguments.delta", delta=piece)]

    def closed(self) -> list[Payload]:
        return [self._event("response.function_call_arguments.done", name=self.target.name, arguments=self.text),
                self._item_done()]


class StreamedCustomCall(StreamedItem):
    """A custom tool's call. Its input is known only once its arguments (JSON around it) are whole,
    so the stream sends it at the end, in one piece."""

    prefix = "ctc"

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

    def grown(self, piece: str) -> list[Payload]:
        self.text += piece
        return [self._event("response.custom_tool_call_input.delta", delta=piece)]

    def closed(self) -> list[Payload]:
        return [self._event("response.custom_tool_call_input.done", input=self.text), self._item_done()]
