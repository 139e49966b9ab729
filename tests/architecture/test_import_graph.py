"""The library's import graph has no cycles: read from the source with ``ast``, imports inside
functions included (a lazy import that hides a cycle is still a cycle); imports under
``if TYPE_CHECKING:`` are left out (annotations only, never executed).
"""

from __future__ import annotations

import ast

from support.import_graph import graph, imports


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
    cycle = _cycle(graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_a_lazy_cycle():
    tree = ast.parse("def f():\n    import a.b\n")
    found = {"a": set(), "a.b": {"a.c"}, "a.c": imports(tree, "a.c", {"a", "a.b", "a.c"})}
    assert _cycle(found) == ["a.b", "a.c", "a.b"]
