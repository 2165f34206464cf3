"""Calls as XML-ish elements, one per argument (Qwen3-Coder's format)::

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    <parameter=days>
    3
    </parameter>
    </function>
    </tool_call>

``xml``: Qwen3-Coder (and the models trained on its template). A string argument is written as raw
text, unquoted, so code and prose need no escaping (it cannot hold ``</parameter>``); any other value
is JSON. Which one a value is comes from the function's schema, so reading the calls needs the
request's functions. Parallel calls are several ``<tool_call>`` blocks.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from llmproxy.common.nesting import client_json
from llmproxy.errors import JSONRepairError, OutputParseError
from llmproxy.grammar import RuleSet, gbnf_literal
from llmproxy.repair import repair_value
from llmproxy.syntaxes._free_text import text_without
from llmproxy.syntaxes._sections import SectionScanner, SectionSyntax
from llmproxy.syntaxes.base import Answer, AnswerShape, Call
from llmproxy.types import FunctionCall, FunctionDefinition

OPEN, CLOSE = "<tool_call>", "</tool_call>"
FUNCTION = "<function="  # also starts a call section: the model sometimes leaves out <tool_call>
END_PARAMETER = "</parameter>"
_FUNCTION = re.compile(r"<function=([^>\n]*)>")
_PARAMETER = re.compile(r"\s*<parameter=([^>\n]*)>")
_END_FUNCTION = re.compile(r"\s*</function>")


class XMLParamsSyntax(SectionSyntax):
    name = "xml"
    instructions = "qwen_coder_instructions"
    preserved_tokens = (OPEN, CLOSE)

    def triggers(self, allowed: Sequence[str]) -> tuple[str, ...]:
        return (OPEN,)

    def call_start(self, text: str, shape: AnswerShape) -> int:
        bare = _FUNCTION.search(text)
        found = [i for i in (text.find(OPEN), bare.start() if bare else -1) if i >= 0]
        return min(found, default=-1)

    def scanner(self, shape: AnswerShape, *, calls: bool = False) -> SectionScanner:
        return SectionScanner((OPEN, FUNCTION), shape.reasoning)  # arguments are typed once a call is read

    def section_rule(self, rules: RuleSet, definitions: Sequence[FunctionDefinition], parallel: bool) -> str:
        text = text_without(rules, [END_PARAMETER], "parameter-text")
        tail = gbnf_literal(f"</function>\n{CLOSE}")
        calls = []
        for function in definitions:
            schema = function.parameters or {"type": "object", "properties": {}}
            params = _parameters_rule(rules, function.name, schema, text)
            head = gbnf_literal(f"{OPEN}\n{FUNCTION}{function.name}>\n")
            calls.append(f"{head} {params} {tail}")
        block = rules.rule("call-block", " | ".join(calls))
        return rules.rule("calls", f"{block} ( ws {block} )*" if parallel else block)

    def read_calls(self, section: str) -> tuple[list[Call], tuple[str, ...]]:
        """The calls with every argument as the raw text it was written in; ``parse`` types them."""
        calls: list[Call] = []
        repairs: list[str] = []
        position = 0
        while (function := _FUNCTION.search(section, position)) is not None:
            arguments: dict[str, Any] = {}
            position = function.end()
            while (parameter := _PARAMETER.match(section, position)) is not None:
                end = section.find(END_PARAMETER, parameter.end())
                if end < 0:  # cut off, or never closed: the value runs to the end of the function
                    closed = _END_FUNCTION.search(section, parameter.end())
                    end = closed.start() if closed else len(section)
                    repairs.append("close_tags")
                    position = end
                else:
                    position = end + len(END_PARAMETER)
                arguments[parameter.group(1).strip()] = _without_newlines(section[parameter.end():end])
            closed = _END_FUNCTION.match(section, position)
            if closed is None:
                repairs.append("close_tags")
            calls.append(Call(function.group(1).strip(), arguments))
            position = closed.end() if closed else position
        if not calls:
            raise OutputParseError(f"The model's {OPEN} block holds no <function=...> call.", section)
        return calls, tuple(dict.fromkeys(repairs))

    def parse(self, text: str, shape: AnswerShape) -> Answer:
        answer = super().parse(text, shape)
        schemas = {function.name: function.parameters for function in shape.functions}
        calls, repairs = [], list(answer.repairs)
        for call in answer.calls:
            properties = (schemas.get(call.name) or {}).get("properties") or {}
            arguments = {}
            for key, raw in call.arguments.items():
                arguments[key], fixed = _typed(raw, properties.get(key))
                repairs += fixed
            calls.append(Call(call.name, arguments))
        return replace(answer, calls=tuple(calls), repairs=tuple(dict.fromkeys(repairs)))

    def render_calls(self, calls: Sequence[FunctionCall]) -> str:
        return "\n".join(_render_call(call) for call in calls)


def _is_text(schema: Any) -> bool:
    """Whether values of ``schema`` are written as raw text: it admits strings only."""
    if not isinstance(schema, dict):
        return False
    if "enum" in schema or "const" in schema:
        values = schema["enum"] if "enum" in schema else [schema["const"]]
        return isinstance(values, list) and bool(values) and all(isinstance(v, str) for v in values)
    return schema.get("type") == "string"


def _parameters_rule(rules: RuleSet, function: str, schema: dict, text: str) -> str:
    """The parameter elements of one function: schema order, the optional ones omissible (linear size)."""
    if "properties" not in schema and schema.get("additionalProperties", True) is not False:
        # A free-form object: any parameters, each value read as JSON where it is JSON, else as text.
        return rules.rule(f"{function}-params", f'( "<parameter=" [^>\\n]+ ">\\n" {text} "\\n</parameter>\\n" )*')
    required = schema.get("required") or []
    parts = []
    for key, sub in (schema.get("properties") or {}).items():
        if _is_text(sub):
            values = sub["enum"] if "enum" in sub else [sub["const"]] if "const" in sub else None
            value = " | ".join(gbnf_literal(v) for v in values) if values else text
        else:
            value = rules.value(sub, f"{function}-{key}", 1, schema)
        head = gbnf_literal(f"<parameter={key}>\n")
        element = rules.rule(f"{function}-{key}-param", f'{head} ( {value} ) "\\n</parameter>\\n"')
        parts.append(element if key in required else f"{element}?")
    return " ".join(parts) if parts else '""'


def _without_newlines(raw: str) -> str:
    """A value as written minus the line breaks the format puts around it (one on each side)."""
    raw = raw[1:] if raw.startswith("\n") else raw
    return raw[:-1] if raw.endswith("\n") else raw


def _typed(raw: str, schema: Any) -> tuple[Any, list[str]]:
    """An argument's value: raw text where the schema wants a string, JSON otherwise. A value that is
    not JSON stays text (the schema check after parsing reports it)."""
    if _is_text(schema):
        return raw, []
    try:
        return json.loads(raw), []
    except ValueError:
        pass
    if raw.lstrip().startswith(("{", "[")):
        try:
            repaired = repair_value(raw, expect="any")
            return repaired.value, list(repaired.repairs)
        except JSONRepairError:
            pass
    return raw, []


def _render_call(call: FunctionCall) -> str:
    try:
        arguments = client_json(call.arguments) if call.arguments else {}
    except ValueError:
        arguments = call.arguments
    if isinstance(arguments, dict):
        body = "".join(f"<parameter={key}>\n{_value_text(value)}\n{END_PARAMETER}\n"
                       for key, value in arguments.items())
    else:
        body = f"{call.arguments}\n"  # not an object: shown as the client sent it
    return f"{OPEN}\n{FUNCTION}{call.name}>\n{body}</function>\n{CLOSE}"


def _value_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
