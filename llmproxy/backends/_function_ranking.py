"""Which of the offered functions a request is for, asked of the embedded model the other way round.

Once ``choose`` (llmproxy.decide) has chosen a call, the model would name the function in the call's
name slot. SmolLM2-135M named the right one in 3 of the 8 calls of the decision eval that way: the
likeliest name after ``{"name": "`` follows the tool list's order and wording more than the request.
Asked the other way round - how likely the request is, read after a line that names one function and
what it does ("noisy channel" scoring) - it ranks the right function first in 16 of 17 requests (the
decision eval's and bench/decide_calibration.jsonl's). So each function's line is read with the
request after it, and the call is constrained to the function under which the request is likeliest.

The scoring runs in a second, small llama.cpp context over the same model file (memory-mapped, so its
weights are shared), so the generation's context and the prompt cached in it are left as they were.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from llama_cpp import Llama

HEADING = 'A request for the function {name} ({description}): "'
DESCRIPTION_CHARS = 160  # a description's first sentence or two say what it is for
REQUEST_TOKENS = 48  # the request's opening says what it asks; the rest would only cost time
CONTEXT_TOKENS = 128  # a heading (about 60 tokens at most) and the request


class FunctionRanker:
    """Ranks functions by the log-likelihood of the request after each one's heading."""

    def __init__(self, model_path: str, threads: int) -> None:
        self._llama = Llama(model_path=model_path, n_ctx=CONTEXT_TOKENS, n_batch=CONTEXT_TOKENS, logits_all=True,
                            n_threads=threads, n_threads_batch=threads, verbose=False)

    def best(self, request: str, functions: Sequence[tuple[str, str]]) -> int:
        """The index of the (name, description) under which ``request`` is likeliest."""
        return int(np.argmax(self.scores(request, functions)))

    def scores(self, request: str, functions: Sequence[tuple[str, str]]) -> list[float]:
        """The log-likelihood of ``request`` (its first ``REQUEST_TOKENS``) after each function's heading."""
        asked = self._tokens(request)[:REQUEST_TOKENS]
        return [self._log_likelihood(self._heading(name, description), asked) for name, description in functions]

    def _heading(self, name: str, description: str) -> list[int]:
        text = HEADING.format(name=name, description=" ".join(description.split())[:DESCRIPTION_CHARS])
        return self._tokens(text)[:CONTEXT_TOKENS - REQUEST_TOKENS]

    def _tokens(self, text: str) -> list[int]:
        return self._llama.tokenize(text.encode("utf-8"), add_bos=False, special=False)

    def _log_likelihood(self, heading: list[int], asked: list[int]) -> float:
        self._llama.reset()
        self._llama.eval(heading + asked)
        logits = np.asarray(self._llama.scores[len(heading) - 1:len(heading) + len(asked) - 1], dtype=np.float64)
        peak = logits.max(axis=1, keepdims=True)
        log_norm = peak[:, 0] + np.log(np.exp(logits - peak).sum(axis=1))
        return float((logits[np.arange(len(asked)), asked] - log_norm).sum())

    def close(self) -> None:
        self._llama.close()
