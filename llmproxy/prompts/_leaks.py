"""llmproxy's own words coming back as an answer: what a wrapper writes around a conversation - its
instructions, its format line and that line's placeholders (``<function name>``) - and a second chance's
note, returned as the answer's text or as a call's argument. A small model copies what it was shown, and
neither the client nor its user ever wrote these words.

Own text is every literal piece of the wrappers' templates (the built-in ones and the user's) and the
pipeline's own notes. An answer leaks it where it holds one of their placeholders, or a run of
``LEAK_WORDS`` words of it that the client's own text (its messages and tools) does not hold: a client
may well quote a phrase a template also uses.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from functools import cache

import jinja2

from llmproxy._data import search_dirs

LEAK_WORDS = 6  # words in a row, so that an ordinary phrase a template happens to use is not one
_WORD = re.compile(r"[a-z0-9']+")
_PLACEHOLDER = re.compile(r"<[a-z]+(?: [a-z]+){1,5}>")  # several words: a tag such as <tools> is markup


def leaked(texts: Iterable[str], client_text: Callable[[], str], notes: tuple[str, ...] = ()) -> str | None:
    """The first piece of own text (the wrappers', and ``notes``) found in ``texts`` that ``client_text()``
    - the client's own words, read only when needed - does not hold; None where there is none."""
    phrases, placeholders = own_text(notes)
    client: str | None = None
    for text in texts:
        lowered = text.lower()
        words = _WORD.findall(lowered)
        found = [*(p for p in placeholders if p in lowered),
                 *(" ".join(run) for run in zip(*(words[i:] for i in range(LEAK_WORDS))) if run in phrases)]
        for piece in found:
            if client is None:
                client = client_text().lower()
                client += "\n" + " ".join(_WORD.findall(client))  # runs are matched word by word
            if piece not in client:
                return piece
    return None


@cache
def own_text(notes: tuple[str, ...]) -> tuple[frozenset[tuple[str, ...]], tuple[str, ...]]:
    """Every run of ``LEAK_WORDS`` words in the templates' literal text and ``notes``, and the templates'
    placeholders. Read once per process (clear_caches reads the templates again)."""
    literal = [*notes, *(_literal_text(path.read_text(encoding="utf-8")) for folder in search_dirs("wrappers")
                         for path in sorted(folder.glob("*.jinja")))]
    runs: set[tuple[str, ...]] = set()
    placeholders: set[str] = set()
    for text in literal:
        lowered = text.lower()
        placeholders.update(_PLACEHOLDER.findall(lowered))
        for line in lowered.splitlines():  # a run never spans two lines of a template: they are written apart
            words = _WORD.findall(line)
            runs.update(zip(*(words[i:] for i in range(LEAK_WORDS))))
    return frozenset(runs), tuple(sorted(placeholders))


def _literal_text(source: str) -> str:
    """The text a template writes as it is (its ``data``), without its tags, expressions and comments."""
    return "\n".join(value for _, kind, value in _LEXER.lex(source) if kind == "data")


_LEXER = jinja2.Environment()  # lexing only: the wrappers' delimiters are Jinja's own
