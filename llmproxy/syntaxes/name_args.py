"""Calls as a name and a JSON arguments object between Mistral's control tokens:
``[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}``, one such pair per call, written back to back for
parallel calls.

``mistral-v11``: Mistral's tokenizer v11 and later (Mistral Small 3.2, Magistral, Devstral). Older
Mistral models write a JSON array after ``[TOOL_CALLS]`` instead (the ``mistral`` syntax); a newer model
that falls back to it is still read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from llmproxy.common.nesting import client_json
from llmproxy.errors import JSONRepairError, OutputParseError
from llmproxy.grammar import RuleSet, gbnf_literal
from llmproxy.repair import repair_value
from llmproxy.syntaxes._json_calls import call_from_value
from llmproxy.syntaxes._sections import SectionSyntax
from llmproxy.syntaxes.base import Call
from llmproxy.types import FunctionCall, FunctionDefinition

TRIGGER = "[TOOL_CALLS]"
ARGS = "[ARGS]"
_NAME = re.compile(r"\s*([^\s\[{]+)\s*")
_SPACE = re.compile(r"\s*")
_HEAD = re.compile(re.escape(TRIGGER) + r"(?P<name>[^\s\[{]+?)" + re.escape(ARGS))  # as the grammar writes it
_DECODER = json.JSONDecoder(strict=False)  # raw line breaks in strings, as the repair accepts them


class NameArgsSyntax(SectionSyntax):
    name = "mistral-v11"
    preserved_tokens = (TRIGGER, ARGS)

    def triggers(self, allowed: Sequence[str]) -> tuple[str, ...]:
        return (TRIGGER,)

    def section_rule(self, rules: RuleSet, definitions: Sequence[FunctionDefinition], parallel: bool) -> str:
        named = []
        for function in definitions:
            schema = function.parameters or {"type": "object", "properties": {}}
            arguments = rules.object(schema, f"{function.name}-arguments", 1, schema)
            named.append(f"{gbnf_literal(TRIGGER + function.name + ARGS)} {arguments}")
        call = rules.rule("call", " | ".join(named))
        # The model writes its calls back to back, nothing between them.
        return rules.rule("calls", f"{call}+" if parallel else call)

    def call_head(self) -> re.Pattern[str]:
        return _HEAD

    def read_calls(self, section: str) -> tuple[list[Call], tuple[str, ...]]:
        calls: list[Call] = []
        repairs: list[str] = []
        position = len(TRIGGER)
        while True:
            try:
                found, position, fixed = _read_call(section, position)
            except OutputParseError:
                if not calls:
                    raise
                repairs.append("drop_truncated_call")  # a broken last call: keep the ones before it
                break
            calls += found
            repairs += fixed
            position = _SPACE.match(section, position).end()
            if not section.startswith(TRIGGER, position):
                repairs += ["strip_suffix"] if position < len(section) else []
                break
            position += len(TRIGGER)
        return calls, tuple(dict.fromkeys(repairs))

    def render_calls(self, calls: Sequence[FunctionCall]) -> str:
        return "".join(f"{TRIGGER}{call.name}{ARGS}{_arguments_text(call.arguments)}" for call in calls)


def _read_call(section: str, start: int) -> tuple[list[Call], int, list[str]]:
    """The call written from ``start`` on (after a ``[TOOL_CALLS]``), where it ends, and the repairs
    it needed. Valid JSON arguments end where their object does (a string in them may hold
    ``[TOOL_CALLS]``); broken ones run to the next ``[TOOL_CALLS]``."""
    name = _NAME.match(section, start)
    position = name.end() if name else start
    if name and section.startswith(ARGS, position):
        position += len(ARGS)
    position = _SPACE.match(section, position).end()
    try:
        value, end = _DECODER.raw_decode(section, position)
        fixed: list[str] = []
    except ValueError:
        end = section.find(TRIGGER, position)
        end = len(section) if end < 0 else end
        try:
            # No name: the JSON array of call objects that tokenizer v3 models write.
            repaired = repair_value(section[position:end], expect="object" if name else "array")
        except JSONRepairError as exc:
            raise OutputParseError(f"The model's call holds no usable JSON ({exc}).", section) from exc
        value, fixed = repaired.value, list(repaired.repairs)
    if name is None:
        values = value if isinstance(value, list) else [value]
        return [call_from_value(item, section) for item in values], end, [*fixed, "json_calls"]
    if not isinstance(value, dict):
        raise OutputParseError(f"The arguments of the call to {name.group(1)!r} are not a JSON object.", section)
    return [Call(name.group(1), value)], end, fixed


def _arguments_text(arguments: str) -> str:
    """A past call's arguments (OpenAI's JSON text) as the model writes them; text that is not JSON is
    shown as the client sent it."""
    try:
        return json.dumps(client_json(arguments) if arguments else {}, ensure_ascii=False)
    except ValueError:
        return arguments
