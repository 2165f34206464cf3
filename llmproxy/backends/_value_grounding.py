"""A chosen call's values held to what the request wrote: a value begun as the request writes one goes on
as the request does.

SmolLM2 writes a number digit by digit and ends it where the grammar lets it: "an initial investment of
$2000" became ``200``, "$50000" ``500``. A string it cuts the same way. So while a call's value is being
written, where what is written so far is the start of a value the request holds (a number written there,
thousands separators left out; a run of its text, for a string of two characters or more) and no value
the request holds ends there, the tokens that go on as the request does get ``bias`` nats: the model still
draws, and the grammar still decides what may be drawn.

Two more guesses get half that (a start is a guess where a continuation is near certain):

- a string value's first token, where it begins a name the request writes (llmproxy.backends.
  _list_continuation.written_names): "Magnus Carlsen" for a player, not the "Manchester United" a small
  model likes better;
- the separator after an argument's value, while numbers of the request are in none of the answer's
  calls yet: "an acceleration of 9.8" written as the optional argument it is, not left out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from llmproxy.backends._json_chars import JSONChars
from llmproxy.backends._list_continuation import amounts, numbers, used_amounts, written_names

MIN_STRING = 2  # characters of a string value before it is held to the request's text
_LOOK_AHEAD = 16  # characters of the request's text after a match that tokens are looked up for
_NUMBER_CHARS = frozenset("0123456789.-+eE")
_ARGUMENTS_DEPTH = 2  # a call's object, then its arguments' object


@dataclass(frozen=True)
class GroundingTokens:
    """A vocabulary (by its tokens' text) as the grounding looks it up, made once per model: the token of
    each text, and the tokens that begin with an argument separator."""

    token_of: Mapping[str, int]
    separators: tuple[int, ...]

    @classmethod
    def of(cls, pieces: Sequence[str]) -> GroundingTokens:
        token_of: dict[str, int] = {}
        for token, piece in enumerate(pieces):
            token_of.setdefault(piece, token)
        return cls(token_of, tuple(token for token, piece in enumerate(pieces) if piece.lstrip().startswith(",")))


class ValueGrounding:
    """Follows a call's JSON token by token (``accept``) and raises the tokens that continue the value being
    written as the request does (``adjust``, on the step's raw logits, before the token is drawn)."""

    def __init__(self, tokens: GroundingTokens, pieces: Sequence[str], request: str, bias: float) -> None:
        self._pieces = pieces
        self._token_of = tokens.token_of
        self._separators = list(tokens.separators)
        self._text = request
        self._numbers = numbers(request)
        self._amounts = amounts(request)
        self._names = sorted(name[:_LOOK_AHEAD] for name in written_names(request))
        self._bias = bias
        self._json = JSONChars()
        self._string_is_value = False
        self._value = ""  # the string or number value written so far
        self._in_number = False
        self._answer = ""  # the calls written so far

    def adjust(self, logits: np.ndarray) -> None:
        bias = self._bias
        if self._json.in_string and self._string_is_value and len(self._value) >= MIN_STRING:
            rests = self._string_rests(self._value)
        elif self._json.in_string and self._string_is_value and not self._value:
            rests, bias = self._names, self._bias / 2
        elif self._in_number and not self._number_is_whole():
            rests = self._number_rests(self._value)
        elif self._argument_ends() and self._amounts - used_amounts(self._answer, self._amounts):
            logits[self._separators] += self._bias / 2
            return
        else:
            return
        raised = {token for rest in rests for token in self._tokens_starting(rest)}
        if raised:
            logits[list(raised)] += bias

    def accept(self, token: int) -> None:
        self._answer += self._pieces[token]
        for char in self._pieces[token]:
            starts = not self._json.in_string and self._json.value_starts()
            if self._json.step(char):
                self._value += char
            elif self._in_number and char in _NUMBER_CHARS:
                self._value += char
            elif char == '"' and self._json.in_string:  # a string opens
                self._in_number, self._string_is_value, self._value = False, starts, ""
            else:
                self._in_number = starts and char in "-0123456789"
                self._value = char

    def _number_is_whole(self) -> bool:
        """Whether the number being written is one the request writes, and none it writes goes on from it."""
        written = self._value
        return written in self._numbers and not any(
            number != written and number.startswith(written) for number in self._numbers)

    def _number_rests(self, written: str) -> list[str]:
        """What follows ``written`` in each number of the request it begins, where none ends with it."""
        if written in self._numbers:
            return []
        return [number[len(written):] for number in self._numbers if number.startswith(written)]

    def _argument_ends(self) -> bool:
        """Whether an argument's value has just been written whole: next is the separator or the end of
        the arguments."""
        json = self._json
        return (not json.in_string and len(json.open) == _ARGUMENTS_DEPTH and json.open[-1] == "{"
                and json.last not in "{,:" and (not self._in_number or self._number_is_whole()))

    def _string_rests(self, written: str) -> list[str]:
        """What follows ``written`` in the request's text where it appears there, where it nowhere ends a word."""
        rests = []
        for found in re.finditer(re.escape(written), self._text):
            rest = self._text[found.end():found.end() + _LOOK_AHEAD]
            if not rest or not (rest[0].isalnum() or rest[0] in "-'"):
                return []  # the value may be whole as it is
            rests.append(rest)
        return rests

    def _tokens_starting(self, rest: str) -> list[int]:
        """The tokens whose text ``rest`` starts with."""
        return [token for end in range(1, len(rest) + 1) if (token := self._token_of.get(rest[:end])) is not None]
