"""Comma-separated lists with a counted length: array elements (``items``, ``prefixItems``,
``minItems``/``maxItems``) and the free members of an object without declared properties
(``minProperties``/``maxProperties``).

Counts become GBNF repetitions, which llama.cpp expands into one rule per optional copy; counts above
MAX_BOUNDED_ITEMS are loosened (a larger maximum dropped, a larger minimum lowered to the cap), leaving
a superset for the validation after generation to narrow.
"""

from __future__ import annotations

from llmproxy.errors import GrammarError
from llmproxy.grammar._rules import Rules


MAX_BOUNDED_ITEMS = 64
_COMMA = '"," ws'  # each element brings the whitespace after it (list_body)


def list_body(
    rules: Rules, hint: str, prefix: list[str], rest: str | None, low: int, high: int | None
) -> str:
    """GBNF for what goes between the brackets: element i follows ``prefix[i]``, later ones ``rest``
    (None: no later ones), between ``low`` and ``high`` elements (high None: no bound); "" for none.

    Each element is followed by its whitespace, so the brackets enclose it as ``"[" ws body "]"``: with a
    ``ws`` before the closing bracket too, whitespace could follow whitespace where the elements may be
    left out, and a model that wrote some after the opening bracket found only the closing one allowed
    (SmolLM2 wrote ``"floors": [`` and two runs of whitespace, for "the 2nd, 3rd and 4th floors").
    """
    prefix = [f"{element} ws" for element in prefix]
    rest = None if rest is None else f"{rest} ws"
    if high is not None and high < low:
        raise GrammarError(f"the maximum count is below the minimum at {hint!r}")
    if high is not None and high < len(prefix):
        prefix, rest = prefix[:high], None
    if rest is None:
        high = len(prefix)
        if low > high:
            raise GrammarError(f"at {hint!r} at least {low} items are required but only {high} are allowed")
    if high == 0:
        return ""
    # From the back: what may follow once the first k elements are written.
    k = len(prefix)
    follow = ""
    if rest is not None:
        follow = _repeat(f"( {_COMMA} {rest} )", max(low - max(k, 1), 0), None if high is None else high - max(k, 1))
    for i in range(k - 1, 0, -1):
        step = " ".join(filter(None, (f"{_COMMA} {prefix[i]}", follow)))
        follow = rules.rule(f"{hint}-from-{i}", step if i < low else f'{step} | ""')
    first = prefix[0] if prefix else rest
    body = " ".join(filter(None, (first, follow)))
    return body if low >= 1 else f"( {body} )?"


def _repeat(item: str, low: int, high: int | None) -> str:
    low = min(low, MAX_BOUNDED_ITEMS)
    if high is not None and high > MAX_BOUNDED_ITEMS:
        high = None
    if high == 0:
        return ""
    if high is None:
        return item + ("*" if low == 0 else "+" if low == 1 else f"{{{low},}}")
    if (low, high) == (0, 1):
        return item + "?"
    if (low, high) == (1, 1):
        return item
    return item + (f"{{{low}}}" if low == high else f"{{{low},{high}}}")
