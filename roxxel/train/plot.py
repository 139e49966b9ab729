"""``roxxel plot``: a PNG of a run's metrics against the step, from ``roxxel_metrics.csv``.

One subplot per metric (loss first), sharing the step axis, so a glance at a run
directory on a machine without TensorBoard shows whether the loss falls. Drawn with
matplotlib's Agg renderer on a standalone ``Figure``: no display needed, and the
caller's pyplot state and backend are left alone. matplotlib is imported only when
plotting.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

import click

from roxxel.format.atomic import atomic_write
from roxxel.train.logger import LOSS_KEY, METRICS_CSV, read_metrics

__all__ = ["DEFAULT_PNG", "plot_command", "plot_run"]

DEFAULT_PNG = "roxxel_metrics.png"


def plot_run(
    run_dir: str | os.PathLike[str],
    output: str | os.PathLike[str] | None = None,
    metrics: Sequence[str] | None = None,
) -> str:
    """Write a PNG of the run's metrics against the step; return its path.

    Args:
        run_dir: the run directory holding ``roxxel_metrics.csv`` (or that file itself).
        output: the PNG to write (atomically); default ``<run_dir>/roxxel_metrics.png``.
        metrics: names to plot, in this order; default every metric in the file, with
            ``loss`` first. Steps where a metric was not logged are skipped.

    Raises:
        FileNotFoundError: ``roxxel_metrics.csv`` is missing (the message names it).
        ValueError: the CSV is empty, malformed or has no rows (the message names the
            file), or a requested metric is not in it, or ``metrics`` is empty.
        TypeError: ``metrics`` is a single str rather than a sequence of names.
        ImportError: matplotlib is not installed.
    """
    if metrics is not None and isinstance(metrics, str):
        raise TypeError(f"metrics must be a sequence of names, not a str ({metrics!r}); use [{metrics!r}]")
    data = read_metrics(run_dir)
    csv_path = os.fspath(run_dir)
    if os.path.isdir(csv_path):
        csv_path = os.path.join(csv_path, METRICS_CSV)
    if not any(data.values()):
        raise ValueError(f"{csv_path} has no metric rows yet: nothing to plot")
    if metrics is None:
        names = sorted((n for n in data if data[n]), key=lambda n: n != LOSS_KEY)  # stable: loss first
    else:
        names = list(metrics)
        if not names:
            raise ValueError("metrics must name at least one metric, but got an empty list")
        unknown = [n for n in names if n not in data]
        if unknown:
            raise ValueError(
                f"{csv_path} has no metric {', '.join(map(repr, unknown))}; it has {', '.join(data) or 'none'}"
            )
    if output is None:
        output = os.path.join(os.path.dirname(csv_path), DEFAULT_PNG)
    output = os.fspath(output)

    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as err:
        raise ImportError("roxxel plot needs matplotlib: pip install 'matplotlib>=3.8'") from err

    fig = Figure(figsize=(8, 1.0 + 2.2 * len(names)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(names), 1, sharex=True, squeeze=False)[:, 0]
    for ax, name in zip(axes, names):
        points = data[name]
        ax.plot([s for s, _ in points], [v for _, v in points], linewidth=1.2, marker="." if len(points) < 50 else None)
        ax.set_ylabel(name)
        ax.grid(True, alpha=0.3)
    axes[-1].set_xlabel("step")
    fig.suptitle(os.path.basename(os.path.abspath(os.path.dirname(csv_path))))
    with atomic_write(output, "wb") as f:
        fig.savefig(f, format="png", dpi=100)
    return output


@click.command("plot")
@click.argument("run_dir", type=click.Path(file_okay=True, dir_okay=True))
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    default=None,
    help=f"PNG to write [default: RUN_DIR/{DEFAULT_PNG}].",
)
@click.option(
    "--metrics",
    default=None,
    metavar="NAMES",
    help="Comma-separated metrics to plot, e.g. loss,eval_loss [default: all].",
)
def plot_command(run_dir: str, output: str | None, metrics: str | None) -> None:
    """Plot RUN_DIR's roxxel_metrics.csv (loss and other metrics against the step) to a PNG."""
    names = None if metrics is None else [m.strip() for m in metrics.split(",") if m.strip()]
    try:
        path = plot_run(run_dir, output, names)
    except (OSError, ValueError, ImportError) as err:
        click.echo(f"roxxel: error: {err}", err=True)
        sys.exit(1)
    click.echo(path)
