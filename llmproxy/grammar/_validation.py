"""Validation with llama.cpp's own grammar parser.

Check every grammar with validate_grammar() before sending it anywhere: a grammar llama.cpp rejects
crashed old llama.cpp servers and kills an embedded llama-cpp-python process.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

from llmproxy.common.bounded_cache import MIB, bounded_cache
from llmproxy.errors import ConfigurationError, GrammarError
from llmproxy.gguf import bundled_model_path, kept_vocabulary
from llmproxy.grammar.limits import check_grammar_limits

__all__ = ["prepare_validation", "validate_grammar"]

_lock = threading.Lock()


def validate_grammar(text: str) -> None:
    """Raise GrammarError unless llama.cpp's grammar parser accepts ``text`` (root rule ``root``)."""
    if not text.strip() or "\0" in text:
        raise GrammarError("grammar is empty or contains a NUL character")
    _validate(text)


def prepare_validation() -> None:
    """Load llama.cpp and the vocabulary grammars are parsed with now (~150 ms), not in the first
    request that has a grammar (a server would hold its event loop for it)."""
    validate_grammar('root ::= "a"')


@bounded_cache(16 * MIB)  # generated grammars repeat request after request; only accepted ones are kept
def _validate(text: str) -> None:
    import llama_cpp

    check_grammar_limits(text)  # llama.cpp's parser is recursive and eager: bound the text first
    with _lock, _collected_log() as log:
        sampler = llama_cpp.llama_sampler_init_grammar(_vocab(), text.encode("utf-8"), b"root")
    if not sampler:
        raise GrammarError(f"llama.cpp rejects the grammar: {_reason(log.getvalue())}")
    llama_cpp.llama_sampler_free(sampler)


def _reason(log: str) -> str:
    for line in log.splitlines():
        for marker in ("error parsing grammar: ", "invalid grammar: ", "unsupported grammar, ", "grammar does not"):
            if marker in line:
                reason = line.split(marker, 1)[1] if marker.endswith(" ") else line
                return reason if len(reason) <= 200 else reason[:200] + "..."
    return "parse failed"


def _vocab() -> Any:
    """The vocabulary of the bundled SmolLM2 model, loaded once per process (no weights).

    llama.cpp only parses a grammar together with a vocabulary (for ``<token>`` syntax); any model's
    vocabulary checks the plain-text grammars llmproxy uses.
    """
    try:
        return kept_vocabulary(bundled_model_path())
    except ConfigurationError as exc:
        raise GrammarError(f"cannot validate grammars: {exc.message}") from None


_libc = ctypes.CDLL(None)


@contextlib.contextmanager
def _collected_log() -> Iterator[io.StringIO]:
    """Collect what llama.cpp reports while the block runs: its log, and what it prints to stderr.

    The grammar parser prints its reason straight to C's stderr (buffered once a model was loaded, hence
    the fflush); other messages go through the log callback, which llama-cpp-python filters by level
    after any model was loaded with verbose=False.
    """
    import llama_cpp
    from llama_cpp import _logger

    log = io.StringIO()

    @llama_cpp.llama_log_callback
    def collect(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        log.write(text.decode("utf-8", "replace"))

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        llama_cpp.llama_log_set(collect, ctypes.c_void_p(0))
        try:
            yield log
        finally:
            _libc.fflush(None)
            llama_cpp.llama_log_set(_logger.llama_log_callback, ctypes.c_void_p(0))
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            log.write(tmp.read().decode("utf-8", "replace"))
