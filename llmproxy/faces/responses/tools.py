"""The Responses API's tools as the pipeline's functions, and the way back from a function to its tool.

``read_tools(tools, skipped)`` takes the request's ``tools`` and gives the ``OfferedTools``: one
internal ``FunctionDefinition`` per usable tool, and the ``ToolNames`` that map each function name
back to the tool it stands for.

- ``function`` tools have chat's function fields, flat.
- A ``namespace`` (Codex wraps each MCP server's tools in one) gives a function per child, named
  after the namespace and the child; the call goes back as ``{"namespace", "name"}``, as Codex
  routes it (it rejects a flattened name).
- A ``custom`` (freeform) tool becomes a function of one string, ``input``, constrained to the tool's
  grammar where llmproxy.faces.lark can write it as a pattern, else free; the call goes back as a
  ``custom_tool_call`` carrying that string.
- Hosted tools (web_search, file_search, tool_search, local_shell, image_generation, mcp, computer
  use...) run on OpenAI's servers and have no local counterpart: they are left out and listed in
  ``skipped``.

Agents send the same tools every turn, so the translation is cached by the tools' JSON
(llmproxy.common.json_cache.cached_by_json): the ``OfferedTools`` of a tool list is shared, and read only.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from pydantic import ValidationError

from llmproxy.common.bounded_cache import MIB
from llmproxy.faces.lark import custom_tool_pattern
from llmproxy.faces.responses._fields import a_list, a_name, an_object, at, fail, optional_text
from llmproxy.common.json_cache import cached_by_json
from llmproxy.types import FunctionDefinition, Tool

VALID_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
SEPARATORS = ("_", ".", "-")  # a namespace ending in one (Codex's "mcp__server__") needs no other


class ToolTarget(NamedTuple):  # a tuple: hashed and compared in C, for every call in every history
    """The tool a function name stands for, as the client names it: ``name`` (in ``namespace``, if
    any) of a function tool, or of a custom tool when ``custom``."""

    name: str
    namespace: str | None = None
    custom: bool = False


def _function_name(target: ToolTarget, salt: int | None = None) -> str:
    """A valid function name for ``target``: the namespace and the name joined, where that is a valid
    name; else (too long, odd characters), or given a ``salt`` to tell it from a taken name, a
    shortened form ending in a hash of the tool."""
    joined = target.name
    if target.namespace is not None:
        joined = target.namespace + ("" if target.namespace.endswith(SEPARATORS) else ".") + target.name
    if salt is None and VALID_NAME.fullmatch(joined):
        return joined
    tool = f"{target.namespace}\0{target.name}\0{target.custom}\0{salt}"
    digest = hashlib.sha256(tool.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return re.sub(r"[^A-Za-z0-9_.\-]", "_", joined)[:55] + "_" + digest


class ToolNames:
    """Which tool each function name stands for, both ways."""

    def __init__(self) -> None:
        self._targets: dict[str, ToolTarget] = {}
        self._names: dict[ToolTarget, str] = {}

    def add(self, target: ToolTarget) -> str | None:
        """The function name given to the offered tool ``target``; None when it was offered already."""
        if target in self._names:
            return None
        name, salt = _function_name(target), 0
        while name in self._targets:  # another tool's name already (a function named like a namespace's child)
            name, salt = _function_name(target, salt), salt + 1
        self._targets[name] = target
        self._names[target] = name
        return name

    def name_for(self, target: ToolTarget) -> str:
        """The function name of ``target``: its offered tool's, else the name it would get (a call in
        the history to a tool offered no more)."""
        return self._names.get(target) or _function_name(target)

    def target(self, name: str) -> ToolTarget:
        """The tool the function ``name`` stands for (a plain function tool for a name never given)."""
        return self._targets.get(name) or ToolTarget(name)


@dataclass(frozen=True)
class OfferedTool:
    target: ToolTarget
    tool: Tool  # as the chat request offers it: made once with the translation, shared by its requests

    @property
    def function(self) -> FunctionDefinition:
        return self.tool.function


@dataclass
class OfferedTools:
    """The functions offered, and their names both ways; complete once ``read_tools`` gives it."""

    tools: list[OfferedTool] = field(default_factory=list)
    names: ToolNames = field(default_factory=ToolNames)


def _definition(name: str, description: str | None, parameters: Any, where: str) -> FunctionDefinition:
    if parameters is None:
        parameters = {"type": "object", "properties": {}}
    if not isinstance(parameters, dict):
        raise fail(at(where, "parameters"), "must be a JSON schema object")
    try:
        return FunctionDefinition(name=name, description=description, parameters=parameters)
    except ValidationError as exc:
        raise fail(at(where, "parameters"), exc.errors()[0]["msg"]) from exc


def _custom_parameters(tool: dict[str, Any], where: str) -> dict[str, Any]:
    """The parameters of a custom tool's function: one string, ``input``, in the tool's grammar."""
    form = an_object(tool.get("format") or {"type": "text"}, at(where, "format"))
    text: dict[str, Any] = {"type": "string", "description": "The tool's input, as free text."}
    if form.get("type", "text") == "grammar":
        here = at(where, "format")
        syntax, definition = a_name(form, "syntax", here), a_name(form, "definition", here)
        pattern = custom_tool_pattern(syntax, definition)
        if pattern is not None:
            text["pattern"] = pattern
        # The model is told the grammar whether or not it can be enforced: it has to write it either way.
        text["description"] = f"The tool's input, written in this {syntax} grammar:\n{definition}"
    elif form.get("type", "text") != "text":
        raise fail(at(at(where, "format"), "type"), "must be 'text' or 'grammar'")
    return {"type": "object", "properties": {"input": text}, "required": ["input"], "additionalProperties": False}


def _offer(offered: OfferedTools, target: ToolTarget, description: str | None, parameters: Any, where: str,
           skipped: list[str]) -> None:
    name = offered.names.add(target)
    if name is None:
        skipped.append(f"{where}: a second tool named {target.name!r} left out")
        return
    offered.tools.append(OfferedTool(target, Tool(function=_definition(name, description, parameters, where))))


def read_tools(tools: Any, skipped: list[str]) -> OfferedTools:
    """The functions for the request's ``tools``; the tools left out are listed in ``skipped``."""
    if tools is None:
        return OfferedTools()
    offered, left_out = _translated(tools)
    skipped += left_out
    return offered


@cached_by_json(4 * MIB)  # of tools JSON; their Python objects take several times that
def _translated(tools: Any) -> tuple[OfferedTools, tuple[str, ...]]:
    """(the functions for ``tools``, what was left out of them)."""
    offered = OfferedTools()
    skipped: list[str] = []
    for index, tool in enumerate(a_list(tools, "tools")):
        where = at("tools", index)
        an_object(tool, where)
        kind = tool.get("type", "function")
        if kind == "function":
            _offer(offered, ToolTarget(a_name(tool, "name", where)), optional_text(tool, "description", where),
                   tool.get("parameters"), where, skipped)
        elif kind == "custom":
            _offer(offered, ToolTarget(a_name(tool, "name", where), custom=True),
                   optional_text(tool, "description", where), _custom_parameters(tool, where), where, skipped)
        elif kind == "namespace":
            namespace = a_name(tool, "name", where)
            for number, child in enumerate(a_list(tool.get("tools"), at(where, "tools"))):
                here = at(at(where, "tools"), number)
                an_object(child, here)
                if child.get("type", "function") != "function":
                    skipped.append(f"{here}: {child.get('type')!r} tool in a namespace left out")
                    continue
                _offer(offered, ToolTarget(a_name(child, "name", here), namespace),
                       optional_text(child, "description", here), child.get("parameters"), here, skipped)
        else:
            skipped.append(f"{where}: {kind!r} tool left out: hosted tools are not available on this server")
    return offered, tuple(skipped)
