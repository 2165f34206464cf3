"""Wrappers (prompt formats) as data: load ``wrappers/<name>.toml`` + its Jinja template, render, unwrap.

A wrapper's TOML says everything the pipeline needs to know about a model family's format: which
template lays out the turns, where the inner monologue goes (``params``, ``top`` or ``none``), whether a
call is required, the assistant prefix that primes the answer, stop strings, the reserved markers that
user text must not be able to forge, and the MemGPT names it answers to (``[aliases]``). Templates
render in an immutable sandbox and see only plain data prepared here (``PromptView``).
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any, Literal

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from llmproxy._data import data_dir
from llmproxy.errors import ConfigurationError, TemplateError
from llmproxy.types import (
    AssistantMessage,
    FunctionDefinition,
    FunctionMessage,
    Message,
    SystemMessage,
    ToolMessage,
    UserMessage,
    content_text,
)

InnerThoughts = Literal["params", "top", "none"]
CallMode = Literal["required", "optional", "text"]
INNER_THOUGHTS_KEY = "inner_thoughts"


@dataclass(frozen=True)
class WrapperSpec:
    """The TOML half of a wrapper."""

    name: str
    description: str
    template: str
    inner_thoughts: InnerThoughts
    call: CallMode
    assistant_prefix: str
    first_message_prefix: str | None
    text_prefix: str
    stop: tuple[str, ...]
    reserved: tuple[str, ...]
    options: dict[str, Any]
    aliases: dict[str, dict[str, Any]]
    json_indent: int = 2


@dataclass(frozen=True)
class Rendered:
    """A rendered prompt: ``prompt`` ends with ``prefix``, which the model's output continues."""

    prompt: str
    prefix: str
    stop: tuple[str, ...]
    call: CallMode


@dataclass(frozen=True)
class Resolved:
    """A wrapper looked up by name or alias; ``grammar`` is the alias's grammar setting (None = route's)."""

    wrapper: Wrapper
    grammar: bool | None = None

    def grammar_mode(self, asked: str | None = None) -> str:
        """The grammar mode to use: what was asked, else the alias's setting, else ``auto``."""
        return asked or ("none" if self.grammar is False else "auto")


# --- loading ---------------------------------------------------------------------------------

_SPEC_KEYS = {
    "name", "description", "template", "inner_thoughts", "call", "assistant_prefix",
    "first_message_prefix", "text_prefix", "stop", "reserved", "options", "aliases", "json_indent",
}


def _read_spec(path) -> WrapperSpec:
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"wrapper file {path} is not valid TOML: {exc}") from exc
    unknown = set(raw) - _SPEC_KEYS
    if unknown:
        raise ConfigurationError(f"wrapper file {path} has unknown keys: {sorted(unknown)}")
    name = path.stem
    try:
        return WrapperSpec(
            name=name,
            description=raw["description"],
            template=raw.get("template", name),
            inner_thoughts=raw.get("inner_thoughts", "params"),
            call=raw.get("call", "required"),
            assistant_prefix=raw.get("assistant_prefix", ""),
            first_message_prefix=raw.get("first_message_prefix"),
            text_prefix=raw.get("text_prefix", ""),
            stop=tuple(raw.get("stop", ())),
            reserved=tuple(raw.get("reserved", ())),
            options=dict(raw.get("options", {})),
            aliases={alias: dict(opts) for alias, opts in raw.get("aliases", {}).items()},
            json_indent=raw.get("json_indent", 2),
        )
    except KeyError as exc:
        raise ConfigurationError(f"wrapper file {path} is missing the key {exc}") from exc


class _Environment(ImmutableSandboxedEnvironment):
    """The immutable sandbox, with a fast path for the plain dicts this module hands to templates."""

    def getattr(self, obj: Any, attribute: str) -> Any:
        if type(obj) is dict and attribute in obj:
            return obj[attribute]  # a data key, never a method: nothing for the sandbox to guard
        return super().getattr(obj, attribute)


@cache
def _environment() -> ImmutableSandboxedEnvironment:
    env = _Environment(
        loader=jinja2.FileSystemLoader(str(data_dir("wrappers"))),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=False,
        trim_blocks=True,  # block tags do not leave newlines behind: templates spell out every one
        lstrip_blocks=True,
        autoescape=False,
        auto_reload=False,  # shipped data: no file check on every {% import %} of every render
    )
    env.filters["tojson_pretty"] = lambda value: json.dumps(value, indent=2, ensure_ascii=False)
    return env


@cache
def _catalogue() -> dict[str, tuple[WrapperSpec, dict[str, Any]]]:
    """Every name and alias -> (spec, alias options)."""
    names: dict[str, tuple[WrapperSpec, dict[str, Any]]] = {}
    for path in sorted(data_dir("wrappers").glob("*.toml")):
        spec = _read_spec(path)
        names[spec.name] = (spec, {})
    for spec, _ in list(names.values()):
        for alias, options in spec.aliases.items():
            if alias in names and names[alias][0] is not spec:
                raise ConfigurationError(f"wrapper alias {alias!r} is claimed by two wrappers")
            names[alias] = (spec, options)
    return names


def wrapper_specs() -> list[WrapperSpec]:
    """All wrappers, by name."""
    return sorted({spec.name: spec for spec, _ in _catalogue().values()}.values(), key=lambda s: s.name)


@cache
def _wrapper_for(name: str) -> Wrapper:
    spec = _catalogue()[name][0]
    try:
        template = _environment().get_template(f"{spec.template}.jinja")
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


@cache
def _marker_pattern(markers: tuple[str, ...]) -> re.Pattern[str] | None:
    if not markers:
        return None
    ordered = sorted(set(markers), key=len, reverse=True)  # longest first: "\nUSER (" before "\nUSER"
    return re.compile("|".join(re.escape(marker) for marker in ordered))


# --- the data a template sees ----------------------------------------------------------------


def _json_or_none(text: str | None) -> Any:
    if not text:
        return None
    try:
        return json.loads(text, strict=False)
    except ValueError:
        return None


@lru_cache(maxsize=4096)
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


def function_view(function: FunctionDefinition) -> dict[str, Any]:
    """A function as the templates list it: name, description, and typed parameters."""
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
                  event: str | None = None, calls: list[str] | None = None) -> dict[str, Any]:
    """One history message as templates see it.

    ``text`` is what the turn shows (content, or a pretty-printed JSON body); ``message`` is the
    ``message`` field of a JSON user event when there is one, else ``text``; ``event`` is that event's
    ``type`` (user_message, heartbeat, login...); ``calls`` are past calls as JSON, thoughts included.
    """
    return {"role": role, "text": text, "message": text if message is None else message, "name": name,
            "event": event, "calls": calls or []}


class Wrapper:
    """A loaded wrapper: spec + compiled template."""

    def __init__(self, spec: WrapperSpec, template: jinja2.Template) -> None:
        self.spec = spec
        self._template = template

    @property
    def name(self) -> str:
        return self.spec.name

    # rendering -------------------------------------------------------------------------------

    def render(
        self,
        messages: Sequence[Message],
        functions: Sequence[FunctionDefinition],
        *,
        call: CallMode | None = None,
        first_message: bool = False,
        force_function: str | None = None,
        primed: bool = True,
    ) -> Rendered:
        """Render the conversation into the prompt this model family expects.

        ``call`` overrides the wrapper's call mode (``text`` = answer in plain text, no functions shown).
        ``force_function`` primes the answer with that function's name where the format allows it.
        ``primed=False`` leaves the assistant prefix out, for backends that must produce a whole object.
        """
        mode: CallMode = call or self.spec.call
        if not functions:
            mode = "text"
        prefix = self.prefix(mode, first_message=first_message, force_function=force_function) if primed else ""
        system, history = self._split_system(messages)
        context = {
            "system": system,
            "messages": [self._message_view(m) for m in history],
            "functions": [function_view(f) for f in functions] if mode != "text" else [],
            "call": mode,
            "inner_thoughts": self.spec.inner_thoughts,
            "first_message": first_message,
            "options": self.spec.options,
        }
        try:
            body = self._template.render(context)
        except jinja2.TemplateError as exc:
            raise TemplateError(f"wrapper {self.name!r} failed to render: {exc}") from exc
        return Rendered(prompt=body + prefix, prefix=prefix, stop=self.spec.stop, call=mode)

    def prefix(self, mode: CallMode, *, first_message: bool = False, force_function: str | None = None) -> str:
        """The text that ends the prompt and that the model's answer continues."""
        if mode == "text":
            return self.spec.text_prefix
        if force_function and self.spec.inner_thoughts != "top":
            return _force_prefix(self.spec.assistant_prefix, force_function)
        if first_message and self.spec.first_message_prefix is not None:
            return self.spec.first_message_prefix
        return self.spec.assistant_prefix

    def _split_system(self, messages: Sequence[Message]) -> tuple[str, list[Message]]:
        """The leading system messages form the system prompt; later ones stay in the history."""
        system_parts: list[str] = []
        index = 0
        while index < len(messages) and isinstance(messages[index], SystemMessage):
            system_parts.append(content_text(messages[index].content) or "")
            index += 1
        return "\n".join(part.strip() for part in system_parts), list(messages[index:])

    def _message_view(self, message: Message) -> dict[str, Any]:
        clean = lambda text: neutralise(text, self.spec.reserved)  # noqa: E731
        text = content_text(message.content) or ""
        if isinstance(message, SystemMessage):
            return _message_view("system", text.strip())
        if isinstance(message, (ToolMessage, FunctionMessage)):
            shown = clean(_pretty(text, self.spec.json_indent).strip())
            return _message_view(message.role, shown, name=getattr(message, "name", None))
        if isinstance(message, UserMessage):
            shown = _pretty(text, self.spec.json_indent)
            parsed = _json_or_none(text)
            is_event = isinstance(parsed, dict)
            event = parsed.get("type") if is_event and isinstance(parsed.get("type"), str) else None
            simple = parsed["message"] if is_event and isinstance(parsed.get("message"), str) else shown
            return _message_view("user", clean(shown.strip()), clean(simple.strip()), _role_name(message.name), event)
        assert isinstance(message, AssistantMessage)
        calls = [self._call_json(call.name, call.arguments, text if i == 0 else None) for i, call in enumerate(message.calls())]
        if not calls and self.spec.inner_thoughts == "top" and text:
            calls = [self._dump({INNER_THOUGHTS_KEY: text})]  # a thoughts-only answer, as the model would write it
            text = ""
        return _message_view("assistant", clean(text.strip()), name=_role_name(message.name), calls=[clean(c) for c in calls])

    def _call_json(self, name: str, arguments: str, thoughts: str | None) -> str:
        """A past call in the exact JSON shape this wrapper asks the model to write."""
        return _call_json(name, arguments, thoughts, self.spec.inner_thoughts, self.spec.json_indent)

    def _dump(self, value: Any) -> str:
        return json.dumps(value, indent=self.spec.json_indent, ensure_ascii=False)

    # unwrapping ------------------------------------------------------------------------------

    def output_text(self, raw: str, rendered: Rendered) -> str:
        """The model's whole answer: the prompt's prefix rejoined with what the model wrote after it.

        Models sometimes repeat the prefix themselves, or restart the object; neither is doubled.
        """
        text = _cut_at_markers(raw, self.spec.stop)
        if rendered.call == "text":
            return text.strip()
        prefix = rendered.prefix
        stripped = text.lstrip()
        if not prefix.strip() or stripped.startswith(prefix.strip()):
            return stripped
        if stripped.startswith("{") and prefix.strip().startswith("{") and prefix.strip() != "{":
            # The model restarted the object after a prefix such as '{"function":' - keep its own object.
            return stripped
        return prefix + text


@lru_cache(maxsize=4096)
def _call_json(name: str, arguments: str, thoughts: str | None, placement: InnerThoughts, indent: int) -> str:
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


def _cut_at_markers(text: str, markers: Sequence[str]) -> str:
    """Drop everything from the first end-of-turn marker on (backends do not always strip stops)."""
    cut = len(text)
    for marker in markers:
        position = text.find(marker)
        if position != -1:
            cut = min(cut, position)
    return text[:cut]


def _force_prefix(assistant_prefix: str, function: str) -> str:
    """Extend a ``{"function":``-style prefix so it names ``function``."""
    head = assistant_prefix if assistant_prefix.rstrip().endswith('"function":') else '\n{\n  "function":'
    return f"{head} {json.dumps(function)},"


def _role_name(name: str | None) -> str | None:
    """A message ``name`` usable as a role word (AutoGen-style); anything else is dropped."""
    if not name:
        return None
    cleaned = re.sub(r"[^a-z0-9_-]", "", name.lower())
    return cleaned or None
