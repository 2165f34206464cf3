"""What went wrong in a failed answer, in a few kinds a person can act on, beside BFCL's own error type.

A proxy's failure shows in kinds BFCL does not tell apart: its own words leaking into an answer (the
note of a second chance, the placeholders of a prompt's call format), or an error status where an
answer should be. ``LEAK_MARKERS`` lists those words; add to it when a prompt gains new ones.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from llmproxy.evaluation.bfcl.checker import Check

# Failure kinds, in the order the report's columns take.
KINDS = {
    "text": "text instead of a call",
    "fewer_calls": "fewer calls than expected",
    "more_calls": "more calls than expected",
    "wrong_function": "a call to another function",
    "wrong_value": "an argument with a value not among the acceptable ones",
    "missing_argument": "an argument the answer needs is missing",
    "unexpected_argument": "an argument the function or the answer does not have",
    "wrong_type": "an argument of the wrong type",
    "bad_arguments": "arguments that are not a JSON object",
    "leaked_text": "the proxy's own words in an argument or the text",
    "needless_call": "a call where no function fits (irrelevance)",
    "error": "the server answered with an error status, or not at all",
}

# Text of llmproxy's prompts and second chances that a model may copy into its answer.
LEAK_MARKERS = (
    "Your last answer could not be used",
    "Answer again, exactly in the format you were asked for",
    "<function name>",
    "<its arguments>",
    "<function-name>",
    "<args-json-object>",
    "example_function_name",
    "example_parameter_1",
    "params_name1",
)

_BY_ERROR_TYPE = {
    "ast_decoder:decoder_wrong_output_format": "bad_arguments",
    "simple_function_checker:wrong_func_name": "wrong_function",
    "simple_function_checker:missing_required": "missing_argument",
    "simple_function_checker:missing_optional": "missing_argument",
    "simple_function_checker:unexpected_param": "unexpected_argument",
}


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def leaked_marker(arguments: list[Any], text: Any) -> str | None:
    """The first of ``LEAK_MARKERS`` found in the arguments (decoded or as JSON text) or the text."""
    for string in _strings([arguments, text]):
        for marker in LEAK_MARKERS:
            if marker in string:
                return marker
    return None


def failure_kind(check: Check, *, irrelevance: bool, calls: int, expected_calls: int, leaked: bool) -> str:
    """The kind of a failed answer (``check`` not valid) that made ``calls`` calls where ``expected_calls``
    were expected; ``leaked``: whether it carries one of the markers."""
    if leaked:
        return "leaked_text"
    if irrelevance:
        return "needless_call"
    reason = check.reason or ""
    if reason == "ast_decoder:decoder_failed" or (reason.endswith(":wrong_count") and calls == 0):
        return "bad_arguments" if calls else "text"
    if reason.endswith(":wrong_count"):
        return "fewer_calls" if calls < expected_calls else "more_calls"
    if reason in _BY_ERROR_TYPE:
        return _BY_ERROR_TYPE[reason]
    return "wrong_type" if reason.startswith("type_error") else "wrong_value"
