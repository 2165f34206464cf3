"""BFCL's single-turn cases, read from an installed ``bfcl-eval`` or from a folder of the same layout.

The layout: ``BFCL_v4_<category>.json`` (one case a line: ``id``, ``question`` - a list of turns, each a
list of messages - and ``function``, the offered function docs) and ``possible_answer/BFCL_v4_<category>.json``
(``id``, ``ground_truth``). Irrelevance categories have no answers: no call is the right one. The package
is found with importlib and never imported: ``pip install --no-deps bfcl-eval`` is all it takes.
"""

from __future__ import annotations

import importlib.util
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmproxy.errors import ConfigurationError

# The single-turn categories scored by BFCL's AST rules, and the two scored by "no call is right".
AST_CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple",
                  "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple")
IRRELEVANCE_CATEGORIES = ("irrelevance", "live_irrelevance")
CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance",
              "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple", "live_irrelevance")
FILE_PREFIX = "BFCL_v4_"
INSTALL_HINT = "pip install --no-deps bfcl-eval"


@dataclass(frozen=True)
class Case:
    """One BFCL question: its first turn's messages, the function docs offered, and the acceptable calls
    (``ground_truth``: a list of ``{function: {parameter: [acceptable values]}}``; None in irrelevance)."""

    id: str
    category: str
    messages: list[dict[str, Any]]
    functions: list[dict[str, Any]]
    ground_truth: list[dict[str, Any]] | None

    @property
    def irrelevance(self) -> bool:
        return self.ground_truth is None


def installed_data_dir() -> Path | None:
    """``bfcl_eval/data`` of the installed package (found without importing it), or None."""
    try:
        spec = importlib.util.find_spec("bfcl_eval")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        folder = Path(location) / "data"
        if folder.is_dir():
            return folder
    return None


def data_dir(folder: Path | None = None) -> Path:
    """``folder`` when given, else the installed package's; a ConfigurationError saying what to do when
    neither holds BFCL's files."""
    if folder is not None:
        if not any(folder.glob(f"{FILE_PREFIX}*.json")):
            raise ConfigurationError(f"{folder} holds no BFCL data ({FILE_PREFIX}<category>.json files); give "
                                     f"bfcl-eval's data folder, or leave the option out after {INSTALL_HINT}")
        return folder
    found = installed_data_dir()
    if found is None:
        raise ConfigurationError(f"BFCL's data is not installed: {INSTALL_HINT} (the data alone, without its "
                                 "dependencies), or give a folder of BFCL_v4_<category>.json files with --data")
    return found


def check_categories(categories: list[str]) -> None:
    unknown = [name for name in categories if name not in CATEGORIES]
    if unknown:
        raise ConfigurationError(f"unknown BFCL category {unknown[0]!r}: use one of {', '.join(CATEGORIES)}")


def _lines(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    except ValueError as exc:
        raise ConfigurationError(f"{path} is not BFCL's JSON-lines format: {exc}") from None


def load_category(category: str, folder: Path | None = None) -> list[Case]:
    """Every case of ``category``, in the file's order."""
    check_categories([category])
    root = data_dir(folder)
    entries = _lines(root / f"{FILE_PREFIX}{category}.json")
    answers: dict[str, Any] = {}
    if category not in IRRELEVANCE_CATEGORIES:
        answers = {line["id"]: line["ground_truth"] for line in _lines(root / "possible_answer" /
                                                                          f"{FILE_PREFIX}{category}.json")}
    cases = []
    for entry in entries:
        if category not in IRRELEVANCE_CATEGORIES and entry["id"] not in answers:
            raise ConfigurationError(f"{category}: case {entry['id']} has no possible answer")
        cases.append(Case(entry["id"], category, entry["question"][0], entry["function"],
                          answers.get(entry["id"])))
    return cases


def sample(cases: list[Case], limit: int | None, seed: int) -> list[Case]:
    """``limit`` cases drawn with ``seed``, kept in file order; each category draws on its own, so adding
    a category never changes another's sample."""
    if limit is None or limit >= len(cases):
        return cases
    category = cases[0].category if cases else ""
    chosen = set(random.Random(f"{seed}:{category}").sample(range(len(cases)), limit))
    return [case for index, case in enumerate(cases) if index in chosen]


def load_cases(categories: list[str] | None = None, folder: Path | None = None, *, limit: int | None = None,
               seed: int = 0) -> list[Case]:
    """The cases of ``categories`` (default: all ten single-turn ones), ``limit`` per category (a seeded
    sample) when given."""
    chosen = list(categories or CATEGORIES)
    check_categories(chosen)
    return [case for category in dict.fromkeys(chosen) for case in sample(load_category(category, folder), limit, seed)]
