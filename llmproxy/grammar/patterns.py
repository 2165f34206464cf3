"""JSON-schema ``pattern``s, matched in linear time.

Python's ``re`` backtracks: ``^(a+)+$`` takes seconds on a 26-character answer, and four times as
long for every two more characters, so one client's schema could stall a server thread. Patterns are
matched with RE2 (linear time, no backtracking). What RE2 cannot run (backreferences, lookaround) is
refused when the request arrives, naming the schema path, instead of being matched unsafely later.
"""

from __future__ import annotations

import re
from typing import Any

import jsonschema
import re2

from llmproxy.common.bounded_cache import MIB, bounded_cache
from llmproxy.errors import InvalidRequestError

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a refused pattern is reported to the client, not logged by the C++ library


@bounded_cache(4 * MIB)
def compiled(pattern: str) -> Any:
    return re2.compile(pattern, _OPTIONS)


def check_patterns(schema: Any, where: str) -> None:
    """Raise InvalidRequestError naming the first ``pattern`` (or ``patternProperties`` key) in
    ``schema`` that RE2 cannot run. Iterative: the schema's depth is the client's."""
    stack = [(schema, where)]
    while stack:
        node, path = stack.pop()
        if isinstance(node, list):
            stack += [(item, f"{path}[{index}]") for index, item in enumerate(node)]
            continue
        if not isinstance(node, dict):
            continue
        patterns = [(node["pattern"], f"{path}.pattern")] if isinstance(node.get("pattern"), str) else []
        if isinstance(node.get("patternProperties"), dict):
            patterns += [(key, f"{path}.patternProperties") for key in node["patternProperties"]]
        for pattern, at in patterns:
            try:
                compiled(pattern)
            except re2.error as exc:
                raise InvalidRequestError(f"invalid request: {at}: {_refusal(pattern, exc)}", param=at) from None
        stack += [(value, f"{path}.{key}") for key, value in node.items() if isinstance(value, (dict, list))]


def _refusal(pattern: str, error: re2.error) -> str:
    """Why ``pattern`` is refused: malformed (Python's re says so too), or beyond what RE2 can run."""
    try:
        re.compile(pattern)  # compiling does not backtrack; only matching does
    except re.error as malformed:
        return f"the pattern {pattern!r} is not a valid regular expression ({malformed})"
    reason = error.args[0] if error.args else str(error)
    reason = reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)
    return (f"the pattern {pattern!r} cannot be checked in linear time ({reason}); backreferences and "
            "lookaround are not supported")


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Any:
    if validator.is_type(instance, "string") and not compiled(pattern).search(instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, properties: dict, instance: Any, schema: Any) -> Any:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in properties.items():
        for key, value in instance.items():
            if compiled(pattern).search(key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def linear_validator(base: type) -> type:
    """``base`` (a jsonschema validator class) with ``pattern`` and ``patternProperties`` matched by RE2."""
    return jsonschema.validators.extend(base, {"pattern": _pattern, "patternProperties": _pattern_properties})
