"""Anthropic's system prompt and conversation as the internal chat messages.

``system_message(system, findings)`` takes the request's ``system`` (a string or text blocks) and gives
one chat system message, or None. ``conversation(messages, findings)`` takes ``messages`` and gives
the chat messages in order: an assistant turn's ``tool_use`` blocks become its ``tool_calls`` and its
``thinking`` its ``reasoning_content``; a user turn's ``tool_result`` blocks become tool messages,
followed by a user message with the turn's other content; a ``system`` turn stays a system message in
place. Malformed turns raise ``InvalidRequestError`` naming the field; blocks a text model has no use
for are left out and listed in ``findings``.
"""

from __future__ import annotations

from typing import Any

from llmproxy.faces.messages._blocks import PARAGRAPH, Findings, readable
from llmproxy.faces.messages._fields import (
    a_bool,
    a_list,
    an_object,
    block_type,
    fail,
    optional,
    path,
    required,
    string_field,
)
from llmproxy.faces.wire import json_bytes

# Chat messages as plain data: validated once, with the whole ChatRequest (see llmproxy.faces).
Message = dict[str, Any]

# Claude Code opens its system prompt with an attribution line for Anthropic's billing,
# ``x-anthropic-billing-header: cc_version=...; cc_entrypoint=...; cch=...;``. Its ``cch`` changes on
# every request, so the prompt would differ from the previous one in its first tokens and the backend
# could reuse none of its cached prefix (minutes of prefill for Claude Code's ~20k-token prompt on a
# local machine). The line is dropped rather than blanked: it tells the model nothing, and its
# ``cc_version`` would still break the cache on every Claude Code update.
ATTRIBUTION = "x-anthropic-billing-header:"


def _without_attribution(text: str) -> str:
    if not text.lstrip().startswith(ATTRIBUTION):
        return text
    return text.lstrip().partition("\n")[2].lstrip("\n")


def _blocks(content: Any, where: str) -> list[tuple[str, Any]]:
    """A turn's content as (path, block) pairs; a string is one text block."""
    if isinstance(content, str):
        return [(where, {"type": "text", "text": content})]
    return [(path(where, index), block) for index, block in enumerate(a_list(content, where))]


def _system_text(content: Any, where: str, findings: Findings) -> str:
    if isinstance(content, str):  # the common case, read without making it a block
        return _without_attribution(content)
    texts = []
    for at, block in _blocks(content, where):
        text = readable(block, at, findings)
        if text is None:
            findings.skip(at, f"a {block['type']} block in a system prompt")
        elif text := _without_attribution(text):
            texts.append(text)
    return PARAGRAPH.join(texts)


def system_message(system: Any, findings: Findings) -> Message | None:
    """The request's top-level ``system`` as one system message (blocks joined by a blank line)."""
    if system is None:
        return None
    text = _system_text(system, "system", findings)
    return {"role": "system", "content": text} if text else None


def conversation(messages: Any, findings: Findings) -> list[Message]:
    """The turns of ``messages``, in order, as chat messages."""
    turns: list[Message] = []
    for index, message in enumerate(a_list(messages, "messages")):
        where = path("messages", index)
        message = an_object(message, where)
        role = string_field(message, "role", where)
        if role not in ("user", "assistant", "system"):
            raise fail(path(where, "role"), "expected 'user', 'assistant' or 'system'")
        content, at = required(message, "content", where), path(where, "content")
        if role == "user":
            turns += _user(content, at, findings)
        elif role == "assistant":
            turns.append(_assistant(content, at, findings))
        elif text := _system_text(content, at, findings):  # Claude Code's mid-conversation reminders
            turns.append({"role": "system", "content": text})
    return turns


def _user(content: Any, where: str, findings: Findings) -> list[Message]:
    """Tool results first, as they must follow the assistant's calls; then the turn's own words."""
    if isinstance(content, str):  # the words alone, read without making them a block
        return [{"role": "user", "content": content}]
    results: list[Message] = []
    texts = []
    for at, block in _blocks(content, where):
        kind = block_type(block, at)
        if kind == "tool_result":
            results.append(_tool_result(block, at, findings))
        elif kind == "tool_use":
            raise fail(at, "tool_use blocks belong in assistant messages")
        else:
            text = readable(block, at, findings)
            if text is None:
                findings.skip(at, f"a {kind} block")
            else:
                texts.append(text)
    if texts or not results:
        results.append({"role": "user", "content": PARAGRAPH.join(texts)})
    return results


def _tool_result(block: dict[str, Any], where: str, findings: Findings) -> Message:
    call_id = string_field(block, "tool_use_id", where)
    content = block.get("content")
    if content is None or isinstance(content, str):  # most results: text, read without making it a block
        text = content or ""
    else:
        texts = []
        for at, inner in _blocks(content, path(where, "content")):
            inner_text = readable(inner, at, findings)
            if inner_text is None:
                findings.skip(at, f"a {inner['type']} block in a tool result")
            else:
                texts.append(inner_text)
        text = PARAGRAPH.join(texts)
    if optional(block, "is_error", a_bool, where):  # the model must not take a failure's output for a result
        text = f"Error: {text}" if text else "Error"
    return {"role": "tool", "content": text, "tool_call_id": call_id}


def _assistant(content: Any, where: str, findings: Findings) -> Message:
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[dict[str, Any]] = []
    for at, block in _blocks(content, where):
        kind = block_type(block, at)
        if kind == "text":
            texts.append(string_field(block, "text", at))
        elif kind == "thinking":  # its signature is Anthropic's (or ours): nothing to check
            thoughts.append(string_field(block, "thinking", at))
        elif kind == "redacted_thinking":
            findings.skip(at, "redacted (encrypted) thinking")
        elif kind == "tool_use":
            calls.append(_tool_use(block, at))
        elif kind == "tool_result":
            raise fail(at, "tool_result blocks belong in user messages")
        else:
            findings.skip(at, f"a {kind} block")
    text = PARAGRAPH.join(texts)
    return {
        "role": "assistant",
        "content": text or (None if calls else ""),
        "tool_calls": calls or None,
        "reasoning_content": PARAGRAPH.join(thoughts) or None,
    }


def _tool_use(block: dict[str, Any], where: str) -> dict[str, Any]:
    call_id = string_field(block, "id", where)
    name = string_field(block, "name", where)
    arguments = an_object(block.get("input", {}), path(where, "input"))
    # Written as the model would write it (non-ASCII as is): the turn is rendered back into the prompt
    # (orjson: a fifteenth of json.dumps's time; the template reads the arguments, whatever their spacing).
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json_bytes(arguments).decode()}}
