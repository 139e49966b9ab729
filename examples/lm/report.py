"""The main job's last words in the terminal: the loss curve as text, beside the sample.

Text, so it shows wherever the job's output goes (a terminal, the launcher's log, a pod's
log) and needs no plotting library; the PNG of every metric is drawn separately.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

TRAIN_MARK, EVAL_MARK = "*", "o"


def loss_chart(
    train: Sequence[tuple[int, float]],
    evals: Sequence[tuple[int, float]] = (),
    width: int = 40,
    height: int = 14,
    ceiling: float | None = None,
) -> list[str]:
    """A text chart of the loss (nats per token) against the step, ``height + 2`` lines.

    ``train`` and ``evals`` are ``(step, loss)`` pairs (``roxxel.train.read_metrics``);
    training losses are drawn ``*``, held-out ones ``o`` (on top). Non-finite values are
    left out. ``width`` is the plot area's columns (the y labels take 7 more). ``ceiling``:
    the top of the y axis (e.g. a baseline to beat); higher values are drawn on the top row,
    so the first steps' losses do not flatten the rest.

    Raises:
        ValueError: no finite point to draw, or a width or height below 2.
    """
    if width < 2 or height < 2:
        raise ValueError(f"a chart needs at least 2 x 2 cells, got width {width}, height {height}")
    series = [
        (TRAIN_MARK, [(s, v) for s, v in train if math.isfinite(v)]),
        (EVAL_MARK, [(s, v) for s, v in evals if math.isfinite(v)]),
    ]
    points = [p for _, pts in series for p in pts]
    if not points:
        raise ValueError("no finite loss to chart")
    first, last = min(s for s, _ in points), max(s for s, _ in points)
    low, high = min(v for _, v in points), max(v for _, v in points)
    if ceiling is not None and low < ceiling < high:
        high = ceiling
    if high - low < 1e-9:
        low, high = low - 0.5, high + 0.5
    grid = [[" "] * width for _ in range(height)]
    for mark, pts in series:
        for step, value in pts:
            col = round((step - first) / max(last - first, 1) * (width - 1))
            row = max(0, round((high - value) / (high - low) * (height - 1)))
            grid[row][col] = mark
    lines = []
    for row, cells in enumerate(grid):
        label = f"{high - row * (high - low) / (height - 1):5.2f}" if row in (0, height // 2, height - 1) else ""
        lines.append(f"{label:>5} |{''.join(cells)}")
    lines.append(f"{'':5} +{'-' * width}")
    axis = f"step {first}"
    lines.append(f"{'':7}{axis}{str(last):>{width - len(axis)}}")
    return lines


def side_by_side(left: Sequence[str], right: Sequence[str], gap: int = 3) -> str:
    """Two blocks of lines as columns; the left one padded to its widest line."""
    pad = max((len(line) for line in left), default=0)
    rows = max(len(left), len(right))
    column = list(left) + [""] * (rows - len(left))
    other = list(right) + [""] * (rows - len(right))
    return "\n".join(f"{a:<{pad}}{' ' * gap}{b}".rstrip() for a, b in zip(column, other))


def text_lines(text: str, width: int = 60) -> list[str]:
    """``text`` as display lines of at most ``width`` columns: tabs expanded, other control
    characters shown as ``?``, trailing spaces dropped (a small model's runs of indentation
    would wrap into rows of nothing), long lines wrapped: a ``\\`` marks the cut, and the rest
    is indented 4 columns past the line's own indentation, so that it never reads as dedented code."""
    out = []
    for line in text.expandtabs(4).split("\n"):
        line = "".join(c if c.isprintable() else "?" for c in line).rstrip(" ")
        indent = " " * min(len(line) - len(line.lstrip(" ")) + 4, width // 2)
        first = True
        while len(line) > width:
            out.append(line[: width - 1] + "\\")
            line = indent + line[width - 1 :]
            first = False
        out.append(line if first or line.strip() else "")
    return out
