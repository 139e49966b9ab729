"""Print a benchmark table: one row per method, a value, and its ratio to the named baseline."""

from __future__ import annotations

from _measure import median, spread


def print_table(
    title: str, rows: list[tuple[str, float]], unit: str, baseline: str, higher_is_better: bool = True
) -> None:
    base = dict(rows)[baseline]
    width = max(len(name) for name, _ in rows)
    print(title)
    print(f"{'method':<{width}}  {unit:>12}  {'vs ' + baseline:>{len(baseline) + 3}}")
    for name, value in rows:
        ratio = value / base if base else float("nan")
        print(f"{name:<{width}}  {value:>12.2f}  {ratio:>{len(baseline) + 3}.2f}x")
    print("(higher is better)" if higher_is_better else "(lower is better)")


def print_samples(
    title: str,
    samples: dict[str, list[float]],
    unit: str,
    baselines: list[str],
    scale: float = 1.0,
    higher_is_better: bool = True,
    note: str = "",
) -> None:
    """One row per method: median (x ``scale``), spread over rounds, and the ratio of medians to each baseline."""
    width = max(len(n) for n in samples)
    meds = {n: median(v) * scale for n, v in samples.items()}
    rounds = max(len(v) for v in samples.values())
    print(f"{title}  [median of {rounds} interleaved rounds{'; ' + note if note else ''}]")
    head = f"{'method':<{width}}  {unit:>10}  {'spread':>10}" + "".join(
        f"  {'vs ' + b:>{max(len(b) + 3, 8)}}" for b in baselines
    )
    print(head)
    print("-" * len(head))
    for name, value in meds.items():
        cells = "".join(
            f"  {value / meds[b] if meds[b] else float('nan'):>{max(len(b) + 3, 8) - 1}.2f}x" for b in baselines
        )
        print(f"{name:<{width}}  {value:>10.2f}  {spread(samples[name]):>10}{cells}")
    print("(higher is better)" if higher_is_better else "(lower is better)")
