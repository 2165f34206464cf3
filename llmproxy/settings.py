"""Layered generation settings: the backend class's defaults -> user file -> per-call settings.

Keys use llmproxy's common names (``max_tokens``, ``stop``, ``temperature``, ``top_p``, ``seed``,
``grammar``) or the backend's own names, which pass through untouched. Layers merge deeply and every
call gets a fresh copy, so nothing a request does can leak into the next one.

The defaults (each backend class's ``default_settings``) are a max_tokens the caller clamps to the
context window, moderate sampler values and the odd backend-specific key (llama.cpp's ``cache_prompt``);
never stop strings, which belong to the wrapper whose prompt format they end.

The user file is JSON at ``$LLMPROXY_SETTINGS`` or ``~/.config/llmproxy/settings.json``. Its top-level
keys apply to every backend; a key named after a backend (``"llamacpp": {...}``) applies to that one
backend only and wins over the shared keys.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

from llmproxy._data import user_config_dir
from llmproxy.backends import BACKEND_NAMES, backend_class
from llmproxy.backends.base import GenerationParams
from llmproxy.errors import ConfigurationError

USER_SETTINGS_ENV = "LLMPROXY_SETTINGS"
COMMON_KEYS = ("max_tokens", "stop", "temperature", "top_p", "seed", "grammar", "lazy_grammar", "choice_grammar",
               "json_schema", "logprobs")


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


def user_settings(backend: str) -> dict[str, Any]:
    """The user file's settings for ``backend``: shared keys, then that backend's own section."""
    path = user_settings_path()
    if not path.is_file():
        return {}
    raw = _read_json_object(path, "user settings file")
    shared = {k: v for k, v in raw.items() if k not in BACKEND_NAMES}
    own = raw.get(backend, {})
    if not isinstance(own, dict):
        raise ConfigurationError(f"user settings file {path}: section {backend!r} must be a JSON object")
    return deep_merge(shared, own)


def resolve_settings(backend: str, call_settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """Defaults for ``backend``, then the user file, then ``call_settings``; always a fresh dict."""
    merged = deep_merge(backend_defaults(backend), user_settings(backend))
    return deep_merge(merged, call_settings or {})


# Type each common key must have; a wrong one would otherwise surface as a backend's cryptic 422.
_COMMON_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "max_tokens": ((int,), "an integer"),
    "temperature": ((int, float), "a number"),
    "top_p": ((int, float), "a number"),
    "seed": ((int,), "an integer"),
    "grammar": ((str,), "a string"),
}


def _check_common(settings: dict[str, Any]) -> None:
    for key, (types, what) in _COMMON_TYPES.items():
        value = settings.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, types)):
            raise ConfigurationError(f"setting {key!r} must be {what}, not {value!r}")
    if settings.get("max_tokens") is not None and settings["max_tokens"] < 1:
        raise ConfigurationError(f"setting 'max_tokens' must be at least 1, not {settings['max_tokens']}")
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
    )
