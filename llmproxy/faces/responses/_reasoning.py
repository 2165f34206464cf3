"""The model's reasoning, there and back: out as a reasoning item, in again as the next turn's thought.

Clients that keep no state on the server (Codex sends ``store: false``) give a reasoning model's
thinking back only as they received it, in the reasoning item. ``reasoning_item`` writes the text in
the item's ``summary`` (what clients show) and ``content``, and, when the client asks for
``reasoning.encrypted_content``, sealed in ``encrypted_content`` too (Codex always replays that
field, not always ``content``). ``replayed_reasoning`` reads a replayed item back to text. A sealed
text is only a marked copy: nothing here is secret, and another server's encrypted content, which
cannot be read, is passed over.
"""

from __future__ import annotations

from typing import Any

from llmproxy.types import new_id

SEAL = "llmproxy.reasoning.v1:"  # marks encrypted_content this server wrote
ENCRYPTED = "reasoning.encrypted_content"  # the ``include`` entry that asks for it


def reasoning_item(text: str, *, encrypted: bool, item_id: str | None = None) -> dict[str, Any]:
    """The output item for reasoning ``text``; ``encrypted``: with the sealed copy."""
    item: dict[str, Any] = {
        "id": item_id or new_id("rs", "_"),
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": text}],
        "content": [{"type": "reasoning_text", "text": text}],
    }
    if encrypted:
        item["encrypted_content"] = SEAL + text
    return item


def _texts(parts: Any, kind: str) -> list[str]:
    """The texts of the ``kind`` parts in ``parts`` (anything else passed over: the item is a replay)."""
    if not isinstance(parts, list):
        return []
    return [part["text"] for part in parts
            if isinstance(part, dict) and part.get("type", kind) == kind and isinstance(part.get("text"), str)]


def replayed_reasoning(item: dict[str, Any]) -> str:
    """The text of a replayed reasoning item: its ``reasoning_text`` content, else its summary, else
    the text sealed in its ``encrypted_content``; "" when it holds none of them."""
    for texts in (_texts(item.get("content"), "reasoning_text"), _texts(item.get("summary"), "summary_text")):
        text = "\n\n".join(t for t in texts if t)
        if text:
            return text
    sealed = item.get("encrypted_content")
    if isinstance(sealed, str) and sealed.startswith(SEAL):
        return sealed[len(SEAL):]
    return ""
