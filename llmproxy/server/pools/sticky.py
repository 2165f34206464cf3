"""Sticky conversations: which member last served a conversation, so its next turn goes there too.

An agent resends its whole history each turn, and the member that served the last turn still holds
that prefix in its KV cache. The conversation's key is the client's own where it sends one
(``prompt_cache_key``, ``user``, Anthropic's ``metadata.user_id``, a session header such as Claude
Code's ``X-Claude-Code-Session-Id`` or Codex's ``session_id``), else a hash of the request's stable
prefix: its system text and tools (for a raw completion, the prompt's first characters). The map is
bounded: the least recently used conversations are forgotten first.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

SESSION_HEADERS = ("x-claude-code-session-id", "session_id", "session-id", "x-session-id")
BODY_KEYS = ("prompt_cache_key", "user")
PREFIX_CHARACTERS = 2048  # of a raw completion's prompt: what an agent's turns share
MAX_CONVERSATIONS = 10_000


def client_key(body: Mapping[str, Any], headers: Mapping[str, str]) -> str | None:
    """The conversation key the client sent, if any (read before the body is validated)."""
    for name in BODY_KEYS:
        value = body.get(name)
        if isinstance(value, str) and value:
            return f"{name}:{value}"
    metadata = body.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("user_id"), str) and metadata["user_id"]:
        return f"user_id:{metadata['user_id']}"
    for name in SESSION_HEADERS:
        value = headers.get(name)
        if value:
            return f"session:{value}"
    return None


def prefix_key(system: str, tools: Any) -> str:
    """A hash of a request's stable prefix."""
    digest = hashlib.blake2b(digest_size=12)
    digest.update(system.encode("utf-8", errors="replace"))
    digest.update(json.dumps(tools, sort_keys=True, default=str).encode())
    return "prefix:" + digest.hexdigest()


class Affinities:
    """Conversation key -> the name of the member that served it last; bounded, least recently used out."""

    def __init__(self, limit: int = MAX_CONVERSATIONS) -> None:
        self.limit = limit
        self._members: OrderedDict[str, str] = OrderedDict()

    def get(self, key: str) -> str | None:
        member = self._members.get(key)
        if member is not None:
            self._members.move_to_end(key)
        return member

    def put(self, key: str, member: str) -> None:
        self._members[key] = member
        self._members.move_to_end(key)
        while len(self._members) > self.limit:
            self._members.popitem(last=False)

    def __len__(self) -> int:
        return len(self._members)
