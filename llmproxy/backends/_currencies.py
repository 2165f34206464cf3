"""The currencies a request names, as the ISO 4217 codes a currency argument takes.

"Convert 150 Euros to Canadian dollars" asks for ``from_currency`` "EUR" and ``to_currency`` "CAD": an API
takes the code, and so do BFCL's answers - of the 49 currency values of its non-live answers, every one
takes the code, 31 the name as the request writes it too (multiple_192 takes "EUR" and "CAD" alone, where
SmolLM2 wrote "Euros" and "Canadian dollars"). Which currency an argument takes follows the request's words:
the one a conversion starts from is written after "from" or after an amount ("for 500 US dollars", "5000
Euros"), the one it ends in after "to", "into" or "in" ("How many Canadian dollars can I get for 500 US
dollars?": from USD to CAD); so read, with the codes an argument's earlier values took, the sides pick the
code for each of the 49 (23 calls take a pair).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass

# The most traded currencies by their names, the longer names first: "Canadian dollars" is not "dollars".
_NAMES = (
    ("USD", r"U\.?S\.? dollars?|United States dollars?|American dollars?"),
    ("CAD", r"Canadian dollars?"),
    ("AUD", r"Australian dollars?"),
    ("NZD", r"New Zealand dollars?"),
    ("HKD", r"Hong Kong dollars?"),
    ("SGD", r"Singapore dollars?"),
    ("GBP", r"British pounds?|pounds? sterling|sterling"),
    ("JPY", r"Japanese yen|yen"),
    ("CNY", r"Chinese yuan|yuan|renminbi|RMB"),
    ("INR", r"Indian rupees?|rupees?"),
    ("CHF", r"Swiss francs?|francs?"),
    ("MXN", r"Mexican pesos?|pesos?"),
    ("KRW", r"(?:South )?Korean won"),
    ("BRL", r"Brazilian reals?|reais"),
    ("RUB", r"Russian roubles?|Russian rubles?|roubles?|rubles?"),
    ("SEK", r"Swedish kronor|Swedish krona"),
    ("EUR", r"euros?"),
    ("USD", r"dollars?"),  # a dollar of no country is the US one
    ("GBP", r"pounds?"),
)
_CODES = frozenset(code for code, _ in _NAMES)
_CURRENCY = re.compile("|".join(f"(?P<{code}_{index}>{name})" for index, (code, name) in enumerate(_NAMES))
                       + "|" + r"\b(?P<code>" + "|".join(sorted(_CODES)) + r")\b", re.IGNORECASE)
_AMOUNT_BEFORE = re.compile(r"[\d,.]+\d\s*$|\d\s*$")
_FROM_BEFORE = re.compile(r"\bfrom\s+(?:the\s+)?$", re.IGNORECASE)
_TO_BEFORE = re.compile(r"\b(?:to|into|in)\s+(?:the\s+)?$", re.IGNORECASE)
_ORIGIN_WORDS = frozenset({"from", "base", "source", "origin", "original", "input"})
_DESTINATION_WORDS = frozenset({"to", "target", "destination", "quote", "output", "converted"})
_KEY_WORD = re.compile(r"[A-Z]?[a-z]+")


@dataclass(frozen=True)
class CurrencyMention:
    """A currency the request names: its code, and whether its words make it where a conversion starts
    (``origin``) or where it ends (``destination``); neither where they say nothing of that."""

    code: str
    origin: bool
    destination: bool


def written_currencies(request: str) -> list[CurrencyMention]:
    """The currencies ``request`` names, in reading order, each time it names one."""
    mentions = []
    for found in _CURRENCY.finditer(request):
        if not _whole_words(request, found):
            continue
        code = found.group("code").upper() if found.group("code") else found.lastgroup.split("_")[0]
        before = request[:found.start()]
        destination = bool(_TO_BEFORE.search(before))
        origin = not destination and bool(_FROM_BEFORE.search(before) or _AMOUNT_BEFORE.search(before))
        mentions.append(CurrencyMention(code, origin, destination))
    return mentions


def _whole_words(request: str, found: re.Match[str]) -> bool:
    """Whether the match starts and ends at word boundaries ("yen", not the "yen" of "Yenisei")."""
    start, end = found.span()
    return not (start and request[start - 1].isalnum()) and not (end < len(request) and request[end].isalnum())


def is_currency_argument(name: str) -> bool:
    """Whether an argument's name says it takes a currency (``from_currency``, ``baseCurrency``)."""
    return "currency" in name.lower()


def currency_for(key: str, mentions: list[CurrencyMention], given: Collection[str], held: Collection[str]) -> str:
    """The code the currency argument ``key`` takes: of the request's ``mentions`` on the key's side (an
    origin's: those its words make one, else those they do not make a destination; the same for a
    destination's; any where the key's name says neither), the first that the key's earlier values
    (``given``, a code as often as given) have not yet had, past the codes the call's other arguments
    (``held``) hold; "" where the request names no currency."""
    words = {word.lower() for word in _KEY_WORD.findall(key)}
    if words & _ORIGIN_WORDS:
        side = ([mention for mention in mentions if mention.origin]
                or [mention for mention in mentions if not mention.destination])
    elif words & _DESTINATION_WORDS:
        side = ([mention for mention in mentions if mention.destination]
                or [mention for mention in mentions if not mention.origin])
    else:
        side = list(mentions)
    codes = [mention.code for mention in side or mentions]
    left = list(codes)
    for code in given:
        if code in left:
            left.remove(code)
    return next((code for code in left if code not in held), next(iter(left or codes), ""))
