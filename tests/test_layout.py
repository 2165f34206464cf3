"""The package's layout: no import circles among llmproxy's modules, private modules (``_name``)
imported only inside their own package, no face importing the server that hosts it, and a short top
level.

Read from the source with ast, not by importing: an import inside a function runs late, on purpose, so
only module-level imports count - those under ``if TYPE_CHECKING:`` included: a reader follows a type
hint's import as much as any other, so a circle through one is a circle still.
"""

from __future__ import annotations

import ast
from pathlib import Path

import llmproxy

ROOT = Path(llmproxy.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Imports at module level: top level, and inside top-level if/try blocks (``if TYPE_CHECKING:``
    too), never inside a function or class body."""
    found: list[ast.Import | ast.ImportFrom] = []
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If):
            todo.extend([*node.body, *node.orelse])
        elif isinstance(node, ast.Try):
            todo.extend([*node.body, *node.orelse, *node.finalbody, *(s for h in node.handlers for s in h.body)])
    return found


def _package_of(module: str, is_package: bool) -> str:
    return module if is_package else module.rpartition(".")[0]


def _targets(node: ast.Import | ast.ImportFrom, package: str, paths: dict[str, Path]) -> list[str]:
    """The llmproxy modules (or packages) one import statement names."""
    if isinstance(node, ast.Import):
        targets = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:  # relative: from the package, up level-1 packages
            up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
            base = ".".join([*up, base] if base else up)
        # ``from pkg import sub`` imports the submodule pkg.sub where there is one.
        targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in paths else base for alias in node.names]
    return [target for target in targets if target.split(".")[0] == "llmproxy"]


def _graph() -> tuple[dict[str, set[str]], dict[str, list[str]]]:
    """Each module's llmproxy modules imported at module level (a package's ``__init__`` counts as the
    package), and every llmproxy module each one imports anywhere (functions too), for the privacy check."""
    paths = {_module_name(path): path for path in ROOT.rglob("*.py")}
    edges: dict[str, set[str]] = {name: set() for name in paths}
    named: dict[str, list[str]] = {name: [] for name in paths}
    for name, path in paths.items():
        package = _package_of(name, path.name == "__init__.py")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                named[name].extend(_targets(node, package, paths))
        for node in _module_level_imports(tree):
            for target in _targets(node, package, paths):
                # Importing a.b.c runs a/__init__, a/b/__init__, then a/b/c.
                parts = target.split(".")
                for end in range(1, len(parts) + 1):
                    step = ".".join(parts[:end])
                    if step in paths and step != name and not name.startswith(step + "."):
                        edges[name].add(step)
    return edges, named


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import circle, as the list of modules around it, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(edges):
        if start in state:
            continue
        path, stack = [start], [iter(sorted(edges[start]))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(edges[nxt])))
    return None


def test_no_import_circles_among_llmproxys_modules():
    edges, _ = _graph()
    assert _cycle(edges) is None, "import circle: " + " -> ".join(_cycle(edges) or [])


def test_the_checker_finds_a_circle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_private_modules_are_imported_only_inside_their_package():
    """``llmproxy.pkg._private`` (or anything under it) is imported only by modules of ``llmproxy.pkg``."""
    _, named = _graph()
    outside = []
    for importer, targets in named.items():
        for target in targets:
            parts = target.split(".")
            for i, part in enumerate(parts):
                if part.startswith("_") and not part.startswith("__"):
                    owner = ".".join(parts[:i])  # the package the private module belongs to
                    if not (importer == owner or importer.startswith(owner + ".")):
                        outside.append(f"{importer} imports {target}")
                    break
    assert not outside, "\n".join(outside)


def test_each_stage_package_says_what_it_takes_and_gives():
    for package in ("grammar", "repair", "prompts"):
        init = ROOT / package / "__init__.py"
        tree = ast.parse(init.read_text(encoding="utf-8"))
        assert ast.get_docstring(tree), f"llmproxy/{package}/__init__.py has no docstring"
        assert any(isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets)
                   for node in tree.body), f"llmproxy/{package}/__init__.py exports no __all__"


def test_no_face_imports_the_server():
    """The faces are translations the server hosts: an import from ``llmproxy.faces`` into
    ``llmproxy.server`` (anywhere in a module, functions too) would run up from a face into its host."""
    _, named = _graph()
    upward = [f"{importer} imports {target}" for importer, targets in named.items() if importer.startswith("llmproxy.faces")
              for target in targets if target == "llmproxy.server" or target.startswith("llmproxy.server.")]
    assert not upward, "\n".join(upward)


MAX_TOP_LEVEL_MODULES = 18


def test_the_top_level_holds_few_modules():
    """Small helpers live in packages of their own (llmproxy.common), so the top of the package reads as
    its stages."""
    modules = sorted(path.name for path in ROOT.glob("*.py"))
    assert len(modules) <= MAX_TOP_LEVEL_MODULES, f"{len(modules)} modules directly in llmproxy/: {modules}"
