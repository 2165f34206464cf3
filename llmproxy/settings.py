"""Layered generation settings: the backend class's defaults -> the user file -> a preset -> the
route's settings; the request's own fields (temperature, top_p, seed, max_tokens, stop) come last
(llmproxy.proxy).

Keys use llmproxy's common names (``max_tokens``, ``stop``, ``temperature``, ``top_p``, ``seed``,
``grammar``, and the SAMPLERS: ``top_k``, ``min_p``, ``typical_p``, ``repeat_penalty``,
``presence_penalty``, ``frequency_penalty``, ``mirostat``, ``mirostat_tau``, ``mirostat_eta``), which
each backend translates into its own, or the backend's own names, which pass through untouched. A
sampler the backend has no counterpart for (Mirostat on vLLM) is left out, with a warning naming it,
the backend and the layer that set it: presets are written once for every backend, and a preset that
only partly applies still applies. Layers merge deeply and every call gets a fresh copy, so nothing a
request does can leak into the next one.

The defaults (each backend class's ``default_settings``) are a max_tokens the caller clamps to the
context window, moderate sampler values and the odd backend-specific key (llama.cpp's ``cache_prompt``);
never stop strings, which belong to the wrapper whose prompt format they end.

The user file is JSON at ``$LLMPROXY_SETTINGS`` or ``~/.config/llmproxy/settings.json``; a preset is a
TOML file in settings/ (llmproxy.presets). In both, top-level keys apply to every backend; a key named
after a backend (``"llamacpp": {...}``) applies to that one backend only and wins over the shared keys.
A preset sits above the user file: choosing one for a model (or a request) is more particular than
what the file says for all of them, while the route's settings still tune the preset.
"""

from __future__ import annotations

import copy
import json
import logging
import os
from pathlib import Path
from typing import Any

from llmproxy._data import user_config_dir
from llmproxy.backends import BACKEND_NAMES, backend_class
from llmproxy.backends.base import SAMPLERS, GenerationParams
from llmproxy.errors import ConfigurationError
from llmproxy.presets import load_preset

logger = logging.getLogger(__name__)

USER_SETTINGS_ENV = "LLMPROXY_SETTINGS"
COMMON_KEYS = ("max_tokens", "stop", "temperature", "top_p", "seed", "grammar", "lazy_grammar", "choice_grammar",
               "json_schema", "logprobs", *SAMPLERS)


def user_settings_path() -> Path:
    """Where the user settings file is looked for."""
    override = os.environ.get(USER_SETTINGS_ENV)
    if override:
        return Path(override).expanduser()
    return user_config_dir() / "settings.json"  # beside the user's wrappers and grammars


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """A new dict: ``override`` merged into ``base``; nested dicts merge, everything else replaces."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _read_json_object(path: Path, what: str) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigurationError(f"{what} {path} is not valid JSON ({exc}); fix or remove it") from exc
    if not isinstance(value, dict):
        raise ConfigurationError(f"{what} {path} must hold a JSON object, not {type(value).__name__}")
    return value


def backend_defaults(backend: str) -> dict[str, Any]:
    """The defaults of the registered backend ``backend`` (a copy); any other backend has none."""
    if backend not in BACKEND_NAMES:
        return {}
    return copy.deepcopy(dict(backend_class(backend).default_settings))


def for_backend(raw: dict[str, Any], backend: str, where: str) -> dict[str, Any]:
    """The settings ``raw`` (a user file's or a preset's) holds for ``backend``: its shared keys, then
    that backend's own table; ``where`` names ``raw`` in the error a table that is not one gets."""
    shared = {k: v for k, v in raw.items() if k not in BACKEND_NAMES}
    own = raw.get(backend, {})
    if not isinstance(own, dict):
        raise ConfigurationError(f"{where}: section {backend!r} must be an object of settings (a JSON object, "
                                 "a TOML table)")
    return deep_merge(shared, own)


def user_settings(backend: str) -> dict[str, Any]:
    """The user file's settings for ``backend``: shared keys, then that backend's own section."""
    path = user_settings_path()
    if not path.is_file():
        return {}
    return for_backend(_read_json_object(path, "user settings file"), backend, f"user settings file {path}")


def preset_settings(name: str, backend: str) -> dict[str, Any]:
    """The settings preset ``name`` holds for ``backend`` (an unknown name is a ConfigurationError that
    lists the known ones)."""
    preset = load_preset(name)
    where = f"settings preset file {preset.origin}"
    settings = for_backend(preset.settings, backend, where)
    try:
        _check_common(settings)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{where}: {exc.message}", param="preset") from None
    return settings


def resolve_settings(backend: str, call_settings: dict[str, Any] | None = None, *,
                     preset: str | None = None) -> dict[str, Any]:
    """Defaults for ``backend``, then the user file (read now), then ``preset``, then ``call_settings``;
    always a fresh dict."""
    return layered_settings(backend, user_settings(backend), preset, call_settings or {})


def layered_settings(backend: str, user: dict[str, Any], preset: str | None,
                     settings: dict[str, Any]) -> dict[str, Any]:
    """The layers for ``backend`` merged, the user file's settings given (``user``), less the samplers it
    has no counterpart for: each left out with a warning naming the layer that set it. A fresh dict."""
    layers = settings_layers(backend, user, preset, settings)
    merged = merge_layers(layers)
    untaken = untaken_samplers(backend, merged)
    if untaken:
        _warn_untaken(backend, untaken, layers)
    return {key: value for key, value in merged.items() if key not in untaken}


Layers = list[tuple[str, dict[str, Any]]]  # (what a message calls the layer, its settings), lowest first


def settings_layers(backend: str, user: dict[str, Any], preset: str | None, settings: dict[str, Any]) -> Layers:
    """Each layer of ``backend``'s settings: its defaults, the user file's (``user``), the preset's, and
    the route's own ``settings``."""
    layers = [("the backend's defaults", backend_defaults(backend)), ("the user settings file", user)]
    if preset is not None:
        layers.append((f"preset {preset!r}", preset_settings(preset, backend)))
    return [*layers, ("settings", settings)]


def merge_layers(layers: Layers) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for _, layer in layers:
        merged = deep_merge(merged, layer)
    return merged


def set_by(key: str, layers: Layers) -> str:
    """The highest of ``layers`` that sets ``key``: the one whose value it has."""
    return next(label for label, layer in reversed(layers) if key in layer)


def untaken_samplers(backend: str, settings: dict[str, Any]) -> list[str]:
    """The SAMPLERS ``settings`` set that ``backend`` has no counterpart for (a backend llmproxy does not
    know, a test's, takes them all)."""
    if backend not in BACKEND_NAMES:
        return []
    return [key for key in SAMPLERS if key in settings and key not in backend_class(backend).samplers]


def _warn_untaken(backend: str, untaken: list[str], layers: Layers) -> None:
    by_layer: dict[str, list[str]] = {}
    for key in untaken:
        by_layer.setdefault(set_by(key, layers), []).append(key)
    origins = "; ".join(f"{', '.join(keys)} (from {label})" for label, keys in by_layer.items())
    taken = ", ".join(key for key in SAMPLERS if key in backend_class(backend).samplers) or "none of them"
    logger.warning("the %s backend has no counterpart for the sampler settings %s: left out of its requests "
                   "(it takes %s)", backend, origins, taken)


# Type each common key must have; a wrong one would otherwise surface as a backend's cryptic 422.
_INTEGER, _NUMBER = ((int,), "an integer"), ((int, float), "a number")
_COMMON_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "max_tokens": _INTEGER, "seed": _INTEGER, "top_k": _INTEGER, "mirostat": _INTEGER, "grammar": ((str,), "a string"),
    **{key: _NUMBER for key in ("temperature", "top_p", "min_p", "typical_p", "repeat_penalty", "presence_penalty",
                                "frequency_penalty", "mirostat_tau", "mirostat_eta")},
}


def _check_common(settings: dict[str, Any]) -> None:
    for key, (types, what) in _COMMON_TYPES.items():
        value = settings.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, types)):
            raise ConfigurationError(f"setting {key!r} must be {what}, not {value!r}")
    if settings.get("max_tokens") is not None and settings["max_tokens"] < 1:
        raise ConfigurationError(f"setting 'max_tokens' must be at least 1, not {settings['max_tokens']}")
    if settings.get("mirostat") not in (None, 0, 1, 2):
        raise ConfigurationError(f"setting 'mirostat' must be 0 (off), 1 or 2 (the Mirostat version), "
                                 f"not {settings['mirostat']}")
    stop = settings.get("stop")
    if stop is not None and not isinstance(stop, str) and (
        not isinstance(stop, list) or not all(isinstance(s, str) for s in stop)
    ):
        raise ConfigurationError(f"setting 'stop' must be a string or a list of strings, not {stop!r}")


def to_generation_params(settings: dict[str, Any]) -> GenerationParams:
    """Split resolved settings into the common parameters and the backend-specific rest."""
    _check_common(settings)
    stop = settings.get("stop") or []
    if isinstance(stop, str):
        stop = [stop]
    extra = {k: copy.deepcopy(v) for k, v in settings.items() if k not in COMMON_KEYS}
    return GenerationParams(
        max_tokens=settings.get("max_tokens"),
        stop=tuple(stop),
        temperature=settings.get("temperature"),
        top_p=settings.get("top_p"),
        seed=settings.get("seed"),
        grammar=settings.get("grammar"),
        lazy_grammar=settings.get("lazy_grammar"),
        choice_grammar=settings.get("choice_grammar"),
        json_schema=settings.get("json_schema"),
        logprobs=settings.get("logprobs"),
        extra=extra,
        samplers={key: settings[key] for key in SAMPLERS if settings.get(key) is not None},
    )
