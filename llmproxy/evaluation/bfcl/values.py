"""BFCL's rules for one argument value: its type against the function doc, and its value against the
acceptable ones, with BFCL's error type for each failure.

They are BFCL's rules as its checker applies them, quirks included (a score must mean what the
leaderboard's does): a possible answer whose type is not the doc's marks the value as a "variable",
compared as it is; strings compare after dropping spaces and ``,./-_*^`` and lower-casing; lists
compare element-wise, their strings normalised one level deep; dicts key by key, a key whose
acceptable values hold ``""`` being optional.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# A function doc's type names -> the Python type a JSON value of it decodes to ("any" is taken as text).
PYTHON_TYPES: dict[str, type] = {"string": str, "integer": int, "float": float, "boolean": bool, "array": list,
                                 "tuple": list, "dict": dict, "any": str}
NESTED_TYPES = ("array", "tuple")  # types whose items are type-checked too (one level deep)
_IGNORED = re.compile(r"[ ,./\-_*^]")


@dataclass(frozen=True)
class Mismatch:
    error_type: str  # BFCL's: type_error:simple, value_error:string ...
    error: str


def normalise(text: str) -> str:
    """BFCL's string comparison form: "April 1, 2024" and "april 1 2024" are the same answer."""
    return _IGNORED.sub("", text).lower().replace("'", '"')


def _normalised(value: Any) -> Any:
    return normalise(value) if type(value) is str else value


def _answer_type(acceptable: Any) -> type | None:
    """The type of the first acceptable value that is not the optional marker ``""``."""
    return next((type(answer) for answer in acceptable if answer != ""), None)


def type_mismatch(param: str, value: Any, acceptable: list[Any], declared: str | None, expected: type | None,
                  item_type: type | None) -> tuple[Mismatch | None, bool]:
    """(the type error or None, whether the value counts as a variable: compared as it is, not by the
    rules of its declared type). A value of the acceptable answers' type passes even where the doc
    says otherwise; a list's items are checked against any acceptable list."""
    answer_type = _answer_type(acceptable)
    variable = answer_type is not None and answer_type != expected
    error_type = "type_error:simple"
    if type(value) is expected:
        if item_type is None:
            return None, variable
        for answer in acceptable:
            # An acceptable answer that is not a list (the optional marker) lets any items pass.
            if type(answer) is not list or all(
                    type_mismatch(param, item, answer, item_type.__name__, item_type, None)[0] is None
                    for item in value):
                return None, variable
        error_type = "type_error:nested"
        if answer_type is not None and type(value) is answer_type:
            return Mismatch(error_type, f"{param!r}: items are not all {item_type.__name__}"), True
        error_type = "type_error:simple"
    elif answer_type is not None and type(value) is answer_type:
        return None, True
    return Mismatch(error_type, f"{param!r} should be {declared}, not {type(value).__name__}: {value!r}"), False


def string_mismatch(param: str, value: str, acceptable: list[Any]) -> Mismatch | None:
    if normalise(value) in [normalise(answer) for answer in acceptable if type(answer) is str]:
        return None
    return Mismatch("value_error:string", f"{param!r} is {value!r}, not one of {acceptable}")


def list_mismatch(param: str, value: list[Any], acceptable: list[Any]) -> Mismatch | None:
    # Each acceptable answer is walked as a sequence, as BFCL does (the marker "" is an empty one).
    options = [[_normalised(item) for item in answer] if isinstance(answer, list | str) else answer
               for answer in acceptable]
    if [_normalised(item) for item in value] in options:
        return None
    return Mismatch("value_error:list/tuple", f"{param!r} is {value!r}, not one of {acceptable}")


def _dict_against(value: dict[str, Any], answer: Any) -> Mismatch | None:
    """``value`` against one acceptable dict. A missing key is looked for even after a wrong one, and
    wins the error type, as in BFCL."""
    found: Mismatch | None = None
    for key, item in value.items():
        if key not in answer:
            found = Mismatch("value_error:dict_key", f"unexpected key {key!r}")
            break
        if _normalised(item) not in [_normalised(option) for option in answer[key]]:
            found = Mismatch("value_error:dict_value", f"key {key!r} is {item!r}, not one of {answer[key]}")
            break
    for key, options in answer.items():
        if key not in value and "" not in options:
            return Mismatch("value_error:dict_key", f"missing key {key!r}")
    return found


def dict_mismatch(value: dict[str, Any], acceptable: list[Any]) -> Mismatch | None:
    last = Mismatch("dict_checker:unclear", "no acceptable dict")
    for answer in acceptable:
        if answer == "":
            continue
        last = _dict_against(value, answer)
        if last is None:
            return None
    return last


def list_of_dicts_mismatch(value: list[Any], acceptable: list[Any]) -> Mismatch | None:
    """Each dict against the one at its place in an acceptable list (the order matters)."""
    last = Mismatch("list_dict_checker:unclear", "no acceptable list")
    for answer in acceptable:
        if len(value) != len(answer):
            last = Mismatch("value_error:list_dict_count", f"{len(value)} dicts, not {len(answer)}")
            continue
        last = next(filter(None, (dict_mismatch(item, [expected]) for item, expected in zip(value, answer))), None)
        if last is None:
            return None
    return last
