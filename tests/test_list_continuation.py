"""After each call of an answer that lists its calls, whether another follows: the model's own margin,
a bias, and whether the request's numbers are all in the calls written (llmproxy.backends._list_continuation)."""

from __future__ import annotations

import numpy as np
import pytest

from llmproxy.backends._list_continuation import ListContinuation, ListTokens, numbers

# A vocabulary of whole pieces: each answer below is written token by token from these.
PIECES = ["[", "{", '"name": "f", "arguments": ', "}", "}}", "},", "}]", ",", "]", " ", "\n", '"a": 20', '"a": 15',
          '"a": 3', ' {', '"s": "}, ]"']
TOKENS = ListTokens.of(PIECES)
COMMA, CLOSE = PIECES.index(","), PIECES.index("]")


def written(continuation: ListContinuation, *pieces: str) -> None:
    for piece in pieces:
        continuation.accept(PIECES.index(piece))


def call(value: str) -> tuple[str, ...]:
    return "{", '"name": "f", "arguments": ', "{", value, "}}"


def step(continuation: ListContinuation, more: float = 0.0, done: float = 0.0) -> np.ndarray:
    logits = np.zeros(len(PIECES), dtype=np.float32)
    logits[COMMA], logits[CLOSE] = more, done
    continuation.adjust(logits)
    return logits


def test_numbers_are_read_as_digits():
    assert numbers("from $2,000 to 3000.50, then +7 and -4.") == {"2000", "3000.50", "7", "-4"}
    assert numbers("no digits") == set() and numbers("v2 and x3") == set()


@pytest.mark.parametrize(("request_text", "values", "goes_on"), [
    ("Play for 20 and for 15 minutes.", ['"a": 20'], True),  # 15 is in no call yet: go on
    ("Play for 20 and for 15 minutes.", ['"a": 20', '"a": 15'], False),  # all numbers in: end
    ("Play for 20 and for 15 minutes.", ['"a": 20', '"a": 3'], False),  # the last call added none: end
    ("Play for 20 minutes.", ['"a": 20'], False),
])
def test_the_list_goes_on_while_the_calls_still_cover_the_requests_numbers(request_text, values, goes_on):
    continuation = ListContinuation(TOKENS, PIECES, request_text, bias=-1.0, weight=3.0)
    written(continuation, "[", *call(values[0]))
    for value in values[1:]:
        written(continuation, ",", " {", *call(value)[1:])
    logits = step(continuation)  # the model itself is undecided
    assert (logits[COMMA] > -np.inf, logits[CLOSE] > -np.inf) == (goes_on, not goes_on)
    assert continuation.choices[-1] is goes_on


def test_without_numbers_the_models_own_margin_and_the_bias_decide():
    continuation = ListContinuation(TOKENS, PIECES, "Play some songs.", bias=-1.0, weight=3.0)
    written(continuation, "[", *call('"a": 3'))
    assert step(continuation, more=0.5)[COMMA] == -np.inf  # 0.5 - 1: ends
    later = ListContinuation(TOKENS, PIECES, "Play some songs.", bias=-1.0, weight=3.0)
    written(later, "[", *call('"a": 3'))
    assert step(later, more=1.5)[CLOSE] == -np.inf  # 1.5 - 1: goes on


def test_the_choice_is_made_once_a_call_and_held_through_whitespace():
    continuation = ListContinuation(TOKENS, PIECES, "Play for 20 and for 15 minutes.", bias=-1.0, weight=3.0)
    written(continuation, "[", *call('"a": 20'))
    assert step(continuation, done=1.0)[CLOSE] == -np.inf  # -1 - 1 + 3 (15 is in no call yet): goes on
    written(continuation, "\n")
    assert step(continuation, done=50.0)[CLOSE] == -np.inf
    assert continuation.choices == [True]  # not chosen again before the list goes on or ends


def test_inside_a_call_no_token_may_close_it_and_go_on_or_end_in_one():
    continuation = ListContinuation(TOKENS, PIECES, "x", bias=0.0, weight=0.0)
    written(continuation, "[", "{", '"name": "f", "arguments": ', "{", '"a": 3', "}")  # the arguments closed
    logits = step(continuation)
    assert logits[PIECES.index("},")] == logits[PIECES.index("}]")] == -np.inf
    assert logits[PIECES.index("}")] == 0.0 and continuation.choices == []


def test_braces_in_strings_are_text():
    continuation = ListContinuation(TOKENS, PIECES, "x", bias=0.0, weight=0.0)
    written(continuation, "[", "{", '"name": "f", "arguments": ', "{", '"s": "}, ]"', "}")  # its arguments closed
    assert step(continuation)[PIECES.index("},")] == -np.inf  # so the call is being closed: at depth 2
    assert continuation.choices == []
