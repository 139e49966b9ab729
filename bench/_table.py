"""Print a benchmark table: one row per method, a value, and its ratio to the named baseline."""

from __future__ import annotations


def print_table(title: str, rows: list[tuple[str, float]], unit: str, baseline: str, higher_is_better: bool = True) -> None:
    base = dict(rows)[baseline]
    width = max(len(name) for name, _ in rows)
    print(title)
    print(f"{'method':<{width}}  {unit:>12}  {'vs ' + baseline:>{len(baseline) + 3}}")
    for name, value in rows:
        ratio = value / base if base else float("nan")
        print(f"{name:<{width}}  {value:>12.2f}  {ratio:>{len(baseline) + 3}.2f}x")
    print("(higher is better)" if higher_is_better else "(lower is better)")
