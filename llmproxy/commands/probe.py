"""``llmproxy probe``: is the backend up, which model, how large a context, does it take grammars, does
the model bring its own chat template."""

from __future__ import annotations

import dataclasses
import json
from typing import Annotated, Any

import typer

from llmproxy.backends import create_backend
from llmproxy.backends.base import Backend, ChatTemplate, ProbeResult
from llmproxy.commands import options as opt
from llmproxy.commands._console import labelled, out, step
from llmproxy.commands._errors import fail, reported


def probe(
    backend: opt.Backend = None,
    endpoint: opt.Endpoint = None,
    model: opt.Model = None,
    auth_type: opt.AuthType = None,
    auth_key: opt.AuthKey = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print the answer as JSON, for scripts.")] = False,
    debug: opt.Debug = False,
) -> None:
    """Ask a backend whether it is up, which model it serves, its context size, grammar support and chat
    template.

    Exits with 1 when the backend does not answer.

    Examples:

    \b
      llmproxy probe
      llmproxy probe --backend llamacpp --endpoint http://localhost:8080
      llmproxy probe --backend ollama --model llama3.1:8b --json
    """
    with reported(debug):
        name = backend or "embedded"
        with step(f"asking {name}"):
            client = create_backend(name, endpoint=endpoint, model=model, auth_type=opt.auth_type_for(auth_type, auth_key),
                                    auth_key=auth_key)
            result = client.probe()
        if json_output:
            typer.echo(json.dumps(_json(result), indent=2))
        else:
            _print(result, client)
        if not result.up:
            raise fail(result.detail or f"{name} is not answering")


def _print(result: ProbeResult, client: Backend) -> None:
    console = out()
    labelled(console, "backend", result.backend)
    labelled(console, "url", result.url or "in-process")
    labelled(console, "up", "yes" if result.up else "no")
    if not result.up:
        return  # the reason follows as the error line
    labelled(console, "model", result.model or "unknown")
    labelled(console, "context", f"{result.context_window} tokens" if result.context_window else "unknown")
    labelled(console, "grammar", _grammar(result, client))
    labelled(console, "template", _template(result.chat_template))
    if result.detail:
        labelled(console, "detail", result.detail)


def _json(result: ProbeResult) -> dict[str, Any]:
    """The answer for scripts; the chat template is there only where the backend reports one."""
    answer: dict[str, Any] = {"backend": result.backend, "url": result.url, "up": result.up, "model": result.model,
                              "context_window": result.context_window, "grammar": result.grammar,
                              "detail": result.detail}
    if result.chat_template is not None:
        answer["chat_template"] = dataclasses.asdict(result.chat_template)
    return answer


def _grammar(result: ProbeResult, client: Backend) -> str:
    if result.grammar or (result.grammar is None and client.capabilities.grammar):
        field = f", sent as {result.grammar_field!r}" if result.grammar_field else ""
        return f"yes (GBNF{field}): --grammar auto constrains every call"
    if client.capabilities.json_schema:
        return "no; output is constrained by JSON schema instead"
    return "no; answers are repaired and checked, not constrained"


def _template(template: ChatTemplate | None) -> str:
    if template is None:
        return "none reported (name a wrapper with --wrapper)"
    tokens = ", ".join(f"{name} {value!r}" for name, value in (("BOS", template.bos_token), ("EOS", template.eos_token))
                       if value)
    return f"the model's own, from {template.source}" + (f" ({tokens})" if tokens else "")
