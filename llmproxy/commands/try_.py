"""``llmproxy try``: one request through a backend, every step shown as it happens.

It runs the pipeline's own two halves (``proxy.plan``, then ``proxy.finish``) around the backend call,
so what it shows is what the server would do with the same request.
"""

from __future__ import annotations

import time
from typing import Annotated

import typer
from rich.console import Console

from llmproxy.backends.base import Completion
from llmproxy.commands import options as opt
from llmproxy.commands._console import labelled, out, step
from llmproxy.commands._errors import reported
from llmproxy.commands._request import Message, RequestFile, read_request
from llmproxy.commands.render import describe_grammar, print_prompt
from llmproxy.errors import OutputParseError
from llmproxy.proxy import Plan, answer_with_retries, chat_completion, plan
from llmproxy.route import Route
from llmproxy.tokens import count_tokens
from llmproxy.types import ChatCompletion, ChatRequest


def try_request(
    request_file: RequestFile = None,
    message: Message = None,
    backend: opt.Backend = None,
    endpoint: opt.Endpoint = None,
    model: opt.Model = None,
    wrapper: opt.Wrapper = None,
    syntax: opt.Syntax = None,
    grammar: opt.Grammar = None,
    decide: opt.Decide = None,
    context_window: opt.ContextWindow = None,
    auth_type: opt.AuthType = None,
    auth_key: opt.AuthKey = None,
    max_tokens: opt.MaxTokens = None,
    temperature: opt.Temperature = None,
    seed: opt.Seed = None,
    preset: opt.Preset = None,
    retries: opt.Retries = None,
    show_prompt: Annotated[bool, typer.Option(
        "--show-prompt", help="Also print the whole prompt, as 'llmproxy render' does.")] = False,
    json_output: Annotated[bool, typer.Option(
        "--json", help="Print only the OpenAI response JSON (as the server would answer), for scripts.")] = False,
    debug: opt.Debug = False,
) -> None:
    """Send one request to a backend and show each step: the prompt's size in tokens, the model's raw
    output, the repairs that fired, the final call (or the error), timings and tokens per second.

    Exits with 1 when the model's answer cannot be turned into a valid call.

    Examples:

    \b
      llmproxy try -m "Remember that my cat is called Tom"
      llmproxy try request.json --wrapper chatml-noforce --grammar none --show-prompt
      llmproxy try request.json --backend llamacpp --endpoint http://localhost:8080
      llmproxy try -m "Hi" --json | jq .choices[0].message
    """
    with reported(debug):
        request = read_request(request_file, message)
        route = opt.open_route(backend=backend, endpoint=endpoint, model=model, wrapper=wrapper, grammar=grammar,
                               decide=decide, syntax=syntax, context_window=context_window, auth_type=auth_type,
                               auth_key=auth_key,
                               max_tokens=max_tokens, temperature=temperature, seed=seed, preset=preset,
                               retries=retries)
        if json_output:
            typer.echo(chat_completion(request, route).model_dump_json(indent=2))
            return
        console = out()
        console.print(f"backend {opt.backend_label(route)}, wrapper {route.wrapper.name}, "
                      f"grammar {route.grammar}, context {route.context_window} tokens"
                      + (f", preset {route.preset}" if route.preset else ""), style="dim")

        def generate(asked: ChatRequest, attempt: int) -> tuple[Plan, Completion]:
            return _generate(console, asked, route, show_prompt=show_prompt and attempt == 1,
                             schemas_checked=attempt > 1)

        def rejected(exc: OutputParseError, again: bool) -> None:
            labelled(console, "result", f"not usable: {exc.reason} Trying again, told so." if again
                     else "no valid answer (the reason follows on stderr)")

        prepared, response = answer_with_retries(request, route, generate, rejected)
        syntax = prepared.shape.syntax
        thoughts = prepared.rendered.call != "text" and syntax is not None and syntax.content_is_thoughts
        _print_answer(console, response, thoughts=thoughts)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def _generate(console: Console, request: ChatRequest, route: Route, *, show_prompt: bool,
              schemas_checked: bool) -> tuple[Plan, Completion]:
    """Plan and run one generation, showing the prompt's size, the speed and the raw output."""
    started = time.perf_counter()
    prepared = plan(request, route, schemas_checked=schemas_checked)
    count = prepared.prompt_tokens
    labelled(console, "prompt", f"{count.tokens} tokens{'' if count.exact else ' (estimate)'}, rendered in "
                                f"{_ms(time.perf_counter() - started)}; grammar: {describe_grammar(prepared)}")
    if show_prompt:
        print_prompt(console, prepared)
    with step("generating"):
        started = time.perf_counter()
        completion = route.backend.complete(prepared.rendered.prompt, prepared.params)
        seconds = time.perf_counter() - started
    labelled(console, "generation", _speed(completion, route, seconds))
    labelled(console, "raw output", f"(continues the prompt's end {prepared.rendered.prefix!r})")
    console.rule(style="dim")
    console.print(completion.text)
    console.rule(style="dim")
    return prepared, completion


def _speed(completion: Completion, route: Route, seconds: float) -> str:
    """The answer's length and the rate, prompt processing included (one request cannot separate them)."""
    exact = completion.completion_tokens is not None
    tokens = completion.completion_tokens if exact else count_tokens(completion.text, route.backend).tokens
    rate = tokens / seconds if seconds > 0 else 0.0
    cut = ", cut off at the token limit" if completion.finish_reason == "length" else ""
    return (f"{tokens} tokens{'' if exact else ' (estimate)'} in {seconds:.2f} s, {rate:.1f} tokens/s "
            f"(prompt processing included){cut}")


def _print_answer(console: Console, response: ChatCompletion, *, thoughts: bool) -> None:
    """Repairs, then the call and the inner thoughts; ``thoughts=False``: the content is a plain answer."""
    info = response.llmproxy
    labelled(console, "repairs", ", ".join(info.repairs) if info and info.repairs else "none")
    message = response.choices[0].message
    calls = [c.function for c in message.tool_calls or []] or ([message.function_call] if message.function_call else [])
    if message.reasoning_content:
        labelled(console, "reasoning", message.reasoning_content)
    if not calls:
        labelled(console, "thoughts" if thoughts else "answer", message.content or "")
        if thoughts:
            labelled(console, "call", "none (the wrapper lets the model answer with thoughts alone)")
        return
    for call in calls:
        labelled(console, "call", f"{call.name} {call.arguments}")
    if message.content:
        labelled(console, "thoughts" if thoughts else "answer", message.content)
