"""The layers of the library, as rules over the import graph (tests/support/import_graph.py,
lazy imports included): a lower layer never imports a higher one, so that the lower one can
change, be tested and be read without the higher.

- ``roxxel.format`` (the shard format) imports neither ``roxxel.data`` nor ``roxxel.train``;
- ``roxxel.data`` does not import ``roxxel.train``;
- ``roxxel.train.checkpoint`` does not import ``roxxel.data``: it stores and compares a
  fingerprint through a small protocol (``train/checkpoint/fingerprint.py``); the run's
  data identity and its judge live in ``roxxel/data/identity.py``;
- the backend wings (``roxxel_launch.backends.<name>``, each a package) do not import each
  other; what they share lives in ``backends/base.py`` (or another module of ``backends``
  itself).

A module counts by what it reaches, not only what it names: ``format -> x -> data`` breaks the
first rule as ``format -> data`` would.

And one rule over who names whom (annotation-only imports included: a circle there still ties
the modules' changes together): ``roxxel.data``'s modules form no circle, but for the
curriculum and its streams (the curriculum builds streams; a stream reads its curriculum). The
read path reaches a dataset only through its shard table and a curriculum only through a
protocol (``roxxel/data/reader.py``).
"""

from __future__ import annotations

import ast

from support.import_graph import ROOTS, graph, imports

RULES = [
    ("roxxel.format", "roxxel.data"),
    ("roxxel.format", "roxxel.train"),
    ("roxxel.data", "roxxel.train"),
    ("roxxel.train.checkpoint", "roxxel.data"),
]
"""``(layer, what it may not import)``: module-name prefixes (a package and its modules)."""
BACKENDS = "roxxel_launch.backends"
DATA_CIRCLE_ALLOWED = {"roxxel.data.curriculum", "roxxel.data.stream"}
"""The one circle ``roxxel.data`` may hold (see this module's docstring)."""


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _paths_from(graph: dict[str, set[str]], start: str) -> dict[str, list[str]]:
    """Every module ``start`` reaches, with one import path to it (breadth first: a shortest one)."""
    paths = {start: [start]}
    queue = [start]
    while queue:
        m = queue.pop(0)
        for n in sorted(graph.get(m, ())):
            if n not in paths:
                paths[n] = paths[m] + [n]
                queue.append(n)
    return paths


def _wing(module: str, wings: set[str]) -> str | None:
    return next((w for w in wings if _within(module, w)), None)


def violations(graph: dict[str, set[str]], rules=RULES, backends: str = BACKENDS) -> list[str]:
    """One line per broken rule: ``a -> b -> c`` from a module of a layer to one it may not reach."""
    wings = {m for m in graph if m.startswith(backends + ".") and any(n.startswith(m + ".") for n in graph)}
    found = []
    for module in sorted(graph):
        reached = _paths_from(graph, module)
        for layer, forbidden in rules:
            if _within(module, layer):
                found += [  # where the path enters the forbidden layer, not every module past it
                    " -> ".join(p)
                    for n, p in sorted(reached.items())
                    if _within(n, forbidden) and not _within(p[-2], forbidden)
                ]
        wing = _wing(module, wings)
        if wing is not None:  # a wing's own imports only: a shared module below backends may be reached by all
            found += [
                f"{module} -> {n} (wing {wing} imports wing {other})"
                for n in sorted(graph[module])
                if (other := _wing(n, wings)) not in (None, wing)
            ]
    return found


def test_the_layers_hold():
    found = violations(graph())
    assert not found, "layer rules broken (see this module's docstring):\n" + "\n".join(found)


def test_there_are_backend_wings_to_check():
    modules = graph()
    assert {"roxxel_launch.backends.kubernetes", "roxxel_launch.backends.local"} <= set(modules)
    assert set(ROOTS) == {"roxxel", "roxxel_launch"}


def test_the_checker_catches_a_broken_layer():
    g = {
        "roxxel.format.reader": {"roxxel.wording"},
        "roxxel.wording": {"roxxel.data.stream"},  # reached through a neutral module: still broken
        "roxxel.data.stream": set(),
        "roxxel.data.identity": {"roxxel.json_changes"},
        "roxxel.json_changes": set(),
        "roxxel.train.checkpoint": {"roxxel.train.checkpoint.fingerprint"},
        "roxxel.train.checkpoint.fingerprint": {"roxxel.json_changes"},
        "roxxel_launch.backends.base": set(),
        "roxxel_launch.backends.a": {"roxxel_launch.backends.a.x"},
        "roxxel_launch.backends.a.x": {"roxxel_launch.backends.base", "roxxel_launch.backends.b.y"},
        "roxxel_launch.backends.b": set(),
        "roxxel_launch.backends.b.y": {"roxxel_launch.backends.base"},
    }
    assert violations(g) == [
        "roxxel.format.reader -> roxxel.wording -> roxxel.data.stream",
        "roxxel_launch.backends.a.x -> roxxel_launch.backends.b.y (wing roxxel_launch.backends.a imports wing "
        "roxxel_launch.backends.b)",
    ]
    g["roxxel.train.checkpoint.fingerprint"] = {"roxxel.data.identity"}
    assert violations(g)[1:2] == [
        "roxxel.train.checkpoint -> roxxel.train.checkpoint.fingerprint -> roxxel.data.identity"
    ]


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The graph's circles: its strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(m: str) -> None:
        index[m] = low[m] = len(index)
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if n not in index:
                visit(n)
                low[m] = min(low[m], low[n])
            elif n in stack:
                low[m] = min(low[m], index[n])
        if low[m] == index[m]:
            part = {stack.pop()}
            while m not in part:
                part.add(stack.pop())
            if len(part) > 1:
                found.append(part)

    for m in sorted(graph):
        if m not in index:
            visit(m)
    return found


def data_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The circles through ``roxxel.data`` beyond the allowed curriculum/stream pair."""
    return [
        sorted(c) for c in circles(graph) if any(_within(m, "roxxel.data") for m in c) and not c <= DATA_CIRCLE_ALLOWED
    ]


def test_data_holds_no_circle_but_curriculum_and_stream():
    found = data_circles(graph(type_checking=True))
    assert not found, "circles in roxxel.data (annotation-only imports included):\n" + "\n".join(map(str, found))


def test_the_circle_finder_sees_annotation_only_imports():
    tree = ast.parse(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from roxxel.data.dataset import Dataset\n"
    )
    known = {"roxxel.data.dataset", "roxxel.data.reader"}
    assert imports(tree, "roxxel.data.reader", known) == set()
    assert imports(tree, "roxxel.data.reader", known, type_checking=True) == {"roxxel.data.dataset"}
    g = {  # the circle this rule was written against (#52), less one module
        "roxxel.data.curriculum": {"roxxel.data.dataset", "roxxel.data.stream"},
        "roxxel.data.stream": {"roxxel.data.reader", "roxxel.data.curriculum"},
        "roxxel.data.reader": {"roxxel.data.map_rows", "roxxel.data.curriculum", "roxxel.data.dataset"},
        "roxxel.data.map_rows": {"roxxel.data.dataset"},
        "roxxel.data.dataset": {"roxxel.data.reader"},
        "roxxel.format.shard": {"roxxel.format.mapped"},
        "roxxel.format.mapped": {"roxxel.format.shard"},  # a circle outside data: not this rule's
    }
    assert data_circles(g) == [
        [
            "roxxel.data.curriculum",
            "roxxel.data.dataset",
            "roxxel.data.map_rows",
            "roxxel.data.reader",
            "roxxel.data.stream",
        ]
    ]
    g["roxxel.data.dataset"] = set()
    g["roxxel.data.reader"] = {"roxxel.data.map_rows", "roxxel.data.dataset"}
    assert data_circles(g) == []  # curriculum <-> stream alone is allowed
