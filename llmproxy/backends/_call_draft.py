"""What a chosen call goes on with, proposed to the embedded model as a draft it reads in one batch.

Once ``choose`` knows the function a call is to (llmproxy.backends._choice_sampling), much of the call is
known before the model writes it: how the call opens (``{"name": "get_weather", "arguments": {``), which
the syntax writes the same way every time, and its arguments' keys, which the grammar asks for in the
schema's order. Only the spacing around the keys is the model's own - SmolLM2 writes
``{\\n    "city": "Paris",\\n    "unit": "celsius"\\n}``, another model ``{"city": "Paris", "unit": ...`` - so a
key is proposed with the spacing the model wrote around the key before it at the same depth, and the
first key at a depth only once its opening quote is written. A string value's opening quote, which the
grammar forces, comes with its key.

``CallDraft`` is llama-cpp-python's ``draft_model``: it reads the token drawn and the proposed ones in one
batch, then samples each place in turn as it would have, keeping a proposed token only where the sample
is that token (speculative decoding); from the first that differs on, the rest is dropped. So the sampler
draws as it would have, place by place, and nothing it did not draw - nothing the grammar forbids - is
written. Only the model's reading is batched, and llama.cpp's batched read gives logits a little apart
from a one-token read (as a cached prompt does), so what follows can still differ for the same seed. A
guess the model does not take costs the reading of the tokens proposed after it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from llmproxy.syntaxes.base import ChoosableFunction

_SPACE = frozenset(b" \t\n\r")


class CallDraft:
    """Proposes the rest of a chosen call's opening, then each next key of its JSON arguments.

    ``function`` tells the function the call is to once it is known (None before, and for a text answer);
    ``text`` gives the bytes of tokens, ``tokens`` the tokens of a text. The model that reads a draft sets
    ``proposed`` back to 0 (``GrammarCheckedLlama.eval``).
    """

    def __init__(self, function: Callable[[], ChoosableFunction | None], text: Callable[[Sequence[int]], bytes],
                 tokens: Callable[[str], list[int]]) -> None:
        self._function = function
        self._text = text
        self._tokens = tokens
        self._start: int | None = None  # where the answer starts among the tokens read
        self._seen = 0  # how many of the answer's tokens have been seen
        self._written = b""  # and their text
        self._arguments: ArgumentsScanner | None = None  # reading the arguments, once the opening is written
        self.proposed = 0  # how many tokens the last call proposed, not yet read

    def __call__(self, input_ids: np.ndarray) -> np.ndarray:
        if self._start is None:
            self._start = len(input_ids) - 1  # first called with the prompt and the first token drawn
        function = self._function()
        rest = self._rest(function, self._new_text(input_ids)) if function else ""
        draft = self._tokens(rest) if rest else []
        self.proposed = len(draft)
        return np.array(draft, dtype=np.intc)

    def _rest(self, function: ChoosableFunction, new: bytes) -> str:
        """The text ``function``'s call most likely goes on with, ``new`` the text written since last asked."""
        opening = function.opening.encode("utf-8")
        if self._arguments is None:
            if opening.startswith(self._written):
                return opening[len(self._written):].decode("utf-8", errors="ignore")
            if not (opening.endswith(b"{") and self._written.startswith(opening)):
                return ""  # another opening (parallel calls) or arguments that are no JSON object
            self._arguments = ArgumentsScanner(function.parameters)
            new = self._written[len(opening):]
        self._arguments.feed(new)
        return self._arguments.next_key()

    def _new_text(self, input_ids: np.ndarray) -> bytes:
        """The text of the answer's tokens not seen before, added to ``_written``. The answer only grows:
        llama-cpp-python passes the tokens drawn, and a draft only once its tokens are."""
        assert self._start is not None
        new = input_ids[self._start + self._seen:].tolist()
        self._seen += len(new)
        text = self._text(new)
        self._written += text
        return text


class ArgumentsScanner:
    """Follows a JSON object as it is written (fed its bytes after the opening ``{``) and tells the key that
    most likely comes next, with the spacing the model has used: ``next_key``.

    It knows only what the keys need: where strings, objects and arrays start and end, which keys each
    object has had, and the whitespace around each key; for a text that is no JSON it proposes nothing.
    """

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self._levels: list[_Level] = [_Level(schema, is_object=True)]
        self._string: bytearray | None = None  # the inside of the string being written, or None
        self._escaped = False
        self._is_key = False  # whether that string is a key
        # The whitespace around the last key written at each depth: before it, after a brace (False) or a
        # comma (True) - ``{"a": 1, "b": 2}`` spaces them apart - and around its colon.
        self._before: dict[tuple[int, bool], str] = {}
        self._colon: dict[int, tuple[str, str]] = {}

    def feed(self, data: bytes) -> None:
        for byte in data:
            if not self._levels:
                return  # the arguments are written
            if self._string is not None:
                self._in_string(byte)
            else:
                self._structure(byte)

    def next_key(self) -> str:
        """The rest of the next key as the model would write it (up to a string value's opening quote), or
        "" where no guess is good: in a value, or where the object's keys or the spacing are not known."""
        if not self._levels or not self._levels[-1].is_object:
            return ""
        level, depth = self._levels[-1], len(self._levels)
        key = level.next_key()
        if key is None:
            return ""
        before_colon, after_colon = self._colon.get(depth, ("", None))
        after = before_colon + ":" + (after_colon + '"' if after_colon is not None and level.is_string(key) else "")
        if self._string is not None:  # a key started: its rest
            written = self._string.decode("utf-8", errors="ignore")
            if not self._is_key or self._escaped or not key.startswith(written):
                return ""
            return key[len(written):] + '"' + after
        before = self._before.get((depth, level.after_comma), self._before.get((depth, not level.after_comma)))
        if level.state != "key" or before is None or not before.startswith(level.gap):
            return ""  # not where a key goes, or spacing not seen yet: the model's first key shows it
        return before[len(level.gap):] + '"' + key + '"' + after

    def _in_string(self, byte: int) -> None:
        assert self._string is not None
        if self._escaped:
            self._escaped = False
        elif byte == ord("\\"):
            self._escaped = True
        elif byte == ord('"'):
            level = self._levels[-1]
            if self._is_key:
                level.keys.append(self._string.decode("utf-8", errors="replace"))
            level.state = "colon" if self._is_key else "after"
            level.gap = ""
            self._string = None
            return
        self._string.append(byte)

    def _structure(self, byte: int) -> None:
        level, char = self._levels[-1], chr(byte)
        if byte in _SPACE:
            level.state = "after" if level.state == "scalar" else level.state
            level.gap += char
            return
        if level.state == "scalar" and char in ",}]":
            level.state = "after"
        if char == '"' and level.state == "key":
            self._before[len(self._levels), level.after_comma] = level.gap
            self._is_key, self._string = True, bytearray()
        elif char == ":" and level.state == "colon":
            level.before_colon, level.state = level.gap, "value"
        elif level.state == "value" and level.is_object:
            self._colon[len(self._levels)] = (level.before_colon, level.gap)
            level.state = "after" if char in '"{[' else "scalar"
            self._value_starts(char, level)
        elif level.state == "value" and char != "]":
            level.state = "after" if char in '"{[' else "scalar"
            self._value_starts(char, level)
        elif char == "," and level.state == "after":
            level.state, level.after_comma = ("key" if level.is_object else "value"), True
        elif char == ("}" if level.is_object else "]") and level.state in ("after", "key", "value"):
            self._levels.pop()  # an empty one, or after a value
        elif level.state != "scalar":
            self._levels.clear()  # no JSON: nothing more to guess
        level.gap = ""

    def _value_starts(self, char: str, level: _Level) -> None:
        """A value starts with ``char`` in ``level`` (now waiting for what comes after it)."""
        if char == '"':
            self._is_key, self._string = False, bytearray()
        elif char in "{[":
            self._levels.append(_Level(level.inner(), is_object=char == "{"))


class _Level:
    """An object or array being written: its schema, and where in it the text is."""

    def __init__(self, schema: Any, *, is_object: bool) -> None:
        self.schema: Mapping[str, Any] = schema if isinstance(schema, Mapping) else {}
        self.is_object = is_object
        # "key" (a key or the end may come), "colon", "value" (a value or, in an array, the end), "scalar"
        # (a number, true, false or null being written), "after" (a comma or the end).
        self.state = "key" if is_object else "value"
        self.keys: list[str] = []
        self.after_comma = False  # whether the last separator was a comma, not the opening
        self.gap = ""  # whitespace written since the last thing that was not
        self.before_colon = ""  # the whitespace between the last key and its colon

    def next_key(self) -> str | None:
        """The property after the last key written, in the schema's order (the grammar's)."""
        properties = self.schema.get("properties")
        if not isinstance(properties, Mapping) or not properties:
            return None
        names = list(properties)
        if not self.keys:
            return names[0]
        if self.keys[-1] not in properties:
            return None
        following = names.index(self.keys[-1]) + 1
        return names[following] if following < len(names) else None

    def is_string(self, key: str) -> bool:
        """Whether the value of ``key`` is a string, so it opens with a quote."""
        schema = self.schema.get("properties", {}).get(key)
        if not isinstance(schema, Mapping):
            return False
        if "enum" in schema or "const" in schema:
            values = schema.get("enum", [schema.get("const")])
            return bool(values) and all(isinstance(value, str) for value in values)
        return schema.get("type") == "string"

    def inner(self) -> Any:
        """The schema of a value opened here: the last key's (objects) or the items' (arrays)."""
        if self.is_object:
            properties = self.schema.get("properties")
            return properties.get(self.keys[-1]) if isinstance(properties, Mapping) and self.keys else None
        return self.schema.get("items")
