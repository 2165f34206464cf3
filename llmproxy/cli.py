"""The ``llmproxy`` command: a typer app, one subcommand per task (``llmproxy serve`` ...)."""

from __future__ import annotations

import ipaddress
import logging
from pathlib import Path
from typing import Annotated

import typer

from llmproxy.commands import options as opt
from llmproxy.commands import register as register_commands
from llmproxy.errors import ConfigurationError

app = typer.Typer(
    help="llmproxy: OpenAI function calling for local models.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)

LOG_LEVELS = ("debug", "info", "warning", "error")
API_KEY_ENV = "LLMPROXY_API_KEY"


@app.callback()
def _commands() -> None:
    """llmproxy: OpenAI function calling for local models.

    Run 'llmproxy COMMAND --help' for a command's options.
    """


def _fail(message: str) -> typer.Exit:
    typer.echo(f"llmproxy: {message}", err=True)
    return typer.Exit(2)


@app.command(no_args_is_help=False)
def serve(
    config: Annotated[Path | None, typer.Option(
        "--config", envvar="LLMPROXY_CONFIG", show_default=False,
        help="TOML file of named models, one [models.NAME] table each with backend, endpoint, model, "
             "wrapper, syntax, grammar, decide, context_window, preset, settings, auth_type, auth_key, max_running, "
             "max_queue, "
             "retries, "
             "connect_timeout, first_token_timeout, read_timeout, fallbacks, escalate_to, for a model loaded on "
             "demand ttl, preload, memory, command (its server's command line, {port} where llmproxy's port for "
             "it goes), start_timeout, router, and for a pool of "
             "interchangeable endpoints members (each may give the command that starts its server), "
             "sticky_imbalance, poll_interval (and "
             "an optional [server] table: host, port, max_body_bytes, default_model, allowed_hosts, "
             "cors_origins, idle_timeout, header_timeout, body_timeout, max_header_bytes, max_connections, "
             "response_store_bytes, response_store_ttl, capture; an optional [on_demand] table: memory_budget, "
             "max_wait, models_dir, ttl; "
             "flags win; and an optional [aliases] table of glob patterns: \"claude-*\" = \"NAME\"). A request's "
             "model picks one; naming none picks default_model, else the first; an unknown name gets the "
             "first alias it matches, else default_model, else a 404. "
             "Cannot be combined with the model flags below. The file is read again on SIGHUP (models loaded "
             "on demand keep running as they are until a restart). "
             "Example: --config ~/.config/llmproxy/server.toml")] = None,
    backend: opt.Backend = None,
    endpoint: opt.Endpoint = None,
    model: Annotated[str | None, typer.Option(
        "--model", show_default=False,
        help="The backend's model name (required by ollama and vllm), or a GGUF file for embedded. "
             "/v1/models lists it under this name (a GGUF file's stem), else under the backend's name; "
             "it answers whatever model name a request gives. "
             "Example: --model dolphin2.2-mistral:7b-q6_K")] = None,
    wrapper: opt.Wrapper = None,
    syntax: opt.Syntax = None,
    grammar: opt.Grammar = None,
    decide: opt.Decide = None,
    context_window: opt.ContextWindow = None,
    preset: opt.Preset = None,
    max_running: Annotated[int | None, typer.Option(
        "--max-running", min=1, show_default=False,
        help="Requests the model runs at once. Default: 32; the embedded model runs one at a time.")] = None,
    retries: opt.Retries = None,
    connect_timeout: Annotated[float | None, typer.Option(
        "--connect-timeout", min=0.001, show_default=False,
        help="Seconds to wait for an HTTP backend to accept a connection (then 503). Default: 5.")] = None,
    first_token_timeout: Annotated[float | None, typer.Option(
        "--first-token-timeout", min=0.001, show_default=False,
        help="Seconds an HTTP backend may take to the first token of an answer (it reads the prompt first: "
             "raise this for long prompts on slow machines) before the request fails with 504. A backend that "
             "cannot stream sends its whole answer within it. Default: 120.")] = None,
    read_timeout: Annotated[float | None, typer.Option(
        "--read-timeout", min=0.001, show_default=False,
        help="Seconds an HTTP backend may send nothing between two pieces of an answer before the request "
             "fails with 504; an answer that keeps coming is never cut. Default: 30.")] = None,
    max_queue: Annotated[int | None, typer.Option(
        "--max-queue", min=0, show_default=False,
        help="Requests that may wait beyond those running; past them a request gets 429 with Retry-After "
             "(OpenAI's SDKs wait and retry). Default: 16. Example: --max-queue 4")] = None,
    host: Annotated[str | None, typer.Option(
        "--host", show_default=False,
        help="Address to listen on. Default: 127.0.0.1 (this machine only); 0.0.0.0 opens it to the "
             "network, so set an API key then. Example: --host 0.0.0.0")] = None,
    port: Annotated[int | None, typer.Option(
        "--port", min=1, max=65535, show_default=False,
        help="Port to listen on. Default: 8100 (8000 and 8080 are vLLM's and llama.cpp's). "
             "Clients use http://HOST:PORT/v1 as their base URL. Example: --port 8200")] = None,
    api_key: Annotated[str | None, typer.Option(
        "--api-key", envvar=API_KEY_ENV, show_default=False,
        help=f"Require 'Authorization: Bearer KEY' on /v1, /health and /metrics; also read from ${API_KEY_ENV} "
             "(better: it stays out of the process list). Default: no key.")] = None,
    allowed_host: Annotated[list[str] | None, typer.Option(
        "--allowed-host", show_default=False,
        help="A host name clients reach the server under (repeat for several); it always answers to "
             "localhost, IP addresses and the --host name. Other names are refused (421): a web page "
             "cannot read answers through DNS rebinding. '*' allows any. Example: --allowed-host llm.lan")] = None,
    cors_origin: Annotated[list[str] | None, typer.Option(
        "--cors-origin", show_default=False,
        help="A web origin whose pages may call the server from the browser (repeat for several). "
             "Default: none. Example: --cors-origin https://chat.example")] = None,
    idle_timeout: Annotated[float | None, typer.Option(
        "--idle-timeout", min=0.001, show_default=False,
        help="Seconds a connection may stay open with no request under way. Default: 5.")] = None,
    header_timeout: Annotated[float | None, typer.Option(
        "--header-timeout", min=0.001, show_default=False,
        help="Seconds a request's headers may take to arrive, from its first byte (then 408). Default: 10.")] = None,
    body_timeout: Annotated[float | None, typer.Option(
        "--body-timeout", min=0.001, show_default=False,
        help="Seconds a request's body may take to arrive, from its headers (then 408). Default: 30.")] = None,
    max_connections: Annotated[int | None, typer.Option(
        "--max-connections", min=1, show_default=False,
        help="Open connections kept at most; past it a new one closes the oldest that runs no request, "
             "so idle clients never lock out real ones. Default: 1000.")] = None,
    models_dir: Annotated[Path | None, typer.Option(
        "--models-dir", show_default=False,
        help="A folder of GGUF files: each one is an embedded model named by its file's stem, loaded on its "
             "first request and unloaded after --ttl idle seconds; with --memory-budget, the least recently "
             "used idle model makes room (a model serving or loading never does), and a request that cannot "
             "fit yet waits in its queue. For servers started on demand (llama-server, vLLM, ...) give each "
             "model a command in a --config file. Example: --models-dir ~/models --memory-budget 8GiB --ttl 300")] = None,
    memory_budget: Annotated[str | None, typer.Option(
        "--memory-budget", show_default=False,
        help="With --models-dir: the memory its models may take together, e.g. 8GiB. Default: no limit.")] = None,
    ttl: Annotated[float | None, typer.Option(
        "--ttl", min=0, show_default=False,
        help="With --models-dir: idle seconds before a model unloads (0: never). Default: 0.")] = None,
    capture: Annotated[bool, typer.Option(
        "--capture", show_default=False,
        help="Keep each request's bodies (the client's request, the prompt, the grammar, the model's raw "
             "output, the response) for the inspector page at /inspect, and let it run them again. They hold "
             "user data, kept in memory only, the last few hundred (64 MiB at most). Default: the inspector "
             "shows each request's metadata only. Config file: capture = true.")] = False,
    log_level: Annotated[str, typer.Option(
        "--log-level", case_sensitive=False,
        help=f"One of {', '.join(LOG_LEVELS)}. 'info' logs one line per request; 'debug' adds each "
             "rendered prompt and the model's raw output.")] = "info",
) -> None:
    """Serve the OpenAI API (/v1/chat/completions, /v1/completions, /v1/responses, /v1/models, /health,
    /metrics, /docs) and Anthropic's Messages API (/v1/messages).

    With no options it serves the embedded SmolLM2 model on http://127.0.0.1:8100/v1.

    Flags define one model, which answers whatever model name a request gives (clients default to
    names like gpt-4o-mini). A --config file defines named models: a request's model picks one, and
    an unknown name is a 404 unless the file sets [server] default_model = "NAME", which then answers
    it (and requests that name no model; without it, those go to the first model).

    Examples:

      llmproxy serve

      llmproxy serve --backend llamacpp --endpoint http://localhost:8080 --wrapper chatml

      llmproxy serve --config models.toml --host 0.0.0.0 --api-key "$KEY"

      llmproxy serve --models-dir ~/models --memory-budget 8GiB --ttl 300
    """
    from llmproxy.server.app import create_app, run
    from llmproxy.server.config import serving
    from llmproxy.server.reload import reload_on_sighup
    from llmproxy.server.response_store import ResponseStore

    level = log_level.lower()
    if level not in LOG_LEVELS:
        raise _fail(f"--log-level must be one of {', '.join(LOG_LEVELS)}, not {log_level!r}")
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    flags = {"backend": backend, "endpoint": endpoint, "model": model, "wrapper": wrapper, "syntax": syntax,
             "grammar": grammar, "decide": decide,
             "context_window": context_window, "preset": preset, "max_running": max_running, "max_queue": max_queue,
             "retries": retries, "connect_timeout": connect_timeout, "first_token_timeout": first_token_timeout,
             "read_timeout": read_timeout}
    on_demand = None
    if models_dir is not None:
        if any(value is not None for value in flags.values()):
            raise _fail("--models-dir serves the folder's GGUF files with their defaults; for other settings "
                        "use a --config file with [on_demand] models_dir and [models.NAME] tables")
        if config is not None:
            raise _fail("--models-dir cannot be combined with --config: set [on_demand] models_dir in the file")
        on_demand = {"models_dir": str(models_dir), "ttl": ttl or 0.0,
                     **({"memory_budget": memory_budget} if memory_budget is not None else {})}
    elif memory_budget is not None or ttl is not None:
        raise _fail("--memory-budget and --ttl go with --models-dir (or [on_demand] in a --config file)")
    try:
        served = serving(config, {k: v for k, v in flags.items() if v is not None}, on_demand)
        server, routes, limits, fallbacks, aliases = served.server, served.routes, served.limits, served.fallbacks, \
            served.aliases
    except ConfigurationError as exc:
        raise _fail(exc.message) from None
    listen_host, listen_port = host or server.host, port or server.port
    log = logging.getLogger("llmproxy.server")
    if not api_key and not _is_loopback(listen_host):
        log.warning("listening on %s without an API key: anyone who can reach it can use it", listen_host)
    try:
        server_app = create_app(routes, default_model=server.default_model, api_key=api_key,
                                max_body_bytes=server.max_body_bytes,
                                allowed_hosts=[listen_host, *(allowed_host or server.allowed_hosts)],
                                cors_origins=cors_origin or server.cors_origins, limits=limits, fallbacks=fallbacks,
                                aliases=aliases, responses=ResponseStore(server.response_store_bytes,
                                                                         server.response_store_ttl),
                                capture=capture or server.capture, pools=served.pools, escalations=served.escalations,
                                on_demand=served.on_demand)
    except ConfigurationError as exc:  # a model that can never fit in the memory budget
        raise _fail(exc.message) from None
    if config is not None:  # kill -HUP reads the file again (llmproxy.server.reload)
        reload_on_sighup(server_app, lambda: serving(config, {}))
    for name, route in routes.items():
        log.info("model %r: backend %s, wrapper %s, grammar %s, tool_choice auto decided %s, context %d tokens%s",
                 name, route.backend.name, route.wrapper.name, route.grammar, route.decide, route.context_window,
                 f", settings preset {route.preset}" if route.preset else "")
    log.info("OpenAI base URL: http://%s:%d/v1 (docs at /docs, inspector at /inspect%s)", listen_host, listen_port,
             ", capturing request bodies" if capture or server.capture else "")
    connection_flags = {"idle_timeout": idle_timeout, "header_timeout": header_timeout, "body_timeout": body_timeout,
                        "max_connections": max_connections}
    limits = server.limits().model_copy(update={k: v for k, v in connection_flags.items() if v is not None})
    run(server_app, listen_host, listen_port, level, limits)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


register_commands(app)  # wrappers, settings, render, try, chat, eval, bfcl, probe


def main() -> None:
    """Entry point of the ``llmproxy`` console script."""
    app()
