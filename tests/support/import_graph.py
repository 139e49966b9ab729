"""The library's import graph, read from the source with ``ast``: imports inside functions
included (a lazy import still runs), imports under ``if TYPE_CHECKING:`` left out
(annotations only, never executed) unless asked for (``type_checking=True``: who names whom,
the graph a reader or a type checker follows). Used by tests/architecture (cycles, layers).
"""

from __future__ import annotations

import ast
from pathlib import Path

from support.paths import REPO

ROOTS = {"roxxel": REPO / "roxxel", "roxxel_launch": REPO / "launcher" / "roxxel_launch"}


def modules() -> dict[str, Path]:
    found = {}
    for package, root in ROOTS.items():
        for path in root.rglob("*.py"):
            parts = [package, *path.relative_to(root).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(tree: ast.AST, module: str, known: set[str], type_checking: bool = False) -> set[str]:
    """The library modules ``module`` imports (a package import counts as its ``__init__``); with
    ``type_checking``, those it imports for annotations only too."""
    out: set[str] = set()
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and is_type_checking(node) and not type_checking:
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


def graph(type_checking: bool = False) -> dict[str, set[str]]:
    found = modules()
    known = set(found)
    out = {m: imports(ast.parse(p.read_text()), m, known, type_checking) for m, p in found.items()}
    for m in out:  # importing a.b.c runs a/__init__ and a/b/__init__ first
        out[m] -= {p for p in known if m.startswith(p + ".")}
    return out
