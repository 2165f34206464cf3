"""A route: one model as llmproxy serves it - a backend, a wrapper, grammar use, settings, context.

The library builds one per call (backends are cached, so repeated calls reuse connections and the
loaded embedded model); the server builds one per configured model name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

from llmproxy.backends import create_backend
from llmproxy.backends.base import Backend
from llmproxy.backends.embedded import DEFAULT_MODEL_FILE
from llmproxy.decide import DecideMode, check_decide, route_decide
from llmproxy.errors import ConfigurationError, InvalidRequestError
from llmproxy.prompts import AUTO, NAME_A_WRAPPER, Resolved, Wrapper, backend_wrapper, load_wrapper
from llmproxy.presets import load_preset
from llmproxy.settings import layered_settings, user_settings
from llmproxy.syntaxes import create_syntax

# The default is the model's own template where the backend reports one, else ChatML with JSON calls;
# both let the model answer in text or call (OpenAI's tool_choice "auto"), so every agent loop can end.
# MemGPT's wrappers, which always call, are chosen by name.
DEFAULT_WRAPPER = AUTO
FALLBACK_WRAPPER = "chatml-json"
DEFAULT_CONTEXT_WINDOW = 8192  # used when neither the caller nor the backend can tell
DEFAULT_RETRIES = 2  # a second chance, and a third, before an answer that cannot be used is an error
BUNDLED_MODEL = Path(DEFAULT_MODEL_FILE).stem  # the embedded backend's own model, where choose is the default


@dataclass
class Route:
    name: str
    backend: Backend
    wrapper: Wrapper
    grammar: str = "auto"  # "auto" (from the tool schemas, where the backend takes grammars), "none", or a grammar name
    context_window: int = DEFAULT_CONTEXT_WINDOW
    settings: dict[str, Any] = field(default_factory=dict)
    function_correction: bool = True
    retries: int = DEFAULT_RETRIES
    decide: DecideMode = "free"  # how tool_choice "auto" is decided (llmproxy.decide)
    preset: str | None = None  # a settings preset (llmproxy.presets): above the user file, below ``settings``
    # Each preset's base settings, once a request names it (a copy made by ``dataclasses.replace`` starts afresh).
    _preset_settings: dict[str, dict[str, Any]] = field(default_factory=dict, init=False, repr=False, compare=False)

    @cached_property
    def user_file_settings(self) -> dict[str, Any]:
        """The user settings file's, read once per route: the library builds a route per call, so it sees
        the file as it is now; the server's routes live as long as it does, so it reads the file when it
        starts."""
        return user_settings(self.backend.name)

    @cached_property
    def base_settings(self) -> dict[str, Any]:
        """The backend's shipped defaults, then the user settings file, then the preset, then this
        route's settings."""
        return layered_settings(self.backend.name, self.user_file_settings, self.preset, self.settings)

    def settings_for(self, preset: str | None) -> dict[str, Any]:
        """The base settings of a request that names ``preset``, which takes the place of the route's own
        (None: the route's). Worked out once per preset (an unknown name fails, and is not kept)."""
        if preset is None or preset == self.preset:
            return self.base_settings
        if preset not in self._preset_settings:
            self._preset_settings[preset] = layered_settings(self.backend.name, self.user_file_settings, preset,
                                                             self.settings)
        return self._preset_settings[preset]


def named_wrapper(wrapper: str | None, syntax: str | None) -> Resolved | None:
    """The wrapper a route names, loaded; None for the model's own template ("auto", the default where
    the backend has one), known once the backend is. Checked before any backend is reached, with the
    ``syntax`` the route names for "auto"."""
    named = None if wrapper in (None, AUTO) else load_wrapper(wrapper)
    if syntax is not None:
        if named is not None:
            raise ConfigurationError(f"syntax {syntax!r} is for the wrapper {AUTO!r} (the model's own chat template); "
                                     f"the wrapper {wrapper!r} names its call syntax in its TOML file")
        create_syntax(syntax, {}, "syntax")
    return named


def route_wrapper(backend: Backend, wrapper: str | None, syntax: str | None, named: Resolved | None) -> Resolved:
    """The wrapper of a route on ``backend``: the one it names (``named_wrapper``), else the model's own."""
    if named is not None:
        return named
    return Resolved(backend_wrapper(backend, syntax)) if wrapper == AUTO else default_wrapper(backend, syntax)


def default_wrapper(backend: Backend, syntax: str | None = None) -> Resolved:
    """The model's own template (wrapper "auto") where ``backend`` reports one, else chatml-json."""
    if backend.chat_template() is None:
        if syntax is not None:
            raise ConfigurationError(f"syntax {syntax!r} is for the wrapper {AUTO!r} (the model's own chat "
                                     f"template), and the {backend.name} backend reports none; {NAME_A_WRAPPER}")
        return load_wrapper(FALLBACK_WRAPPER)
    return Resolved(backend_wrapper(backend, syntax))


def _check_types(**arguments: tuple[Any, Any]) -> None:
    """Each argument is of its type (``bool`` is not taken for ``int``), or an InvalidRequestError names it."""
    for name, (value, expected) in arguments.items():
        if not isinstance(value, expected) or (isinstance(value, bool) and expected is not bool):
            raise InvalidRequestError(f"{name} must be {_type_words(expected)}, not {type(value).__name__} {value!r:.60}",
                                      param=name)


def _type_words(expected: Any) -> str:
    words = {str: "a string", int: "an integer", dict: "a dict", bool: "true or false", type(None): "None"}
    return " or ".join(words[t] for t in getattr(expected, "__args__", (expected,)))


@lru_cache(maxsize=32)
def _cached_backend(endpoint_type: str, endpoint: str | None, model: str | None, auth_type: str | None,
                    auth_key: str | None, context_window: int | None, extra: tuple[tuple[str, Any], ...]) -> Backend:
    options: dict[str, Any] = {"model": model, "context_window": context_window, **dict(extra)}
    if auth_type or auth_key:
        options.update(auth_type=auth_type, auth_key=auth_key)
    return create_backend(endpoint_type, endpoint=endpoint, **options)


def build_route(
    *,
    endpoint_type: str = "embedded",
    endpoint: str | None = None,
    model: str | None = None,
    wrapper: str | None = None,
    syntax: str | None = None,
    grammar: str | None = None,
    context_window: int | None = None,
    settings: dict[str, Any] | None = None,
    function_correction: bool = True,
    auth_type: str | None = None,
    auth_key: str | None = None,
    backend_options: dict[str, Any] | None = None,
    name: str | None = None,
    retries: int = DEFAULT_RETRIES,
    decide: str | None = None,
    preset: str | None = None,
) -> Route:
    """A route from MemGPT-style arguments. ``grammar=None`` takes the wrapper alias's setting
    (``chatml-grammar`` means on), else ``auto``. ``syntax`` names the call syntax of the wrapper ``auto``
    (default: read from the model's template). ``backend_options`` go to the backend's constructor
    (``connect_timeout``, ``first_token_timeout``, ``read_timeout``, vLLM's ``grammar_field``).
    ``decide``: how ``tool_choice: "auto"`` is decided, ``free`` or ``choose`` (llmproxy.decide; default:
    ``choose`` on the bundled SmolLM2, ``free`` elsewhere). ``preset``: a settings preset's name
    (llmproxy.presets), the layer below ``settings``."""
    _check_types(endpoint_type=(endpoint_type, str), endpoint=(endpoint, str | None), model=(model, str | None),
                  wrapper=(wrapper, str | None), syntax=(syntax, str | None), grammar=(grammar, str | None),
                  context_window=(context_window, int | None), settings=(settings, dict | None),
                  function_correction=(function_correction, bool), auth_type=(auth_type, str | None),
                  auth_key=(auth_key, str | None), backend_options=(backend_options, dict | None),
                  retries=(retries, int), decide=(decide, str | None), preset=(preset, str | None))
    check_decide(decide)
    if retries < 0:
        raise InvalidRequestError(f"retries must be 0 or more, not {retries}", param="retries")
    if context_window is not None and context_window <= 0:
        raise InvalidRequestError(f"context_window must be a positive number of tokens, not {context_window}",
                                  param="context_window")
    named = named_wrapper(wrapper, syntax)
    if preset is not None:
        load_preset(preset)  # an unknown or broken one fails before any backend is reached
    extra = tuple(sorted((backend_options or {}).items()))
    try:
        backend = _cached_backend(endpoint_type, endpoint, model, auth_type, auth_key, context_window, extra)
    except TypeError as exc:  # an option the backend's constructor does not take
        raise ConfigurationError(f"backend {endpoint_type!r} does not take these options: {exc}") from exc
    backend.discover()  # asks the server once, here (off the event loop); complete() asks again if it was down
    window = context_window or backend.context_window() or DEFAULT_CONTEXT_WINDOW
    resolved = route_wrapper(backend, wrapper, syntax, named)
    grammar_mode = resolved.grammar_mode(grammar)
    # The bundled SmolLM2, in-process or served from its GGUF by llama.cpp: where choose is the default.
    bundled = (backend.discover().model or "").removesuffix(".gguf") == BUNDLED_MODEL
    return Route(
        name=name or model or endpoint_type,
        backend=backend,
        wrapper=resolved.wrapper,
        grammar=grammar_mode,
        context_window=window,
        settings=dict(settings or {}),
        function_correction=function_correction,
        retries=retries,
        decide=route_decide(decide, backend, resolved.wrapper, grammar_mode, bundled=bundled),
        preset=preset,
    )
