"""Where the data folders (wrappers/, grammars/, settings/, scenarios/) are.

In a wheel they ship inside the package (``llmproxy/data/wrappers``); in a source checkout or an editable
install they sit at the top of the repository. Every loader asks this one function.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


@cache
def data_dir(kind: str) -> Path:
    """The folder holding ``kind`` ("wrappers", "grammars", "settings" or "scenarios")."""
    for candidate in (_PACKAGE / "data" / kind, _PACKAGE.parent / kind):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"llmproxy's {kind}/ folder is missing; reinstall the package")
