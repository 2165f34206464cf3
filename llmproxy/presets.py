"""Settings presets: named sets of generation settings, kept as data in settings/ (``deterministic.toml``).

A preset is a TOML file: a one-line ``description``, an optional ``source`` (where its values come
from), and a ``[settings]`` table in the user settings file's shape: top-level keys for every backend,
a table named after a backend (``[settings.webui]``) for that backend only. Its keys are llmproxy's
common names (``temperature``, ``top_k``, ``repeat_penalty``, ``mirostat`` ...: llmproxy.settings),
which each backend translates into its own, or a backend's own names inside that backend's table.

Presets are found on the data search path (llmproxy._data): ``$LLMPROXY_PATH``'s folders, then the
user's ``~/.config/llmproxy/settings/``, then the built-in ones; the first file of a name wins, so a
user's ``deterministic.toml`` replaces the built-in one. The folders are read once per process
(``preset_files.cache_clear()`` reads them again).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from llmproxy._data import data_dir, named_files
from llmproxy.errors import ConfigurationError

KIND = "settings"  # the data folder's name
_KEYS = {"description", "source", "settings"}


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    source: str | None
    settings: dict[str, Any]  # shared keys, and a table per backend, as written
    origin: Path  # the file it was read from

    @property
    def built_in(self) -> bool:
        return self.origin.is_relative_to(data_dir(KIND))


@cache
def preset_files() -> dict[str, Path]:
    """Every preset on the search path by name (file name without ``.toml``); the user's shadow the
    built-in ones."""
    return named_files(KIND, ".toml")


def preset_names() -> list[str]:
    return sorted(preset_files())


def load_preset(name: str) -> Preset:
    """The preset called ``name``, read from its file; an unknown name or a broken file is a
    ConfigurationError that says which presets there are, or what is wrong in which file."""
    path = preset_files().get(name)
    if path is None:
        raise ConfigurationError(f"unknown settings preset {name!r}; known presets: {', '.join(preset_names())} "
                                 "('llmproxy settings' lists them)", param="preset")
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"settings preset file {path} cannot be read: {exc}", param="preset") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"settings preset file {path} is not valid TOML: {exc}", param="preset") from None
    problem = _problem(raw)
    if problem is not None:
        raise ConfigurationError(f"settings preset file {path}: {problem}", param="preset")
    return Preset(name, raw["description"], raw.get("source"), raw["settings"], path)


def _problem(raw: dict[str, Any]) -> str | None:
    """What keeps a preset file's TOML from being a preset, if anything."""
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        return f"unknown key {unknown[0]!r} (a preset has description, source and [settings])"
    if not isinstance(raw.get("description"), str) or not raw["description"]:
        return "'description' must be a non-empty string"
    if not isinstance(raw.get("source", ""), str):
        return "'source' must be a string"
    if not isinstance(raw.get("settings"), dict):
        return "it needs a [settings] table"
    return None
