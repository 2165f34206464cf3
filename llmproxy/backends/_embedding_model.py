"""The embedded backend's embedding model: a GGUF loaded by llama-cpp-python in embedding mode, once per
file and process, pooled as the file says, or by the mean of its tokens where it names no pooling (a
generation model such as SmolLM2: its last hidden states, averaged).

Inputs are tokenized here, so that each is held to the context before anything runs and token ids are
embedded as given; then short ones are decoded several at a time (``EmbeddingLlama.embed_tokens``:
llama-cpp-python's own ``Llama.embed`` loop, for token ids, in smaller batches). Vectors come back L2-normalised, as
OpenAI's do.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Sequence
from pathlib import Path

from llama_cpp import LLAMA_POOLING_TYPE_MEAN, Llama, llama_get_embeddings_seq

from llmproxy.backends.base import EmbeddingInput
from llmproxy.backends.cpu_features import load_without_amx
from llmproxy.errors import ConfigurationError, InvalidRequestError
from llmproxy.gguf import gguf_embedding_facts

EMBEDDING_CONTEXT = 2048  # tokens one input may hold: each is decoded whole, within one batch
# Tokens of short inputs decoded together: a batch's attention grows with the square of its tokens, so 100
# short passages took 15.6 s in one batch of 1,675 tokens and 10.4 s in batches of up to 128 (a busy
# 2-core machine, one thread); fewer per batch pays each batch's fixed cost more often.
GROUP_TOKENS = 256


class EmbeddingLlama(Llama):
    """A llama-cpp-python model in embedding mode that embeds token ids."""

    def embed_tokens(self, inputs: Sequence[Sequence[int]]) -> list[list[float]]:
        """One pooled, normalised vector per token list (each at most ``n_batch`` tokens), decoded as many
        together as ``GROUP_TOKENS`` hold (a longer one alone)."""
        width, most = self.n_embd(), self.context_params.n_seq_max
        vectors: list[list[float]] = []
        sizes: list[int] = []  # the token counts of the sequences in the batch now

        def decode() -> None:
            self._ctx.kv_cache_clear()
            self._ctx.decode(self._batch)
            self._batch.reset()
            for seq in range(len(sizes)):
                vectors.append(normalized(llama_get_embeddings_seq(self._ctx.ctx, seq)[:width]))
            sizes.clear()

        self._batch.reset()
        for tokens in inputs:
            if sizes and (sum(sizes) + len(tokens) > GROUP_TOKENS or len(sizes) >= most):
                decode()
            self._batch.add_sequence(tokens, len(sizes), True)
            sizes.append(len(tokens))
        if sizes:
            decode()
        self._ctx.kv_cache_clear()
        return vectors


def normalized(vector: Sequence[float]) -> list[float]:
    norm = math.sqrt(sum(value * value for value in vector)) or 1.0
    return [value / norm for value in vector]


class EmbeddingModel:
    """One GGUF's embedding model and the lock that serialises its use (a llama.cpp context is not
    thread-safe)."""

    def __init__(self, path: Path) -> None:
        load_without_amx()
        facts = gguf_embedding_facts(path)
        threads = os.cpu_count() or 1
        try:
            self.llama = EmbeddingLlama(
                model_path=str(path), embedding=True, pooling_type=facts.pooling or LLAMA_POOLING_TYPE_MEAN,
                n_ctx=EMBEDDING_CONTEXT, n_batch=EMBEDDING_CONTEXT, n_ubatch=EMBEDDING_CONTEXT,
                n_threads=threads, n_threads_batch=threads, verbose=False)
        except (ValueError, RuntimeError) as exc:
            raise ConfigurationError(f"could not load the GGUF model {path} for embeddings: {exc}") from exc
        self.name = path.stem
        self.lock = threading.Lock()
        vocabulary = self.llama.n_vocab()
        self.vocabulary = vocabulary
        # No text of more bytes than this can fit the context: refused before it is tokenized (an 8 MiB body
        # takes seconds to tokenize).
        longest = max(len(self.llama.detokenize([token], special=True)) for token in range(vocabulary))
        self.most_bytes = EMBEDDING_CONTEXT * max(longest, 1)

    def tokens(self, item: EmbeddingInput, index: int) -> list[int]:
        """``item``'s token ids (a text's as the model reads it), held to the context and the vocabulary.
        Called with the lock held."""
        if isinstance(item, str):
            data = item.encode("utf-8", errors="replace")
            if len(data) > self.most_bytes:
                raise self._too_long(index, f"more than {EMBEDDING_CONTEXT} tokens ({len(data)} bytes)")
            tokens = self.llama.tokenize(data, add_bos=True, special=False)
        else:
            tokens = list(item)
            unknown = next((token for token in tokens if token >= self.vocabulary), None)
            if unknown is not None:
                raise InvalidRequestError(f"input[{index}]: token id {unknown} is not in the {self.name} model's "
                                          f"vocabulary (ids 0 to {self.vocabulary - 1})", param="input")
        if len(tokens) > EMBEDDING_CONTEXT:
            raise self._too_long(index, f"{len(tokens)} tokens")
        if not tokens:  # a model that adds no BOS, and a text of no token
            raise InvalidRequestError(f"input[{index}] holds no token to embed", param="input")
        return tokens

    def _too_long(self, index: int, size: str) -> InvalidRequestError:
        return InvalidRequestError(f"input[{index}] is {size}; the {self.name} model embeds at most "
                                   f"{EMBEDDING_CONTEXT} tokens per input: split it into shorter passages",
                                   param="input")

    def embed(self, inputs: Sequence[EmbeddingInput]) -> tuple[list[list[float]], int]:
        """The inputs' vectors, and the tokens they held."""
        with self.lock:
            token_lists = [self.tokens(item, index) for index, item in enumerate(inputs)]
            return self.llama.embed_tokens(token_lists), sum(len(tokens) for tokens in token_lists)

    def close(self) -> None:
        self.llama.close()


_models: dict[Path, EmbeddingModel] = {}
_models_lock = threading.Lock()


def embedding_model(path: Path) -> EmbeddingModel:
    """The embedding model of the GGUF at ``path``, loaded on first use."""
    with _models_lock:
        if path not in _models:
            _models[path] = EmbeddingModel(path)
        return _models[path]


def close_all() -> None:
    for model in _models.values():
        model.close()
    _models.clear()
