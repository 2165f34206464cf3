"""A later call that repeats an earlier one in all but its last argument, followed as it is written.

A small model let write several calls to one function writes an earlier call again word for word, and a
repeated call ends the answer (llmproxy.backends._list_continuation): SmolLM2 wrote the second of
"$6,000,000 ... 2,500,000 shares" and "$6,000,000 ... 2,000,000 shares" twice, and stopped. In BFCL's
answers a later call to a function that gives an earlier one's arguments, in order, up to its last, gives
that last a value of its own 83 times, the earlier one's twice (and goes on to arguments of its own 3
times). So ``CallCopy`` follows the calls' JSON, token by token, and says what a value being written would
repeat (``copied``): the earlier call's value for the argument, where the call so far is that call up to
its last argument and this is it. What to do about it is the value grounding's (llmproxy.backends.
_value_grounding): it knows which other values the request holds.
"""

from __future__ import annotations

from llmproxy.backends._json_chars import JSONChars

_ARGUMENTS_DEPTH = 2  # a call's object, then its arguments' object


class CallCopy:
    """Takes a list of calls' JSON text a token at a time (``accept``); ``copied`` tells what the value
    being written would repeat."""

    def __init__(self) -> None:
        self._json = JSONChars()
        self._text = ""  # the answer so far
        self._string = ""  # the string being written, or the last one written
        self._string_is_value = False  # whether it is a value (else a key)
        self._call_key = ""  # the call's last key ("name", "arguments")
        self._name = ""  # the function of the call being written, once its name is written
        self._key = ""  # the argument being written
        self._value_start: int | None = None  # where in ``_text`` its value starts
        self._arguments: list[tuple[str, str]] = []  # the call's arguments written whole: (key, value's text)
        self._calls: list[tuple[str, list[tuple[str, str]]]] = []  # the calls written whole, with theirs

    def copied(self) -> list[str]:
        """The values (as JSON text) that the value being written would repeat: of each earlier call to this
        call's function whose arguments are this call's so far, in order and with the same values, and then
        the one being written as their last. None where no value is being written."""
        if self._value_start is None:
            return []
        count = len(self._arguments) + 1
        return [arguments[-1][1] for name, arguments in self._calls
                if name == self._name and len(arguments) == count
                and arguments[:-1] == self._arguments and arguments[-1][0] == self._key]

    def value(self) -> str:
        """The text of the value being written, so far ("" where none is)."""
        return "" if self._value_start is None else self._text[self._value_start:].lstrip()

    def accept(self, piece: str) -> None:
        for char in piece:
            self._step(char)

    def _step(self, char: str) -> None:
        json = self._json
        depth, in_string, value_starts = len(json.open), json.in_string, json.value_starts()
        in_text = json.step(char)
        self._text += char
        if in_text:
            self._string += char
        elif char == '"' and not in_string:  # a string opens
            self._string, self._string_is_value = "", value_starts
        elif char == '"':  # a string closes
            if depth == 1 and not self._string_is_value:
                self._call_key = self._string
            elif depth == 1 and self._call_key == "name":
                self._name = self._string
            elif depth == _ARGUMENTS_DEPTH and not self._string_is_value:
                self._key = self._string
        elif depth == _ARGUMENTS_DEPTH and char == ":":
            self._value_start = len(self._text)
        elif depth == _ARGUMENTS_DEPTH and char in ",}" and self._value_start is not None:
            self._arguments.append((self._key, self._text[self._value_start:-1].strip()))
            self._value_start = None
        elif depth == 1 and char == "}":  # the call closes
            self._calls.append((self._name, self._arguments))
            self._name, self._call_key, self._arguments = "", "", []
