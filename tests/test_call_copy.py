"""A later call that repeats an earlier one up to its last argument (llmproxy.backends._call_copy), and the
value grounding that holds its last value off the earlier one's (llmproxy.backends._value_grounding)."""

from __future__ import annotations

import numpy as np
import pytest

from llmproxy.backends._call_copy import CallCopy
from llmproxy.backends._value_grounding import ArgumentKinds, GroundingTokens, ValueGrounding

FIRST = '{"name": "f", "arguments": {"a": 6000000, "b": 2500000}}, '


def copy_after(text: str) -> CallCopy:
    copy = CallCopy()
    for start in range(0, len(text), 3):  # as tokens come: a few characters at a time
        copy.accept(text[start:start + 3])
    return copy


@pytest.mark.parametrize(("written", "copied", "value"), [
    (FIRST + '{"name": "f", "arguments": {"a": 6000000, "b": 25', ["2500000"], "25"),
    (FIRST + '{"name": "f", "arguments": {"a": 6000000, "b": ', ["2500000"], ""),
    # Not the last argument, another function, or another value before it: nothing is repeated.
    (FIRST + '{"name": "f", "arguments": {"a": 6', [], "6"),
    (FIRST + '{"name": "g", "arguments": {"a": 6000000, "b": 25', [], "25"),
    (FIRST + '{"name": "f", "arguments": {"a": 5000000, "b": 25', [], "25"),
    (FIRST + '{"name": "f", "arguments": {"b": 2500000, "a": 6', [], "6"),
    (FIRST + '{"name": "f", "arguments": {"a": 6000000, "b": 2500000', ["2500000"], "2500000"),  # not ended yet
    (FIRST + '{"name": "f", "arguments": {"a": 6000000, "b": 2500000}', [], ""),
])
def test_a_value_repeats_an_earlier_calls_last_where_the_call_so_far_is_that_one(written, copied, value):
    copy = copy_after(written)
    assert copy.copied() == copied
    assert copy.value() == value


def test_values_with_json_punctuation_inside_are_read_whole():
    first = '{"name": "f", "arguments": {"a": "x, }", "b": [1, {"q": 2}]}}\n, '
    copy = copy_after(first + '{"name": "f", "arguments": {"a": "x, }", "b": [1, ')
    assert copy.copied() == ['[1, {"q": 2}]']
    assert copy.value() == "[1, "


def test_each_earlier_call_it_could_repeat_counts():
    calls = ('{"name": "f", "arguments": {"a": 1, "b": true}}, {"name": "f", "arguments": {"a": 2, "b": true}}, '
             '{"name": "f", "arguments": {"a": 1, "b": false}}, ')
    assert copy_after(calls + '{"name": "f", "arguments": {"a": 1, "b": ').copied() == ["true", "false"]


NUMBER_CALL = '{"name": "f", "arguments": {"n": 6000000, "m": 2500000}}, '
NUMBER_COPY = '{"name": "f", "arguments": {"n": 6000000, "m": '
NUMBER_OTHER = '{"name": "f", "arguments": {"n": 5000000, "m": '
ENUM_CALL = '{"name": "f", "arguments": {"s": "Amazon", "t": "year"}}, '
ENUM_COPY = '{"name": "f", "arguments": {"s": "Amazon", "t": '
BOOLEAN_CALL = '{"name": "f", "arguments": {"s": "Amazon", "b": true}}, '
BOOLEAN_COPY = '{"name": "f", "arguments": {"s": "Amazon", "b": '
PIECES = [NUMBER_CALL, NUMBER_COPY, NUMBER_OTHER, ENUM_CALL, ENUM_COPY, BOOLEAN_CALL, BOOLEAN_COPY, "2", "25", "20",
          "0", "5", ",", "}", "\n", " 2", ' "', "y", "year", "five", '"', '",', '"}', "true", "false", "t"]
BIAS = 4.0


def lowered(request: str, *written: str, arguments: ArgumentKinds) -> dict[str, float]:
    """The pieces the grounding lowers after ``written``, and by how many nats."""
    tokens = GroundingTokens.of(PIECES)
    grounding = ValueGrounding(tokens, PIECES, request, BIAS, (), arguments)
    for piece in written:
        grounding.accept(tokens.token_of[piece])
    logits = np.zeros(len(PIECES), dtype=np.float32)
    grounding._lower_copied_call(logits)
    return {PIECES[token]: float(logits[token]) for token in np.flatnonzero(logits)}


NUMBERS = ArgumentKinds(numbers=frozenset({"n", "m"}))
AMAZON = "Rain in the Amazon, then again"
REQUEST = "A payout of $6,000,000 with 2,500,000 shares, then with 2,000,000 shares"


def test_a_number_that_would_repeat_the_call_before_is_held_off_it_where_the_request_holds_another():
    # "2" may still become 2,000,000: only the copy's own way is lowered.
    assert lowered(REQUEST, NUMBER_CALL, NUMBER_COPY, arguments=NUMBERS) == {"25": -2 * BIAS}
    assert lowered(REQUEST, NUMBER_CALL, NUMBER_COPY, "2", arguments=NUMBERS) == {"5": -2 * BIAS}
    assert lowered(REQUEST, NUMBER_CALL, NUMBER_COPY, "25", arguments=NUMBERS) == {}  # no other value goes on
    # Where the request holds no other number that goes on from what is written, nothing is lowered.
    assert lowered("A payout of $6,000,000 with 2,500,000 shares, then again", NUMBER_CALL, NUMBER_COPY, "2",
                   arguments=NUMBERS) == {}
    # Where the request does not say it asks for several things, a call repeated had best end the answer.
    assert lowered("A payout of $6,000,000 with 2,500,000 shares, or with 2,000,000 shares", NUMBER_CALL,
                   NUMBER_COPY, "2", arguments=NUMBERS) == {}
    assert lowered(REQUEST, NUMBER_CALL, NUMBER_OTHER, arguments=NUMBERS) == {}  # another value before it: no copy


def test_an_enums_value_that_would_repeat_the_call_before_is_held_off_it_and_a_boolean_is_not():
    booleans = ArgumentKinds(booleans=frozenset({"b"}))
    assert lowered(AMAZON, BOOLEAN_CALL, BOOLEAN_COPY, arguments=booleans) == {}  # the other is no sign
    enum = ArgumentKinds(enums={"t": ("year", "five_years", "six_months")})
    assert lowered(AMAZON, ENUM_CALL, ENUM_COPY, ' "', arguments=enum) == {"y": -2 * BIAS, "year": -2 * BIAS}
    assert lowered(AMAZON, ENUM_CALL, ENUM_COPY, ' "', "year", arguments=enum) == {}  # no other goes on
    longer = ArgumentKinds(enums={"t": ("year", "years")})
    assert lowered(AMAZON, ENUM_CALL, ENUM_COPY, ' "', "year", arguments=longer) == {
        '"': -2 * BIAS, '",': -2 * BIAS, '"}': -2 * BIAS}
    assert lowered(AMAZON, ENUM_CALL, ENUM_COPY, ' "', "five", arguments=enum) == {}  # no copy any more
