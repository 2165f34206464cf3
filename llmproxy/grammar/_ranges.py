"""Numeric ranges as GBNF: ``minimum``/``maximum``/``exclusiveMinimum``/``exclusiveMaximum``.

Integers are exact: the range is cut by digit count, and each same-length span into a few digit-class
runs (``"1" [3-9] | [2-8] [0-9] | "9" [0-4]`` for 13..94), so the grammar admits exactly the integers in
the range, written without leading zeros (and without ``-0``). A side without a bound still stops at
``MAX_DIGITS`` digits (or the bound's own length), like the unbounded ``integer`` primitive.

Numbers (``type: number``) are exact when the bounds are integers (``"minimum": 0, "maximum": 1``, the
usual case): the integer part is ranged as above and the fraction is free, all zeros, or not all
zeros at the ends. A bound with a fraction of its own (``"maximum": 2.5``) only bounds the integer
part (2.9 gets through): a sound superset, which the validation after generation narrows. Bounded
numbers are written in plain decimals (no exponent: ``1e3`` would escape any digit range) with up to
``MAX_FRACTION_DIGITS`` decimals; that leaves every value in range expressible.
"""

from __future__ import annotations

import math
from typing import Any

from llmproxy.errors import GrammarError

MAX_DIGITS = 16  # the unbounded integer primitive's limit, kept for one-sided ranges
MAX_BOUND_DIGITS = 40  # a bound longer than this is dropped (the side stays unbounded): a superset
MAX_FRACTION_DIGITS = 16

_FRACTIONS = {
    "any": f'( "." [0-9]{{1,{MAX_FRACTION_DIGITS}}} )?',
    "zero": f'( "." "0"{{1,{MAX_FRACTION_DIGITS}}} )?',  # the value is the integer itself
    "nonzero": f'"." "0"{{0,{MAX_FRACTION_DIGITS - 1}}} [1-9] [0-9]{{0,{MAX_FRACTION_DIGITS - 1}}}',
}


# --- reading the bounds of a schema ------------------------------------------------------------


def _number(schema: dict, keyword: str, hint: str) -> float | int | None:
    value = schema.get(keyword)
    if value is None or (isinstance(value, bool) and keyword.startswith("exclusive")):
        return None  # draft-4 boolean exclusive* flags are read with their minimum/maximum
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise GrammarError(f"'{keyword}' at {hint!r} must be a number, got {value!r}")
    if abs(value) >= 10**MAX_BOUND_DIGITS:
        return None
    return value


def bounds(schema: dict, hint: str) -> tuple[tuple[Any, bool] | None, tuple[Any, bool] | None]:
    """The lower and upper bound of a numeric schema as ``(value, exclusive)`` (None: no bound)."""
    return (_side(schema, "minimum", "exclusiveMinimum", hint, lower=True),
            _side(schema, "maximum", "exclusiveMaximum", hint, lower=False))


def _side(schema: dict, inclusive: str, exclusive: str, hint: str, lower: bool) -> tuple[Any, bool] | None:
    found = []
    value = _number(schema, inclusive, hint)
    if value is not None:
        found.append((value, schema.get(exclusive) is True))  # draft 4: "exclusiveMinimum": true
    value = _number(schema, exclusive, hint)
    if value is not None:
        found.append((value, True))
    if not found:
        return None
    # The stricter of the two: the tighter value, and at equal values the exclusive one.
    if lower:
        return max(found, key=lambda bound: (bound[0], bound[1]))
    return min(found, key=lambda bound: (bound[0], not bound[1]))


# --- integers --------------------------------------------------------------------------------


def integer_range(low: int | None, high: int | None) -> str:
    """GBNF for the integers in [low, high] (None: no bound on that side), exactly."""
    if low is not None and high is not None and low > high:
        raise GrammarError(f"no integer lies between {low} and {high}")
    alternatives = []
    if high is None or high >= 0:
        alternatives.append(natural_range(max(low, 0) if low is not None else 0, high))
    if low is None or low < 0:
        magnitudes = natural_range(1 if high is None or high >= 0 else -high, None if low is None else -low)
        alternatives.append(f'"-" {_group(magnitudes)}')
    return " | ".join(alternatives)


def integer_expr(schema: dict, hint: str) -> str:
    """The GBNF for an integer schema: the ``integer`` primitive, or an exact range."""
    lower, upper = bounds(schema, hint)
    if lower is None and upper is None:
        return "integer"
    low = None if lower is None else math.floor(lower[0]) + 1 if lower[1] else math.ceil(lower[0])
    high = None if upper is None else math.ceil(upper[0]) - 1 if upper[1] else math.floor(upper[0])
    if low is not None and high is not None and low > high:
        raise GrammarError(f"no integer satisfies the bounds at {hint!r}")
    return "natural" if (low, high) == (0, None) else integer_range(low, high)


def natural_range(low: int, high: int | None) -> str:
    """GBNF for the naturals in [low, high] written without leading zeros (high None: up to the digit
    limit)."""
    low_len = len(str(low))
    high_len = len(str(high)) if high is not None else max(MAX_DIGITS, low_len)
    spans: list[str | tuple[int, int]] = []  # texts, and (shortest, longest) runs of whole lengths
    for length in range(low_len, high_len + 1):
        start = low if length == low_len else 10 ** (length - 1)
        end = high if high is not None and length == high_len else 10**length - 1
        if start > end:
            continue
        whole = length > 1 and start == 10 ** (length - 1) and end == 10**length - 1
        if whole and spans and isinstance(spans[-1], tuple):
            spans[-1] = (spans[-1][0], length)
        elif whole:
            spans.append((length, length))
        else:
            spans.append(_same_length(str(start), str(end)))
    return " | ".join(_whole_lengths(*span) if isinstance(span, tuple) else span for span in spans)


def _whole_lengths(shortest: int, longest: int) -> str:
    """Every number of ``shortest`` to ``longest`` digits (both > 1)."""
    return f"[1-9] {_digits(shortest - 1, longest - 1)}"


def _same_length(low: str, high: str) -> str:
    """GBNF for the digit strings of one length between ``low`` and ``high`` (inclusive)."""
    if low == high:
        return f'"{low}"'
    common = 0
    while low[common] == high[common]:
        common += 1
    prefix = f'"{low[:common]}" ' if common else ""
    first, last = int(low[common]), int(high[common])
    rest_low, rest_high = low[common + 1:], high[common + 1:]
    width = len(rest_low)
    low_open = rest_low.strip("0") != ""  # the low side needs its own branch below the first digit
    high_open = rest_high.strip("9") != ""
    alternatives = []
    if low_open:
        alternatives.append(f'"{first}" {_group(_same_length(rest_low, "9" * width))}')
    middle_from, middle_to = first + low_open, last - high_open
    if middle_from <= middle_to:
        alternatives.append(f"{_digit_class(middle_from, middle_to)} {_digits(width, width)}".strip())
    if high_open:
        alternatives.append(f'"{last}" {_group(_same_length("0" * width, rest_high))}')
    body = " | ".join(alternatives)
    return prefix + (_group(body) if prefix and len(alternatives) > 1 else body)


def _digit_class(low: int, high: int) -> str:
    return f'"{low}"' if low == high else f"[{low}-{high}]"


def _digits(low: int, high: int) -> str:
    """``low`` to ``high`` more digits of any value."""
    if high == 0:
        return ""
    if low == high:
        return "[0-9]" if low == 1 else f"[0-9]{{{low}}}"
    return f"[0-9]{{{low},{high}}}"


def _group(body: str) -> str:
    return f"( {body} )" if "|" in body else body


# --- numbers ---------------------------------------------------------------------------------


def number_expr(schema: dict, hint: str) -> str:
    """The GBNF for a number schema: the ``number`` primitive, or plain decimals in the range."""
    lower, upper = bounds(schema, hint)
    if lower is None and upper is None:
        return "number"
    if upper is None and lower == (0, False):
        return "unsigned-number"  # the sign alone decides: exponents may stay
    alternatives = []
    if upper is None or upper[0] > 0 or upper == (0, False):
        start = lower if lower is not None and lower[0] >= 0 else (0, False)
        alternatives.append(_magnitudes(start, upper))
    if lower is None or lower[0] < 0:
        # Negative values by magnitude: -x with x in (max(0, -upper), -lower]. "-0" is left out (0 is
        # written unsigned), so magnitude 0 is excluded even where the upper bound allows it.
        start = (-upper[0], upper[1]) if upper is not None and upper[0] < 0 else (0, True)
        alternatives.append(f'"-" {_group(_magnitudes(start, None if lower is None else (-lower[0], lower[1])))}')
    alternatives = [a for a in alternatives if a]
    if not alternatives:
        raise GrammarError(f"no number satisfies the bounds at {hint!r}")
    return " | ".join(alternatives)


def _magnitudes(low: tuple[Any, bool], high: tuple[Any, bool] | None) -> str:
    """Unsigned decimals x with low <= x <= high (each bound ``(value, exclusive)``, high None: no
    bound); "" when there are none. Exact for whole bounds, integer part only for fractional ones."""
    low_int = math.floor(low[0])
    low_fraction = "nonzero" if low[1] and float(low[0]).is_integer() else "any"  # x > N: not N itself
    # Pieces (first integer, last integer or None, fraction), from low to high.
    pieces = [(low_int, low_int, low_fraction), (low_int + 1, None, "any")]
    if high is not None:
        high_int = math.floor(high[0])
        whole = float(high[0]).is_integer()
        if whole and high[1]:  # x < N: N itself with any fraction is out
            high_int, high_fraction = high_int - 1, "any"
        else:
            high_fraction = "zero" if whole else "any"
        pieces = [(a, high_int if b is None else min(b, high_int), f) for a, b, f in pieces if a <= high_int]
        if pieces and pieces[-1][1] == high_int:  # the top integer takes the high side's fraction rule
            a, b, f = pieces.pop()
            if a < b:
                pieces.append((a, b - 1, f))
            top = _both(f, high_fraction)
            if top:
                pieces.append((high_int, high_int, top))
    merged: list[tuple[int, int | None, str]] = []
    for a, b, f in pieces:
        if merged and merged[-1][2] == f:
            merged[-1] = (merged[-1][0], b, f)
        else:
            merged.append((a, b, f))
    return " | ".join(f"{_group(natural_range(a, b))} {_FRACTIONS[f]}" for a, b, f in merged)


def _both(a: str, b: str) -> str | None:
    """The fraction rule meeting both rules (None: no fraction does)."""
    if "any" in (a, b):
        return b if a == "any" else a
    return a if a == b else None
