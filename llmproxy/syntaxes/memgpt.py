"""MemGPT's call syntax: one JSON object ``{"function": NAME, "params": {...}}`` with an inner monologue.

The only module that knows the keys ``function``, ``params`` and ``inner_thoughts``. Options (the
wrapper's ``[answer]`` table):

- ``inner_thoughts``: where the monologue goes - ``params`` (first key of the arguments), ``top`` (a
  key before ``function``; a call is then optional where the wrapper allows it: thoughts alone are an
  answer) or ``none``;
- ``prime``: how far the prompt starts the object - ``open`` (``{``), ``name`` (``{"function":``) or
  ``thoughts`` (``{"inner_thoughts":``); a named tool_choice, or the first message's function, is
  primed further (``{"function": "NAME",``), except where the thoughts come first;
- ``first_message``: the function MemGPT's first message is primed to call (``send_message``);
- ``indent``: the indentation of the JSON the model is shown and primed with (2).

Stages (where a prefix leaves the answer): ``start``, ``open``, ``name``, ``thoughts``, ``arguments``.
Single call only: MemGPT's design is one call per step.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, Literal

from llmproxy.common.bounded_cache import MIB, bounded_cache
from llmproxy.common.nesting import client_json
from llmproxy.errors import ConfigurationError, GrammarError, JSONRepairError, OutputParseError
from llmproxy.grammar import RuleSet, json_literal, key_value
from llmproxy.repair import repair
from llmproxy.syntaxes._json_calls import definitions_key
from llmproxy.syntaxes._scanners import ThoughtsScanner
from llmproxy.syntaxes.base import Answer, AnswerShape, Call, CallMode, CallSyntax, Grammar, Scanner, TurnText
from llmproxy.types import FunctionCall, FunctionDefinition

INNER_THOUGHTS_KEY = "inner_thoughts"
MAX_FUNCTIONS = 256
MAX_GRAMMAR_BYTES = 1 << 20

Placement = Literal["params", "top", "none"]
_PRIMES = {"open", "name", "thoughts"}
# Models do not always use the key names they were shown; these mean the same thing.
_NAME_KEYS = ("function", "name", "function_name", "tool")
_ARGUMENT_KEYS = ("params", "arguments", "parameters", "args")
_FUNCTION_NAME = re.compile(r"[A-Za-z0-9_.\-]+")


class MemGPTSyntax(CallSyntax):
    name = "memgpt"
    content_is_thoughts = True

    def __init__(self, *, inner_thoughts: Placement = "params", prime: str = "name",
                 first_message: str | None = None, indent: int = 2) -> None:
        if inner_thoughts not in ("params", "top", "none"):
            raise ConfigurationError(f"inner_thoughts must be 'params', 'top' or 'none', not {inner_thoughts!r}")
        if prime not in _PRIMES:
            raise ConfigurationError(f"prime must be one of {sorted(_PRIMES)}, not {prime!r}")
        if (prime == "thoughts") != (inner_thoughts == "top") and prime != "open":
            raise ConfigurationError(f"prime {prime!r} does not fit inner_thoughts {inner_thoughts!r}: the object "
                                     "starts with 'inner_thoughts' exactly when they go on top")
        self.inner_thoughts: Placement = inner_thoughts
        self.prime = prime
        self.first_message = first_message
        self.indent = indent

    def template_context(self) -> dict[str, Any]:
        return {"inner_thoughts": self.inner_thoughts}

    def call_stops(self) -> tuple[str, ...]:
        """MemGPT's cut after a pretty-printed call object (the closing brace is restored by repair)."""
        return (" " * self.indent + "}\n}\n",)

    # --- the shape ----------------------------------------------------------------------------

    def shape(self, call: CallMode, functions: Sequence[FunctionDefinition], allowed: Sequence[str], *,
              named: bool, parallel: bool, first_message: bool, primed: bool) -> AnswerShape:
        forced = None
        if self.inner_thoughts != "top":  # with thoughts first, the name cannot be primed
            if named:
                forced = allowed[0]
            elif first_message and self.first_message in allowed:
                forced = self.first_message
        if not primed:
            stage, forced = "start", None
        elif forced is not None:
            stage = "arguments"
        else:
            stage = self.prime
        return AnswerShape(self, call, tuple(functions), tuple(allowed), False, self._prefix(stage, forced), stage,
                           forced)

    def _prefix(self, stage: str, forced: str | None) -> str:
        member = "\n{\n" + " " * self.indent
        return {
            "start": "",
            "open": "\n{",
            "name": member + '"function":',
            "thoughts": member + f'"{INNER_THOUGHTS_KEY}":',
            "arguments": member + f'"function": {json.dumps(forced)},',
        }[stage]

    # --- history ------------------------------------------------------------------------------

    def render_turn(self, content: str, calls: Sequence[FunctionCall]) -> TurnText:
        texts = tuple(self.call_json(call.name, call.arguments, content if i == 0 else None)
                      for i, call in enumerate(calls))
        if self.inner_thoughts == "none":
            return TurnText(content, texts)
        if texts:
            return TurnText("", texts)  # the content is the monologue, inside the first call
        if self.inner_thoughts == "top" and content:  # a thoughts-only answer, as the model would write it
            return TurnText("", (json.dumps({INNER_THOUGHTS_KEY: content}, indent=self.indent, ensure_ascii=False),))
        return TurnText(content)

    def call_json(self, name: str, arguments: str, thoughts: str | None) -> str:
        """A past call in the exact JSON shape this syntax asks the model to write."""
        return _call_json(name, arguments, thoughts, self.inner_thoughts, self.indent)

    # --- constraints --------------------------------------------------------------------------

    def grammar(self, shape: AnswerShape) -> Grammar:
        definitions = definitions_key(shape)
        optional = shape.call == "optional" and self.inner_thoughts == "top"
        return Grammar(_grammar(definitions, self.inner_thoughts, shape.stage, shape.forced, optional))

    def json_schema(self, shape: AnswerShape) -> dict[str, Any]:
        variants = [self._call_schema(function) for function in shape.definitions]
        if shape.call == "optional" and self.inner_thoughts == "top":
            variants.append({"type": "object", "properties": {INNER_THOUGHTS_KEY: {"type": "string"}},
                             "required": [INNER_THOUGHTS_KEY], "additionalProperties": False})
        return variants[0] if len(variants) == 1 else {"anyOf": variants}

    def _call_schema(self, function: FunctionDefinition) -> dict[str, Any]:
        params = json.loads(json.dumps(function.parameters))  # a deep copy of plain JSON
        params.setdefault("type", "object")
        if self.inner_thoughts == "params":
            params["properties"] = {INNER_THOUGHTS_KEY: {"type": "string"}, **params.get("properties", {})}
            params["required"] = [INNER_THOUGHTS_KEY, *params.get("required", [])]
        properties: dict[str, Any] = {}
        if self.inner_thoughts == "top":
            properties[INNER_THOUGHTS_KEY] = {"type": "string"}
        properties["function"] = {"const": function.name}
        properties["params"] = params
        return {"type": "object", "properties": properties, "required": list(properties),
                "additionalProperties": False}

    # --- reading the answer -------------------------------------------------------------------

    def parse(self, text: str, shape: AnswerShape) -> Answer:
        whole = _rejoin(text, shape.prefix)
        try:
            repaired = repair(whole)
        except JSONRepairError as exc:
            raise OutputParseError(f"The model's output holds no usable JSON object ({exc}).", whole) from exc
        obj = repaired.value
        thoughts = obj.get(INNER_THOUGHTS_KEY)
        name, arguments = _find_call(obj)
        if name is None:
            if shape.call == "required":
                raise OutputParseError("The model's JSON has no function call in it.", whole)
            if not isinstance(thoughts, str):
                raise OutputParseError("The model's JSON has neither a function call nor inner thoughts.", whole)
            return Answer(thoughts, (), repaired.repairs)
        if not isinstance(name, str):
            raise OutputParseError("The model gave the function name as something other than a string.", whole)
        if not _FUNCTION_NAME.fullmatch(name):
            raise OutputParseError(f"The model wrote text where the function name goes ({name[:80]!r}).", whole)
        params, extra_repairs = _arguments_object(arguments, whole)
        inner = params.pop(INNER_THOUGHTS_KEY, None)
        content = thoughts if isinstance(thoughts, str) else inner if isinstance(inner, str) else None
        return Answer(content, (Call(name, params),), repaired.repairs + extra_repairs)

    def scanner(self, shape: AnswerShape, *, calls: bool = False) -> Scanner:
        # The call is sent once read and checked: MemGPT's heartbeat rule may still change its arguments.
        scanner = ThoughtsScanner()
        scanner.feed(shape.prefix)  # the answer continues the prompt's prefix
        return scanner


def _rejoin(text: str, prefix: str) -> str:
    """The model's whole object: the prompt's prefix rejoined with what the model wrote after it.

    Models sometimes repeat the prefix themselves, or restart the object; neither is doubled.
    """
    stripped = text.lstrip()
    primed = prefix.strip()
    if not primed or stripped.startswith(primed):
        return stripped
    if stripped.startswith("{") and primed != "{":
        return stripped  # the model restarted the object after a prefix such as '{"function":'
    return prefix + text


def _find_call(obj: dict[str, Any]) -> tuple[Any, Any]:
    """The function name and arguments, under whichever key the model used; (None, None) if none."""
    name_key = next((key for key in _NAME_KEYS if key in obj), None)
    if name_key is None:
        return None, None
    name = obj[name_key]
    if isinstance(name, dict):
        return _find_call(name)  # the model restarted the whole object after a '{"function":' prefix
    if name is None or (isinstance(name, str) and name.strip().lower() in ("", "none", "null")):
        return None, None
    arguments = next((obj[key] for key in _ARGUMENT_KEYS if key in obj), {})
    return name, arguments


def _arguments_object(arguments: Any, raw: str) -> tuple[dict[str, Any], tuple[str, ...]]:
    if arguments is None:
        return {}, ()
    if isinstance(arguments, str):  # arguments double-encoded as a JSON string
        try:
            decoded = repair(arguments)
        except JSONRepairError as exc:
            raise OutputParseError("The call's arguments are a string that holds no JSON object.", raw) from exc
        return dict(decoded.value), ("decode_nested_json",) + decoded.repairs
    if not isinstance(arguments, dict):
        raise OutputParseError("The call's arguments are not a JSON object.", raw)
    return dict(arguments), ()


def _json_or_none(text: str) -> Any:
    try:
        return client_json(text, strict=False) if text else None
    except ValueError:
        return None


@bounded_cache(16 * MIB)
def _call_json(name: str, arguments: str, thoughts: str | None, placement: Placement, indent: int) -> str:
    # Cached: agents resend their whole history every turn, calls included.
    params = _json_or_none(arguments)
    if not isinstance(params, dict):
        params = {"arguments": arguments} if arguments else {}
    if placement == "params":
        shaped = {"function": name, "params": {INNER_THOUGHTS_KEY: thoughts or "", **params}}
    elif placement == "top":
        shaped = {INNER_THOUGHTS_KEY: thoughts or "", "function": name, "params": params}
    else:
        shaped = {"function": name, "params": params}
    return json.dumps(shaped, indent=indent, ensure_ascii=False)


# --- the grammar -----------------------------------------------------------------------------
#
#   params: {"function": "<name>", "params": {"inner_thoughts": "<text>", <args>}}
#   top:    {"inner_thoughts": "<text>", "function": "<name>", "params": {<args>}}
#           (with an optional call also just {"inner_thoughts": "<text>"})
#   none:   {"function": "<name>", "params": {<args>}}
#
# The name selects which argument object follows. The grammar covers what follows the stage's prefix.


@bounded_cache(32 * MIB)
def _grammar(definitions: str, placement: Placement, stage: str, forced: str | None, optional: bool) -> str:
    functions = json.loads(definitions)
    if len(functions) > MAX_FUNCTIONS:
        raise GrammarError(f"too many functions for a grammar ({len(functions)} > {MAX_FUNCTIONS})")
    if not functions and not optional:
        raise GrammarError("no functions to build a call grammar from")
    rules = RuleSet()
    thoughts = (INNER_THOUGHTS_KEY, "string")
    params = {}
    for function in functions:
        schema = function.get("parameters") or {"type": "object", "properties": {}}
        first = thoughts if placement == "params" else None
        params[function["name"]] = rules.object(schema, f"{function['name']}-params", 1, schema, first)

    if stage == "arguments":  # the prefix ends with {"function": "NAME",
        rest = key_value("params", params[forced])
    else:
        calls = [rules.rule(f"{name}-call", f'{json_literal(name)} ws "," ws {key_value("params", p)}')
                 for name, p in params.items()]
        call = rules.rule("call", " | ".join(calls)) if calls else ""
        function_member = key_value("function", call)
        if placement != "top":
            rest = call if stage == "name" else function_member
        else:
            rest = "string" if stage == "thoughts" else key_value(*thoughts)
            if calls:  # none only when the call is optional and no function may be called
                more = f'ws "," ws {function_member}'
                rest += f" ( {more} )?" if optional else f" {more}"
    root = f'ws "{{" ws {rest} ws "}}"' if stage == "start" else f'ws {rest} ws "}}"'
    text = rules.render(root)
    if len(text.encode()) > MAX_GRAMMAR_BYTES:
        raise GrammarError(f"generated grammar too large ({len(text.encode())} bytes)")
    return text
