"""The small answers of Anthropic's API: the model list (``GET /v1/models``) and a token count
(``POST /v1/messages/count_tokens``), as JSON-ready dicts."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any


def models_list(models: Sequence[tuple[str, int | None]], created: int = 0) -> dict[str, Any]:
    """Anthropic's list of ``models`` (name, context length), all of it in one page. ``created``: Unix
    seconds, shown as RFC 3339 (served models have no release date; the server's start time will do).
    ``lifecycle`` is required by the SDK's newer model type; a served model is always active. The context
    length is both ``max_input_tokens`` and ``max_tokens``: prompt and answer share it."""
    stamp = datetime.fromtimestamp(created, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    data = [{"type": "model", "id": name, "display_name": name, "created_at": stamp, "lifecycle": "active",
             "max_input_tokens": window, "max_tokens": window} for name, window in models]
    return {"data": data, "has_more": False, "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None}


def count_tokens_body(input_tokens: int) -> dict[str, int]:
    """The count_tokens answer: the prompt's tokens, and nothing else."""
    return {"input_tokens": input_tokens}
