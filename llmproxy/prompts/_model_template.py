"""``wrapper = "auto"``: the model's own chat template (Hugging Face Jinja, read from its GGUF file or its
server) used as the wrapper.

The template renders in the immutable sandbox, set up as Hugging Face's ``apply_chat_template`` sets
it up (the same variables, functions and ``tojson``): the prompt is byte for byte what the model's own
tooling renders, but for client text neutralised and a leading BOS left to the backend. What a TOML
file says for a written wrapper is read from the template text here: the call syntax (``<tool_call>``
means Hermes-style calls, ``[TOOL_CALLS]`` Mistral's...), the end-of-turn markers (stop strings), the
special tokens client text must not forge, and a reasoning block (``<think>``, ``[THINK]``). A route
may name the call syntax instead. A template that knows no tools (SmolLM2's) gets the tool list and
the call instructions of the syntax (``json`` unless the route names another) in its system message,
and past calls written as that syntax writes them.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from functools import cache, lru_cache
from pathlib import Path
from typing import Any, NoReturn

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

from llmproxy.common.nesting import client_json
from llmproxy.backends.base import Backend, ChatTemplate
from llmproxy.errors import ConfigurationError, TemplateError
from llmproxy.prompts._template_roles import fit_roles, probe_roles

# The wrappers' own environment gives the tool listing the chatml-json wrapper uses (``_tools.jinja``).
from llmproxy.prompts._wrappers import Rendered, Wrapper, WrapperSpec, environment, neutralise, neutralise_json
from llmproxy.syntaxes import SYNTAX_NAMES, create_syntax
from llmproxy.syntaxes.base import AnswerShape, Reasoning
from llmproxy.types import (
    AssistantMessage,
    FunctionCall,
    FunctionMessage,
    Message,
    SystemMessage,
    ToolMessage,
    content_text,
)

AUTO = "auto"
MAX_TEMPLATE_BYTES = 256 * 1024  # real templates are a few KB; a huge one is a mistake or an attack
NAME_A_WRAPPER = "name a wrapper instead, e.g. --wrapper chatml-json ('llmproxy wrappers' lists them)"


class ModelTemplateError(TemplateError):
    """The model's own template refused the request (its ``raise_exception``, or a failure on these
    messages): the request does not fit that model's format, so it is the client's to change."""

    status_code = 400
    error_type = "invalid_request_error"


# --- a sandbox compatible with Hugging Face chat templates -------------------------------------


class _IgnoreGeneration(jinja2.ext.Extension):
    """Hugging Face's ``{% generation %}`` tag marks training targets; rendering keeps its body as is."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> list[jinja2.nodes.Node]:
        parser.stream.skip(1)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


def _raise_exception(message: str) -> NoReturn:
    raise jinja2.TemplateError(message)


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    """Hugging Face's ``tojson``: its options, and no HTML escaping (Jinja's own escapes ``<``)."""
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


@cache
def _hf_environment() -> ImmutableSandboxedEnvironment:
    # Hugging Face's settings: lenient undefined variables (templates test ``x is defined``), blocks trimmed.
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[_IgnoreGeneration, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now)
    return env


def _compile(text: str, source: str) -> jinja2.Template:
    size = len(text.encode("utf-8"))
    if size > MAX_TEMPLATE_BYTES:
        raise ConfigurationError(f"the model's chat template ({source}) is {size} bytes, over the "
                                 f"{MAX_TEMPLATE_BYTES} llmproxy reads; {NAME_A_WRAPPER}")
    try:
        return _hf_environment().from_string(text)
    except jinja2.TemplateError as exc:
        raise ConfigurationError(f"the model's chat template ({source}) does not compile: {exc}; "
                                 f"{NAME_A_WRAPPER}") from exc


# --- what the template text tells --------------------------------------------------------------

# Tokens that look special: <|im_start|>, DeepSeek's <｜User｜>, [INST], <start_of_turn>, <tool_call>.
_SPECIAL = re.compile(r"<\|[^<>|\s]{1,40}\|>|<｜[^<>｜]{1,40}｜>|\[/?[A-Z][A-Z_]{1,30}\]|</?[a-z]+(?:_[a-z]+)+>"
                      r"|</?(?:think|tools)>")
# Markers that end a turn or open the next one: the answer stops at any the template uses.
_TURN_MARKERS = ("<|im_end|>", "<|im_start|>", "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "<|start_header_id|>",
                 "<|end|>", "<|user|>", "<|endoftext|>", "</s>", "[INST]", "<end_of_turn>", "<start_of_turn>",
                 "<|END_OF_TURN_TOKEN|>", "<｜end▁of▁sentence｜>", "<｜User｜>")


def _detected_syntax(text: str) -> tuple[str, dict[str, Any]] | None:
    """The call syntax the template writes calls in, and its options; None when it knows no tools."""
    if "<function=" in text:  # Qwen3-Coder: <tool_call><function=...>
        return "xml", {}
    if "<tool_call>" in text:
        return "hermes", {}
    if "[TOOL_CALLS]" in text:
        return ("mistral-v11" if "[ARGS]" in text else "mistral"), {}
    if "<|tool_call|>" in text:  # Granite 3: <|tool_call|>[{"name": ..., "arguments": ...}]
        return "mistral", {"trigger": "<|tool_call|>"}
    if "<|python_tag|>" in text or ('"parameters"' in text and "ipython" in text):
        return "llama3", {}
    return None


# The tags of the reasoning blocks families write: DeepSeek R1's and Qwen 3's, Magistral's.
_REASONING_TAGS = (("<think>", "</think>"), ("[THINK]", "[/THINK]"))


def _reasoning(text: str) -> Reasoning | None:
    return next((Reasoning(open, close) for open, close in _REASONING_TAGS if open in text), None)


def _token(text: str | None) -> str | None:
    """A BOS/EOS text fit to reserve and stop at: not empty, blank or a lone character."""
    return text if text and len(text.strip()) > 2 else None


# --- the wrapper -----------------------------------------------------------------------------


def backend_wrapper(backend: Backend, syntax: str | None = None) -> Wrapper:
    """The ``auto`` wrapper of ``backend``'s model: its own chat template, as discovered; ``syntax``:
    the call syntax the route names, else the one read from the template."""
    found = backend.discover()  # answered once per backend; here it is the answer already had
    template = backend.chat_template()
    if template is None:
        reason = "did not answer" if not found.up else "exposes no chat template"
        raise ConfigurationError(f"wrapper {AUTO!r} renders the model's own chat template, and the {backend.name} "
                                 f"backend {reason}; {NAME_A_WRAPPER}")
    return model_wrapper(template, syntax)


def model_wrapper(template: ChatTemplate, syntax_name: str | None = None) -> ModelTemplateWrapper:
    """A wrapper rendering ``template``; its stops and reserved markers read from the text, and its call
    syntax too unless ``syntax_name`` names one. One per template and syntax."""
    return _model_wrapper(template, syntax_name)


@lru_cache(maxsize=16)
def _model_wrapper(template: ChatTemplate, syntax_name: str | None) -> ModelTemplateWrapper:
    detected = _detected_syntax(template.tool_use_text or template.text)
    where = f"the model's chat template ({template.source})"
    if syntax_name:
        syntax = create_syntax(syntax_name, {}, "the route's syntax")
    else:
        syntax = create_syntax(*(detected or ("json", {})), where)
    if detected is None and syntax.instructions is None:
        raise ConfigurationError(
            f"{where} knows no tools, so llmproxy teaches the model a call syntax in its system message, and "
            f"there are no such instructions for the {syntax.name} syntax; name one that has them "
            f"({', '.join(_teachable())}) or a wrapper written for the model")
    texts = template.text + (template.tool_use_text or "")
    bos, eos = _token(template.bos_token), _token(template.eos_token)
    specials = [*_SPECIAL.findall(texts), *filter(None, (bos, eos))]
    reserved = [*specials, *getattr(syntax, "preserved_tokens", ())]
    reasoning = _reasoning(texts)
    if reasoning is not None:
        reserved += [reasoning.open, reasoning.close]
    stop = [eos, *(marker for marker in _TURN_MARKERS if marker in texts)]
    spec = WrapperSpec(
        name=AUTO,
        description=f"{where}, calls in the {syntax.name} syntax" + (" (the route's)" if syntax_name else "")
                    + ("" if detected else " (the template knows no tools: they go into its system message)"),
        template=AUTO, call="optional", syntax=syntax,
        answer={"syntax": syntax.name, "call": "optional", **(detected[1] if detected and not syntax_name else {})},
        text_prefix="", stop=tuple(dict.fromkeys(filter(None, stop))), reserved=tuple(dict.fromkeys(reserved)),
        options={}, aliases={}, origin=Path(template.source), reasoning=reasoning)
    tool_template = _compile(template.tool_use_text, where) if template.tool_use_text else None
    return ModelTemplateWrapper(spec, _compile(template.text, where), tool_template, template,
                                knows_tools=detected is not None)


def _teachable() -> list[str]:
    """The call syntaxes a model whose template knows no tools can be taught."""
    return [name for name in SYNTAX_NAMES if create_syntax(name, {}, "registry").instructions is not None]


class ModelTemplateWrapper(Wrapper):
    """A wrapper whose template is the model's own; ``render`` gives it Hugging Face's variables."""

    def __init__(self, spec: WrapperSpec, template: jinja2.Template, tool_template: jinja2.Template | None,
                 chat: ChatTemplate, *, knows_tools: bool) -> None:
        super().__init__(spec, template)
        self._tool_template = tool_template
        self._chat = chat
        self._writes_bos = "bos_token" in chat.text + (chat.tool_use_text or "")
        self.knows_tools = knows_tools
        self._roles = probe_roles(lambda messages: template.render(self._context(messages, None, True)),
                                  tools_known=knows_tools)

    def render(self, messages: Sequence[Message], shape: AnswerShape, *, first_message: bool = False,
               reasoning: bool = True) -> Rendered:
        offered = shape.functions if shape.call != "text" else ()
        tools = [neutralise_json(f.model_dump(exclude_none=True), self.spec.reserved) for f in offered]
        history = self._history(messages)
        if tools and not self.knows_tools:
            history = _with_system(history, self._instructions(tools, shape))
        listed = [{"type": "function", "function": tool} for tool in tools] if tools and self.knows_tools else None
        context = self._context(fit_roles(history, self._roles), listed, reasoning)
        template = self._tool_template if tools and self._tool_template is not None else self._template
        try:
            body = template.render(context)
        except Exception as exc:  # noqa: BLE001 - the model's template is foreign code: any failure is its own
            raise ModelTemplateError(f"the model's chat template ({self._chat.source}) failed to render "
                                     f"this request: {exc}") from exc
        bos = self._chat.bos_token
        if bos and self._writes_bos and body.startswith(bos):
            body = body[len(bos):]  # the backend adds BOS itself, as it does for every other wrapper
        if self.spec.reasoning is not None:
            block = self.spec.reasoning
            opened = body.rfind(block.open) > body.rfind(block.close)  # the template opened the block
            shape = replace(shape, reasoning=replace(block, opened=opened))
        return Rendered(prompt=body + shape.prefix, shape=shape, stop=self.stops(shape))

    def _context(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                 reasoning: bool) -> dict[str, Any]:
        """What Hugging Face's ``apply_chat_template`` gives a template (and Qwen 3's thinking switch)."""
        return {"messages": messages, "tools": tools, "add_generation_prompt": True,
                "bos_token": self._chat.bos_token or "", "eos_token": self._chat.eos_token or "",
                "enable_thinking": reasoning}

    def _instructions(self, tools: list[dict[str, Any]], shape: AnswerShape) -> str:
        """The tool list and call instructions of the wrapper's syntax, worded as the written wrappers
        word them (wrappers/_tools.jinja)."""
        macro = getattr(environment().get_template("_tools.jinja").module, self.spec.syntax.instructions)
        given = {"tools": tools, "call": shape.call, **self.spec.syntax.template_context()}
        return str(macro(**{name: given[name] for name in macro.arguments if name in given})).strip()

    def _history(self, messages: Sequence[Message]) -> list[dict[str, Any]]:
        """The messages as Hugging Face templates take them (OpenAI's shape, call arguments as objects),
        client text neutralised. A template that knows no tools sees past calls written in its syntax."""
        clean = lambda text: neutralise(text, self.spec.reserved)  # noqa: E731
        names: dict[str, str] = {}  # call id -> function name, for the tool results that answer it
        history: list[dict[str, Any]] = []
        for index, message in enumerate(messages):
            text = content_text(message.content) or ""
            if isinstance(message, SystemMessage):
                history.append({"role": "system", "content": text})  # the client's own instructions
            elif isinstance(message, AssistantMessage):
                history.append(self._assistant(message, index, clean(text), names))
            elif isinstance(message, ToolMessage):
                call_id = _template_id(message.tool_call_id)
                history.append(_result(clean(text), call_id, names.get(call_id)))
            elif isinstance(message, FunctionMessage):  # the legacy form answers the latest call of its name
                name = clean(message.name)
                call_id = next((i for i, called in reversed(names.items()) if called == name), "")
                history.append(_result(clean(text), call_id, name))
            else:
                history.append({"role": "user", "content": clean(text)}
                               | ({"name": clean(message.name)} if message.name else {}))
        return history

    def _assistant(self, message: AssistantMessage, index: int, text: str, names: dict[str, str]) -> dict[str, Any]:
        reserved = self.spec.reserved
        calls = [(neutralise(c.name, reserved), _arguments(c.arguments, reserved)) for c in message.calls()]
        turn: dict[str, Any] = {"role": "assistant", "content": text}
        if message.thought():  # where the template replays reasoning (Qwen 3's, in a tool loop)
            turn["reasoning_content"] = neutralise(message.thought(), reserved)
        if message.name:
            turn["name"] = neutralise(message.name, reserved)
        if not calls:
            return turn
        ids = [_template_id(c.id) for c in message.tool_calls or []]
        ids += [_template_id(f"{index}:{name}") for name, _ in calls[len(ids):]]  # a legacy function_call has none
        names.update(zip(ids, (name for name, _ in calls)))
        if not self.knows_tools:
            written = self.spec.syntax.render_turn(text, [FunctionCall(name=name, arguments=_json_text(value))
                                                          for name, value in calls])
            return turn | {"content": "\n".join(filter(None, [written.text.strip(), *written.calls]))}
        return turn | {"tool_calls": [{"id": call_id, "type": "function",
                                       "function": {"name": name, "arguments": value}}
                                      for call_id, (name, value) in zip(ids, calls)]}


def _result(text: str, call_id: str, name: str | None) -> dict[str, Any]:
    """A tool result; ``name`` (the function that gave it) where known, for templates that show it."""
    return {"role": "tool", "content": text, "tool_call_id": call_id} | ({"name": name} if name else {})


def _with_system(history: list[dict[str, Any]], instructions: str) -> list[dict[str, Any]]:
    """``history`` with ``instructions`` after its system message's text (a new system message if none)."""
    if history and history[0]["role"] == "system":
        text = history[0]["content"]
        return [{**history[0], "content": f"{text}\n\n{instructions}" if text.strip() else instructions},
                *history[1:]]
    return [{"role": "system", "content": instructions}, *history]


def _arguments(text: str, reserved: Sequence[str]) -> Any:
    """A past call's arguments as an object, as Hugging Face templates take them (``| tojson`` writes
    them), every string in them neutralised; arguments that are not JSON stay text, neutralised too.
    Parsed first: a marker written with JSON escapes (``\\u003c|im_start|>``) must not come back whole."""
    try:
        value = client_json(text) if text else {}
    except ValueError:
        return neutralise(text, reserved)
    return neutralise_json(value, reserved)


def _json_text(value: Any) -> str:
    """Arguments as JSON text again, for the syntax to write (text that was not JSON stays as it was)."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _template_id(call_id: str) -> str:
    """A call id as templates accept it: Mistral's demand nine letters or digits, so any other id
    becomes nine hex digits of its hash (the same for the call and the result that answers it)."""
    return call_id if re.fullmatch(r"[A-Za-z0-9]{9}", call_id) else hashlib.sha256(call_id.encode()).hexdigest()[:9]
