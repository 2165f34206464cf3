"""Which boolean arguments a request asks to be true: those whose names it writes in its own words.

"Can you also provide a brief description of each protein?" asks ``include_description`` to be true, "and
the species information" ``species``; SmolLM2 writes ``false`` for both as often as not. An argument's name
words (llmproxy.common.word_overlap.content_words, less the words that only say it is a switch: include,
show, want ...) written in the request ask for true, where no negation ("not", "without", "don't" ...)
stands in the four words before them ("Don't return full text", "if we do not include the impact of human
activities"). Of BFCL's non-live answers' boolean values whose argument's name words the request writes
with no negation before them, 119 of 127 are true; with one, 11 of 18 are false (parallel calls ask both
ways: "with and without"), too few to say false.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from llmproxy.common.word_overlap import content_words

_SWITCH_WORDS = frozenset(content_words(
    "include get want use show return is has flag enable with should need consider allow"))
_NEGATION = re.compile(r"\b(?:not|no|without|never|exclude|excluding|less|nor|neither|\w+n't)\b", re.IGNORECASE)
_NEGATION_REACH = 4  # words before a name word that a negation of it stands in
_WORD = re.compile(r"[A-Za-z']+")


def asked_true(request: str, arguments: Collection[str]) -> frozenset[str]:
    """Which of the boolean ``arguments`` (by name) the request asks to be true."""
    words = [match.group() for match in _WORD.finditer(request)]
    stems = [content_words(word) for word in words]
    asked = set()
    for argument in arguments:
        named = content_words(argument) - _SWITCH_WORDS
        places = [place for place, stem in enumerate(stems) if stem & named]
        if places and not any(_NEGATION.search(" ".join(words[max(0, place - _NEGATION_REACH):place]))
                              for place in places):
            asked.add(argument)
    return frozenset(asked)
