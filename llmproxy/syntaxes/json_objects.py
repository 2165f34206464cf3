"""Calls written as bare JSON objects: OpenAI-style ``{"name": ..., "arguments": {...}}`` (``json``), and
Llama 3.1's ``{"name": ..., "parameters": {...}}`` (``llama3``).

Content may come first; the call section starts at ``{"name"``. Several calls (``json`` only) are a
JSON array ``[{"name": ...}, {"name": ...}]``, which starts at ``[{"name"``. This is also the syntax
for models whose own template knows nothing of tools: the tool list goes into the system turn and
the model is asked to answer in exactly this shape.

Options: ``arguments_key`` (``arguments`` / ``parameters``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from llmproxy.errors import JSONRepairError, OutputParseError
from llmproxy.grammar import RuleSet
from llmproxy.repair import repair_all, repair_value
from llmproxy.syntaxes._json_calls import call_from_value, call_json, call_object_head, call_object_rule
from llmproxy.syntaxes._sections import SectionSyntax
from llmproxy.syntaxes.base import AnswerShape, Call
from llmproxy.types import FunctionCall, FunctionDefinition

OBJECT_TRIGGER = '{"name"'
ARRAY_TRIGGER = '[{"name"'
# Unconstrained output spaces its JSON as it likes: the call section starts at any of these.
_SECTION_START = re.compile(r'\[?\s*\{\s*"name"\s*:')


class JSONObjectSyntax(SectionSyntax):
    name = "json"
    parallel_calls = True
    lists_calls = True  # after a first call object, more: call, call, ...
    call_separator = ","
    instructions = "json_instructions"

    def __init__(self, *, arguments_key: str = "arguments") -> None:
        self.arguments_key = arguments_key

    def template_context(self) -> dict[str, Any]:
        return {"arguments_key": self.arguments_key, "parallel_calls": self.parallel_calls}

    def triggers(self, allowed: Sequence[str]) -> tuple[str, ...]:
        return (OBJECT_TRIGGER, ARRAY_TRIGGER) if self.parallel_calls else (OBJECT_TRIGGER,)

    def call_start(self, text: str, shape: AnswerShape) -> int:
        found = _SECTION_START.search(text)
        if found is None or (found.group().startswith("[") and not self.parallel_calls):
            found = re.compile(r'\{\s*"name"\s*:').search(text) if found else None
        return found.start() if found else -1

    def section_rule(self, rules: RuleSet, definitions: Sequence[FunctionDefinition], parallel: bool) -> str:
        call = call_object_rule(rules, definitions, self.arguments_key)
        if not parallel:
            return call
        return rules.rule("calls", f'{call} | "[" {call} ( ws "," ws {call} )* ws "]"')

    def list_rule(self, rules: RuleSet, first: str, rest: str) -> str | None:
        if not (self.lists_calls and self.parallel_calls):
            return None
        return rules.rule("calls", f'{first} ( ws "," ws {rest} )*')

    def call_head(self) -> re.Pattern[str]:
        return call_object_head(self.arguments_key)

    def read_calls(self, section: str) -> tuple[list[Call], tuple[str, ...]]:
        try:
            if section.startswith("["):
                repaired = repair_value(section, expect="array")
                values, repairs = repaired.value, repaired.repairs
            else:
                many = repair_all(section)
                values, repairs = list(many.values), many.repairs
        except JSONRepairError as exc:
            raise OutputParseError(f"The model's call holds no usable JSON ({exc}).", section) from exc
        if not values:
            raise OutputParseError("The model's call list is empty.", section)
        return [call_from_value(value, section) for value in values], repairs

    def render_calls(self, calls: Sequence[FunctionCall]) -> str:
        objects = [call_json(call.name, call.arguments, self.arguments_key) for call in calls]
        return objects[0] if len(objects) == 1 else "[" + ", ".join(objects) + "]"

    def json_schema(self, shape: AnswerShape) -> dict[str, Any] | None:
        if shape.call != "required":
            return None  # "text or a call" is not one JSON value
        variants = [{"type": "object", "required": ["name", self.arguments_key], "additionalProperties": False,
                     "properties": {"name": {"const": f.name},
                                    self.arguments_key: {"type": "object", **f.parameters}}}
                    for f in shape.definitions]
        return variants[0] if len(variants) == 1 else {"anyOf": variants}


class Llama3Syntax(JSONObjectSyntax):
    """Llama 3.1-3.3's JSON tool calls: one ``{"name": ..., "parameters": {...}}`` per answer."""

    name = "llama3"
    parallel_calls = False

    def __init__(self, *, arguments_key: str = "parameters") -> None:
        super().__init__(arguments_key=arguments_key)
