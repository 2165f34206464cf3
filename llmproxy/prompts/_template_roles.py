"""The roles a model's own chat template takes, and the conversation reshaped for one that lacks some.

Gemma's template refuses a system turn, Mistral v0.1's any role but user and assistant, and a template
that knows no tools rarely shows a ``tool`` turn. Which roles a template takes is probed once, by
rendering a two-turn conversation; a template that fails or leaves the probe text out does not take
that role. The conversation is then reshaped as llama.cpp reshapes it for such templates: system text
opens the next user turn, a tool result becomes a user turn holding ``{"tool_response": ...}``, and user
turns in a row are merged, since these templates often insist that roles alternate.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

PROBE = "llmproxy-role-probe"

Render = Callable[[list[dict[str, Any]]], str]


@dataclass(frozen=True)
class Roles:
    system: bool
    tool: bool


def probe_roles(render: Render, *, tools_known: bool) -> Roles:
    """Which of the system and tool roles ``render`` shows; a template that knows tools takes tool results."""
    system = [{"role": "system", "content": PROBE}, {"role": "user", "content": "Hi"}]
    tool = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hi"},
            {"role": "tool", "content": PROBE, "tool_call_id": "abcdef123"}]
    return Roles(system=_shows(render, system), tool=tools_known or _shows(render, tool))


def _shows(render: Render, messages: list[dict[str, Any]]) -> bool:
    try:
        return PROBE in render(messages)
    except Exception:  # noqa: BLE001 - a template that fails on the role does not take it
        return False


def fit_roles(history: list[dict[str, Any]], roles: Roles) -> list[dict[str, Any]]:
    """``history`` with the roles the template does not take turned into user turns (see the module)."""
    if roles.system and roles.tool:
        return history
    fitted: list[dict[str, Any]] = []
    pending: list[str] = []  # system text waiting for the next user turn
    for message in history:
        role = message["role"]
        if role == "system" and not roles.system:
            pending.append(message["content"])
            continue
        if role == "tool" and not roles.tool:
            result = {key: message[key] for key in ("name", "content") if key in message}
            message = {"role": "user", "content": json.dumps({"tool_response": result}, ensure_ascii=False)}
        if message["role"] == "user":
            message = {**message, "content": "\n\n".join([*pending, message["content"]])}
            pending = []
            if fitted and fitted[-1]["role"] == "user":
                message = {**message, "content": fitted.pop()["content"] + "\n\n" + message["content"]}
        fitted.append(message)
    if pending:
        fitted.append({"role": "user", "content": "\n\n".join(pending)})
    return fitted
