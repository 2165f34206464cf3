"""Telling an answer that went round in a loop from one that had more to say.

A small model that a grammar keeps from stopping where it wanted to (a required argument still to
come) can slip into a string and write the same few words over and over until the token limit. Cut
there, such an answer is not a long call that more tokens would finish: it is no use at any length, so
it is an error that earns a second chance, not OpenAI's partial answer with ``finish_reason`` "length".
"""

from __future__ import annotations

MIN_REPEATS = 3  # back-to-back copies of one unit
MIN_SPAN = 64  # characters the copies cover together, so "ha ha ha" at the cut is not a loop
_TAIL = 3000  # characters looked at: a loop long enough to matter shows within them


def looping_unit(text: str) -> str | None:
    """The unit that the end of ``text`` repeats (at least ``MIN_REPEATS`` times back to back, over at
    least ``MIN_SPAN`` characters), or None when it ends some other way."""
    tail = text[-_TAIL:]
    for period in range(1, len(tail) // MIN_REPEATS + 1):
        span = max(MIN_REPEATS * period, MIN_SPAN)
        if span > len(tail):
            break
        # Periodic: every character equals the one ``period`` before it, across the whole span.
        if tail[-span:-period] == tail[-span + period:]:
            return tail[-period:]  # the last copy, as the model last wrote it
    return None
