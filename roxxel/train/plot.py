"""``roxxel plot``: a PNG of a run's metrics against the step, from ``roxxel_metrics.csv``.

By default a few panels sharing the step axis, those the run logged of: the training and
held-out loss on one axis (with a baseline, when given), throughput (tokens/s), and the
learning rate; so a glance at a run directory on a machine without TensorBoard shows
whether the loss falls. The rest (the Trainer's diagnostics, your own metrics) on request:
``metrics=`` / ``--metrics`` names them, ``--metrics all`` draws every one; ``eval_X`` shares
``X``'s panel when both are drawn. Drawn with
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
from roxxel.train.logger import LOSS_KEY, METRICS_CSV, TOKENS_PER_SEC_KEY, read_metrics

__all__ = ["DEFAULT_PANELS", "DEFAULT_PNG", "panels", "plot_command", "plot_run"]

DEFAULT_PNG = "roxxel_metrics.png"

#: The panels drawn by default, each the metrics on one axis; a panel the run did not log is left out.
DEFAULT_PANELS: tuple[tuple[str, ...], ...] = ((LOSS_KEY, "eval_loss"), (TOKENS_PER_SEC_KEY,), ("learning_rate",))


def panels(available: Sequence[str], metrics: Sequence[str] | None = None) -> list[list[str]]:
    """The panels to draw, top to bottom, each a list of metrics sharing one axis.

    ``metrics=None``: the :data:`DEFAULT_PANELS` of ``available`` (every metric, if it has none of
    them). Otherwise one panel per name in that order, except that ``eval_X`` joins ``X``'s panel
    when ``X`` is named too.
    """
    if metrics is None:
        chosen = [[name for name in panel if name in available] for panel in DEFAULT_PANELS]
        chosen = [panel for panel in chosen if panel]
        if chosen:
            return chosen
        metrics = sorted(available, key=lambda n: n != LOSS_KEY)  # stable: loss first
    result: list[list[str]] = []
    where: dict[str, int] = {}  # a panel's first metric -> its index
    for name in dict.fromkeys(metrics):
        base = name.removeprefix("eval_")
        key = base if base != name and base in metrics else name
        if key not in where:
            where[key] = len(result)
            result.append([])
        panel = result[where[key]]
        if name == key:
            panel.insert(0, name)
        else:
            panel.append(name)
    return result


def plot_run(
    run_dir: str | os.PathLike[str],
    output: str | os.PathLike[str] | None = None,
    metrics: Sequence[str] | None = None,
    *,
    baseline: float | None = None,
) -> str:
    """Write a PNG of the run's metrics against the step; return its path.

    Args:
        run_dir: the run directory holding ``roxxel_metrics.csv`` (or that file itself).
        output: the PNG to write (atomically); default ``<run_dir>/roxxel_metrics.png``.
        metrics: names to plot, in this order (see :func:`panels`); default the loss and
            held-out loss, tokens/s and the learning rate, those the file has (every metric
            if it has none of them). Steps where a metric was not logged are skipped.
        baseline: a loss to beat (e.g. a unigram model's), drawn as a dashed line on the
            loss panel (the first panel when no loss is drawn).

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
    if metrics is not None:
        if not metrics:
            raise ValueError("metrics must name at least one metric, but got an empty list")
        unknown = [n for n in metrics if n not in data]
        if unknown:
            raise ValueError(
                f"{csv_path} has no metric {', '.join(map(repr, unknown))}; it has {', '.join(data) or 'none'}"
            )
    layout = panels([n for n in data if data[n]], metrics)
    if output is None:
        output = os.path.join(os.path.dirname(csv_path), DEFAULT_PNG)
    output = os.fspath(output)

    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as err:
        raise ImportError("roxxel plot needs matplotlib: pip install 'matplotlib>=3.8'") from err

    fig = Figure(figsize=(8, 1.0 + 2.4 * len(layout)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(layout), 1, sharex=True, squeeze=False)[:, 0]
    baseline_ax = next((ax for ax, panel in zip(axes, layout) if LOSS_KEY in panel), axes[0])
    for ax, panel in zip(axes, layout):
        for name in panel:
            points = data[name]
            marker = "o" if name.startswith("eval_") or len(points) < 50 else None
            ax.plot(
                [s for s, _ in points], [v for _, v in points], linewidth=1.2, marker=marker, markersize=3, label=name
            )
        if baseline is not None and ax is baseline_ax:
            ax.axhline(baseline, color="grey", linestyle="--", linewidth=1, label=f"baseline {baseline:.4g}")
        ax.set_ylabel(_LABELS.get(panel[0], panel[0]) if len(panel) == 1 else "loss" if LOSS_KEY in panel else panel[0])
        if len(ax.get_lines()) > 1:
            ax.legend(loc="best", fontsize="small")
        if panel == [TOKENS_PER_SEC_KEY]:
            ax.set_ylim(bottom=0)  # from zero: a few percent of noise does not fill the panel
        ax.grid(True, alpha=0.3)
    axes[-1].set_xlabel("step")
    fig.suptitle(os.path.basename(os.path.abspath(os.path.dirname(csv_path))))
    with atomic_write(output, "wb") as f:
        fig.savefig(f, format="png", dpi=100)
    return output


_LABELS = {TOKENS_PER_SEC_KEY: "tokens/s", "learning_rate": "learning rate"}


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
    help="Comma-separated metrics to plot, one panel each (eval_X on X's), e.g. loss,eval_loss,step_time_s; "
    "'all' for every metric [default: loss and held-out loss, tokens/s, learning rate].",
)
@click.option("--baseline", type=float, default=None, help="A loss to beat, drawn as a dashed line on the loss panel.")
def plot_command(run_dir: str, output: str | None, metrics: str | None, baseline: float | None) -> None:
    """Plot RUN_DIR's roxxel_metrics.csv (loss, throughput, learning rate against the step) to a PNG."""
    names = None if metrics is None else [m.strip() for m in metrics.split(",") if m.strip()]
    try:
        if names == ["all"]:
            names = [n for n, points in read_metrics(run_dir).items() if points]
        path = plot_run(run_dir, output, names, baseline=baseline)
    except (OSError, ValueError, ImportError) as err:
        click.echo(f"roxxel: error: {err}", err=True)
        sys.exit(1)
    click.echo(path)
