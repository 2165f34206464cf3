"""What a chosen call goes on with, proposed to the embedded model as a draft it reads in one batch.

Once ``choose`` knows the function a call is to (llmproxy.backends._choice_sampling), much of the call is
known before the model writes it: how the call opens (``{"name": "get_weather", "arguments": {``), which
the syntax writes the same way every time; its arguments' keys, which the grammar asks for in the
schema's order; the rest of an enum's value once only one value fits what was written; and, after the
last property, the braces that close the arguments and the call. Only the spacing is the model's own -
SmolLM2 writes ``{\\n    "city": "Paris",\\n    "unit": "celsius"\\n}``, another model
``{"city": "Paris", "unit": ...`` - so a key is proposed with the spacing the model wrote around the key
before it at the same depth, and the first key at a depth only once its opening quote is written; a
string value's opening quote, which the grammar forces, comes with its key. The closing brace goes on a
line of its own where the keys did, and the call's own braces follow it spaced alike.

``CallDraft`` is llama-cpp-python's ``draft_model``: it reads the token drawn and the proposed ones in one
batch, then samples each place in turn as it would have, keeping a proposed token only where the sample
is that token (speculative decoding); from the first that differs on, the rest is dropped. So the sampler
draws as it would have, place by place, and nothing it did not draw - nothing the grammar forbids - is
written. Only the model's reading is batched, and llama.cpp's batched read gives logits a little apart
from a one-token read (as a cached prompt does), so what follows can still differ for the same seed. A
guess the model does not take costs the reading of the tokens proposed after it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llmproxy.syntaxes.base import ChoosableFunction

log = logging.getLogger(__name__)

_SPACE = frozenset(b" \t\n\r")


class CallDraft:
    """Proposes the rest of a chosen call's opening (with its first key, spaced as ``style`` last saw the
    model space one), then what comes next in its JSON arguments (``ArgumentsScanner``).

    ``function`` tells the function the call is to once it is known (None before, and for a text answer);
    ``text`` gives the bytes of tokens, ``tokens`` the tokens of a text. The model that reads a draft sets
    ``proposed`` back to 0 (``GrammarCheckedLlama.eval``).
    """

    def __init__(self, function: Callable[[], ChoosableFunction | None], text: Callable[[Sequence[int]], bytes],
                 tokens: Callable[[str], list[int]], style: CallStyle | None = None) -> None:
        self._function = function
        self._text = text
        self._tokens = tokens
        self._style = style if style is not None else CallStyle()
        self._start: int | None = None  # where the answer starts among the tokens read
        self._seen = 0  # how many of the answer's tokens have been seen
        self._written = b""  # and their text
        self._arguments: ArgumentsScanner | None = None  # reading the arguments, once the opening is written
        self.proposed = 0  # how many tokens the last call proposed, not yet read
        self._failed = False  # whether drafting failed (a bug): the answer then goes on without drafts

    def __call__(self, input_ids: np.ndarray) -> np.ndarray:
        if self._start is None:
            self._start = len(input_ids) - 1  # first called with the prompt and the first token drawn
        try:
            function = self._function()
            rest = self._rest(function, self._new_text(input_ids)) if function and not self._failed else ""
        except Exception:  # noqa: BLE001 - a draft only saves time: its failure must not fail the answer
            log.exception("drafting a call failed; the answer goes on without drafts")
            self._failed, rest = True, ""
        draft = self._tokens(rest) if rest else []
        self.proposed = len(draft)
        return np.array(draft, dtype=np.intc)

    def _rest(self, function: ChoosableFunction, new: bytes) -> str:
        """The text ``function``'s call most likely goes on with, ``new`` the text written since last asked."""
        opening = function.opening.encode("utf-8")
        if self._arguments is None:
            if opening.startswith(self._written):  # the opening, and the first key as the last call spaced it
                first_key = self._scanner(function, opening).next_text() if opening.endswith(b"{") else ""
                return opening[len(self._written):].decode("utf-8", errors="ignore") + first_key
            if not (opening.endswith(b"{") and self._written.startswith(opening)):
                return ""  # another opening (parallel calls) or arguments that are no JSON object
            self._arguments = self._scanner(function, opening)
            new = self._written[len(opening):]
        self._arguments.feed(new)
        return self._arguments.next_text()

    def _scanner(self, function: ChoosableFunction, opening: bytes) -> ArgumentsScanner:
        """A scanner for the arguments after ``opening`` (which ends with their ``{``)."""
        closers = "}" * (opening.count(b"{") - opening.count(b"}") - 1)  # the call's, around the arguments
        return ArgumentsScanner(function.parameters, closers, self._style)

    def _new_text(self, input_ids: np.ndarray) -> bytes:
        """The text of the answer's tokens not seen before, added to ``_written``. The answer only grows:
        llama-cpp-python passes the tokens drawn, and a draft only once its tokens are."""
        assert self._start is not None
        new = input_ids[self._start + self._seen:].tolist()
        self._seen += len(new)
        text = self._text(new)
        self._written += text
        return text


@dataclass
class CallStyle:
    """How a model spaces its calls' arguments, as last seen (it writes every call alike): the whitespace
    before a key at each depth, after the opening brace (False) or a comma (True), and around its colon.
    One per loaded model, so that a call's first key is guessed as the last call spaced it."""

    # ("before", depth, after a comma) -> the whitespace before a key; ("colon", depth) -> around its colon
    spacing: dict[tuple[Any, ...], Any] = field(default_factory=dict)


class ArgumentsScanner:
    """Follows a JSON object as it is written (fed its bytes after the opening ``{``) and tells what most
    likely comes next, with the spacing the model has used: ``next_text``.

    It knows only what that needs: where strings, objects and arrays start and end, which keys each
    object has had, and the whitespace around each key; for a text that is no JSON it proposes nothing.
    ``closers`` close what was open around the object (a call's own ``}``), once it is written.
    """

    def __init__(self, schema: Mapping[str, Any], closers: str = "", style: CallStyle | None = None) -> None:
        self._closers = closers
        self._after = ""  # what was written after the object closed
        self._closing_gap = ""  # the whitespace written before the object's closing brace
        self._levels: list[_Level] = [_Level(schema, is_object=True)]
        self._string: bytearray | None = None  # the inside of the string being written, or None
        self._escaped = False
        self._is_key = False  # whether that string is a key
        # The whitespace around the last key written at each depth: before it, after a brace (False) or a
        # comma (True) - ``{"a": 1, "b": 2}`` spaces them apart - and around its colon. Kept in ``style``
        # (the last call's, until this one shows otherwise).
        self._spacing = (style if style is not None else CallStyle()).spacing
        self._shown: set[tuple[Any, ...]] = set()  # the spacing this call has shown

    def feed(self, data: bytes) -> None:
        for index, byte in enumerate(data):
            if not self._levels:  # the arguments are written
                self._after += data[index:].decode("utf-8", errors="replace")
                return
            if self._string is not None:
                self._in_string(byte)
            else:
                self._structure(byte)

    def next_text(self) -> str:
        """What most likely comes next as the model would write it, or "" where no guess is good: the rest
        of the next key (up to a string value's opening quote), the rest of an enum's value, or after the
        last property the closing braces."""
        if not self._levels:
            closing = self._closing_gap + "}"
            rest = closing * len(self._closers)
            return rest[len(self._after):] if rest.startswith(self._after) else ""
        level, depth = self._levels[-1], len(self._levels)
        if self._string is not None and not self._is_key:
            return self._enum_rest(level)
        if not level.is_object:
            return ""
        key = level.next_key()
        if key is None:
            return self._closing(level)
        before_colon, after_colon = self._spacing.get(("colon", depth), ("", None))
        after = before_colon + ":" + (after_colon + '"' if after_colon is not None and level.is_string(key) else "")
        if self._string is not None:  # a key started: its rest
            written = self._string.decode("utf-8", errors="ignore")
            if not self._is_key or self._escaped or not key.startswith(written):
                return ""
            return key[len(written):] + '"' + after
        before = self._spacing.get(("before", depth, level.after_comma),
                                   self._spacing.get(("before", depth, not level.after_comma)))
        if level.state != "key" or before is None or not before.startswith(level.gap):
            return ""  # not where a key goes, or spacing not seen yet: the model's first key shows it
        return before[len(level.gap):] + '"' + key + '"' + after

    def _enum_rest(self, level: _Level) -> str:
        """In a string value: the rest of the one enum value that fits what was written, its closing quote,
        and the closing braces where it is the last property; "" where several fit, or none."""
        written = self._string.decode("utf-8", errors="ignore") if self._string is not None else ""
        fitting = [value for value in level.value_enum() if value.startswith(written)]
        if self._escaped or len(fitting) != 1:
            return ""
        return fitting[0][len(written):] + '"' + (self._closing(level, value_ends=True) if level.is_object else "")

    def _closing(self, level: _Level, value_ends: bool = False) -> str:
        """After the last property of the arguments (the outermost object, where the schema's order ends),
        its value written (or ending with what is proposed: ``value_ends``): its closing brace and the
        call's, spaced as its keys were - on a line of their own where the keys were, else as the first
        key was spaced from the opening brace."""
        written = "" if value_ends else level.gap
        if len(self._levels) != 1 or not level.wrote_last_property() or not (value_ends or level.state == "after"):
            return ""
        before = self._spacing.get(("before", 1, False))
        if before is None:
            return ""
        gap = "\n" if "\n" in before else before
        closing = (gap + "}") * (1 + len(self._closers))
        return closing[len(written):] if closing.startswith(written) else ""

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
            self._remember(("before", len(self._levels), level.after_comma), level.gap)
            self._is_key, self._string = True, bytearray()
        elif char == ":" and level.state == "colon":
            level.before_colon, level.state = level.gap, "value"
        elif level.state == "value" and level.is_object:
            self._remember(("colon", len(self._levels)), (level.before_colon, level.gap))
            level.state = "after" if char in '"{[' else "scalar"
            self._value_starts(char, level)
        elif level.state == "value" and char != "]":
            level.state = "after" if char in '"{[' else "scalar"
            self._value_starts(char, level)
        elif char == "," and level.state == "after":
            level.state, level.after_comma = ("key" if level.is_object else "value"), True
        elif char == ("}" if level.is_object else "]") and level.state in ("after", "key", "value"):
            self._levels.pop()  # an empty one, or after a value
            self._closing_gap = level.gap
        elif level.state != "scalar":
            self._levels.clear()  # no JSON: nothing more to guess
        level.gap = ""

    def _remember(self, place: tuple[Any, ...], gap: Any) -> None:
        """Note the spacing at ``place``; where the last call's was other, the model spaces otherwise than
        remembered, and what this call has not shown is forgotten."""
        if self._spacing.get(place, gap) != gap:
            for unshown in [kept for kept in self._spacing if kept not in self._shown]:
                del self._spacing[unshown]
        self._spacing[place] = gap
        self._shown.add(place)

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

    def wrote_last_property(self) -> bool:
        """Whether the last key written is the schema's last property, after which the grammar allows only
        the end of the object."""
        properties = self.schema.get("properties")
        if not isinstance(properties, Mapping) or not properties or not self.keys:
            return False
        return list(properties)[-1] == self.keys[-1]

    def value_enum(self) -> list[str]:
        """The enum of the value being written here, where its values are plain strings (no character JSON
        escapes, so the text written is the value's own); [] otherwise."""
        schema = self.inner()
        if not isinstance(schema, Mapping):
            return []
        values = schema["enum"] if isinstance(schema.get("enum"), list) else [schema["const"]] if "const" in schema else []
        plain = all(isinstance(value, str) and value.isascii() and value.isprintable() and '"' not in value
                    and "\\" not in value for value in values)
        return values if plain else []

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
