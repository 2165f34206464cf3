"""JSON call objects as most families write them: ``{"name": NAME, "arguments": {...}}``.

Shared by the syntaxes that write a call as one JSON object (OpenAI-style JSON, Llama 3.1, Hermes and
Qwen inside ``<tool_call>`` tags, Mistral's array); they differ in the key of the arguments and in
what surrounds the objects. Here: the GBNF rule for one call object (the name selects which argument
schema follows), reading calls back out of repaired JSON values, and writing a past call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from llmproxy.common.nesting import client_json
from llmproxy.errors import GrammarError, OutputParseError
from llmproxy.grammar import RuleSet, json_literal, key_value
from llmproxy.syntaxes.base import AnswerShape, Call
from llmproxy.types import FunctionDefinition

MAX_FUNCTIONS = 256
MAX_GRAMMAR_BYTES = 1 << 20
# Models do not always use the key names they were shown; these mean the same thing.
NAME_KEYS = ("name", "function", "function_name", "tool", "tool_name")
ARGUMENT_KEYS = ("arguments", "parameters", "params", "args", "input", "kwargs")


def definitions_key(shape: AnswerShape) -> str:
    """The callable definitions as JSON text, in the request's order: a cache key for grammars (property
    order is part of a grammar)."""
    if len(shape.definitions) > MAX_FUNCTIONS:
        raise GrammarError(f"too many functions for a grammar ({len(shape.definitions)} > {MAX_FUNCTIONS})")
    try:
        return "[" + ",".join(f.definition_json for f in shape.definitions) + "]"
    except (TypeError, ValueError) as exc:  # a library caller's value that is not JSON
        raise GrammarError(f"function definitions are not JSON: {exc}") from None


def load_definitions(key: str) -> list[FunctionDefinition]:
    return [FunctionDefinition.model_validate(item) for item in json.loads(key)]


def call_object_rule(rules: RuleSet, definitions: Sequence[FunctionDefinition], arguments_key: str) -> str:
    """A rule for one call object ``{"name": "<one of them>", "<arguments_key>": {...its arguments...}}``."""
    if not definitions:
        raise GrammarError("no functions to build a call grammar from")
    named = []
    for function in definitions:
        schema = function.parameters or {"type": "object", "properties": {}}
        arguments = rules.object(schema, f"{function.name}-arguments", 1, schema)
        named.append(rules.rule(f"{function.name}-call",
                                f'{json_literal(function.name)} ws "," ws {key_value(arguments_key, arguments)}'))
    name_and_arguments = rules.rule("call-body", " | ".join(named))
    # No space between "{" and "name": the object starts with the very trigger word ``{"name"``.
    return rules.rule("call", f'"{{" {key_value("name", name_and_arguments)} ws "}}"')


def call_object_head(arguments_key: str) -> re.Pattern[str]:
    """A call object up to its arguments, as ``call_object_rule`` writes it (the name first)."""
    return re.compile(r'\{\s*"name"\s*:\s*"(?P<name>(?:[^"\\]|\\.)*)"\s*,\s*'
                      + re.escape(json.dumps(arguments_key)) + r"\s*:\s*")


def checked_size(text: str) -> str:
    if len(text.encode()) > MAX_GRAMMAR_BYTES:
        raise GrammarError(f"generated grammar too large ({len(text.encode())} bytes)")
    return text


def call_from_value(value: Any, raw: str) -> Call:
    """The call a repaired JSON object describes, under whichever key names the model used."""
    if not isinstance(value, dict):
        raise OutputParseError(f"A call is not a JSON object: {json.dumps(value)[:120]}.", raw)
    name = next((value[key] for key in NAME_KEYS if key in value), None)
    if isinstance(name, dict):  # {"function": {"name": ..., "arguments": ...}}, OpenAI's own nesting
        return call_from_value(name, raw)
    if not isinstance(name, str) or not name.strip():
        raise OutputParseError("A call object has no function name.", raw)
    arguments = next((value[key] for key in ARGUMENT_KEYS if key in value), {})
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise OutputParseError(f"The arguments of the call to {name!r} are not a JSON object.", raw)
    return Call(name.strip(), arguments)


def call_json(name: str, arguments: str, arguments_key: str) -> str:
    """A past call as one compact JSON object (arguments given as OpenAI's JSON text)."""
    try:
        parsed = client_json(arguments) if arguments else {}
    except ValueError:
        parsed = arguments  # shown as the client sent it
    return json.dumps({"name": name, arguments_key: parsed}, ensure_ascii=False)
