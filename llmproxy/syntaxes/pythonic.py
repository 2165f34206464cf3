"""Calls as a Python list of function calls with keyword arguments:
``[get_weather(city="Paris", days=3), add(a=1, b=2.5)]``.

``pythonic``: Llama 3.2 (1B/3B) and 3.3's zero-shot function calling, and models given the format in
their prompt (Gemma). Values are Python literals: strings in double quotes (JSON's escapes, which are
Python's too, except ``\\/`` and surrogate pairs, which the grammar leaves out), numbers, ``True``,
``False``, ``None``, lists and dicts.

Each value is read with Python's ``ast`` module (``ast.literal_eval`` of its parsed expression); nothing
is ever evaluated. The list, the calls and the keywords around the values are read by hand rather than
by parsing the whole list as Python: function names such as ``get-weather`` and keys such as
``user-id`` are not Python identifiers, and the grammar writes them as they are; reading by hand also
lets a list cut off by the token limit keep its complete calls.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Sequence
from functools import cached_property
from typing import Any

from llmproxy.common.nesting import client_json
from llmproxy.errors import OutputParseError
from llmproxy.grammar import RuleSet, gbnf_literal, members
from llmproxy.syntaxes._sections import SectionSyntax
from llmproxy.syntaxes.base import AnswerShape, Call
from llmproxy.types import FunctionCall, FunctionDefinition

# An answer that is a call list calls whatever it names (an unknown function is reported downstream);
# later in the text, only "[name(" of an offered function starts one: code such as x[len(x) - 1] does not.
_LEADING_CALLS = re.compile(r"\s*\[\s*[A-Za-z0-9_.\-]+\(")
_CALL = re.compile(r"\s*([^\s()\[\],=\"']+)\s*\(")
_KEYWORD = re.compile(r"\s*([^\s()\[\]{},=\"']+)\s*=(?!=)")
_CLOSERS = {"(": ")", "[": "]", "{": "}"}
# A JSON-style string Python reads the same way: no "\/" and no surrogate escapes.
_STRING = (r'"\"" ( [^"\\\x7F\x00-\x1F] | "\\" ( ["\\bfnrt] | "u" ( [0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} '
           r'| [dD] [0-7] [0-9a-fA-F]{2} ) ) )* "\""')
_JSON_NAMES = {"true": True, "false": False, "null": None}


class PythonicSyntax(SectionSyntax):
    name = "pythonic"
    instructions = "pythonic_instructions"

    def triggers(self, allowed: Sequence[str]) -> tuple[str, ...]:
        return tuple(f"[{name}(" for name in allowed)

    def call_start(self, text: str, shape: AnswerShape) -> int:
        if _LEADING_CALLS.match(text):
            return text.index("[")
        found = [i for i in (text.find(f"[{function.name}(") for function in shape.functions) if i >= 0]
        return min(found, default=-1)

    def section_rule(self, rules: RuleSet, definitions: Sequence[FunctionDefinition], parallel: bool) -> str:
        literals = _Literals(rules)
        named = []
        for function in definitions:
            schema = function.parameters or {"type": "object", "properties": {}}
            keywords = [(f"{gbnf_literal(key + '=')} {literals.value(sub, f'{function.name}-{key}', schema)}",
                         key in (schema.get("required") or []))
                        for key, sub in (schema.get("properties") or {}).items()]
            if not keywords and "properties" not in schema and schema.get("additionalProperties", True) is not False:
                free = f'[A-Za-z_] [A-Za-z0-9_]* "=" {literals.generic}'  # a free-form object: any keywords
                body = f'( {free} ( ws "," ws {free} )* )?'
            else:
                body = members(rules, f"{function.name}-args", keywords, after_first=False) if keywords else ""
            opened = gbnf_literal(function.name + "(")
            named.append(rules.rule(f"{function.name}-call", f'{opened} {body} ")"' if body else f'{opened} ")"'))
        call = rules.rule("call", " | ".join(named))
        return rules.rule("calls", f'"[" {call} ( ws "," ws {call} )* "]"' if parallel else f'"[" {call} "]"')

    def read_calls(self, section: str) -> tuple[list[Call], tuple[str, ...]]:
        calls: list[Call] = []
        repairs: list[str] = []
        position = section.index("[") + 1
        while (opened := _CALL.match(section, position)) is not None:
            end, unclosed = _scan(section, opened.end(), ")")
            fixed: list[str] = []
            try:
                calls.append(_call(opened.group(1), section[opened.end():end], unclosed, fixed, section))
                repairs += fixed
            except OutputParseError:
                if unclosed is None or not calls:
                    raise
                repairs.append("drop_truncated_call")  # the last call was cut off: keep the ones before it
            following = section[end + 1:].lstrip()
            if following.startswith(","):
                position = len(section) - len(following) + 1
                continue
            if not following:
                repairs.append("close_brackets")
            elif not following.startswith("]") or following[1:].strip():
                repairs.append("strip_suffix")
            break
        if not calls:
            raise OutputParseError("The model's call list holds no call.", section)
        return calls, tuple(dict.fromkeys(repairs))

    def render_calls(self, calls: Sequence[FunctionCall]) -> str:
        return "[" + ", ".join(_render_call(call) for call in calls) + "]"


class _Literals:
    """GBNF for Python literals: typed by the schema where it is simple, any literal otherwise. Rules
    are made when first used."""

    def __init__(self, rules: RuleSet) -> None:
        self.rules = rules

    def value(self, schema: Any, hint: str, root: dict) -> str:
        if not isinstance(schema, dict):
            return self.generic
        if "enum" in schema or "const" in schema:
            values = schema["enum"] if "enum" in schema else [schema["const"]]
            return self.rules.rule(hint, " | ".join(gbnf_literal(python_literal(v)) for v in values))
        kind = schema.get("type")
        if kind == "string":
            return self.string
        if kind in ("integer", "number"):
            return self.rules.value(schema, hint, 1, root)  # digits are the same in JSON and Python
        if kind == "boolean":
            return self.rules.rule("py-boolean", '"True" | "False"')
        if kind == "null":
            return '"None"'
        return self.generic

    @cached_property
    def string(self) -> str:
        return self.rules.rule("py-string", _STRING)

    @cached_property
    def generic(self) -> str:
        """Any literal: strings, numbers, True/False/None, lists and dicts."""
        name = self.rules._fresh_name("py-value")
        self.rules.rules[name] = ""  # named first: lists and dicts refer back to it
        pair = f'{self.string} ws ":" ws {name}'
        items = self.rules.rule("py-list", f'"[" ws ( {name} ws ( "," ws {name} ws )* )? "]"')
        mapping = self.rules.rule("py-dict", f'"{{" ws ( {pair} ws ( "," ws {pair} ws )* )? "}}"')
        self.rules.rules[name] = f'{self.string} | number | "True" | "False" | "None" | {items} | {mapping}'
        return name


def _scan(text: str, start: int, closer: str) -> tuple[int, str | None]:
    """Where ``closer`` closes, at top level, from ``start`` on (quotes and brackets skipped), and None;
    or, where the text ends first, its end and the characters that would close what is open."""
    stack: list[str] = []
    quote = None
    index = start
    while index < len(text):
        char = text[index]
        if quote:
            if char == "\\":
                index += 1
            elif char == quote:
                quote = None
        elif char in "\"'":
            quote = char
        elif char in _CLOSERS:
            stack.append(_CLOSERS[char])
        elif stack and char == stack[-1]:
            stack.pop()
        elif not stack and char == closer:
            return index, None
        index += 1
    return len(text), (quote or "") + "".join(reversed(stack))


def _call(name: str, arguments: str, unclosed: str | None, repairs: list[str], raw: str) -> Call:
    """One call; ``unclosed``: what a call cut off by the end of the text leaves open (None if closed)."""
    if unclosed is not None:
        if not arguments.strip():
            raise OutputParseError(f"The call to {name!r} was cut off before its arguments.", raw)
        repairs += ["close_string"] if unclosed[:1] in ("'", '"') else []
        arguments += unclosed
    return Call(name, _keywords(arguments, repairs, raw))


def _keywords(text: str, repairs: list[str], raw: str) -> dict[str, Any]:
    """The keyword arguments in ``text`` (what is between a call's parentheses)."""
    arguments: dict[str, Any] = {}
    position = 0
    while text[position:].strip():
        keyword = _KEYWORD.match(text, position)
        if keyword is None:
            raise OutputParseError(f"A call's arguments are not keyword arguments: {text[position:][:80]!r}.", raw)
        end, _ = _scan(text, keyword.end(), ",")
        arguments[keyword.group(1)] = _literal(text[keyword.end():end], repairs, raw)
        position = end + 1
    return arguments


def _literal(text: str, repairs: list[str], raw: str) -> Any:
    """A Python literal's value as JSON data, read without evaluating anything; JSON's own ``true``,
    ``false`` and ``null`` are taken too."""
    try:
        names = _JSONNames()
        value = ast.literal_eval(names.visit(ast.parse(text.strip(), mode="eval").body))
        if names.found:
            repairs.append("normalize_literal")
        return json.loads(json.dumps(value, allow_nan=False))  # tuples become lists; sets, bytes are refused
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError) as exc:
        raise OutputParseError(f"A call's argument is not a literal value: {text.strip()[:80]!r}.", raw) from exc


class _JSONNames(ast.NodeTransformer):
    """Reads JSON's ``true``/``false``/``null`` (names to Python) as the constants they mean."""

    def __init__(self) -> None:
        self.found = False

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id not in _JSON_NAMES:
            return node
        self.found = True
        return ast.copy_location(ast.Constant(_JSON_NAMES[node.id]), node)


def python_literal(value: Any) -> str:
    """``value`` (JSON data) written as a Python literal, strings in double quotes."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(map(python_literal, value)) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{python_literal(str(k))}: {python_literal(v)}" for k, v in value.items()) + "}"
    return json.dumps(value, ensure_ascii=False)  # strings, with JSON's escapes, and numbers


def _render_call(call: FunctionCall) -> str:
    try:
        arguments = client_json(call.arguments) if call.arguments else {}
    except ValueError:
        arguments = call.arguments
    if not isinstance(arguments, dict):
        return f"{call.name}({call.arguments})"  # not an object: shown as the client sent it
    return f"{call.name}(" + ", ".join(f"{key}={python_literal(value)}" for key, value in arguments.items()) + ")"
