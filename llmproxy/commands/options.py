"""The options the commands share (named and explained as for ``llmproxy serve``), and the route they
describe: built by the same code as the server's, so ``try`` and ``eval`` behave exactly like ``serve``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Optional

import typer

from llmproxy.backends import BACKEND_NAMES
from llmproxy.commands._console import step
from llmproxy.route import Route

BACKEND_HELP = (
    f"Backend type, by MemGPT's endpoint type names: {', '.join(BACKEND_NAMES)}. "
    "Default: embedded (SmolLM2-135M in-process). Example: --backend llamacpp"
)
WRAPPER_HELP = (
    "Prompt format for the model family (see 'llmproxy wrappers'); MemGPT's wrapper names work too. "
    "'auto' is the model's own chat template. Default: auto where the backend reports a template (the "
    "embedded model, llama.cpp), else chatml-json; both let the model answer in text or call. "
    "Example: --wrapper chatml-noforce-roles"
)
SYNTAX_HELP = (
    "The call syntax of the wrapper 'auto' (the model's own chat template), where the one read from the "
    "template is wrong or the template knows no tools: json, llama3, hermes, xml or pythonic are taught in "
    "the system message then; mistral and mistral-v11 need a template that lists the tools. Default: read "
    "from the template, else json. Example: --wrapper auto --syntax hermes"
)
DECIDE_HELP = (
    "How tool_choice 'auto' is decided: 'free' (the model writes text or a call as it likes, the call "
    "grammar applied from its trigger word) or 'choose' (the first step is a choice between calling and "
    "answering, made from the model's probabilities; then the call or the text is constrained; the "
    "embedded backend, and llamacpp, which is asked for the first token's likeliest alternatives first). "
    "Default: choose on the bundled SmolLM2 (embedded, or its GGUF on llama-server), where it decides far "
    "better, else free. Example: --decide free"
)
GRAMMAR_HELP = (
    "Constrained decoding: 'auto' (a grammar built from the request's functions, where the backend takes "
    "grammars), 'none', or a grammar file name. Default: the wrapper's setting, else auto. Example: --grammar none"
)

Backend = Annotated[Optional[str], typer.Option("--backend", show_default=False, help=BACKEND_HELP)]
Endpoint = Annotated[Optional[str], typer.Option(
    "--endpoint", show_default=False,
    help="The backend server's base URL; each backend has its usual default. Example: --endpoint http://localhost:8080")]
Model = Annotated[Optional[str], typer.Option(
    "--model", show_default=False,
    help="The backend's model name (required by ollama and vllm), or a GGUF file for embedded. "
         "Example: --model dolphin2.2-mistral:7b-q6_K")]
Wrapper = Annotated[Optional[str], typer.Option("--wrapper", show_default=False, help=WRAPPER_HELP)]
Wrappers = Annotated[Optional[list[str]], typer.Option(
    "--wrapper", show_default=False,
    help="Wrapper to evaluate; repeat the option to compare several. Default: as 'serve' picks it (auto "
         "where the backend reports the model's template, else chatml-json). "
         "Example: --wrapper chatml --wrapper chatml-noforce")]
Decides = Annotated[Optional[list[str]], typer.Option(
    "--decide", show_default=False,
    help="How tool_choice 'auto' is decided, 'free' or 'choose' (see 'llmproxy serve --help'); repeat to "
         "compare; choose is run with grammar auto only. Default: the route's own (choose on the bundled "
         "SmolLM2 with grammar auto, else free).")]
Syntax = Annotated[Optional[str], typer.Option("--syntax", show_default=False, help=SYNTAX_HELP)]
Grammar = Annotated[Optional[str], typer.Option("--grammar", show_default=False, help=GRAMMAR_HELP)]
Decide = Annotated[Optional[str], typer.Option("--decide", show_default=False, help=DECIDE_HELP)]
ContextWindow = Annotated[Optional[int], typer.Option(
    "--context-window", min=1, show_default=False,
    help="The model's context size in tokens; default: what the backend reports, else 8192. "
         "Example: --context-window 16384")]
AuthType = Annotated[Optional[str], typer.Option(
    "--auth-type", show_default=False,
    help="How to send --auth-key to the backend: 'bearer_token' (Authorization: Bearer KEY) or 'api_key' "
         "(api-key: KEY). Default: bearer_token when a key is given.")]
AuthKey = Annotated[Optional[str], typer.Option(
    "--auth-key", envvar="LLMPROXY_BACKEND_KEY", show_default=False,
    help="The backend's API key, if it wants one; also read from $LLMPROXY_BACKEND_KEY (better: it stays "
         "out of the process list).")]
MaxTokens = Annotated[Optional[int], typer.Option(
    "--max-tokens", min=1, show_default=False,
    help="Longest answer in tokens. Default: the backend's own default (512 for embedded).")]
Temperature = Annotated[Optional[float], typer.Option(
    "--temperature", min=0, max=2, show_default=False,
    help="Sampling temperature; 0 is (nearly) deterministic. Default: the backend's own default.")]
Preset = Annotated[Optional[str], typer.Option(
    "--preset", show_default=False,
    help="A settings preset: named generation settings such as deterministic, precise or creative, and MemGPT's "
         "simple and deterministic_mirostat ('llmproxy settings' lists them, with what each sets). Settings are "
         "layered: the backend's defaults, the user settings file, the preset, the model's own settings "
         "(--temperature and the like, a config file's settings), then a request's own fields. "
         "Example: --preset deterministic")]
Seed = Annotated[Optional[int], typer.Option(
    "--seed", show_default=False, help="Sampling seed, for repeatable runs where the backend honours it.")]
Retries = Annotated[Optional[int], typer.Option(
    "--retries", min=0, show_default=False,
    help="More generations an answer that cannot be used gets (told what was wrong) before it is an error. "
         "Default: 2; 0 shows the model's first answer as it is.")]
Debug = Annotated[bool, typer.Option(
    "--debug", envvar="LLMPROXY_DEBUG", help="On an error, show the full traceback instead of one line.")]


def variants(wrappers: Sequence[str] | None, grammars: Sequence[str | None],
             decides: Sequence[str] | None) -> list[tuple[str | None, str | None, str | None]]:
    """Each (wrapper, grammar, decide) to evaluate (None: the route's default), but choose without a
    grammar, which it needs."""
    return [(w, g, d) for w in wrappers or [None] for g in grammars for d in decides or [None]
            if not (g == "none" and d == "choose")]


def auth_type_for(auth_type: str | None, auth_key: str | None) -> str | None:
    """A key given without --auth-type is meant to be sent, so it goes the common way: as a bearer token."""
    return auth_type or ("bearer_token" if auth_key else None)


def open_routes(
    variants: Sequence[tuple[str | None, str | None, str | None]],
    *,
    backend: str | None,
    endpoint: str | None,
    model: str | None,
    context_window: int | None,
    auth_type: str | None,
    auth_key: str | None,
    syntax: str | None = None,
    max_tokens: int | None = None,
    temperature: float | None = None,
    seed: int | None = None,
    retries: int | None = None,
    preset: str | None = None,
) -> list[Route]:
    """One route per (wrapper, grammar, decide) in ``variants`` (None: the default), all on the backend these
    options describe, checked as ``serve`` checks its flags, with the model loaded."""
    from llmproxy.server.config import setup  # builds the backends: only commands that talk to one pay for it

    settings = {key: value for key, value in
                (("max_tokens", max_tokens), ("temperature", temperature), ("seed", seed)) if value is not None}
    common: dict[str, Any] = {"backend": backend, "endpoint": endpoint, "model": model, "syntax": syntax,
                              "context_window": context_window, "auth_type": auth_type_for(auth_type, auth_key),
                              "auth_key": auth_key, "settings": settings or None, "preset": preset}
    name = backend or "embedded"
    routes = []
    with step("loading the embedded model" if name == "embedded" else f"connecting to {name}"):
        for wrapper, grammar, decide in variants:
            flags = {**common, "wrapper": wrapper, "grammar": grammar, "decide": decide}
            _, named = setup(None, {key: value for key, value in flags.items() if value is not None})
            routes.extend(named.values())  # routes share the backend (and the loaded model): route.py caches it
        # The embedded model loads on first use: load it now, under the spinner, so that the first
        # request's timings measure generation and not loading. (HTTP backends: a tokenizer check.)
        routes[0].backend.count_tokens("")
    if retries is not None:
        for route in routes:
            route.retries = retries
    return routes


def open_route(*, wrapper: str | None, grammar: str | None, decide: str | None = None, **options: Any) -> Route:
    """The route for one wrapper, grammar and decide mode; ``options`` as for ``open_routes``."""
    return open_routes([(wrapper, grammar, decide)], **options)[0]


def backend_label(route: Route) -> str:
    """The backend, and the model's name where the route has one (``llamacpp (mistral-7b)``)."""
    name = route.backend.name
    return name if route.name == name else f"{name} ({route.name})"
