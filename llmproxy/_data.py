"""Where the data folders (wrappers/, grammars/, settings/, scenarios/) are, built-in and the user's own.

Built-in data ships inside the package in a wheel (``llmproxy/data/wrappers``); in a source checkout or
an editable install it sits at the top of the repository. ``data_dir`` finds it either way.

Wrappers, grammars and settings presets are also looked for in the user's folders, before the built-in
ones, so a user adds or overrides one without editing site-packages. The search path, first match wins:

1. each folder in ``$LLMPROXY_PATH`` (separated like PATH), holding ``wrappers/``, ``grammars/`` and/or
   ``settings/``;
2. the user config folder: ``$XDG_CONFIG_HOME/llmproxy``, else ``~/.config/llmproxy``;
3. the built-in data.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
PATH_ENV = "LLMPROXY_PATH"


@cache
def data_dir(kind: str) -> Path:
    """The built-in folder holding ``kind`` ("wrappers", "grammars", "settings" or "scenarios")."""
    for candidate in (_PACKAGE / "data" / kind, _PACKAGE.parent / kind):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"llmproxy's {kind}/ folder is missing; reinstall the package")


def user_config_dir() -> Path:
    """The user's llmproxy config folder (settings.json, wrappers/, grammars/, settings/)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base).expanduser() / "llmproxy"


def user_roots() -> list[Path]:
    """The user's folders on the search path, in order (they need not exist)."""
    listed = [Path(part).expanduser() for part in os.environ.get(PATH_ENV, "").split(os.pathsep) if part]
    return [*listed, user_config_dir()]


def search_dirs(kind: str) -> list[Path]:
    """Every existing folder that may hold ``kind`` ("wrappers", "grammars" or "settings"), first match first."""
    found = [root / kind for root in user_roots() if (root / kind).is_dir()]
    return [*found, data_dir(kind)]


def named_files(kind: str, suffix: str) -> dict[str, Path]:
    """Every ``suffix`` file of ``kind`` on the search path by name (the file name without ``suffix``): the
    first of a name wins, so the user's shadow the built-in ones."""
    found: dict[str, Path] = {}
    for folder in search_dirs(kind):
        for path in sorted(folder.glob(f"*{suffix}")):
            found.setdefault(path.stem, path)
    return found
