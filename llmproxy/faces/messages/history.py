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

import json
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


def _system_text(blocks: list[tuple[str, Any]], findings: Findings) -> str:
    texts = []
    for where, block in blocks:
        text = readable(block, where, findings)
        if text is None:
            findings.skip(where, f"a {block['type']} block in a system prompt")
        elif text := _without_attribution(text):
            texts.append(text)
    return PARAGRAPH.join(texts)


def system_message(system: Any, findings: Findings) -> Message | None:
    """The request's top-level ``system`` as one system message (blocks joined by a blank line)."""
    if system is None:
        return None
    text = _system_text(_blocks(system, "system"), findings)
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
        content = _blocks(required(message, "content", where), path(where, "content"))
        if role == "user":
            turns += _user(content, findings)
        elif role == "assistant":
            turns.append(_assistant(content, findings))
        elif text := _system_text(content, findings):  # Claude Code's mid-conversation reminders
            turns.append({"role": "system", "content": text})
    return turns


def _user(blocks: list[tuple[str, Any]], findings: Findings) -> list[Message]:
    """Tool results first, as they must follow the assistant's calls; then the turn's own words."""
    results: list[Message] = []
    texts = []
    for where, block in blocks:
        kind = block_type(block, where)
        if kind == "tool_result":
            results.append(_tool_result(block, where, findings))
        elif kind == "tool_use":
            raise fail(where, "tool_use blocks belong in assistant messages")
        else:
            text = readable(block, where, findings)
            if text is None:
                findings.skip(where, f"a {kind} block")
            else:
                texts.append(text)
    if texts or not results:
        results.append({"role": "user", "content": PARAGRAPH.join(texts)})
    return results


def _tool_result(block: dict[str, Any], where: str, findings: Findings) -> Message:
    call_id = string_field(block, "tool_use_id", where)
    content = block.get("content")
    texts = []
    for at, inner in [] if content is None else _blocks(content, path(where, "content")):
        text = readable(inner, at, findings)
        if text is None:
            findings.skip(at, f"a {inner['type']} block in a tool result")
        else:
            texts.append(text)
    text = PARAGRAPH.join(texts)
    if optional(block, "is_error", a_bool, where):  # the model must not take a failure's output for a result
        text = f"Error: {text}" if text else "Error"
    return {"role": "tool", "content": text, "tool_call_id": call_id}


def _assistant(blocks: list[tuple[str, Any]], findings: Findings) -> Message:
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[dict[str, Any]] = []
    for where, block in blocks:
        kind = block_type(block, where)
        if kind == "text":
            texts.append(string_field(block, "text", where))
        elif kind == "thinking":  # its signature is Anthropic's (or ours): nothing to check
            thoughts.append(string_field(block, "thinking", where))
        elif kind == "redacted_thinking":
            findings.skip(where, "redacted (encrypted) thinking")
        elif kind == "tool_use":
            calls.append(_tool_use(block, where))
        elif kind == "tool_result":
            raise fail(where, "tool_result blocks belong in user messages")
        else:
            findings.skip(where, f"a {kind} block")
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
    # Written as the model would write it (non-ASCII as is): the turn is rendered back into the prompt.
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}}
