"""The shard format's modules import no circle, annotation-only imports included (``if
TYPE_CHECKING:``): a reader or a type checker follows those too. tests/architecture checks the
runtime graph of the whole library; this is the stricter graph of ``roxxel.format`` alone.
"""

from __future__ import annotations

from support.import_graph import graph


def _circles(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Pairs of modules each of which reaches the other."""

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for n in edges.get(todo.pop(), ()):
                if n not in seen:
                    seen.add(n)
                    todo.append(n)
        return seen

    reached = {m: reach(m) for m in edges}
    return sorted((a, b) for a in edges for b in reached[a] if a < b and a in reached.get(b, ()))


def test_format_modules_import_no_circle_annotations_included():
    edges = {
        m: {n for n in names if n.startswith("roxxel.format")}
        for m, names in graph(type_checking=True).items()
        if m.startswith("roxxel.format")
    }
    assert "roxxel.format.background" in edges["roxxel.format.shard_writer"]  # the graph sees the imports
    assert _circles(edges) == []


def test_the_circle_finder_finds_an_annotation_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [("a", "b"), ("a", "c"), ("b", "c")]
