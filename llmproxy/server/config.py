"""Server configuration: named models from a TOML file, or one model from command-line flags.

The file (``llmproxy serve --config FILE``, or ``$LLMPROXY_CONFIG``)::

    [server]                      # optional; command-line flags win
    host = "127.0.0.1"
    port = 8100
    max_body_bytes = 8388608
    default_model = "smol"        # optional: answers requests naming no model or one not below or aliased
    allowed_hosts = ["llm.lan"]   # host names it answers to besides localhost and IP addresses ("*": any)
    cors_origins = ["https://app.example"]  # web pages that may call it (none by default)
    idle_timeout = 5              # seconds a connection may wait with no request under way
    header_timeout = 10           # seconds for a request's headers to arrive, from its first byte
    body_timeout = 30             # seconds for its body to arrive, from its headers
    max_header_bytes = 65536
    max_connections = 1000        # past it, the oldest connection with no request running is closed
    response_store_bytes = 67108864  # Responses API turns kept for previous_response_id (0: none)
    response_store_ttl = 3600     # seconds each is kept after its last use
    capture = false               # keep request bodies for the inspector at /inspect (they hold user data)

    [models.smol]                 # without default_model, the first model answers requests naming none
    backend = "embedded"          # MemGPT endpoint type: embedded, llamacpp, koboldcpp, ollama, ...
    wrapper = "chatml"            # prompt format (or a MemGPT wrapper name such as chatml-noforce-roles)
    # syntax = "hermes"           # with wrapper "auto" (the model's own template): the call syntax, if not the detected one
    grammar = "auto"              # auto | none | a grammar file name (see grammars/)
    # decide = "free"             # tool_choice "auto": free or choose (default: choose on the bundled SmolLM2)
    context_window = 8192

    [models.mixtral]
    backend = "llamacpp"
    endpoint = "http://localhost:8080"
    wrapper = "chatml-noforce-roles"
    auth_type = "bearer_token"    # or "api_key"; with auth_key
    auth_key = "secret"
    preset = "precise"            # a settings preset ('llmproxy settings' lists them), under the settings below
    settings = { temperature = 0.2, stop = ["</s>"] }
    max_running = 4               # requests it runs at once (default 32; the embedded model: 1)
    max_queue = 16                # requests that may wait beyond those (default 16); past them, 429
    retries = 2                   # more generations an unusable answer gets, told what was wrong (default 2)
    connect_timeout = 5           # seconds to connect to the backend (default 5)
    first_token_timeout = 300     # seconds to the answer's first token, the prompt read first (default 120)
    read_timeout = 60             # seconds between two pieces of the answer (default 30)
    fallbacks = ["smol"]          # models to try in order when this one is down, busy or silent

    [models.qwen]                 # a pool: interchangeable endpoints of any backend kind (llmproxy.server.pools)
    backend = "llamacpp"          # the members' default backend
    wrapper = "hermes"            # every member renders alike (checked at start)
    members = [
      { endpoint = "http://gpu1:8080" },
      { endpoint = "http://gpu2:8080", weight = 2 },   # twice the capacity
      { backend = "vllm", endpoint = "http://gpu3:8000", model = "Qwen/Qwen3-8B", name = "gpu3" },
    ]
    sticky_imbalance = 2          # a conversation leaves its member once it carries this many more requests
    sticky = true                 # false: each request to the least loaded member, conversations or not
    escalate_to = "mixtral"       # an answer still unusable after the second chances is asked of it, once

    [on_demand]                   # models loaded on demand (llmproxy.server.on_demand)
    memory_budget = "6GiB"        # what they may take together; the least recently used idle one makes room
    max_wait = 30                 # seconds a request for an unloaded model waits before busy models make room
    models_dir = "~/models"       # each *.gguf in it: an embedded model named by its stem
    ttl = 300                     # idle seconds before a model unloads (0: never); a model's own ttl wins

    [models.coder]                # a server started on its first request, stopped after its ttl
    backend = "llamacpp"
    command = "llama-server -m ~/models/coder.gguf --port {port} --no-repack"   # {port}: llmproxy picks it
    ttl = 600
    preload = true                # loaded when the server starts (the default_model is, and stays loaded)
    memory = "5GiB"               # what it takes in the budget (default: measured; GGUFs guessed before)

    [models.local]                # a pool whose members' servers start on demand, and stop after the ttl
    backend = "llamacpp"
    wrapper = "chatml"
    ttl = 600
    members = [{ command = "llama-server -m q.gguf --port {port} --device CUDA0", start_timeout = 300 },
               { command = "llama-server -m q.gguf --port {port} --device CUDA1" }]

    [aliases]                     # names clients send (glob patterns, first match wins) -> a model
    "claude-*" = "mixtral"        # Claude Code's names, including its background tier
    "gpt-*" = "smol"

Which model answers a request: the one its ``model`` names, else the first alias matching the name. A file that sets no ``default_model``
answers a request naming none with its first model, and one naming an unknown model with a 404
listing the known ones: with several models, a misspelt name must not silently reach another. A
server started with flags serves one model, which answers whatever name a client sends (clients
and tools default to names such as ``gpt-4o-mini``).

With an ``[on_demand]`` table, or a model that sets ``command``, ``ttl``, ``preload``, ``memory`` or
``router`` (its endpoint is llama.cpp's router, which loads ``model`` on command), embedded models load
on their first request instead of at start, started servers and Ollama models likewise, and they unload
after their ``ttl``; a ``model = "package:NAME"`` is the GGUF the installed Python package NAME ships.
A pool member's ``command`` starts its server likewise (llmproxy.server.pools.servers), and LM Studio's
models get their ``ttl`` with each request (llmproxy.server.on_demand.lmstudio).

Nothing here imports the web framework: the commands that do not serve build their routes here too.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Mapping, Sequence
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from llmproxy.errors import ConfigurationError
from llmproxy.grammar import grammar_names
from llmproxy.route import DEFAULT_RETRIES, Route, build_route
from llmproxy.server.on_demand.sizes import parse_size
from llmproxy.server.on_demand.spec import (DEFAULT_MAX_WAIT, DEFAULT_START_TIMEOUT, PACKAGE_PREFIX, ModelPlan,
                                            OnDemandSpec, command_line, gguf_files, model_file)
from llmproxy.server.pools.build import check_members
from llmproxy.server.pools.spec import MemberSpec, PoolSpec
from llmproxy.server.response_store import DEFAULT_MAX_BYTES as DEFAULT_STORE_BYTES
from llmproxy.server.response_store import DEFAULT_TTL as DEFAULT_STORE_TTL
from llmproxy.settings import to_generation_params

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8100  # 8000 is vLLM's default and 8080 llama.cpp's: both often run next to llmproxy
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024  # a long MemGPT conversation is well under 1 MiB
DEFAULT_MAX_RUNNING = 32  # for backends that run several generations at once
DEFAULT_MAX_QUEUE = 16


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt key is an error, not silently ignored


TIMEOUTS = ("connect_timeout", "first_token_timeout", "read_timeout")  # model keys that go to the backend


class MemberConfig(_Strict):
    """One member of a model's pool (llmproxy.server.pools): its endpoint, with the model's settings
    for everything it does not set itself."""

    name: str | None = Field(default=None, min_length=1)  # in /health, /metrics and the log; default: backend-N
    backend: str | None = None  # default: the model's
    endpoint: str | None = None
    model: str | None = None
    weight: float = Field(default=1.0, gt=0)  # its capacity relative to the others
    max_running: int | None = Field(default=None, ge=1)  # requests sent to it at once (default: the backend's)
    auth_type: Literal["bearer_token", "api_key"] | None = None
    auth_key: str | None = None
    connect_timeout: float | None = Field(default=None, gt=0)
    first_token_timeout: float | None = Field(default=None, gt=0)
    read_timeout: float | None = Field(default=None, gt=0)
    # The command that starts its server on demand ({port}: llmproxy picks it), and the seconds it has to answer.
    command: str | list[str] | None = None
    start_timeout: float | None = Field(default=None, gt=0)


class ModelConfig(_Strict):
    backend: str = "embedded"
    endpoint: str | None = None
    model: str | None = None
    wrapper: str | None = None
    syntax: str | None = None  # the call syntax of the wrapper "auto"; None: read from the model's template
    grammar: str | None = None  # None: the wrapper alias's setting, else auto
    decide: Literal["free", "choose"] | None = None  # tool_choice "auto" (llmproxy.decide); None: the route's default
    context_window: int | None = Field(default=None, ge=1)
    preset: str | None = None  # a settings preset (llmproxy.presets); ``settings`` tune it
    settings: dict[str, Any] = Field(default_factory=dict)
    auth_type: Literal["bearer_token", "api_key"] | None = None
    auth_key: str | None = None
    function_correction: bool = True
    max_running: int | None = Field(default=None, ge=1)
    max_queue: int | None = Field(default=None, ge=0)
    retries: int = Field(default=DEFAULT_RETRIES, ge=0)  # second chances for an unusable answer
    # HTTP backends (TIMEOUTS; llmproxy.backends._http.Timeouts): seconds to connect, to the first token, between pieces
    connect_timeout: float | None = Field(default=None, gt=0)
    first_token_timeout: float | None = Field(default=None, gt=0)
    read_timeout: float | None = Field(default=None, gt=0)
    fallbacks: list[str] = Field(default_factory=list)  # served models to try instead (llmproxy.server.fallbacks)
    # A pool of interchangeable endpoints instead of one (llmproxy.server.pools), and its settings.
    members: list[MemberConfig] = Field(default_factory=list)
    sticky_imbalance: float = Field(default=2.0, ge=0)  # requests a conversation's member may carry above the least loaded
    sticky: bool = True  # whether a conversation stays on its member (False: every request to the least loaded)
    poll_interval: float = Field(default=1.0, ge=0.1)  # seconds between two load and health checks of a member
    escalate_to: str | None = None  # the model that gets an answer still unusable after the second chances
    # Loaded on demand (llmproxy.server.on_demand): idle seconds before it unloads (0: never; default:
    # [on_demand] ttl), loaded at start, its size in the budget, the command that starts its server.
    ttl: float | None = Field(default=None, ge=0)
    preload: bool = False
    memory: int | str | None = None
    command: str | list[str] | None = None
    start_timeout: float = Field(default=DEFAULT_START_TIMEOUT, gt=0)  # seconds its started server has to answer
    router: bool = False  # its endpoint is llama.cpp's router: ``model`` loaded and unloaded on command


class ConnectionLimits(_Strict):
    """How long the server waits for what a client must send next, and how many connections it keeps
    open (llmproxy.server.connections)."""

    idle_timeout: float = Field(default=5.0, gt=0)  # uvicorn's keep-alive default; clients reconnect at no cost
    header_timeout: float = Field(default=10.0, gt=0)
    body_timeout: float = Field(default=30.0, gt=0)  # 8 MiB (the body limit) at 280 KB/s
    max_header_bytes: int = Field(default=64 * 1024, ge=1024)
    max_connections: int = Field(default=1000, ge=1)


class ServerConfig(ConnectionLimits):
    host: str = DEFAULT_HOST
    port: int = Field(default=DEFAULT_PORT, ge=1, le=65535)
    max_body_bytes: int = Field(default=DEFAULT_MAX_BODY_BYTES, ge=1024)
    default_model: str | None = None  # answers requests naming no model or an unknown one
    allowed_hosts: list[str] = Field(default_factory=list)
    cors_origins: list[str] = Field(default_factory=list)
    # The Responses API's stored turns (llmproxy.server.response_store): bytes in all, seconds each.
    response_store_bytes: int = Field(default=DEFAULT_STORE_BYTES, ge=0)
    response_store_ttl: float = Field(default=DEFAULT_STORE_TTL, gt=0)
    capture: bool = False  # the inspector keeps each request's bodies, not just its metadata (llmproxy.server.inspector)

    def limits(self) -> ConnectionLimits:
        return ConnectionLimits(**{key: getattr(self, key) for key in ConnectionLimits.model_fields})


class OnDemandConfig(_Strict):
    """What the models loaded on demand share (llmproxy.server.on_demand)."""

    memory_budget: int | str | None = None  # bytes, or "6GiB"; None: no limit
    max_wait: float = Field(default=DEFAULT_MAX_WAIT, gt=0)
    models_dir: str | None = None  # each GGUF file in it: an embedded model named by its stem
    ttl: float = Field(default=0.0, ge=0)  # the models' default ttl


class Config(_Strict):
    server: ServerConfig = Field(default_factory=ServerConfig)
    models: dict[str, ModelConfig] = Field(min_length=1)
    aliases: dict[str, str] = Field(default_factory=dict)  # glob of names clients send -> model
    on_demand: OnDemandConfig | None = None


def load_config(path: Path) -> Config:
    """Read and check a config file; every problem is a ConfigurationError naming the file and key."""
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigurationError(f"config file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"config file {path} cannot be read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"config file {path} is not valid TOML: {exc}") from None
    return config_from(raw, f"config file {path}")


def config_from(raw: dict[str, Any], origin: str) -> Config:
    """A config file's contents checked (``origin`` names it in errors); ``[on_demand] models_dir``'s files
    become models, after those the file names itself."""
    path = origin
    folder = (raw.get("on_demand") or {}).get("models_dir") if isinstance(raw.get("on_demand"), dict) else None
    if isinstance(folder, str):
        try:
            found = {file.stem: {"model": str(file)} for file in gguf_files(folder)}
        except ConfigurationError as exc:
            raise ConfigurationError(f"{origin}: on_demand.{exc.message}") from None
        named = raw.get("models") if isinstance(raw.get("models"), dict) else {}
        raw = {**raw, "models": {**named, **{name: model for name, model in found.items() if name not in named}}}
    try:
        config = Config.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or '(top level)'}: {error['msg']}" for error in exc.errors()
        )
        raise ConfigurationError(f"{path}: {problems}") from None
    default = config.server.default_model
    if default is not None and default not in config.models:
        raise ConfigurationError(
            f"{path}: server.default_model: {default!r} is not one of its models "
            f"({', '.join(config.models)})"
        )
    for pattern, name in config.aliases.items():
        if name not in config.models:
            raise ConfigurationError(f"{path}: aliases.{pattern!r}: {name!r} is not one of its models "
                                     f"({', '.join(config.models)})")
    return config


def check_grammar(grammar: str | None) -> None:
    if grammar is not None and grammar not in ("auto", "none") and grammar not in grammar_names():
        raise ConfigurationError(
            f"unknown grammar {grammar!r}; use auto, none or one of: {', '.join(grammar_names())}"
        )


def model_route(name: str, model: ModelConfig) -> Route:
    """The route serving ``model`` under ``name``."""
    check_grammar(model.grammar)
    route = build_route(
        endpoint_type=model.backend,
        endpoint=model.endpoint,
        model=model.model,
        wrapper=model.wrapper,
        syntax=model.syntax,
        grammar=model.grammar,
        context_window=model.context_window,
        settings=model.settings,
        preset=model.preset,
        function_correction=model.function_correction,
        auth_type=model.auth_type,
        auth_key=model.auth_key,
        name=name,
        retries=model.retries,
        decide=model.decide,
        backend_options={key: getattr(model, key) for key in TIMEOUTS if getattr(model, key) is not None},
    )
    to_generation_params(route.base_settings)  # bad settings fail now, not per request
    return route


def check_fallbacks(fallbacks: Mapping[str, Sequence[str]], served: Sequence[str]) -> None:
    """Every fallback names another served model, once."""
    for name, others in fallbacks.items():
        for other in others:
            if other == name:
                raise ConfigurationError(f"model {name!r}: fallbacks name the model itself")
            if other not in served:
                raise ConfigurationError(f"model {name!r}: fallback {other!r} is not a served model"
                                         f" ({', '.join(served)})")
        if len(set(others)) != len(others):
            raise ConfigurationError(f"model {name!r}: fallbacks name a model twice")


@dataclass(frozen=True)
class RouteLimits:
    """How many of a backend's requests run at once, and how many may wait (llmproxy.server.admission)."""

    max_running: int
    max_queue: int = DEFAULT_MAX_QUEUE


def route_limits(route: Route, max_running: int | None = None, max_queue: int | None = None) -> RouteLimits:
    """The limits for ``route``: those given, else the defaults for its backend."""
    concurrent = route.backend.capabilities.concurrent
    if not concurrent and max_running not in (None, 1):
        raise ConfigurationError(f"max_running: the {route.backend.name} backend runs one generation at a time")
    return RouteLimits(max_running or (DEFAULT_MAX_RUNNING if concurrent else 1),
                       DEFAULT_MAX_QUEUE if max_queue is None else max_queue)


class Serving(NamedTuple):
    """What ``llmproxy serve`` serves: server settings, and each model's route and limits; the members of
    the models that are pools; the model each escalates to."""

    server: ServerConfig
    routes: dict[str, Route]
    limits: dict[str, RouteLimits]
    fallbacks: dict[str, tuple[str, ...]]
    aliases: dict[str, str]
    pools: dict[str, PoolSpec] = {}
    escalations: dict[str, str] = {}
    on_demand: OnDemandSpec | None = None  # the models loaded on demand (llmproxy.server.on_demand)


def _served(name: str, model: ModelConfig, ttl: float = 0.0) -> tuple[Route, RouteLimits, PoolSpec | None]:
    """The route and limits of a model; a pool's members too (``ttl``: their servers' idle seconds, where the
    model sets none)."""
    if not model.members:
        route = model_route(name, model)
        return route, route_limits(route, model.max_running, model.max_queue), None
    if model.command is not None:
        raise ConfigurationError("command: give each member of the pool its own (each starts its own server)")
    for key in ("router", "memory"):
        if getattr(model, key):
            raise ConfigurationError(f"{key}: not for a pool (its members are not in the on-demand memory budget)")
    members = []
    for number, member in enumerate(model.members, 1):
        label = member.name or f"{member.backend or model.backend}-{number}"
        settings = {key: value for key, value in member.model_dump(exclude={"name", "weight"}).items() if value is not None}
        try:
            found, argv = _found(model.model_copy(update={**settings, "members": []}))
            route = model_route(name, found)
            members.append(MemberSpec(label, route, member.weight, route_limits(route, member.max_running).max_running,
                                      argv, found.start_timeout))
        except ConfigurationError as exc:
            raise ConfigurationError(f"member {label!r}: {exc.message}") from None
    if len({member.name for member in members}) != len(members):
        raise ConfigurationError("two members have the same name; give each its own")
    down = check_members(name, [(member.name, member.route) for member in members],
                         {member.name for member in members if member.command})
    pool = PoolSpec(tuple(members), model.sticky_imbalance, model.poll_interval, model.sticky, down,
                    ttl if model.ttl is None else model.ttl, model.preload)
    running = model.max_running or sum(member.max_running for member in members)
    return members[0].route, RouteLimits(running, DEFAULT_MAX_QUEUE if model.max_queue is None else model.max_queue), pool


def check_escalations(escalations: Mapping[str, str], served: Sequence[str]) -> None:
    """Every model escalates to another served model."""
    for name, other in escalations.items():
        if other == name:
            raise ConfigurationError(f"model {name!r}: escalate_to names the model itself")
        if other not in served:
            raise ConfigurationError(f"model {name!r}: escalate_to {other!r} is not a served model ({', '.join(served)})")


def default_name(model: ModelConfig) -> str:
    """The name a flags-defined model is listed under: the model's name (a GGUF file's stem), else
    the backend's."""
    if model.model:
        return Path(model.model).stem if model.model.endswith(".gguf") else model.model
    return model.backend


def _found(model: ModelConfig) -> tuple[ModelConfig, tuple[str, ...] | None]:
    """The model with its file found (``package:NAME``) and its command's ``{port}`` filled in; the command."""
    update: dict[str, Any] = {}
    if model.model and model.model.startswith(PACKAGE_PREFIX):
        update["model"] = model_file(model.model)
    argv = None
    if model.command is not None:
        argv, update["endpoint"] = command_line(model.command, model.endpoint)
    return (model.model_copy(update=update) if update else model), argv


def _on_demand(config: Config, commands: Mapping[str, tuple[str, ...]]) -> OnDemandSpec | None:
    """The models loaded on demand: none unless the file has an [on_demand] table or a model sets a key of it."""
    models = config.models
    if config.on_demand is None and not any(model.command or model.ttl is not None or model.preload or model.router
                                            or model.memory is not None for model in models.values()):
        return None
    shared = config.on_demand or OnDemandConfig()
    budget = None if shared.memory_budget is None else parse_size(shared.memory_budget, "on_demand.memory_budget")
    plans = {name: ModelPlan(ttl=shared.ttl if model.ttl is None else model.ttl, preload=model.preload,
                             memory=None if model.memory is None else parse_size(model.memory, f"models.{name}.memory"),
                             command=commands.get(name), start_timeout=model.start_timeout, router=model.router)
             for name, model in models.items() if not model.members}  # a pool's members: not yet on demand
    return OnDemandSpec(budget, shared.max_wait, config.server.default_model, plans)


def serving(path: Path | None, flags: dict[str, Any], on_demand: dict[str, Any] | None = None) -> Serving:
    """Server settings, routes and limits: from the config file at ``path``, else from ``on_demand`` (an
    [on_demand] table naming a models_dir: ``serve --models-dir``), else one model from ``flags``
    (ModelConfig's keys; none at all means the embedded model), which answers any model name."""
    if path is None and on_demand is not None:
        config = config_from({"on_demand": on_demand}, "--models-dir")
        return _serving(config, "--models-dir")
    if path is None:
        try:
            model = ModelConfig(**flags)
        except ValidationError as exc:
            error = exc.errors()[0]
            option = "--" + str(error["loc"][0]).replace("_", "-") if error["loc"] else "option"
            raise ConfigurationError(f"bad option {option}: {error['msg']}") from None
        name = default_name(model)
        route, limits, _ = _served(name, _found(model)[0])
        if model.fallbacks:
            raise ConfigurationError("fallbacks name other models: define them in a config file (--config)")
        return Serving(ServerConfig(default_model=name), {name: route}, {name: limits}, {}, {})
    if flags:
        options = ", ".join("--" + key.replace("_", "-") for key in flags)
        raise ConfigurationError(
            f"{options} cannot be combined with a config file ({path}): the file defines the models"
        )
    return _serving(load_config(path), f"config file {path}")


def _serving(config: Config, path: str) -> Serving:
    served = Serving(config.server, {}, {}, {name: tuple(model.fallbacks) for name, model in config.models.items()
                                             if model.fallbacks}, config.aliases, {},
                     {name: model.escalate_to for name, model in config.models.items() if model.escalate_to})
    try:
        check_fallbacks(served.fallbacks, list(config.models))
        check_escalations(served.escalations, list(config.models))
    except ConfigurationError as exc:
        raise ConfigurationError(f"{path}, {exc.message}") from None
    commands: dict[str, tuple[str, ...]] = {}
    ttl = config.on_demand.ttl if config.on_demand is not None else 0.0
    for name, model in config.models.items():
        try:
            model, argv = _found(model)
            if argv is not None:
                commands[name] = argv
            served.routes[name], served.limits[name], pool = _served(name, model, ttl)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{path}, model {name!r}: {exc.message}") from None
        if pool is not None:
            served.pools[name] = pool
    try:
        return served._replace(on_demand=_on_demand(config, commands))
    except ConfigurationError as exc:
        raise ConfigurationError(f"{path}: {exc.message}") from None


def setup(path: Path | None, flags: dict[str, Any]) -> tuple[ServerConfig, dict[str, Route]]:
    """Server settings and routes, as ``serving`` finds them (for commands that do not serve)."""
    served = serving(path, flags)
    return served.server, served.routes
