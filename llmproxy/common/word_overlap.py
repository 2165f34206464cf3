"""How much of what a function is called and said to do the request names in its own words.

A small model's first step says little about whether a request wants a call; whether the request uses
the words of the function's name, its description and its parameters' names says a lot (on BFCL's
non-live cases, a function's name words are in a request that asks for it 75 % of the time on average,
and in one that does not 15 %). Words are compared as crude stems: lower case, camelCase and snake_case
split, words of fewer than three letters and the commonest English ones dropped, a plural or -ing/-ed
ending cut, and the first six letters kept (so "temperatures" meets "temperature").
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from llmproxy.common.bounded_cache import MIB, bounded_cache

_COMMON = frozenset(
    "the and for with from into that this what which are its get find calculate given value values number "
    "specific".split())
_ENDINGS = ("ing", "ies", "es", "s", "ed")
_CAMEL = re.compile(r"([a-z])([A-Z])")
_LETTERS = re.compile(r"[A-Za-z]+")


@bounded_cache(4 * MIB)  # an agent sends the same tools every turn: their words are read once
def content_words(text: str) -> frozenset[str]:
    """The stems of ``text``'s content words."""
    stems = set()
    for word in _LETTERS.findall(_CAMEL.sub(r"\1 \2", text)):
        word = word.lower()
        if len(word) < 3 or word in _COMMON:
            continue
        for ending in _ENDINGS:
            if word.endswith(ending) and len(word) - len(ending) >= 4:
                word = word[:-len(ending)]
                break
        stems.add(word[:6])
    return frozenset(stems)


@dataclass(frozen=True)
class WordOverlap:
    """The share of a function's name, description and parameter-name words that a request uses (0 to 1)."""

    name: float
    description: float
    parameters: float


def word_overlap(request: frozenset[str], name: str, description: str, parameters: Iterable[str]) -> WordOverlap:
    """How much of a function's words the request's (``content_words`` of it) hold."""

    def share(text: str) -> float:
        words = content_words(text)
        return len(words & request) / len(words) if words else 0.0

    return WordOverlap(share(name), share(description), share(" ".join(parameters)))
