"""Whether another call follows, after each call of an answer that lists its calls as a JSON list.

A chosen call (llmproxy.backends._choice_sampling) whose syntax lists calls is written as a list -
``[{"name": ...}, {"name": ...}]`` - so that one answer can make the several calls a request asks for.
After each call the list either goes on (``,``) or ends (``]``). A small model left to itself goes on as
often where one call was asked as where several were; but a request that asks for several calls names
values for each, and a call rarely uses values the request does not hold. So the choice is made from the
model's own probabilities, as the first step's is - how much likelier it finds going on than ending - with
a bias, raised where numbers the request holds are not yet in any call written and the last call added
one (the calls are still covering the request), lowered where all are in or the last call added none:
the margin plus ``continue_bias`` plus ``coverage_weight`` times that coverage (+1, -1, or 0 for a
request with no numbers) decides.

A token can close a call and go on or end in one (``},``, ``}]``): those are held back while a call is
being closed, so the choice is made on its own, once the call is whole.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

_NUMBER = re.compile(r"(?<![\w.])[-+]?\d[\d,]*(?:\.\d+)?")
_CLOSING = re.compile(r"\s*(\}+)\s*([,\]])")


def numbers(text: str) -> set[str]:
    """The numbers written in ``text``, as digits (thousands separators and a leading + dropped)."""
    return {found.replace(",", "").lstrip("+").rstrip(".") for found in _NUMBER.findall(text)}


@dataclass(frozen=True)
class ListTokens:
    """What each token of a vocabulary (by its text) does to a list of calls: how many objects it closes
    before it goes on (``,``) or ends the list (``]``) - 0 where it does neither - and whether, outside
    any call, it goes on (1) or ends the list (2)."""

    closes_then: np.ndarray  # objects closed by a token that then goes on or ends
    leads: np.ndarray  # 1: goes on (","), 2: ends ("]"), 0: neither (whitespace, anything else)

    @classmethod
    def of(cls, pieces: Sequence[str]) -> ListTokens:
        closes_then = np.zeros(len(pieces), dtype=np.int16)
        leads = np.zeros(len(pieces), dtype=np.int8)
        for token, piece in enumerate(pieces):
            closing = _CLOSING.match(piece)
            if closing is not None:
                closes_then[token] = len(closing.group(1))
            stripped = piece.lstrip()
            leads[token] = 1 if stripped.startswith(",") else 2 if stripped.startswith("]") else 0
        return cls(closes_then, leads)


class ListContinuation:
    """Follows the JSON of an answer that is a list of calls, token by token (``accept``), and at the end
    of each call makes the list's next step a choice between going on and ending (``adjust``, on the raw
    logits of the step, before the token is drawn)."""

    def __init__(self, tokens: ListTokens, pieces: Sequence[str], request: str, bias: float, weight: float) -> None:
        self._tokens = tokens
        self._pieces = pieces
        self._asked = numbers(request)
        self._bias = bias
        self._weight = weight
        self._calls: list[str] = []  # the text of each call written
        self._call = ""  # the call being written
        self._depth = 0  # [ and { open, outside strings
        self._in_string = self._escaped = False
        self._call_ended = False  # a call was closed, and the list has neither gone on nor ended since
        self.choices: list[bool] = []  # each choice made: True where the list went on

    def adjust(self, logits: np.ndarray) -> None:
        if self._in_string or self._depth < 1:
            return
        if self._depth > 1:  # inside a call: none of its closing tokens may also go on or end the list
            logits[self._tokens.closes_then == self._depth - 1] = -np.inf
            return
        if not self._call_ended:
            return
        more, done = self._tokens.leads == 1, self._tokens.leads == 2
        if len(self.choices) < len(self._calls):  # chosen once a call; whitespace may come first
            margin = _log_sum_exp(logits[more]) - _log_sum_exp(logits[done])
            self.choices.append(margin + self._bias + self._weight * self._coverage() > 0)
        logits[done if self.choices[-1] else more] = -np.inf

    def accept(self, token: int) -> None:
        for char in self._pieces[token]:
            if self._depth > 1 or char == "{":
                self._call += char
            if self._in_string:
                if self._escaped:
                    self._escaped = False
                elif char == "\\":
                    self._escaped = True
                elif char == '"':
                    self._in_string = False
            elif char == '"':
                self._in_string = True
            elif char in "[{":
                self._depth += 1
            elif char in "]}":
                self._depth -= 1
                if self._depth == 1 and char == "}":
                    self._call_ended = True
                    self._calls.append(self._call)
                    self._call = ""
            elif char == "," and self._depth == 1:
                self._call_ended = False

    def _coverage(self) -> int:
        """+1 where numbers the request holds are in no call yet and the last call added one, -1 where all
        are or it added none, 0 where the request has none."""
        if not self._asked:
            return 0
        *before, last = [numbers(call) & self._asked for call in self._calls]
        earlier = set().union(*before)
        return 1 if self._asked - earlier - last and last - earlier else -1


def _log_sum_exp(values: np.ndarray) -> float:
    if not len(values):
        return float("-inf")
    peak = float(values.max())
    return peak if peak == float("-inf") else peak + float(np.log(np.exp(values - peak).sum()))
