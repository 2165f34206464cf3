"""``llmproxy render``: the exact prompt, stop strings and grammar a request becomes, with no backend.

The request goes through ``proxy.plan`` like any other, on a route whose backend is a stand-in: it has
the named backend's name (so that backend's settings file adds its stop strings and limits) and its
capabilities (so the same grammar, JSON schema or nothing is chosen), and it is never called.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from llmproxy.backends import backend_class
from llmproxy.backends.base import Backend, ChatTemplate, Completion, GenerationParams
from llmproxy.backends.embedded import default_model_path, model_file_template
from llmproxy.commands import options as opt
from llmproxy.commands._console import labelled, out
from llmproxy.commands._errors import reported
from llmproxy.commands._request import Message, RequestFile, read_request
from llmproxy.errors import ConfigurationError
from llmproxy.prompts import AUTO, NAME_A_WRAPPER
from llmproxy.proxy import Plan, plan
from llmproxy.route import DEFAULT_CONTEXT_WINDOW, Route, named_wrapper, route_wrapper

# Reserved markers are shown as ⟦<|im_start|>⟧: visible in a pipe, a log or a test, not only in colour.
MARK_OPEN, MARK_CLOSE = "⟦", "⟧"
MARKER_STYLE = "bold magenta"


def marked(text: str, markers: Sequence[str]) -> Text:
    """``text`` with every reserved marker bracketed and coloured.

    A marker's own leading or trailing whitespace (``"\\nUSER:"``) stays outside the brackets, so the
    layout of the prompt is unchanged apart from the brackets.
    """
    result = Text()
    ordered = sorted({m for m in markers if m.strip()}, key=len, reverse=True)  # longest first
    if not ordered:
        return Text(text)
    position = 0
    for match in re.finditer("|".join(map(re.escape, ordered)), text):
        marker = match.group(0)
        start = match.start() + len(marker) - len(marker.lstrip())
        core = marker.strip()
        result.append(text[position:start])
        result.append(f"{MARK_OPEN}{core}{MARK_CLOSE}", style=MARKER_STYLE)
        position = start + len(core)
    result.append(text[position:])
    return result


def print_prompt(console: Console, prepared: Plan) -> None:
    """The prompt between rules, markers marked, then what the answer continues and where it stops."""
    rendered = prepared.rendered
    count = prepared.prompt_tokens
    size = f"{count.tokens} tokens" if count.exact else f"~{count.tokens} tokens (estimate)"
    console.rule(f"prompt: wrapper {prepared.route.wrapper.name}, {size}", style="dim")
    console.print(marked(rendered.prompt, prepared.route.wrapper.spec.reserved))
    console.rule(style="dim")
    labelled(console, "prefix", f"{rendered.prefix!r} (the prompt ends with it; the answer continues it)")
    labelled(console, "stop", " ".join(repr(stop) for stop in prepared.params.stop))
    labelled(console, "max tokens", str(prepared.params.max_tokens))


def describe_grammar(prepared: Plan) -> str:
    """One line: how the answer is constrained, and why."""
    if prepared.grammar == "generated":
        return f"generated from the request's {len(prepared.shape.functions)} function(s)"
    if prepared.grammar == "json_schema":
        return f"a JSON schema (the {prepared.route.backend.name} backend constrains by schema, not grammar)"
    if prepared.grammar is not None:
        return f"grammars/{prepared.grammar}.gbnf"
    if prepared.rendered.call == "text":
        return "none (a plain-text answer)"
    if prepared.route.grammar == "none":
        return "none (--grammar none); the answer is repaired and checked against the schemas"
    return f"none (the {prepared.route.backend.name} backend takes no grammar); the answer is repaired and checked"


class _StandIn(Backend):
    """A backend's name and capabilities, without the backend."""

    def __init__(self, name: str) -> None:
        real = backend_class(name)
        self.name, self.capabilities = real.name, real.capabilities

    def complete(self, prompt: str, params: GenerationParams) -> Completion:
        raise NotImplementedError("render never generates")

    def chat_template(self) -> ChatTemplate | None:
        """The embedded model's template is in its GGUF file (read without loading the model); a server's
        is not asked for."""
        return model_file_template(default_model_path()) if self.name == "embedded" else None


def offline_route(backend: str, wrapper: str | None, grammar: str | None, context_window: int | None,
                  syntax: str | None = None) -> Route:
    from llmproxy.server.config import check_grammar

    check_grammar(grammar)
    named = named_wrapper(wrapper, syntax)
    stand_in = _StandIn(backend)
    if wrapper == AUTO and stand_in.chat_template() is None:
        raise ConfigurationError(f"render asks no server, so only the embedded model's own template is known "
                                 f"to wrapper {AUTO!r}: use --backend embedded, or {NAME_A_WRAPPER}")
    resolved = route_wrapper(stand_in, wrapper, syntax, named)
    return Route(
        name=backend,
        backend=stand_in,
        wrapper=resolved.wrapper,
        grammar=resolved.grammar_mode(grammar),
        context_window=context_window or DEFAULT_CONTEXT_WINDOW,
    )


def render(
    request_file: RequestFile = None,
    message: Message = None,
    wrapper: opt.Wrapper = None,
    syntax: opt.Syntax = None,
    backend: Annotated[str, typer.Option(
        "--backend",
        help="Render for this backend type: its settings file adds stop strings, and whether it takes grammars "
             "decides the constraint. Nothing is sent to it.")] = "embedded",
    grammar: opt.Grammar = None,
    context_window: opt.ContextWindow = None,
    first_message: Annotated[bool, typer.Option(
        "--first-message", help="Render as MemGPT's first message of a conversation (the answer is primed "
                                "to call send_message, where the wrapper says so).")] = False,
    plain: Annotated[bool, typer.Option(
        "--plain", help="Print the prompt alone, byte for byte as it would be sent: no marking, nothing else.")] = False,
    debug: opt.Debug = False,
) -> None:
    """Show the exact prompt a request becomes, with its stop strings and grammar. No backend needed.

    Reserved markers (the wrapper's special tokens, such as <|im_start|>) are shown as
    ⟦<|im_start|>⟧, and in colour on a terminal; --plain prints the prompt exactly.
    Token counts are estimates (the model's own tokenizer is not loaded).

    Examples:

    \b
      llmproxy render -m "My cat is called Tom"
      llmproxy render request.json --wrapper llama3 --grammar none
      llmproxy render request.json --backend ollama      # Ollama constrains by JSON schema
      cat request.json | llmproxy render - --plain > prompt.txt
    """
    with reported(debug):
        request = read_request(request_file, message)
        prepared = plan(request, offline_route(backend, wrapper, grammar, context_window, syntax),
                        first_message=first_message)
        if plain:
            typer.echo(prepared.rendered.prompt, nl=False)
            return
        console = out()
        print_prompt(console, prepared)
        labelled(console, "grammar", describe_grammar(prepared))
        constraint = prepared.params.grammar or (
            json.dumps(prepared.params.json_schema, indent=2) if prepared.params.json_schema else None)
        if constraint:
            console.rule(style="dim")
            console.print(constraint.rstrip("\n"))
