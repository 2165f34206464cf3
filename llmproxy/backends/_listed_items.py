"""The items a request lists after a value it writes: "aluminum" after the "copper" of "resistivity of copper
and aluminum", "mitochondria" and "cytoplasm" after the "nucleus" of "the nucleus, mitochondria, and
cytoplasm".

A request that asks for a call per item of a list writes the items as plain words as often as it writes
them as names (capitalised, llmproxy.backends._list_continuation.written_names). Where such a list begins
is not clear from its words alone ("the resistivity of copper": copper, or all of it?), but once a call
holds one of its items as a value, what follows that value is: a list separator (", ", " and ", ", and "),
an item of one to three words that ends at another separator or at the clause's end, and so on, until an
" and " ends the list. A run of commas that no " and " ends is no list ("Miami, Florida"), and a phrase
that begins as a clause does ("and in which year", "and their 3D models") is no item.

On BFCL's non-live answers (their calls written in turn), a call's value followed by an item no call holds
yet is there after 32 calls of the 400 parallel and parallel_multiple answers (28 and 4), each one that
another call follows, and after the last call of none of the 1,000 answers of the four AST categories.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

# A list's separator, and the article its next item may begin with ("a chicken soup and a salad").
_SEPARATOR = re.compile(r"(?:,\s*(?:and|&)\s+|,\s*|\s+(?:and|&)\s+)(?:(?:a|an|the)\s+)?", re.IGNORECASE)
_WORD = r"(?:[^\s,;:.?!()\[\]\"]|[.,](?=\d))+"  # a decimal point or a thousands separator is in its number
_ITEM = re.compile(rf"{_WORD}(?:\s+{_WORD}){{0,2}}")  # one to three words
_AND_INSIDE = re.compile(r"\s+(?:and\b|&)", re.IGNORECASE)
_ITEM_END = re.compile(r"\s*(?:[,;:?!)]|\.(?!\d)|$)|\s+(?:and|&)\s", re.IGNORECASE)
# What begins a clause, or refers back to the items, rather than being one.
_NOT_AN_ITEM = re.compile(
    r"(?:their|its|his|her|my|our|your|them|it|these|those|this|that|all|both|each|in|on|at|for|with|to|from|"
    r"by|of|what|which|who|whom|whose|how|when|where|why|if|but|then|also|is|are|was|were|be|do|does|did|can|"
    r"could|would|will|should|may|might|please|i|we|you|he|she|they|there|so|as|not|get|find|give|show|tell|"
    r"provide|calculate|make)\b", re.IGNORECASE)


def items_after(request: str, value: str) -> list[str]:
    """The items that follow ``value`` in a list the request writes, in order, as the request writes them
    (none where ``value`` stands in no list, or last in one). Case, and underscores for spaces, aside."""
    return list(_items_after(request, value.replace("_", " ").strip().lower()))


@functools.lru_cache(maxsize=256)  # the grounding asks at every token of a later call's string value
def _items_after(request: str, wanted: str) -> tuple[str, ...]:
    if len(wanted) < 2:
        return ()
    text = request.lower()
    items: list[str] = []
    for found in re.finditer(re.escape(wanted), text):
        if (found.start() and text[found.start() - 1].isalnum()) or text[found.end():found.end() + 1].isalnum():
            continue  # a part of a word
        for item in _chain(request, found.end()):
            if item not in items:
                items.append(item)
    return tuple(items)


def _chain(request: str, end: int) -> list[str]:
    """The items of the list that goes on from ``end``, where an " and " ends it; else none."""
    chain = []
    while (separator := _SEPARATOR.match(request, end)) is not None:
        item = _item_at(request, separator.end())
        if item is None:
            return []
        chain.append(item)
        end = separator.end() + len(item)
        if "," not in separator.group() or _AND_INSIDE.search(separator.group()):
            return chain  # its last item
    return []


def _item_at(request: str, start: int) -> str | None:
    """The item that begins at ``start``: up to three words that end where an item may end."""
    found = _ITEM.match(request, start)
    if found is None or _NOT_AN_ITEM.match(found.group()):
        return None
    item = _AND_INSIDE.split(found.group())[0]  # "copper and aluminum": the item ends at its " and "
    return item if _ITEM_END.match(request, start + len(item)) else None


def items_left(request: str, value: str, held: Sequence[str]) -> list[str]:
    """The items that follow ``value`` in a list the request writes (``items_after``) that none of the values
    ``held`` is, or holds as whole words ("blue" holds the item "blue colors")."""
    values = [plain for text in held if len(plain := text.replace("_", " ").strip().lower()) >= 2]
    return [item for item in items_after(request, value)
            if not any(item.lower() in held_value or re.search(rf"\b{re.escape(held_value)}\b", item.lower())
                       for held_value in values)]
