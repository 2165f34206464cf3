"""Responses input items as the internal chat messages.

``History(names)`` is fed item lists in conversation order with ``read(items, where)`` (a stored
previous turn's, then the request's own ``input``) and gives the chat messages with ``messages()``.

- A ``message`` (its ``type`` may be left out) is a user, system or developer message, or an
  assistant turn's text.
- ``function_call`` and ``custom_tool_call`` items are an assistant turn's calls: consecutive ones,
  and the assistant message before them, make one turn with several ``tool_calls``. A call is named
  as its tool is offered (llmproxy.faces.responses.tools), a namespace's child and a custom tool
  included, so history and tools agree.
- ``function_call_output`` and ``custom_tool_call_output`` are tool messages.
- A ``reasoning`` item's text becomes the ``reasoning_content`` of the assistant turn it belongs to.
- Images and files become stand-in text, listed in ``notes``; items of any other type (Codex's
  ``web_search_call``, ``compaction``...) and reasoning with no turn to go with are left out and
  listed in ``skipped``.

Item ids are never relied on: Codex leaves them out of what it replays.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from llmproxy.faces.responses._fields import a_name, at, fail, optional_text
from llmproxy.faces.responses._parts import content_text
from llmproxy.faces.responses._reasoning import replayed_reasoning
from llmproxy.faces.responses.tools import ToolNames, ToolTarget

# Chat messages as plain data: validated once, with the whole ChatRequest (see llmproxy.faces).
Message = dict[str, Any]


@dataclass
class _Turn:
    """An assistant turn being gathered from consecutive items."""

    reasoning: list[str] = field(default_factory=list)
    reasoning_at: str = ""  # where its first reasoning item was, for the note should the turn have nothing else
    content: str | None = None
    calls: list[dict[str, Any]] = field(default_factory=list)

    @property
    def answered(self) -> bool:
        return self.content is not None or bool(self.calls)


class History:
    """The chat messages of a conversation given as Responses items."""

    def __init__(self, names: ToolNames) -> None:
        self.names = names
        self.notes: list[str] = []  # content replaced by a stand-in
        self.skipped: list[str] = []  # items and parts left out
        self._messages: list[Message] = []
        self._turn: _Turn | None = None

    def messages(self) -> list[Message]:
        """The messages read so far, the last assistant turn included."""
        self._close_turn()
        return list(self._messages)

    def read(self, items: list[Any], where: str) -> None:
        """Add ``items``; ``where`` is their list's path in the request (``input``) for errors and notes."""
        readers = self._READERS
        for index, item in enumerate(items):
            here = f"{where}[{index}]"  # at(where, index), inline: a long history has hundreds of items
            if not isinstance(item, dict):
                raise fail(here, "must be an object")
            kind = item.get("type") or ("message" if "role" in item else None)
            reader = readers.get(kind) if isinstance(kind, str) else None
            if reader is None:
                self.skipped.append(f"{here}: item of type {kind!r} left out")
            else:
                reader(self, item, here)

    # --- the items -----------------------------------------------------------------------------

    def _message(self, item: dict[str, Any], here: str) -> None:
        role = item.get("role")
        text = content_text(item, "content", here, self.notes, self.skipped)
        if role == "assistant":
            if self._turn is not None and self._turn.answered:
                self._close_turn()
            self._current_turn().content = text or ""
            return
        self._close_turn()
        if role == "user":
            self._messages.append({"role": "user", "content": text or ""})
        elif role in ("system", "developer"):
            self._messages.append({"role": role, "content": text or ""})
        else:
            raise fail(at(here, "role"), "must be 'user', 'system', 'developer' or 'assistant'")

    def _function_call(self, item: dict[str, Any], here: str) -> None:
        call_id, name = a_name(item, "call_id", here), a_name(item, "name", here)
        namespace = optional_text(item, "namespace", here) or None
        arguments = item.get("arguments")
        if arguments is None:
            arguments = "{}"
        elif not isinstance(arguments, str):  # the arguments as an object, not yet as JSON text
            arguments = json.dumps(arguments, ensure_ascii=False)
        self._add_call(call_id, self.names.name_for(ToolTarget(name, namespace)), arguments)

    def _custom_tool_call(self, item: dict[str, Any], here: str) -> None:
        call_id, name = a_name(item, "call_id", here), a_name(item, "name", here)
        tool_input = optional_text(item, "input", here) or ""
        self._add_call(call_id, self.names.name_for(ToolTarget(name, custom=True)),
                       json.dumps({"input": tool_input}, ensure_ascii=False))

    def _call_output(self, item: dict[str, Any], here: str) -> None:
        call_id = a_name(item, "call_id", here)
        text = content_text(item, "output", here, self.notes, self.skipped)
        self._close_turn()
        self._messages.append({"role": "tool", "content": text or "", "tool_call_id": call_id})

    def _reasoning(self, item: dict[str, Any], here: str) -> None:
        text = replayed_reasoning(item)
        if not text:
            self.skipped.append(f"{here}: reasoning with no text this server can read left out")
            return
        # Reasoning opens a turn; one that follows an answer without reasoning is that answer's own
        # (a stream that found the reasoning only at its end sent it after the message).
        if self._turn is not None and self._turn.answered and self._turn.reasoning:
            self._close_turn()
        turn = self._current_turn()
        if not turn.reasoning:
            turn.reasoning_at = here
        turn.reasoning.append(text)

    _READERS = {
        "message": _message,
        "function_call": _function_call,
        "custom_tool_call": _custom_tool_call,
        "function_call_output": _call_output,
        "custom_tool_call_output": _call_output,
        "reasoning": _reasoning,
    }

    # --- assistant turns -----------------------------------------------------------------------

    def _current_turn(self) -> _Turn:
        if self._turn is None:
            self._turn = _Turn()
        return self._turn

    def _add_call(self, call_id: str, name: str, arguments: str) -> None:
        self._current_turn().calls.append({"id": call_id, "type": "function",
                                           "function": {"name": name, "arguments": arguments}})

    def _close_turn(self) -> None:
        turn, self._turn = self._turn, None
        if turn is None:
            return
        if not turn.answered:
            self.skipped.append(f"{turn.reasoning_at}: reasoning with no assistant message or call after it left out")
            return
        content = turn.content if turn.content or not turn.calls else None  # chat's way: calls alone, no content
        self._messages.append({"role": "assistant", "content": content, "tool_calls": turn.calls or None,
                               "reasoning_content": "\n\n".join(turn.reasoning) or None})
