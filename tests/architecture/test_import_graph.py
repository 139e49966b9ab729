"""The library's import graph has no cycles: read from the source with ``ast``, imports inside
functions included (a lazy import that hides a cycle is still a cycle); imports under
``if TYPE_CHECKING:`` are left out (annotations only, never executed).
"""

from __future__ import annotations

import ast
from pathlib import Path

from support.paths import REPO

ROOTS = {"roxxel": REPO / "roxxel", "roxxel_launch": REPO / "launcher" / "roxxel_launch"}


def _modules() -> dict[str, Path]:
    found = {}
    for package, root in ROOTS.items():
        for path in root.rglob("*.py"):
            parts = [package, *path.relative_to(root).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, module: str, known: set[str]) -> set[str]:
    """The library modules ``module`` imports (a package import counts as its ``__init__``)."""
    out: set[str] = set()
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import
                base = ".".join(module.split(".")[: -node.level] + ([base] if base else []))
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            names = []
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module:
                out.add(name)
        stack.extend(ast.iter_child_nodes(node))
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    graph = {m: _imports(ast.parse(p.read_text()), m, known) for m, p in modules.items()}
    for m in graph:  # importing a.b.c runs a/__init__ and a/b/__init__ first
        graph[m] -= {p for p in known if m.startswith(p + ".")}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return path[path.index(n) :] + [n]
            if n not in state and (found := visit(n)):
                return found
        path.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_the_library_has_no_import_cycle():
    cycle = _cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_a_lazy_cycle():
    tree = ast.parse("def f():\n    import a.b\n")
    graph = {"a": set(), "a.b": {"a.c"}, "a.c": _imports(tree, "a.c", {"a", "a.b", "a.c"})}
    assert _cycle(graph) == ["a.b", "a.c", "a.b"]
