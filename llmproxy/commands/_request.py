"""Where ``render`` and ``try`` get their request: a JSON file (or stdin), or ``-m TEXT`` with the
built-in example functions."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from llmproxy.commands.examples import example_request
from llmproxy.common.nesting import TooDeep, client_json
from llmproxy.errors import InvalidRequestError
from llmproxy.proxy import parse_request
from llmproxy.types import ChatRequest

RequestFile = Annotated[Optional[typer.FileText], typer.Argument(
    show_default=False, metavar="REQUEST.json",
    help="An OpenAI chat request (messages, plus tools or functions) as JSON; '-' reads it from stdin.")]
Message = Annotated[Optional[str], typer.Option(
    "--message", "-m", show_default=False,
    help="Instead of a request file: this user message, with the built-in example functions "
         "(send_message, remember, search_memory). Example: -m \"My cat is called Tom\"")]


def read_request(file: typer.FileText | None, message: str | None) -> ChatRequest:
    """The request from exactly one of ``file`` and ``message``."""
    if (file is None) == (message is None):
        raise typer.BadParameter("give a request file or -m TEXT, one of the two", param_hint="REQUEST.json / -m")
    if message is not None:
        return parse_request(example_request(message))
    try:
        fields = client_json(file.read())
    except TooDeep as exc:
        raise InvalidRequestError(f"{file.name} holds {exc}; flatten them") from None
    except ValueError as exc:
        raise InvalidRequestError(f"{file.name} is not valid JSON: {exc}") from None
    if not isinstance(fields, dict):
        raise InvalidRequestError(f"{file.name} holds no JSON object")
    return parse_request(fields)
