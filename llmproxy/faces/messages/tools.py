"""Anthropic's ``tools`` and ``tool_choice`` as the internal function definitions and tool choice.

``offered_tools(tools, findings)`` takes the request's ``tools`` and gives a chat Tool for each
client tool (``{name, description, input_schema}``); server tools, which Anthropic runs itself
(``web_search_20250305``, ``bash_20250124``, ``text_editor_...``), have nothing to run them here and
are left out and listed in ``findings``. ``choice(tool_choice, offered)`` gives the chat
``tool_choice`` and ``parallel_tool_calls`` values, mapped exactly (a named tool stays named).

Agents send the same tools every turn, so their translation is cached by the tools' JSON
(llmproxy.common.json_cache.cached_by_json); the tools it gives are shared, and read only.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from llmproxy.common.bounded_cache import MIB
from llmproxy.faces.messages._blocks import Findings
from llmproxy.faces.messages._fields import a_bool, a_list, a_string, an_object, fail, optional, path, required
from llmproxy.common.json_cache import cached_by_json
from llmproxy.types import FunctionDefinition, NamedFunction, NamedToolChoice, Tool, ToolChoiceValue

_MODES = {"auto": "auto", "any": "required", "none": "none"}


def offered_tools(tools: Any, findings: Findings) -> tuple[Tool, ...]:
    """The client tools of ``tools``, in order."""
    found, skipped = _translated(tools)
    findings.skipped += skipped
    return found


@cached_by_json(4 * MIB)  # of tools JSON; their Python objects take several times that
def _translated(tools: Any) -> tuple[tuple[Tool, ...], tuple[str, ...]]:
    """(the client tools of ``tools``, the lines saying which were left out)."""
    findings = Findings()
    found: list[FunctionDefinition] = []
    for index, tool in enumerate(a_list(tools, "tools")):
        where = path("tools", index)
        tool = an_object(tool, where)
        kind = optional(tool, "type", a_string, where)
        if kind not in (None, "custom"):
            findings.skip(where, f"server tool {kind} ({tool.get('name')})")
            continue
        found.append(_definition(tool, where))
        if found[-1].name in (f.name for f in found[:-1]):
            raise fail(path(where, "name"), f"a second tool named {found[-1].name!r}")
    return tuple(Tool(function=function) for function in found), tuple(findings.skipped)


def _definition(tool: dict[str, Any], where: str) -> FunctionDefinition:
    name = a_string(required(tool, "name", where), path(where, "name"))
    schema = an_object(required(tool, "input_schema", where), path(where, "input_schema"))
    description = optional(tool, "description", a_string, where)
    try:
        return FunctionDefinition(name=name, description=description, parameters=schema)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = "name" if error["loc"][:1] == ("name",) else "input_schema"
        raise fail(path(where, field), error["msg"]) from None


def choice(tool_choice: Any, offered: list[str]) -> tuple[ToolChoiceValue | None, bool | None]:
    """(chat ``tool_choice``, ``parallel_tool_calls``) for ``tool_choice``; (None, None) when absent.

    ``auto`` stays auto, ``any`` is required, ``none`` is none, and ``{type: tool, name}`` forces that
    tool, which must be among ``offered``. ``disable_parallel_tool_use`` turns parallel calls off."""
    if tool_choice is None:
        return None, None
    where = "tool_choice"
    tool_choice = an_object(tool_choice, where)
    kind = a_string(required(tool_choice, "type", where), path(where, "type"))
    single = optional(tool_choice, "disable_parallel_tool_use", a_bool, where)
    parallel = False if single else None
    if kind in _MODES:
        return _MODES[kind], parallel
    if kind != "tool":
        raise fail(path(where, "type"), "expected 'auto', 'any', 'tool' or 'none'")
    name = a_string(required(tool_choice, "name", where), path(where, "name"))
    if name not in offered:
        raise fail(path(where, "name"), f"the tool {name!r} is not among the tools offered {offered}")
    return NamedToolChoice(function=NamedFunction(name=name)), parallel
