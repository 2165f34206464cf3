"""Which of the offered functions a request is for, asked of the embedded model the other way round.

Once ``choose`` (llmproxy.decide) has chosen a call, the model would name the function in the call's
name slot. SmolLM2-135M named the right one in 3 of the 8 calls of the decision eval that way: the
likeliest name after ``{"name": "`` follows the tool list's order and wording more than the request.
Asked the other way round - how likely the request is, read after a line that names one function and
what it does ("noisy channel" scoring) - it ranks the right function first in 16 of 17 requests (the
decision eval's and bench/decide_calibration.jsonl's). So each function's line is read with the
request after it, and the call is constrained to the function under which the request is likeliest.
The same reading tells how much the best function explains the request: how much likelier the request
is after its line than after a line that names no function (``Judgement.relevance``), which ``choose``
weighs where the model's first step leans to answering in text.

The scoring runs in a second, small llama.cpp context on the same loaded model, so the generation's
context and the prompt cached in it are left as they were. The same tools come with every turn of a
conversation, and their lines are most of what the scoring reads; so once a line is read, its KV cache
and the logits after it are kept (up to ``HELD_BYTES``, the least recently used dropped first), and the
cache is put back before the next request is read after it. A line is known by its tokens - a renamed or
redescribed function is a new line - and each loaded model has a ranker, and so kept lines, of its own.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass

import llama_cpp
import numpy as np
from llama_cpp._internals import LlamaBatch, LlamaContext, LlamaModel

from llmproxy.common.bounded_cache import MIB, bounded_cache

HEADING = 'A request for the function {name} ({description}): "'
DESCRIPTION_CHARS = 160  # a description's first sentence or two say what it is for
REQUEST_TOKENS = 48  # the request's opening says what it asks; the rest would only cost time
CONTEXT_TOKENS = 128  # a heading (about 60 tokens at most) and the request
# Read headings kept: SmolLM2-135M's KV cache takes 23 KB a token, so a typical heading (15-60 tokens)
# takes 0.3-1.4 MB, with 0.2 MB for the logits after it; 16 MB holds a few dozen.
HELD_BYTES = 16 * MIB


# A heading that names no function in particular: how likely the request is without one, against which a
# function's heading shows how much it explains the request (its relevance).
NEUTRAL = ("anything", "")


@dataclass(frozen=True)
class Judgement:
    """What the ranker makes of a request and the offered functions: the index of the function under
    whose heading the request is likeliest, and how much likelier it is there than under ``NEUTRAL`` (in
    nats: a request a function was made for reads far likelier after that function's heading)."""

    best: int
    relevance: float


class FunctionRanker:
    """Ranks functions by the log-likelihood of the request after each one's heading."""

    def __init__(self, model: LlamaModel, threads: int, held_bytes: int = HELD_BYTES) -> None:
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = params.n_batch = params.n_ubatch = CONTEXT_TOKENS
        params.n_threads = params.n_threads_batch = threads
        params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED  # as the generation's context
        self._model = model
        self._context = LlamaContext(model=model, params=params, verbose=False)
        self._batch = LlamaBatch(n_tokens=CONTEXT_TOKENS, embd=0, n_seq_max=1, verbose=False)
        self._held = bounded_cache(held_bytes)(self._read_heading)  # heading tokens -> its KV cache, logits

    def judge(self, request: str, functions: Sequence[tuple[str, str]]) -> Judgement:
        """The (name, description) under which ``request`` is likeliest, and by how much against ``NEUTRAL``."""
        scores = self.scores(request, [*functions, NEUTRAL])
        best = int(np.argmax(scores[:-1]))
        return Judgement(best, scores[best] - scores[-1])

    def scores(self, request: str, functions: Sequence[tuple[str, str]]) -> list[float]:
        """The log-likelihood of ``request`` (its first ``REQUEST_TOKENS``) after each function's heading."""
        asked = self._tokens(request)[:REQUEST_TOKENS]
        if not asked:
            return [0.0] * len(functions)  # nothing to read: no function is likelier than another
        return [self._log_likelihood(self._heading(name, description), asked) for name, description in functions]

    def held_bytes(self) -> int:
        """The size of the read headings kept (never above the ranker's ``held_bytes``)."""
        return self._held.cache_bytes()

    def _heading(self, name: str, description: str) -> tuple[int, ...]:
        text = HEADING.format(name=name, description=" ".join(description.split())[:DESCRIPTION_CHARS])
        return tuple(self._tokens(text)[:CONTEXT_TOKENS - REQUEST_TOKENS])

    def _tokens(self, text: str) -> list[int]:
        return self._model.tokenize(text.encode("utf-8"), add_bos=False, special=False)

    def _read_heading(self, heading: tuple[int, ...]) -> tuple[bytes, bytes]:
        """The KV cache of ``heading``, and the logits after it (float32), which give the request's first token."""
        self._decode(heading, start=0, scored_from=len(heading) - 1)
        after = self._logits(1).tobytes()
        size = llama_cpp.llama_state_seq_get_size(self._context.ctx, 0)
        state = (ctypes.c_uint8 * size)()
        llama_cpp.llama_state_seq_get_data(self._context.ctx, state, size, 0)
        return bytes(state), after

    def _log_likelihood(self, heading: tuple[int, ...], asked: list[int]) -> float:
        state, after = self._held(heading)
        first = _log_probability(np.frombuffer(after, dtype=np.float32).reshape(1, -1), asked[:1])
        if len(asked) == 1:
            return first
        llama_cpp.llama_memory_seq_rm(self._context.memory, 0, -1, -1)
        kept = ctypes.cast(state, ctypes.POINTER(ctypes.c_uint8))  # the bytes themselves, not a copy
        if not llama_cpp.llama_state_seq_set_data(self._context.ctx, kept, len(state), 0):
            raise RuntimeError("llama.cpp could not put a function's heading back in the ranking context")
        self._decode(asked[:-1], start=len(heading), scored_from=len(heading))
        return first + _log_probability(self._logits(len(asked) - 1), asked[1:])

    def _logits(self, rows: int) -> np.ndarray:
        """The logits of the last decode's ``rows`` scored places (a view of llama.cpp's buffer)."""
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits(self._context.ctx),
                                     shape=(rows, self._model.n_vocab()))

    def _decode(self, tokens: Sequence[int], start: int, scored_from: int) -> None:
        """Read ``tokens`` into the context at positions ``start`` on (what it held there and after is
        dropped), with logits for the positions from ``scored_from`` on."""
        llama_cpp.llama_memory_seq_rm(self._context.memory, 0, start, -1)
        batch = self._batch.batch
        batch.n_tokens = len(tokens)
        for i, token in enumerate(tokens):
            batch.token[i] = token
            batch.pos[i] = start + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = start + i >= scored_from
        if tokens:
            self._context.decode(self._batch)

    def close(self) -> None:
        self._held.cache_clear()
        self._batch.close()
        self._context.close()


def _log_probability(logits: np.ndarray, tokens: Sequence[int]) -> float:
    """The log-probability of ``tokens``, each one by its row of ``logits`` (a log-softmax, with the sums
    in float64: float32's exp is ten times faster on a row of 49k logits, and as exact here)."""
    peak = logits.max(axis=1, keepdims=True)
    log_norm = peak[:, 0].astype(np.float64) + np.log(np.exp(logits - peak).sum(axis=1, dtype=np.float64))
    return float((logits[np.arange(len(tokens)), tokens].astype(np.float64) - log_norm).sum())
