"""BFCL's verdict on one answer (its AST checker and its irrelevance rule), written here so that a run
needs nothing of bfcl-eval but its data; ``tests/test_bfcl_agreement.py`` holds it to BFCL's own verdicts.

An answer is what BFCL's function-calling handlers record: ``[{name: arguments JSON}, ...]`` when the
model called, else its text. In the AST categories the calls must match the possible answers: as many
calls as expected (parallel ones in any order; ``multiple``: one call, to the right one of several
functions), each with the expected function, every parameter it needs, none it does not know, and
values of the right type among the acceptable ones. In the irrelevance categories any call fails.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from llmproxy.evaluation.bfcl.tools import tool_name
from llmproxy.evaluation.bfcl.values import (
    NESTED_TYPES,
    PYTHON_TYPES,
    Mismatch,
    dict_mismatch,
    list_mismatch,
    list_of_dicts_mismatch,
    string_mismatch,
    type_mismatch,
)


@dataclass(frozen=True)
class Check:
    """BFCL's verdict: ``valid``, and for a failure its error type (``simple_function_checker:missing_required``
    ...) and message. ``cause``: for a parallel answer with no match, the error of the closest candidate
    (a call to the expected function, where there is one), which says what went wrong."""

    valid: bool
    error_type: str | None = None
    error: str = ""
    cause: str | None = None

    @property
    def reason(self) -> str | None:
        return self.cause or self.error_type


VALID = Check(True)


class _Undecodable(ValueError):
    pass


def decode_calls(answer: Any) -> list[dict[str, Any]]:
    """``[{name: arguments}]`` from BFCL's record of an answer, as its FC handlers decode it: text is no
    call (an error, except the empty text, which is an empty list), arguments are JSON."""
    if isinstance(answer, str | list) and not answer:
        return []
    if not isinstance(answer, list) or not all(type(item) is dict and item for item in answer):
        raise _Undecodable("the answer holds text, not calls")
    calls = []
    for item in answer:
        name = next(iter(item))
        arguments = item[name]
        if not isinstance(arguments, str | bytes | bytearray):
            raise _Undecodable(f"the arguments of {name!r} are not JSON text")
        try:
            calls.append({name: json.loads(arguments)})
        except ValueError as exc:
            raise _Undecodable(f"the arguments of {name!r} are not JSON: {exc}") from None
    return calls


def _well_formed(calls: list[dict[str, Any]]) -> bool:
    """Each call's arguments are an object (``[1]`` decodes, but is no call)."""
    return all(type(next(iter(call.values()))) is dict for call in calls)


def check_irrelevance(answer: Any) -> Check:
    """No call is right: text, an empty answer, or calls that do not decode to arguments."""
    try:
        calls = decode_calls(answer)
    except _Undecodable:
        return VALID
    if calls and _well_formed(calls):
        return Check(False, "irrelevance_error:decoder_success", "a call where no function fits")
    return VALID


def check_ast(category: str, functions: list[dict[str, Any]], ground_truth: list[dict[str, Any]],
              answer: Any) -> Check:
    """BFCL's AST verdict on ``answer`` for a case of ``category``."""
    try:
        calls = decode_calls(answer)
    except _Undecodable as exc:
        return Check(False, "ast_decoder:decoder_failed", str(exc))
    if not _well_formed(calls):
        return Check(False, "ast_decoder:decoder_wrong_output_format", "arguments that are not an object")
    if "parallel" in category:
        return _parallel(functions, calls, ground_truth)
    checker = "multiple_function_checker" if "multiple" in category else "simple_function_checker"
    if len(calls) != len(ground_truth):
        return Check(False, f"{checker}:wrong_count", f"{len(calls)} calls, not {len(ground_truth)}")
    doc = _doc_for(functions, ground_truth[0]) if checker.startswith("multiple") else functions[0]
    return check_call(doc, calls[0], ground_truth[0])


def _doc_for(functions: list[dict[str, Any]], expected: dict[str, Any]) -> dict[str, Any] | None:
    name = next(iter(expected))
    return next((doc for doc in functions if doc["name"] == name), None)


def _parallel(functions: list[dict[str, Any]], calls: list[dict[str, Any]],
              ground_truth: list[dict[str, Any]]) -> Check:
    """Each expected call, in turn, takes the first call not yet taken that matches it."""
    if len(calls) != len(ground_truth):
        return Check(False, "parallel_function_checker_no_order:wrong_count",
                     f"{len(calls)} calls, not {len(ground_truth)}")
    taken: set[int] = set()
    for number, expected in enumerate(ground_truth):
        doc = _doc_for(functions, expected)
        failures = []
        for index, call in enumerate(calls):
            if index in taken:
                continue
            result = check_call(doc, call, expected)
            if result.valid:
                taken.add(index)
                break
            failures.append(result)
        else:
            cause = _closest_failure(failures, [calls[i] for i in range(len(calls)) if i not in taken],
                                     ground_truth[number:])
            return Check(False, "parallel_function_checker_no_order:cannot_find_match",
                         f"no call matches expected call {number}: {cause.error}", cause.error_type)
    return VALID


def _closest_failure(failures: list[Check], left: list[dict[str, Any]], expected: list[dict[str, Any]]) -> Check:
    """What went wrong with the calls no expected call took: a call to a function none of the expected
    calls left is to, else the first failure of a call to the expected function."""
    names = {tool_name(next(iter(call))) for call in expected}
    stray = next((name for call in left for name in call if name not in names), None)
    if stray is not None:
        return Check(False, "simple_function_checker:wrong_func_name", f"{stray!r} is not an expected function")
    same_function = [f for f in failures if f.error_type != "simple_function_checker:wrong_func_name"]
    return (same_function or failures)[0]


def check_call(doc: dict[str, Any] | None, call: dict[str, Any], expected: dict[str, Any]) -> Check:
    """One call against the function doc and the acceptable arguments (``{function: {param: [values]}}``)."""
    acceptable: dict[str, list[Any]] = next(iter(expected.values()))
    if doc is None:  # the expected function is not among those offered: no call can match
        return Check(False, "simple_function_checker:wrong_func_name", f"{next(iter(expected))!r} is not offered")
    name = tool_name(doc["name"])
    if name not in call:
        return Check(False, "simple_function_checker:wrong_func_name", f"not a call to {name!r}")
    arguments = call[name]
    properties = doc["parameters"].get("properties", {})
    for param in doc["parameters"].get("required", []):
        if param not in arguments:
            return Check(False, "simple_function_checker:missing_required", f"missing required {param!r}")
    for param, value in arguments.items():
        if param not in properties or param not in acceptable:
            return Check(False, "simple_function_checker:unexpected_param", f"unexpected {param!r}")
        mismatch = _argument_mismatch(param, value, properties[param], acceptable[param])
        if mismatch is not None:
            return Check(False, mismatch.error_type, mismatch.error)
    for param, options in acceptable.items():
        if param not in arguments and "" not in options:
            return Check(False, "simple_function_checker:missing_optional",
                         f"{param!r} is optional in the doc, but the answer needs it")
    return VALID


def _argument_mismatch(param: str, value: Any, schema: dict[str, Any], acceptable: list[Any]) -> Mismatch | None:
    declared = schema.get("type")  # a doc BFCL's checker could not read (no type) fails the type check here
    expected = PYTHON_TYPES.get(declared)
    item_type = PYTHON_TYPES.get(schema.get("items", {}).get("type")) if declared in NESTED_TYPES else None
    if declared == "float" and type(value) is int:  # an int is a fine float
        value = float(value)
    mismatch, variable = type_mismatch(param, value, acceptable, declared, expected, item_type)
    if mismatch is not None:
        return mismatch
    if not variable:  # a "variable" is compared as it is, below
        if expected is dict:
            return dict_mismatch(value, acceptable)
        if expected is list and item_type is dict:
            return list_of_dicts_mismatch(value, acceptable)
        if expected is str:
            return string_mismatch(param, value, acceptable)
        if expected is list:
            return list_mismatch(param, value, acceptable)
    if value not in acceptable:
        return Mismatch("value_error:others", f"{param!r} is {value!r}, not one of {acceptable}")
    return None
