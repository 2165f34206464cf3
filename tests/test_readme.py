"""The README's Python examples, each run as written against the default server - what ``llmproxy serve``
serves with no options: the embedded SmolLM2 - so that they cannot drift from what it does.

Every ```python block in README.md is run, in order of appearance, with the documented address
(http://127.0.0.1:8100, or localhost) pointed at a server started here on a free port. A block that cannot run
offline says why in an HTML comment right before it, ``<!-- not run: reason -->``: it is compiled, and
what it imports is imported, so the names it documents exist. A block passes when it runs to its end: the examples print what they get, so an answer
without the call they index (``tool_calls[0]``) fails them, as it would fail a reader.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest
from server_helpers import running

from llmproxy.server.config import serving

pytestmark = pytest.mark.model  # every block talks to the embedded model

README = Path(__file__).parent.parent / "README.md"
DOCUMENTED_ADDRESSES = ("http://127.0.0.1:8100", "http://localhost:8100")
FENCE = re.compile(r"^```python[ \t]*\n(?P<code>.*?)^```[ \t]*$", re.S | re.M)
# A comment that ends the text before a fence (blank lines aside); it holds no other comment's end.
NOT_RUN = re.compile(r"<!--\s*not run:\s*(?P<reason>(?:(?!-->).)*?)\s*-->\s*\Z", re.S)


def python_blocks(text: str) -> list[tuple[int, str, str | None]]:
    """(line, code, reason it is not run or None) of each ```python block in ``text``."""
    blocks = []
    for found in FENCE.finditer(text):
        marked = NOT_RUN.search(text, 0, found.start())
        blocks.append((text.count("\n", 0, found.start()) + 1, found.group("code"),
                       marked.group("reason") if marked else None))
    return blocks


BLOCKS = python_blocks(README.read_text(encoding="utf-8"))


def test_every_python_block_is_found():
    text = README.read_text(encoding="utf-8")
    assert len(BLOCKS) == len(re.findall(r"^```python", text, re.M)) > 0
    assert not re.search(r"^```(?!python[ \t]*$)[Pp]y", text, re.M), "a Python block fenced otherwise is not run"


def test_a_block_is_skipped_only_where_marked():
    text = "<!-- not run: needs a GPU -->\n```python\nprint(1)\n```\nProse.\n\n```python\nprint(2)\n```\n"
    assert python_blocks(text) == [(2, "print(1)\n", "needs a GPU"), (7, "print(2)\n", None)]


@pytest.fixture(scope="module")
def default_server():
    """The app ``llmproxy serve`` builds with no options, on a free port."""
    served = serving(None, {})
    with running(served.routes, default_model=served.server.default_model, limits=served.limits) as server:
        yield server


@pytest.mark.parametrize(("line", "code", "reason"), BLOCKS, ids=[f"README.md:{line}" for line, _, _ in BLOCKS])
def test_readme_example_runs_as_written(line, code, reason, default_server):
    if reason is not None:  # cannot run offline (the reason says why): what it names must still exist
        imports_what_it_names(code, f"README.md:{line}")
        return
    for documented in DOCUMENTED_ADDRESSES:
        code = code.replace(documented, f"http://127.0.0.1:{default_server.port}")
    exec(compile(code, f"README.md:{line}", "exec"), {"__name__": "__readme__"})


def imports_what_it_names(code: str, where: str) -> None:
    """Compile ``code`` and import every module and name its imports name (an AssertionError for a missing one)."""
    for node in ast.walk(ast.parse(code, where)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                importlib.import_module(alias.name)
        elif isinstance(node, ast.ImportFrom) and node.module:
            module = importlib.import_module(node.module)
            missing = [alias.name for alias in node.names if not hasattr(module, alias.name)]
            assert not missing, f"{where} imports {missing} from {node.module}, which has no such name"


def test_a_block_not_run_still_names_what_exists():
    imports_what_it_names("from llmproxy.evaluation.bfcl import load_cases\n", "example")
    with pytest.raises(AssertionError, match="no_such_name"):
        imports_what_it_names("from llmproxy.evaluation.bfcl import no_such_name\n", "example")
