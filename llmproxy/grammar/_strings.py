"""String schemas as GBNF: ``format``, ``pattern``, ``minLength``/``maxLength``.

A grammar cannot intersect two of them, so the most specific one present shapes the string: a known
``format`` (llmproxy.grammar._formats), else a ``pattern`` that has a grammar (llmproxy.grammar._regex), else
the lengths; the validation after generation checks the others. A malformed pattern is an error even
where a format wins.

Lengths become ``char{m,n}`` (``char`` is one JSON-string character, an escape included, so the count is
the decoded length). llama.cpp expands such a repetition into n rules and refuses counts past 2000, so
bounds above MAX_BOUNDED_LENGTH are loosened: a larger maxLength is dropped, a larger minLength is
lowered to the cap. The grammar then admits a superset and the validation checks the rest.
"""

from __future__ import annotations

from llmproxy.errors import GrammarError
from llmproxy.grammar._formats import FORMATS
from llmproxy.grammar._regex import translate
from llmproxy.grammar._rules import Rules


MAX_BOUNDED_LENGTH = 1000
_QUOTE = '"\\""'


def string_expr(rules: Rules, schema: dict, hint: str) -> str:
    """A rule (or the ``string`` primitive) for the JSON strings ``schema`` admits."""
    form = schema.get("format")
    if isinstance(form, str) and form in FORMATS:
        if "pattern" in schema:
            translate(schema["pattern"], lambda body: "unused")  # only to refuse a malformed one
        return rules.rule(hint, f"{_QUOTE} {FORMATS[form]} {_QUOTE}")
    if "pattern" in schema:
        pattern = translate(schema["pattern"], lambda body: rules.rule(f"{hint}-part", body))
        if pattern is not None:
            return rules.rule(hint, f"{_QUOTE} {pattern} {_QUOTE}")
    low = _length(schema, "minLength", hint) or 0
    high = _length(schema, "maxLength", hint)
    if high is not None and high < low:
        raise GrammarError(f"maxLength < minLength at {hint!r}")
    low = min(low, MAX_BOUNDED_LENGTH)
    if high is not None and high > MAX_BOUNDED_LENGTH:
        high = None
    if high is None:
        count = "*" if low == 0 else "+" if low == 1 else f"{{{low},}}"
    else:
        count = f"{{{low}}}" if low == high else f"{{{low},{high}}}"
    if count == "*":
        return "string"
    return rules.rule(hint, f"{_QUOTE} char{count} {_QUOTE}" if count != "{0}" else f"{_QUOTE} {_QUOTE}")


def _length(schema: dict, keyword: str, hint: str) -> int | None:
    value = schema.get(keyword)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
        raise GrammarError(f"'{keyword}' at {hint!r} must be a non-negative integer")
    return value
