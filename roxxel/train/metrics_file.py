"""The run's metrics file, ``roxxel_metrics.csv``: written by the :class:`~roxxel.train.Logger`'s
writer thread, read back by :func:`read_metrics` (``roxxel plot``, tests, users).

The format (wide, one row per logged step, a header that only grows, rewritten atomically
when it does) is described in :mod:`roxxel.train.logger`.
"""

from __future__ import annotations

import csv
import datetime
import os
from typing import Iterable, Sequence

from roxxel.format.atomic import atomic_write

__all__ = ["FIXED_COLUMNS", "METRICS_CSV", "MetricsCsv", "read_metrics"]

METRICS_CSV = "roxxel_metrics.csv"
FIXED_COLUMNS = ("step", "wall_time")
"""The first two columns of every metrics file; metric names may not take them."""


class MetricsCsv:
    """Appends rows to the wide metrics CSV; rewrites it atomically when the header grows."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.columns = list(FIXED_COLUMNS)
        self._start_step: int | None = None  # the step a restored run starts from (see start_from)
        self._at_start: dict[str, str] = {}  # what the file holds at that step: column -> value as written
        if os.path.exists(path) and os.path.getsize(path) > 0:
            with open(path, newline="", encoding="utf-8") as f:
                header = next(csv.reader(f), [])
            if tuple(header[:2]) != FIXED_COLUMNS:
                raise ValueError(
                    f"{path} is not a roxxel metrics file: its header starts with {header[:2]!r}, "
                    f"expected {list(FIXED_COLUMNS)!r}"
                )
            self.columns, self._known = header, set(header)
            with open(path, "rb") as f:
                f.seek(-1, os.SEEK_END)
                torn = f.read(1) != b"\n"
            self._append()
            if torn:  # the previous process died mid-row: end that row
                self._file.write("\n")
        else:
            self._rewrite(FIXED_COLUMNS, ())

    def write(self, step: int, wall: float, values: dict[str, float]) -> bool:
        """Append a row; False when it repeats what the file holds at the restored step (nothing written)."""
        if step == self._start_step and values and all(self._at_start.get(k) == repr(v) for k, v in values.items()):
            # A run restored at its last step (a finished run started again) evaluates once more: the
            # same values at the same step are not a second measurement, and would show up twice.
            return False
        new = [key for key in values if key not in self._known]
        if new:
            self._grow(new)
        row = [str(step), repr(wall)]
        row += [repr(values[c]) if c in values else "" for c in self.columns[len(FIXED_COLUMNS) :]]
        self._writer.writerow(row)
        return True

    def _grow(self, new: list[str]) -> None:
        self._file.close()
        pad = [""] * len(new)
        with open(self.path, newline="", encoding="utf-8") as src:
            reader = csv.reader(src)
            next(reader)
            self._rewrite(self.columns + new, (row + pad for row in reader))

    def _rewrite(self, columns: Sequence[str], rows: Iterable[list[str]]) -> None:
        """Replace the file, atomically, by ``columns`` and ``rows``; then append to it."""
        with atomic_write(self.path, "w") as dst:
            out = csv.writer(dst, lineterminator="\n")
            out.writerow(columns)
            out.writerows(rows)
        self.columns, self._known = list(columns), set(columns)
        self._append()

    def _append(self) -> None:
        self._file = open(self.path, "a", encoding="utf-8")
        self._writer = csv.writer(self._file, lineterminator="\n")

    def start_from(self, step: int) -> str:
        """Supersede the rows after ``step`` (all of them at 0; see :meth:`Logger.start_from`); what was done, or ""."""
        self._file.flush()
        with open(self.path, newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))[1:]
        if step:
            names = self.columns[len(FIXED_COLUMNS) :]
            self._start_step = step
            self._at_start = {
                c: v for r in rows if r and int(r[0]) == step for c, v in zip(names, r[len(FIXED_COLUMNS) :]) if v
            }
        stale = [r for r in rows if r and (int(r[0]) > step or not step)]  # the checkpoint's own step stays
        if not stale:
            return ""
        self._file.close()
        steps = f"steps {min(int(r[0]) for r in stale)}-{max(int(r[0]) for r in stale)}"
        if step == 0:
            aside = self._aside_name()
            os.replace(self.path, aside)
            self._rewrite(FIXED_COLUMNS, ())
            return (
                f"{self.path} held the metrics of an earlier run ({steps}) and this run starts at step 0 "
                f"(no checkpoint restored): moved them to {aside}"
            )
        self._rewrite(self.columns, (r for r in rows if r and int(r[0]) <= step))
        return (
            f"dropped {len(stale)} rows of metrics ({steps}) that an earlier attempt logged after "
            f"the checkpoint of step {step}: this run logs those steps again"
        )

    def _aside_name(self) -> str:
        """A name no file has yet for an earlier run's metrics (two restarts within one second keep both)."""
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        base = os.path.join(os.path.dirname(self.path), f"roxxel_metrics.earlier-{stamp}")
        name, k = f"{base}.csv", 1
        while os.path.exists(name):
            name, k = f"{base}-{k}.csv", k + 1
        return name

    def flush(self) -> None:
        self._file.flush()

    def fsync(self) -> None:
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()


def read_metrics(run_dir: str | os.PathLike[str]) -> dict[str, list[tuple[int, float]]]:
    """Parse a run's ``roxxel_metrics.csv`` back into ``{metric: [(step, value), ...]}``.

    Metrics come in column order; each list is sorted by step and omits steps where the
    metric was not logged. For a step logged more than once (a resumed run re-logs the
    steps after its checkpoint) the value written last wins. ``wall_time`` is not returned.

    Args:
        run_dir: the run directory (the Logger's ``log_dir``), or the CSV file itself.

    Raises:
        FileNotFoundError: no ``roxxel_metrics.csv`` there (the message names the path).
        ValueError: the file is empty, its header is not ``step,wall_time,...``, or a row
            is malformed (the message names the file and line).
    """
    path = os.fspath(run_dir)
    if os.path.isdir(path):
        path = os.path.join(path, METRICS_CSV)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no metrics file {path} (written by roxxel's Logger in the run directory)")
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if not header:
            raise ValueError(f"{path} is empty: no header line")
        if tuple(header[:2]) != FIXED_COLUMNS:
            raise ValueError(
                f"{path} is not a roxxel metrics file: its header starts with {header[:2]!r}, "
                f"expected {list(FIXED_COLUMNS)!r}"
            )
        names = header[2:]
        by_step: list[dict[int, float]] = [{} for _ in names]
        for row in reader:
            if not row:
                continue
            if len(row) > len(header):
                raise ValueError(f"{path}, line {reader.line_num}: {len(row)} fields, header has {len(header)}")
            try:
                step = int(row[0])
                for i, cell in enumerate(row[2:]):
                    if cell:
                        by_step[i][step] = float(cell)
            except ValueError as err:
                raise ValueError(f"{path}, line {reader.line_num}: {err}") from err
    return {name: sorted(values.items()) for name, values in zip(names, by_step)}
