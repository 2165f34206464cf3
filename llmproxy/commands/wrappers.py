"""``llmproxy wrappers``: the prompt formats (with their call syntax and where each came from), and
``wrappers show NAME``: one format's template and settings."""

from __future__ import annotations

import json
from typing import Annotated, Any

import jinja2
import jinja2.meta
import typer

from llmproxy._data import data_dir
from llmproxy.commands import options as opt
from llmproxy.commands._console import labelled, out
from llmproxy.commands._errors import reported
from llmproxy.errors import ConfigurationError
from llmproxy.prompts import AUTO, WrapperSpec, load_wrapper, template_path, wrapper_specs
from llmproxy.route import FALLBACK_WRAPPER

app = typer.Typer(
    name="wrappers",
    invoke_without_command=True,
    add_completion=False,
    rich_markup_mode=None,
)

_CALL = {
    "required": "every answer is a function call",
    "optional": "a call is optional (the model may answer without one)",
    "text": "plain text, no function calls",
}


def _alias_label(alias: str, options: dict[str, Any]) -> str:
    return f"{alias} (grammar on)" if options.get("grammar") else alias


@app.callback()
def wrappers(ctx: typer.Context, debug: opt.Debug = False) -> None:
    """List the wrappers (prompt formats) with their MemGPT aliases and a one-line description.

    Pick one with --wrapper in serve, render, try, chat and eval; 'llmproxy eval' compares them.

    Examples:

    \b
      llmproxy wrappers
      llmproxy wrappers show chatml-noforce-roles
    """
    if ctx.invoked_subcommand is not None:
        return
    with reported(debug):
        console = out()
        names = {spec.name: f"{spec.name} (default without a template)" if spec.name == FALLBACK_WRAPPER
                 else spec.name for spec in wrapper_specs()}
        width = max(map(len, names.values())) + 2
        for spec in wrapper_specs():
            labelled(console, names[spec.name], spec.description, width)
            details = [f"syntax: {_syntax_label(spec)}"]
            if spec.aliases:
                details.append("aliases: " + ", ".join(_alias_label(alias, options)
                                                       for alias, options in spec.aliases.items()))
            if not spec.origin.is_relative_to(data_dir("wrappers")):
                details.append(f"from {spec.origin}")
            console.print(" " * width + "; ".join(details), style="dim")
        labelled(console, f"{AUTO} (default)", "The model's own chat template, as the backend reports it (the embedded GGUF's "
                                "metadata, llama.cpp's GET /props).", width)
        console.print(" " * width + "syntax: read from the template (hermes, mistral, mistral-v11, xml or llama3; "
                                    "json, with the tools in the system message, where it knows no tools)", style="dim")


@app.command()
def show(
    name: Annotated[str, typer.Argument(help="A wrapper name or MemGPT alias, as 'llmproxy wrappers' lists them.")],
    debug: opt.Debug = False,
) -> None:
    """Print a wrapper's settings and its Jinja template (with the templates it imports).

    Examples:

    \b
      llmproxy wrappers show chatml
      llmproxy wrappers show dolphin-2.1-mistral-7b-grammar
    """
    with reported(debug):
        if name == AUTO:
            raise ConfigurationError(f"{AUTO!r} has no file: it is the model's own chat template, read from the backend; "
                                     f"'llmproxy render --wrapper {AUTO}' shows it at work")
        spec = load_wrapper(name).wrapper.spec
        console = out()
        console.print(spec.name, style="bold")
        console.print(spec.description)
        for label, value in _settings(spec):
            labelled(console, label, value, width=18)
        for template in _templates(spec.template):
            path = template_path(template)
            console.rule(template, style="dim")
            console.print(f"# {path}", style="dim", soft_wrap=True)
            console.print(path.read_text(encoding="utf-8").rstrip("\n"))


def _syntax_label(spec: WrapperSpec) -> str:
    """The call syntax and its options as the TOML gives them: ``memgpt (inner_thoughts = "params")``."""
    options = {key: value for key, value in spec.answer.items() if key not in ("syntax", "call")}
    name = spec.answer.get("syntax", "none")
    listed = ", ".join(f"{key} = {json.dumps(value)}" for key, value in options.items())
    return f"{name} ({listed})" if listed else name


def _call_prefix(spec: WrapperSpec) -> str:
    """What the prompt ends with when a call is expected (the answer continues it)."""
    if spec.syntax is None or spec.call == "text":
        return "-"
    shape = spec.syntax.shape(spec.call, [], [], named=False, parallel=False, first_message=False, primed=True)
    return repr(shape.prefix)


def _settings(spec: WrapperSpec) -> list[tuple[str, str]]:
    aliases = ", ".join(_alias_label(alias, options) for alias, options in spec.aliases.items())
    return [
        ("file", str(spec.origin)),
        ("aliases", aliases or "-"),
        ("call", _CALL[spec.call]),
        ("syntax", _syntax_label(spec)),
        ("call prefix", _call_prefix(spec)),
        ("plain-text prefix", repr(spec.text_prefix)),
        ("stop", " ".join(map(repr, spec.stop)) or "-"),
        ("reserved", " ".join(map(repr, spec.reserved)) or "-"),
        ("options", ", ".join(f"{key} = {json.dumps(value)}" for key, value in spec.options.items()) or "-"),
    ]


def _templates(name: str) -> list[str]:
    """``name``.jinja, then every template it imports or includes (and so on), each once."""
    found: list[str] = []
    pending = [f"{name}.jinja"]
    parser = jinja2.Environment()  # parses only, to list references; rendering happens in the sandbox elsewhere
    while pending:
        template = pending.pop(0)
        if template in found:
            continue
        found.append(template)
        source = template_path(template).read_text(encoding="utf-8")
        pending.extend(ref for ref in jinja2.meta.find_referenced_templates(parser.parse(source)) if ref)
    return found
