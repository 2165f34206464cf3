"""JSON calls inside marker words: Hermes's ``<tool_call>{...}</tool_call>`` and Mistral's
``[TOOL_CALLS][{...}, ...]``.

``hermes`` (Hermes 2 Pro/3, Qwen 2.5, Qwen 3; Granite's ``<|tool_call|>`` is the same shape with its
own tag): content may come first, then one ``<tool_call>`` block per call, each holding one
``{"name": ..., "arguments": {...}}`` object. Options: ``open``/``close`` (the tags).

``mistral`` (Mistral 7B v0.3, Nemo, Small): content may come first, then ``[TOOL_CALLS]`` and a JSON
array of call objects. Option: ``trigger`` (Granite 3 writes the same array after ``<|tool_call|>``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from llmproxy.errors import JSONRepairError, OutputParseError
from llmproxy.grammar import RuleSet, gbnf_literal
from llmproxy.repair import repair_all, repair_value
from llmproxy.syntaxes._json_calls import call_from_value, call_json, call_object_head, call_object_rule
from llmproxy.syntaxes._sections import SectionSyntax
from llmproxy.syntaxes.base import Call
from llmproxy.types import FunctionCall, FunctionDefinition


def _values(text: str, expect: str, raw: str) -> tuple[list[Any], tuple[str, ...]]:
    """The JSON values in ``text`` (an array's items when ``expect`` is "array"), repaired."""
    try:
        if expect == "array":
            repaired = repair_value(text, expect="any")
            values = repaired.value if isinstance(repaired.value, list) else [repaired.value]
            return values, repaired.repairs
        many = repair_all(text)
        return list(many.values), many.repairs
    except JSONRepairError as exc:
        raise OutputParseError(f"The model's call holds no usable JSON ({exc}).", raw) from exc


class HermesSyntax(SectionSyntax):
    name = "hermes"
    instructions = "hermes_instructions"
    lists_calls = True  # call blocks back to back

    def __init__(self, *, open: str = "<tool_call>", close: str = "</tool_call>") -> None:
        self.open, self.close = open, close
        self.preserved_tokens = (open, close)
        self._block = re.compile(re.escape(open) + r"(.*?)(?:" + re.escape(close) + r"|$)", re.S)

    def template_context(self) -> dict[str, Any]:
        return {"call_open": self.open, "call_close": self.close}

    def triggers(self, allowed: Sequence[str]) -> tuple[str, ...]:
        return (self.open,)

    def section_rule(self, rules: RuleSet, definitions: Sequence[FunctionDefinition], parallel: bool) -> str:
        call = call_object_rule(rules, definitions, "arguments")
        block = rules.rule("call-block", f'{gbnf_literal(self.open)} ws {call} ws {gbnf_literal(self.close)}')
        return rules.rule("calls", f"{block} ( ws {block} )*" if parallel else block)

    def list_rule(self, rules: RuleSet, first: str, rest: str) -> str | None:
        return rules.rule("calls", f"{first} ( ws {rest} )*")

    def call_head(self) -> re.Pattern[str]:
        return call_object_head("arguments")

    def read_calls(self, section: str) -> tuple[list[Call], tuple[str, ...]]:
        calls: list[Call] = []
        repairs: list[str] = []
        for block in self._block.findall(section):
            values, fixed = _values(block, "object", section)
            calls += [call_from_value(value, section) for value in values]
            repairs += fixed
        if not calls:
            raise OutputParseError(f"The model's {self.open} block holds no call.", section)
        return calls, tuple(repairs)

    def render_calls(self, calls: Sequence[FunctionCall]) -> str:
        return "\n".join(f"{self.open}\n{call_json(c.name, c.arguments, 'arguments')}\n{self.close}" for c in calls)


class MistralSyntax(SectionSyntax):
    name = "mistral"

    def __init__(self, *, trigger: str = "[TOOL_CALLS]") -> None:
        self.trigger = trigger
        self.preserved_tokens = (trigger,)

    def triggers(self, allowed: Sequence[str]) -> tuple[str, ...]:
        return (self.trigger,)

    def section_rule(self, rules: RuleSet, definitions: Sequence[FunctionDefinition], parallel: bool) -> str:
        call = call_object_rule(rules, definitions, "arguments")
        more = f'( ws "," ws {call} )*' if parallel else ""
        return rules.rule("calls", f'{gbnf_literal(self.trigger)} ws "[" ws {call} {more} ws "]"')

    def call_head(self) -> re.Pattern[str]:
        return call_object_head("arguments")

    def read_calls(self, section: str) -> tuple[list[Call], tuple[str, ...]]:
        values, repairs = _values(section[len(self.trigger):], "array", section)
        if not values:
            raise OutputParseError("The model's call list is empty.", section)
        return [call_from_value(value, section) for value in values], repairs

    def render_calls(self, calls: Sequence[FunctionCall]) -> str:
        return self.trigger + "[" + ", ".join(call_json(c.name, c.arguments, "arguments") for c in calls) + "]"
