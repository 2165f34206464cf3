"""Wrappers (prompt formats) as data: load ``wrappers/<name>.toml`` + its Jinja template, and render.

A wrapper's TOML says how a model family lays out a conversation: which template renders the turns,
the end-of-turn markers (``stop``), the reserved markers that client text must not be able to forge,
what follows the assistant header for a plain-text answer (``text_prefix``), and the MemGPT names it
answers to (``[aliases]``). Its ``[answer]`` table says how the model answers: ``call`` (``required``,
``optional`` or ``text``), the call ``syntax`` (a module in llmproxy/syntaxes/) and that syntax's own
options. Templates render in an immutable sandbox and see only plain data prepared here.

Wrappers are found on a search path (llmproxy._data): the user's folders first, then the built-in
ones, so a user's ``wrappers/<name>.toml`` shadows a built-in wrapper of the same name.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from llmproxy.common.bounded_cache import MIB, bounded_cache
from llmproxy.common.nesting import client_json
from llmproxy._data import search_dirs
from llmproxy.prompts._leaks import own_text
from llmproxy.errors import ConfigurationError, TemplateError
from llmproxy.syntaxes import create_syntax
from llmproxy.syntaxes.base import AnswerShape, CallMode, CallSyntax, Decide, Reasoning
from llmproxy.types import (
    AssistantMessage,
    FunctionCall,
    FunctionDefinition,
    FunctionMessage,
    Message,
    SystemMessage,
    ToolMessage,
    UserMessage,
    content_text,
)


@dataclass(frozen=True)
class WrapperSpec:
    """The TOML half of a wrapper; ``origin`` is the file it came from."""

    name: str
    description: str
    template: str
    call: CallMode
    syntax: CallSyntax | None  # None only for plain-text wrappers
    answer: dict[str, Any]  # the [answer] table as written (call, syntax and the syntax's options)
    text_prefix: str
    stop: tuple[str, ...]
    reserved: tuple[str, ...]
    options: dict[str, Any]
    aliases: dict[str, dict[str, Any]]
    origin: Path
    reasoning: Reasoning | None = None  # the family's reasoning block, if it has one


@dataclass(frozen=True)
class Rendered:
    """A rendered prompt: ``prompt`` ends with ``shape.prefix``, which the model's output continues;
    ``stop`` are the strings that end the answer."""

    prompt: str
    shape: AnswerShape
    stop: tuple[str, ...]

    @property
    def prefix(self) -> str:
        return self.shape.prefix

    @property
    def call(self) -> CallMode:
        return self.shape.call


@dataclass(frozen=True)
class Resolved:
    """A wrapper looked up by name or alias; ``grammar`` is the alias's grammar setting (None = route's)."""

    wrapper: Wrapper
    grammar: bool | None = None

    def grammar_mode(self, asked: str | None = None) -> str:
        """The grammar mode to use: what was asked, else the alias's setting, else ``auto``."""
        return asked or ("none" if self.grammar is False else "auto")


# --- loading ---------------------------------------------------------------------------------

_SPEC_KEYS = {"description", "template", "text_prefix", "stop", "reserved", "options", "aliases", "answer",
              "reasoning"}
_CALL_MODES = ("required", "optional", "text")


def _read_spec(path: Path) -> WrapperSpec:
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"wrapper file {path} cannot be read: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"wrapper file {path} is not valid TOML: {exc}") from exc
    unknown = set(raw) - _SPEC_KEYS
    if unknown:
        raise ConfigurationError(f"wrapper file {path} has unknown keys: {sorted(unknown)}")
    answer = dict(raw.get("answer", {}))
    written = dict(answer)
    call = answer.pop("call", "required")
    if call not in _CALL_MODES:
        raise ConfigurationError(f"wrapper file {path}: [answer] call must be one of {', '.join(_CALL_MODES)}")
    syntax_name = answer.pop("syntax", None)
    if syntax_name is None and call != "text":
        raise ConfigurationError(f"wrapper file {path}: [answer] needs a syntax (how the model writes calls)")
    syntax = create_syntax(syntax_name, answer, f"wrapper file {path}") if syntax_name else None
    reasoning = raw.get("reasoning")
    if reasoning is not None and (set(reasoning) - {"open", "close"} or not all(
            isinstance(reasoning.get(key), str) and reasoning.get(key) for key in ("open", "close"))):
        raise ConfigurationError(f"wrapper file {path}: [reasoning] takes two tags, open and close")
    try:
        return WrapperSpec(
            name=path.stem,
            description=raw["description"],
            template=raw.get("template", path.stem),
            call=call,
            syntax=syntax,
            answer=written,
            text_prefix=raw.get("text_prefix", ""),
            stop=tuple(raw.get("stop", ())),
            reserved=tuple(raw.get("reserved", ())),
            options=dict(raw.get("options", {})),
            aliases={alias: dict(opts) for alias, opts in raw.get("aliases", {}).items()},
            origin=path,
            reasoning=Reasoning(reasoning["open"], reasoning["close"]) if reasoning else None,
        )
    except KeyError as exc:
        raise ConfigurationError(f"wrapper file {path} is missing the key {exc}") from exc


_DICT_METHODS = frozenset(dir(dict))  # ``schema.items()`` is the method, even where a schema has an "items" key


class _Environment(ImmutableSandboxedEnvironment):
    """The immutable sandbox, with a fast path for the plain dicts this module hands to templates."""

    def getattr(self, obj: Any, attribute: str) -> Any:
        if type(obj) is dict and attribute in obj and attribute not in _DICT_METHODS:
            return obj[attribute]  # a data key, never a method: nothing for the sandbox to guard
        return super().getattr(obj, attribute)


@cache
def environment() -> ImmutableSandboxedEnvironment:
    """The sandboxed Jinja environment wrapper templates render in (the wrappers/ folders on the search
    path); the prompts package's model templates take its ``_tools.jinja`` listing from it."""
    env = _Environment(
        loader=jinja2.FileSystemLoader([str(path) for path in search_dirs("wrappers")]),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=False,
        trim_blocks=True,  # block tags do not leave newlines behind: templates spell out every one
        lstrip_blocks=True,
        autoescape=False,
        auto_reload=False,  # no file check on every {% import %} of every render
    )
    env.filters["tojson_pretty"] = lambda value: json.dumps(value, indent=2, ensure_ascii=False)
    env.filters["tojson"] = _tojson  # Jinja's own escapes <, > and & for HTML, which a prompt must not
    return env


def _tojson(value: Any, indent: int | None = None) -> str:
    """JSON as a model reads it: UTF-8 text, nothing escaped for HTML."""
    return json.dumps(value, indent=indent, ensure_ascii=False)


@cache
def _catalogue() -> dict[str, tuple[WrapperSpec, dict[str, Any]]]:
    """Every name and alias -> (spec, alias options). Earlier folders on the search path win."""
    specs: dict[str, WrapperSpec] = {}
    for folder in search_dirs("wrappers"):
        for path in sorted(folder.glob("*.toml")):
            if path.stem not in specs:
                specs[path.stem] = _read_spec(path)
    names: dict[str, tuple[WrapperSpec, dict[str, Any]]] = {name: (spec, {}) for name, spec in specs.items()}
    for spec in specs.values():
        for alias, options in spec.aliases.items():
            if alias in names and names[alias][0] is not spec:
                raise ConfigurationError(f"wrapper alias {alias!r} ({spec.origin}) is claimed by two wrappers")
            names[alias] = (spec, options)
    return names


def clear_caches() -> None:
    """Forget loaded wrappers, so the search path is read again (after installing a user wrapper)."""
    for cached in (_catalogue, environment, _wrapper_for, own_text):
        cached.cache_clear()


def template_path(name: str) -> Path:
    """The file of template ``name`` (``chatml.jinja``) that rendering uses: first on the search path."""
    for folder in search_dirs("wrappers"):
        if (folder / name).is_file():
            return folder / name
    raise ConfigurationError(f"template {name!r} not found in {', '.join(map(str, search_dirs('wrappers')))}")


def wrapper_specs() -> list[WrapperSpec]:
    """All wrappers, by name."""
    return sorted({spec.name: spec for spec, _ in _catalogue().values()}.values(), key=lambda s: s.name)


@cache
def _wrapper_for(name: str) -> Wrapper:
    spec = _catalogue()[name][0]
    try:
        template = environment().get_template(f"{spec.template}.jinja")
    except jinja2.TemplateNotFound as exc:
        raise ConfigurationError(f"wrapper {spec.name!r}: template {exc.name!r} not found") from exc
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateError(f"wrapper {spec.name!r}: template syntax error at line {exc.lineno}: {exc}") from exc
    return Wrapper(spec, template)


def load_wrapper(name: str) -> Resolved:
    """The wrapper called ``name`` (a wrapper name or one of its MemGPT aliases)."""
    entry = _catalogue().get(name)
    if entry is None:
        known = ", ".join(sorted(_catalogue()))
        raise ConfigurationError(f"unknown wrapper {name!r}; known wrappers and aliases: {known}")
    spec, options = entry
    return Resolved(_wrapper_for(spec.name), options.get("grammar"))


# --- role-forgery defence --------------------------------------------------------------------


def neutralise(text: str, markers: Sequence[str]) -> str:
    """Break every reserved marker in ``text`` with a visible backslash after its first character.

    ``<|im_start|>`` becomes ``<\\|im_start|>`` and ``\\nUSER:`` becomes ``\\n\\USER:``: the reader still
    sees what was written, but the text can no longer open or close a turn.
    """
    pattern = _marker_pattern(tuple(markers))
    if pattern is None:
        return text
    return pattern.sub(lambda m: m.group(0)[0] + "\\" + m.group(0)[1:], text)


def neutralise_json(value: Any, markers: Sequence[str]) -> Any:
    """``value`` (plain JSON data: a tool definition) with every string in it neutralised, keys included:
    tool names, descriptions, parameter names and schemas reach the prompt as much as messages do."""
    if isinstance(value, str):
        return neutralise(value, markers)
    if isinstance(value, dict):
        return {neutralise(key, markers): neutralise_json(item, markers) for key, item in value.items()}
    if isinstance(value, list):
        return [neutralise_json(item, markers) for item in value]
    return value


@cache
def _marker_pattern(markers: tuple[str, ...]) -> re.Pattern[str] | None:
    if not markers:
        return None
    ordered = sorted(set(markers), key=len, reverse=True)  # longest first: "\nUSER (" before "\nUSER"
    return re.compile("|".join(_marker_regex(marker) for marker in ordered))


def _marker_regex(marker: str) -> str:
    """A marker as a pattern. A line-start word marker (``\nASSISTANT:``) also matches its near
    forms - any case, spaces before or after the word (``\n assistant :``) - which a model reads as the
    same turn; special tokens (``<|im_start|>``) match exactly."""
    word = re.fullmatch(r"\n([A-Za-z][A-Za-z ]*?)( ?[:(])", marker)
    if word is None:
        return re.escape(marker)
    name = r"\s+".join(re.escape(part) for part in word.group(1).split())
    return rf"\n[ \t]*(?i:{name})[ \t]*{re.escape(word.group(2).strip())}"


# --- the data a template sees ----------------------------------------------------------------


def _json_or_none(text: str | None) -> Any:
    if not text:
        return None
    try:
        return client_json(text, strict=False)
    except ValueError:  # not JSON, or too deep to walk (llmproxy.common.nesting)
        return None


JSON_INDENT = 2  # how JSON message bodies (events, tool results) are shown to the model


@bounded_cache(16 * MIB)
def _pretty(text: str, indent: int) -> str:
    """JSON text re-printed with ``indent`` (agents resend their history every turn, so this is cached);
    anything that is not JSON comes back unchanged."""
    parsed = _json_or_none(text)
    return text if parsed is None else json.dumps(parsed, indent=indent, ensure_ascii=False)


def _describe_type(schema: dict[str, Any]) -> str:
    """A short human description of a parameter's JSON schema type, e.g. ``array of string``."""
    if "enum" in schema:
        return "one of " + ", ".join(json.dumps(v, ensure_ascii=False) for v in schema["enum"])
    if "const" in schema:
        return "always " + json.dumps(schema["const"], ensure_ascii=False)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " or ".join(_describe_type(option) for option in schema[key])
    kind = schema.get("type", "any")
    if isinstance(kind, list):
        return " or ".join(kind)
    if kind == "array" and isinstance(schema.get("items"), dict):
        return f"array of {_describe_type(schema['items'])}"
    return kind


def function_view(function: FunctionDefinition, markers: Sequence[str] = ()) -> dict[str, Any]:
    """A function as the templates list it: name, description, and typed parameters (client text, so
    every piece of it is neutralised)."""
    return neutralise_json(_function_view(function), markers)


def _function_view(function: FunctionDefinition) -> dict[str, Any]:
    schema = function.parameters
    required = set(schema.get("required", ()))
    params = [
        {
            "name": name,
            "type": _describe_type(prop if isinstance(prop, dict) else {}),
            "required": name in required,
            "description": (prop.get("description") or "").strip() if isinstance(prop, dict) else "",
        }
        for name, prop in (schema.get("properties") or {}).items()
    ]
    return {"name": function.name, "description": (function.description or "").strip(), "params": params}


def _message_view(role: str, text: str, message: str | None = None, name: str | None = None,
                  event: str | None = None, calls: Sequence[str] = (), reasoning: str = "") -> dict[str, Any]:
    """One history message as templates see it.

    ``text`` is what the turn shows (content, or a pretty-printed JSON body); ``message`` is the
    ``message`` field of a JSON user event when there is one, else ``text``; ``event`` is that event's
    ``type`` (user_message, heartbeat, login...); ``calls`` are past calls as the syntax writes them;
    ``turn`` is what an assistant turn shows: its text, then its calls, a line each; ``reasoning`` is
    an assistant turn's reasoning, for templates that replay it.
    """
    turn = "\n".join([text, *calls] if text else calls)
    return {"role": role, "text": text, "message": text if message is None else message, "name": name,
            "event": event, "calls": list(calls), "turn": turn, "reasoning": reasoning}


class Wrapper:
    """A loaded wrapper: spec + compiled template."""

    def __init__(self, spec: WrapperSpec, template: jinja2.Template) -> None:
        self.spec = spec
        self._template = template
        self._views = bounded_cache(16 * MIB)(self._build_view)

    @property
    def name(self) -> str:
        return self.spec.name

    def shape(self, call: CallMode, functions: Sequence[FunctionDefinition], allowed: Sequence[str] = (), *,
              named: bool = False, parallel: bool = False, first_message: bool = False,
              primed: bool = True, decide: Decide = "free") -> AnswerShape:
        """The answer shape of a request in call mode ``call`` (see CallSyntax.shape); ``decide``: how an
        optional call is decided, for syntaxes that can choose (llmproxy.decide)."""
        syntax = self.spec.syntax
        if call == "text" or syntax is None:
            return AnswerShape(syntax, "text", tuple(functions), prefix=self.spec.text_prefix)
        shape = syntax.shape(call, functions, allowed or [f.name for f in functions], named=named,
                             parallel=parallel, first_message=first_message, primed=primed)
        return replace(shape, decide=decide) if call == "optional" and syntax.can_choose else shape

    def stops(self, shape: AnswerShape) -> tuple[str, ...]:
        """Where the answer ends: the format's end-of-turn markers, and the syntax's own cut after a call
        (never applied to a plain-text answer, which may well contain it)."""
        if shape.call == "text" or shape.syntax is None:
            return self.spec.stop
        return self.spec.stop + shape.syntax.call_stops()

    def render(self, messages: Sequence[Message], shape: AnswerShape, *, first_message: bool = False,
               reasoning: bool = True) -> Rendered:
        """Render the conversation into the prompt this model family expects, ending with the shape's prefix.
        ``reasoning=False`` asks a family that reasons not to (where its template can)."""
        system, history = self._split_system(messages)
        offered = shape.functions if shape.call != "text" else ()
        definitions = "\n".join(f.definition_json for f in offered)
        reserved = self.spec.reserved
        context = {
            "system": system,
            "messages": [self._message_view(m) for m in history],
            **_offered_views(definitions, reserved),
            "call": shape.call,
            "inner_thoughts": "none",
            "first_message": first_message,
            "reasoning": reasoning,
            "options": self.spec.options,
        }
        if self.spec.syntax is not None:
            context.update(self.spec.syntax.template_context())
        if offered:
            context["instructions"] = _instructions(definitions, reserved, context["inner_thoughts"], shape.call)
        try:
            body = self._template.render(context)
        except jinja2.TemplateError as exc:
            raise TemplateError(f"wrapper {self.name!r} failed to render: {exc}") from exc
        if self.spec.reasoning is not None:
            block = self.spec.reasoning
            opened = body.rfind(block.open) > body.rfind(block.close)  # the template opened the block
            shape = replace(shape, reasoning=replace(block, opened=opened))
        return Rendered(prompt=body + shape.prefix, shape=shape, stop=self.stops(shape))

    def _split_system(self, messages: Sequence[Message]) -> tuple[str, list[Message]]:
        """The leading system messages form the system prompt; later ones stay in the history."""
        system_parts: list[str] = []
        index = 0
        while index < len(messages) and isinstance(messages[index], SystemMessage):
            system_parts.append(content_text(messages[index].content) or "")
            index += 1
        return "\n".join(part.strip() for part in system_parts), list(messages[index:])

    def _message_view(self, message: Message) -> dict[str, Any]:
        assistant = isinstance(message, AssistantMessage)
        calls = tuple((c.name, c.arguments) for c in message.calls()) if assistant else ()
        return self._views(type(message), message.role, content_text(message.content) or "",
                           getattr(message, "name", None), calls, (assistant and message.thought()) or "")

    def _build_view(self, kind: type, role: str, text: str, name: str | None,
                    calls: tuple[tuple[str, str], ...], reasoning: str = "") -> dict[str, Any]:
        """A message's view from what it holds (``_views`` caches it: agents resend their history
        every turn, and templates cannot change what they are given)."""
        clean = lambda text: neutralise(text, self.spec.reserved)  # noqa: E731
        if kind is SystemMessage:
            return _message_view("system", text.strip())
        if kind in (ToolMessage, FunctionMessage):
            shown = clean(_pretty(text, JSON_INDENT).strip())
            return _message_view(role, shown, name=name)
        if kind is UserMessage:
            shown = _pretty(text, JSON_INDENT)
            parsed = _json_or_none(text)
            is_event = isinstance(parsed, dict)
            event = parsed.get("type") if is_event and isinstance(parsed.get("type"), str) else None
            simple = parsed["message"] if is_event and isinstance(parsed.get("message"), str) else shown
            return _message_view("user", clean(shown.strip()), clean(simple.strip()), _role_name(name), event)
        assert kind is AssistantMessage
        syntax = self.spec.syntax
        thought = clean(reasoning.strip())
        if syntax is None:
            return _message_view("assistant", clean(text.strip()), name=_role_name(name), reasoning=thought)
        # The client's text is neutralised before the syntax writes it: the syntax's own markers
        # (<tool_call>, [TOOL_CALLS]...) are reserved words too, and must stay intact.
        neutral = [FunctionCall(name=clean(call), arguments=_neutral_arguments(arguments, self.spec.reserved))
                   for call, arguments in calls]
        turn = syntax.render_turn(clean(text), neutral)
        return _message_view("assistant", turn.text.strip(), name=_role_name(name), calls=turn.calls,
                             reasoning=thought)


@bounded_cache(16 * MIB)
def _neutral_arguments(arguments: str, reserved: tuple[str, ...]) -> str:
    """A past call's arguments (JSON text) with every string in them neutralised; text that is not JSON
    is neutralised as it stands. Cached: agents resend their whole history every turn."""
    try:
        parsed = client_json(arguments) if arguments else {}
    except ValueError:
        return neutralise(arguments, reserved)
    return json.dumps(neutralise_json(parsed, reserved), ensure_ascii=False)


@bounded_cache(16 * MIB)
def _offered_views(definitions: str, reserved: tuple[str, ...]) -> dict[str, list[Any]]:
    """The offered functions (one JSON object a line) as templates see them, neutralised: ``functions``
    (typed parameter lists) and ``tools`` (the definitions as JSON). Cached: agents offer the same
    functions every turn; the sandbox keeps templates from changing what they are given."""
    # json.loads, not pydantic's parser: that refuses an escaped lone surrogate, which the prompt's check reports
    offered = [FunctionDefinition.model_validate(json.loads(line)) for line in definitions.split("\n") if line]
    return {"functions": [function_view(f, reserved) for f in offered],
            "tools": [neutralise_json(f.model_dump(exclude_none=True), reserved) for f in offered]}


@bounded_cache(8 * MIB)
def _instructions(definitions: str, reserved: tuple[str, ...], inner_thoughts: str, call: str) -> str:
    """The function list and call instructions the MemGPT-style wrappers write (``_common.jinja``'s
    ``instructions``), as templates get them (``instructions``): written once per offered functions, as
    agents offer the same ones every turn."""
    functions = _offered_views(definitions, reserved)["functions"]
    return str(environment().get_template("_common.jinja").module.instructions(functions, inner_thoughts, call))


def cut_at_markers(text: str, markers: Sequence[str]) -> str:
    """Drop everything from the first end-of-turn marker on (backends do not always strip stops)."""
    cut = len(text)
    for marker in markers:
        position = text.find(marker)
        if position != -1:
            cut = min(cut, position)
    return text[:cut]


# Role words a name must not become: a client's "name" would otherwise open a privileged turn.
_PRIVILEGED_ROLES = frozenset({"system", "developer", "assistant", "tool", "function", "ipython", "model"})


def _role_name(name: str | None) -> str | None:
    """A message ``name`` usable as a role word (AutoGen-style); anything else, and the name of a
    privileged role, is dropped."""
    if not name:
        return None
    cleaned = re.sub(r"[^a-z0-9_-]", "", name.lower())
    return cleaned if cleaned and cleaned not in _PRIVILEGED_ROLES else None
