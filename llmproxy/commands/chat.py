"""``llmproxy chat``: a conversation through a wrapper, with the example functions executed here.

Each user line starts a turn. The model answers with a call: ``send_message`` ends the turn with its
message; ``remember`` and ``search_memory`` run against an in-memory list, their result goes back to
the model as a function return, and it continues (up to ``--max-steps`` calls), as MemGPT's heartbeats do.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.text import Text

from llmproxy.commands import options as opt
from llmproxy.commands._console import err, out, step
from llmproxy.commands._errors import message_for, reported
from llmproxy.commands.examples import SEND_MESSAGE, SYSTEM_PROMPT, TOOLS, Memory
from llmproxy.errors import OutputParseError
from llmproxy.prompts import AUTO
from llmproxy.proxy import chat_completion, parse_request
from llmproxy.route import Route

PROMPT = "you> "
# Thoughts, calls and results are told apart by their labels in plain text, and by colour as well.
STYLES = {"thinks": "dim italic", "calls": "cyan", "result": "dim", "error": "red"}


class Conversation:
    """The message history and the memory the functions act on."""

    def __init__(self, route: Route, console: Console, max_steps: int) -> None:
        self.route = route
        self.console = console
        self.max_steps = max_steps
        self.memory = Memory()
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT}]

    def turn(self, text: str) -> None:
        """The user said ``text``: let the model call functions until it sends a message."""
        self.messages.append({"role": "user", "content": text})
        for _ in range(self.max_steps):
            if self._step():
                return
        self._show("error", f"no message after {self.max_steps} calls; --max-steps allows more")

    def _step(self) -> bool:
        """One model answer and its call; True when the turn is over."""
        request = parse_request({"messages": self.messages, "tools": TOOLS, "tool_choice": "auto"})
        try:
            with step("thinking"):
                response = chat_completion(request, self.route)
        except OutputParseError as exc:
            # A small model's slip is part of the show, not the end of the conversation.
            self._show("error", f"{message_for(exc)}; raw output: {exc.raw!r}")
            return True
        message = response.choices[0].message
        self.messages.append(message.model_dump(exclude_none=True))
        syntax = self.route.wrapper.spec.syntax
        if message.content and syntax is not None and syntax.content_is_thoughts:
            self._show("thinks", message.content)
        elif message.content:  # a syntax whose text is the reply itself
            self.console.print(Text.assemble(("assistant> ", "bold green"), message.content))
        if not message.tool_calls:
            return True  # thoughts or a reply alone, where the wrapper allows them
        call = message.tool_calls[0]
        arguments = json.loads(call.function.arguments)
        if call.function.name == SEND_MESSAGE:
            self.console.print(Text.assemble(("assistant> ", "bold green"), arguments["message"]))
            result = json.dumps({"status": "OK", "message": None})  # what MemGPT answers a sent message with
        else:
            self._show("calls", f"{call.function.name} {call.function.arguments}")
            result = self.memory.run(call.function.name, arguments)
            self._show("result", result)
        self.messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        return call.function.name == SEND_MESSAGE

    def _show(self, label: str, text: str) -> None:
        self.console.print(Text.assemble((f"  {label:<7}", "bold"), (text, STYLES[label])))


def _read_line(console: Console, interactive: bool) -> str | None:
    """The next user line; None at the end of input."""
    if interactive:
        try:
            return console.input(Text(PROMPT, style="bold"))
        except EOFError:
            console.print()
            return None
    line = sys.stdin.readline()
    if not line:
        return None
    line = line.rstrip("\n")
    console.print(Text.assemble((PROMPT, "bold"), line))  # piped input is echoed, so the transcript reads whole
    return line


CHAT_WRAPPER = "chatml"  # MemGPT's: the agent speaks only through send_message


def chat(
    backend: opt.Backend = None,
    endpoint: opt.Endpoint = None,
    model: opt.Model = None,
    wrapper: opt.Wrapper = None,
    syntax: opt.Syntax = None,
    grammar: opt.Grammar = None,
    context_window: opt.ContextWindow = None,
    auth_type: opt.AuthType = None,
    auth_key: opt.AuthKey = None,
    max_tokens: opt.MaxTokens = None,
    temperature: opt.Temperature = None,
    seed: opt.Seed = None,
    preset: opt.Preset = None,
    retries: opt.Retries = None,
    max_steps: Annotated[int, typer.Option(
        "--max-steps", min=1, help="Most function calls the model may make for one user message.")] = 4,
    debug: opt.Debug = False,
) -> None:
    """Chat with a model through a wrapper and watch its function calls turn by turn.

    The model is a small MemGPT-style agent (through the chatml wrapper unless --wrapper names another)
    with three functions, executed here: send_message (its reply), remember (save a fact)
    and search_memory (find saved facts). Inner thoughts, calls and their results are shown apart
    from the reply. Ctrl-D or Ctrl-C ends the chat; input can also be piped in, one message a line.

    Examples:

    \b
      llmproxy chat
      llmproxy chat --wrapper chatml-noforce --grammar none
      llmproxy chat --backend ollama --model llama3.1:8b --wrapper llama3
      printf 'My cat is Tom\\nWhat is my cat called?\\n' | llmproxy chat
    """
    with reported(debug):
        route = opt.open_route(backend=backend, endpoint=endpoint, model=model, wrapper=wrapper or (AUTO if syntax else CHAT_WRAPPER),
                               grammar=grammar,
                               syntax=syntax, context_window=context_window, auth_type=auth_type, auth_key=auth_key,
                               max_tokens=max_tokens, temperature=temperature, seed=seed, preset=preset,
                               retries=retries)
        console = out()
        interactive = sys.stdin.isatty()
        if interactive:
            err().print(f"chatting with {opt.backend_label(route)} through {route.wrapper.name} (grammar {route.grammar}); "
                        "Ctrl-D or Ctrl-C ends", style="dim")
        conversation = Conversation(route, console, max_steps)
        try:
            while (line := _read_line(console, interactive)) is not None:
                if line.strip():
                    conversation.turn(line)
        except KeyboardInterrupt:
            console.print()  # leave the ^C line
