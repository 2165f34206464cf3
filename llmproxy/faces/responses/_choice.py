"""The Responses API's ``tool_choice`` as the functions offered and chat's ``tool_choice``.

``"none"``, ``"auto"`` and ``"required"`` are chat's too. ``{"type": "function" | "custom", "name"}``
forces that tool. ``{"type": "allowed_tools", "mode", "tools"}`` offers only the tools listed (the
others are not offered at all, so the model cannot call them) with ``mode`` auto or required. A tool
named that is not offered, and a hosted tool (``{"type": "web_search"}``...), which runs on OpenAI's
servers only, are a 400 naming ``tool_choice``.
"""

from __future__ import annotations

from typing import Any

from llmproxy.errors import InvalidRequestError
from llmproxy.faces.responses._fields import a_list, an_object, at, fail
from llmproxy.faces.responses.tools import OfferedTools, ToolTarget
from llmproxy.types import Tool

PARAM = "tool_choice"


def _refuse(problem: str) -> InvalidRequestError:
    return fail(PARAM, problem)


def _chosen(offered: OfferedTools, entry: Any, where: str) -> str:
    """The function name of the offered tool that ``entry`` (``{"type", "name", "namespace"?}``) names."""
    entry = an_object(entry, where)
    kind, name, namespace = entry.get("type"), entry.get("name"), entry.get("namespace")
    if kind not in ("function", "custom"):
        raise _refuse(f"{where}: {kind!r} tools are not available here (hosted tools run on OpenAI's servers); "
                      "choose a function or custom tool")
    if not isinstance(name, str):
        raise _refuse(f"{where}.name: must be a string")
    wanted = ToolTarget(name, namespace if kind == "function" else None, custom=kind == "custom")
    found = [tool for tool in offered.tools if tool.target == wanted]
    if not found and kind == "function" and namespace is None:  # a namespace's child named alone: if only one
        found = [tool for tool in offered.tools if tool.target.name == name and not tool.target.custom]
    if len(found) != 1:
        shown = name if namespace is None else f"{namespace}/{name}"
        raise _refuse(f"{where} names the {kind} tool {shown!r}, which is not among the tools offered")
    return found[0].function.name


def read_tool_choice(raw: Any, offered: OfferedTools) -> tuple[list[Tool], Any]:
    """(the tools to offer, chat's ``tool_choice``: None, a mode or a named function) for ``raw``."""
    tools = [offered_tool.tool for offered_tool in offered.tools]
    if raw is None:
        return tools, None
    if isinstance(raw, str):
        if raw not in ("none", "auto", "required"):
            raise _refuse("must be 'none', 'auto', 'required' or an object")
        if raw == "required" and not tools:
            raise _refuse("'required' needs a function or custom tool in tools to call")
        return tools, raw
    choice = an_object(raw, PARAM)
    kind = choice.get("type")
    if kind in ("function", "custom"):
        return tools, {"type": "function", "function": {"name": _chosen(offered, choice, PARAM)}}
    if kind == "allowed_tools":
        mode = choice.get("mode", "auto")
        if mode not in ("auto", "required"):
            raise _refuse("mode: must be 'auto' or 'required'")
        listed = a_list(choice.get("tools"), "tool_choice.tools")
        allowed = {_chosen(offered, entry, at("tool_choice.tools", index)) for index, entry in enumerate(listed)}
        if not allowed:
            raise _refuse("tools: must list at least one tool")
        return [tool for tool in tools if tool.function.name in allowed], mode
    raise _refuse(f"{kind!r} tools are not available here (hosted tools run on OpenAI's servers); use 'auto', "
                  "'required', 'none', or a function or custom tool")
