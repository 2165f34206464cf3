"""Where in a request that asks for several functions each one is asked for, so that a call to one takes
the values written where it is asked for.

A request for several different calls mostly writes each call's values in a part of its own: "What is the
electric field at 3m from a point charge of 4C? Also, calculate the magnetic field for a current of 0.5A
..., 25 turns per meter ...". SmolLM2 gave the electric field's ``distance`` the 25 of the magnetic field's
part, the game reviews' ``region`` the "Xbox" of the price search's. So a function is asked for where the
request writes a word of its name that no other function it asks for has in its name or its arguments'
("electric", "magnetic"; "field" is both's), and its part runs from the place such a word of the function
before it in the request is followed by the last sentence's end (or else comma, "and" or "then") before its
own word, to that place before the next function's word: the part of the first one from the request's start,
of the last one to its end. A function asked for in several places ("a piece of music in D Minor, then an
audio signal ... After that, another piece of music") has a part at each.

On BFCL's parallel_multiple requests, of the 485 string values of their answers that are one of the
request's names, 420 are a function's whose part holds some of the request's names, and 409 of those are one
its part holds (a value's function's part holds 2.9 names on average, its request 6.0); the 65 others are
mostly where a function has no part of its own (its name's own words are nowhere in the request: beside
``musical_ticket_buy`` and ``concert_ticket_buy``, "get me a train ticket" gives ``train_ticket_buy`` a
part, and "Buy me a ticket to the Mamma Mia musical" gives the concert none) or where a part refers to
another's values ("the same species in the same location"). Of the 445 number values of a function with a
part that their requests write, 400 are written there. Guessed in reading order from the first number of its
function's part that no value holds yet, a call's number is the answer's for 363 of the 485 number values
those answers take from their requests, 337 in reading order alone. In multiple's requests (one call each),
no number an answer takes lies outside its function's part (4 did with the names' words alone).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from llmproxy.common.word_overlap import content_words

Span = tuple[int, int]  # a part of the request: where it starts and where it ends

_WORD = re.compile(r"[A-Za-z]+")
_SENTENCE_END = re.compile(r"[.?!;](?=\s)")
_CLAUSE_BREAK = re.compile(r",\s|\band\b|\bthen\b")


def function_regions(request: str, functions: Mapping[str, Sequence[str]]) -> dict[str, list[Span]]:
    """The parts of ``request`` where it asks for each of ``functions`` (by name, with their arguments'
    names), for those whose names' own words it writes; none where fewer than two of them are so written."""
    marks = sorted((place, name) for name in functions for place in _own_word_places(request, name, functions))
    asked_in_turn = [mark for index, mark in enumerate(marks) if index == 0 or marks[index - 1][1] != mark[1]]
    if len({name for _, name in asked_in_turn}) < 2:
        return {}
    regions: dict[str, list[Span]] = {}
    for index, (place, name) in enumerate(asked_in_turn):
        start = 0 if index == 0 else _boundary(request, asked_in_turn[index - 1][0], place)
        end = len(request)
        if index + 1 < len(asked_in_turn):
            end = max(_boundary(request, place, asked_in_turn[index + 1][0]), place + 1)
        regions.setdefault(name, []).append((start, end))
    return regions


def _own_word_places(request: str, name: str, functions: Mapping[str, Sequence[str]]) -> list[int]:
    """Where ``request`` writes a word of the function ``name`` that no other of ``functions`` has in its
    name or its arguments' ("speed" of ``final_speed`` is the ``initial_speed`` of ``displacement``); not
    where the word after it is of another's arguments' names, where it is written elsewhere too: "an electric
    current of 0.5A" describes the magnetic field's ``current``, and asks for no electric field there."""
    own = _roots(content_words(name)).difference(*(_roots(content_words(" ".join((other, *arguments))))
                                                   for other, arguments in functions.items() if other != name))
    others = _roots(content_words(" ".join(argument for other, arguments in functions.items() if other != name
                                         for argument in arguments)))
    words = list(_WORD.finditer(request))
    places, describing = [], []
    for index, word in enumerate(words):
        roots = _roots(content_words(word.group()))
        after = _roots(content_words(words[index + 1].group())) if index + 1 < len(words) else frozenset()
        if roots and roots <= own:
            (describing if after and after <= others else places).append(word.start())
    return places or describing


def _roots(stems: frozenset[str]) -> frozenset[str]:
    """``stems`` less a last "e": the stem of "updates" is "updat", of "update" "update" (llmproxy.common.
    word_overlap cuts the plural's "es"), and a request asks for ``games_update_find`` as "the latest
    updates". Here only: the words' scores that decide whether to call at all stay as they were measured."""
    return frozenset(stem[:-1] if len(stem) >= 5 and stem.endswith("e") else stem for stem in stems)


def _boundary(request: str, after: int, before: int) -> int:
    """Where the part of the function asked for at ``after`` ends and the next one's, asked for at
    ``before``, begins: after the last sentence's end between them, else at the last comma, "and" or
    "then", else at ``before``."""
    between = request[after:before]
    ends = [found.end() for found in _SENTENCE_END.finditer(between)]
    if ends:
        return after + ends[-1]
    breaks = [found.start() for found in _CLAUSE_BREAK.finditer(between)]
    return after + breaks[-1] if breaks else before


def in_regions(place: int, regions: Sequence[Span]) -> bool:
    """Whether ``place`` of the request lies in one of ``regions``."""
    return any(start <= place < end for start, end in regions)
