"""Which arguments a request asks for in its own words, beyond those the model would write anyway.

A boolean: "Can you also provide a brief description of each protein?" asks ``include_description`` to be
true, "and the species information" ``species``; SmolLM2 writes ``false`` for both as often as not, or
leaves the argument out. An argument's name words (llmproxy.common.word_overlap.content_words, less the
words that only say it is a switch: include, show, want ...) written in the request ask for true, where
no negation ("not", "without", "don't" ...) stands in the four words before them ("Don't return full
text", "if we do not include the impact of human activities"). Of BFCL's non-live answers' boolean values
whose argument's name words the request writes with no negation before them, 119 of 127 are true; with
one, 11 of 18 are false (parallel calls ask both ways: "with and without"), too few to say false.

An argument with an enum: one of its values written in the request ("by public transit" for ``mode``,
"with a patio" for ``amenities``). Of the optional arguments of BFCL's non-live answers that either rule
asks for, the answer needs 149 of 216 (SmolLM2 leaves optional arguments out), and takes the other 67.
Where the request writes none of an enum's values as it is, one it writes in another form counts ("detail"
for "detailed", "point and rebound" for "Points" and "Rebounds"): of the 20 arguments of BFCL's non-live
answers that this asks for, the answer takes the values so written in 16 (SmolLM2 wrote "detailed_stock_info").

A string: the request writes one of its names (llmproxy.backends._list_continuation.written_names) right
before a word of the argument's name ("the 'European' region" for ``region``). Of the optional string
arguments of BFCL's non-live answers so asked, the answer needs 33 of 55 and takes 20 more; 2 must be left
out (SmolLM2 ended the game update's arguments before ``region``, then wrote a call more for "European").

A number: the request writes a number (in digits, or a word: "two tickets") beside the argument's name
words ("a maximum cost of $50" for ``max_cost``; llmproxy.backends._list_continuation.number_words). Of
the optional number arguments of BFCL's non-live answers so asked, the answer needs 97 of 155.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence

from llmproxy.common.word_overlap import content_words

_SWITCH_WORDS = frozenset(content_words(
    "include get want use show return is has flag enable with should need consider allow"))
_NEGATION = re.compile(r"\b(?:not|no|without|never|exclude|excluding|less|nor|neither|\w+n't)\b", re.IGNORECASE)
_NEGATION_REACH = 4  # words before a name word that a negation of it stands in
_WORD = re.compile(r"[A-Za-z']+")
_WORD_AFTER = re.compile(r"['\"]?\s+([A-Za-z]+)")  # the word after a name (past its closing quote)
# Characters of an enum value before the request writing it (in any case) counts: "a" is in every text. One
# character shorter, it counts where the request writes it as it is, a word of its own.
_MIN_ENUM_VALUE = 3
# The endings by which a request's word may differ from an enum value's (``_word_forms``), longest first.
_FORM_ENDINGS = "es|ed|ly|s"
_NEVER = re.compile(r"(?!)")


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


def asked_numbers(arguments: Collection[str], number_words: Sequence[frozenset[str]]) -> frozenset[str]:
    """Which of the number ``arguments`` (by name) have name words among the words around a number of the
    request (``number_words``: the words around each of its numbers)."""
    return frozenset(argument for argument in arguments
                     if any(words & content_words(argument) for words in number_words))


def asked_names(request: str, names: Collection[str], arguments: Collection[str]) -> frozenset[str]:
    """Which of the string ``arguments`` (by name) the request asks for by writing one of its ``names``
    right before a word of the argument's name ("the 'European' region", "on the Playstation platform")."""
    after_names = set()
    for name in names:
        for found in re.finditer(re.escape(name), request):
            if word := _WORD_AFTER.match(request, found.end()):
                after_names |= content_words(word.group(1))
    return frozenset(argument for argument in arguments if content_words(argument) & after_names)


def asked_enums(request: str, enums: Mapping[str, Sequence[str]]) -> dict[str, tuple[str, ...]]:
    """The arguments with enums (``enums``: by name, their values) that the request writes values of (in any
    case, an underscore as a space; a value of two characters as it is: "AA", "Aa" and "aa" are three
    genotypes), and those values, in the order it first writes them; not one the request writes only within
    another it writes ("new" of "like new")."""
    asked = {}
    for argument, values in enums.items():
        places = ({value: place for value in values if (place := _written_at(request, value)) is not None}
                  or {value: found.start() for value in values if (found := _word_forms(value).search(request))})
        if written := [value for value in sorted(places, key=places.__getitem__)
                       if not any(_within(value, other, request) for other in places)]:
            asked[argument] = tuple(written)
    return asked


def _within(value: str, other: str, request: str) -> bool:
    """Whether each time the request writes the enum value ``value`` it writes the longer ``other`` around it."""
    text, inner, outer = request.lower(), value.lower(), other.lower()
    return inner != outer and inner in outer and text.count(inner) <= text.count(outer) * outer.count(inner)


def _written_at(request: str, value: str) -> int | None:
    """Where the request first writes an enum's ``value`` (``asked_enums``); None where it does not."""
    if len(value) < _MIN_ENUM_VALUE - 1:
        return None
    if len(value) < _MIN_ENUM_VALUE:
        found = re.search(rf"(?<!\w){re.escape(value)}(?!\w)", request)
    else:
        found = re.search(rf"\b{re.escape(value.lower().replace('_', ' '))}\b", request.lower())
    return None if found is None else found.start()


def _word_forms(value: str) -> re.Pattern[str]:
    """Where a request writes each word of an enum's ``value`` in turn, in another form of it perhaps: a plural,
    the word without one ("heart" for "hearts"), or with or without -ed or -ly ("detail" for "detailed",
    "annual" for "Annually"); what else stands between them ("gluten-free" for "Gluten Free") or after them
    ("%" of "field goal %") aside."""
    words = _WORD.findall(value)
    if not words or any(len(word) < _MIN_ENUM_VALUE for word in words) or any(char.isdigit() for char in value):
        return _NEVER  # "1 week" is not written by "weeks"
    forms = [rf"{re.escape(_stem(word))}(?:{_FORM_ENDINGS})?" for word in words]
    return re.compile(rf"\b{'[^A-Za-z]{1,3}'.join(forms)}\b", re.IGNORECASE)


def _stem(word: str) -> str:
    """``word`` less one of the endings ``_word_forms`` allows, where four letters are left."""
    lowered = word.lower()
    for ending in _FORM_ENDINGS.split("|"):
        if lowered.endswith(ending) and len(lowered) - len(ending) >= 4:
            return lowered[:-len(ending)]
    return lowered
