"""Static grammars: the ``.gbnf`` files in grammars/ on the search path (built-in and the user's, see
llmproxy._data), by name."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from llmproxy._data import named_files
from llmproxy.errors import GrammarError

__all__ = ["grammar_files", "grammar_names", "load_grammar"]


@cache
def grammar_files() -> dict[str, Path]:
    """Every grammar on the search path by name (file name without ``.gbnf``); the user's shadow the
    built-in ones. Read once per process (``grammar_files.cache_clear()`` reads the folders again)."""
    return named_files("grammars", ".gbnf")


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
