"""Where each character of JSON text written a token at a time falls: inside a string or not, and which
arrays and objects are open. What follows a call as the model writes it (llmproxy.backends._list_continuation,
llmproxy.backends._value_grounding) reads its answer through one of these."""

from __future__ import annotations


class JSONChars:
    """Takes JSON text a character at a time (``step``)."""

    def __init__(self) -> None:
        self.in_string = False
        self._escaped = False
        self.open: list[str] = []  # the arrays and objects open, outside strings: "[" or "{"
        self.last = ""  # the last character outside strings and whitespace

    def step(self, char: str) -> bool:
        """Take ``char``; whether it is part of a string's text (its quotes are not)."""
        if self.in_string:
            if self._escaped:
                self._escaped = False
            elif char == "\\":
                self._escaped = True
            elif char == '"':
                self.in_string = False
                self.last = char
                return False
            return True
        if char == '"':
            self.in_string = True
        elif char in "[{":
            self.open.append(char)
        elif char in "]}" and self.open:
            self.open.pop()
        if not char.isspace():
            self.last = char
        return False

    def value_starts(self) -> bool:
        """Whether a value starts at the next character: after an object's colon, or an array's item."""
        return self.last == ":" or (self.last in ("[", ",") and self.open[-1:] == ["["])
