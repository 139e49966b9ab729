"""What `roxxel-launch status` pays to read a long run's goodput totals from its metrics file.

A metrics file of 100k logged windows (the Logger's wide CSV, 40 columns: a run of 1M steps
logged every 10), written once. Measured, interleaved in the same run: the launcher's reader
(``roxxel_launch.goodput_read.from_metrics_file``: the file's last 256 KiB first), the same
reader made to scan the whole file (the baseline: what it did before it read the tail), and
``roxxel.train.metrics_file.read_metrics``, which a user's script would call (every metric of
every row). Target: status spends < 50 ms on it.

Usage: python bench/status_goodput.py
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "launcher")]

from _measure import interleaved, load_average, median, over_window, record  # noqa: E402
from _table import print_samples  # noqa: E402

from roxxel.train.metrics_file import MetricsCsv, read_metrics  # noqa: E402
from roxxel_launch import goodput_read  # noqa: E402

ROWS, EXTRA_COLUMNS = 100_000, 24


def write_file(directory: str) -> None:
    metrics = MetricsCsv(os.path.join(directory, goodput_read.METRICS_CSV))
    names = ["goodput", "goodput_total_s", "goodput_productive_s", "goodput_attempts"]
    names += [f"badput_{kind}_s" for kind in ("restore", "compile", "data_wait", "save", "eval", "restart", "other")]
    names += [f"metric_{i}" for i in range(EXTRA_COLUMNS)]
    for row in range(ROWS):
        metrics.write(10 * row, 1.7e9 + row, {name: 0.001 * row for name in names})
    metrics.close()


def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        write_file(directory)
        size_mb = os.path.getsize(os.path.join(directory, goodput_read.METRICS_CSV)) / 1e6

        def tail_first() -> int:
            assert goodput_read.from_metrics_file(directory).step == 10 * (ROWS - 1)
            return 1

        def whole_file() -> int:
            saved, goodput_read.TAIL_BYTES = goodput_read.TAIL_BYTES, 1 << 40
            try:
                return tail_first()
            finally:
                goodput_read.TAIL_BYTES = saved

        def every_metric() -> int:
            read_metrics(directory)
            return 1

        methods = {"whole file (baseline)": whole_file, "tail first": tail_first, "read_metrics": every_metric}
        samples = interleaved({n: (lambda w, f=f: over_window(f, w)) for n, f in methods.items()}, rounds=5, window=2.0)
        print_samples(
            f"reading the newest goodput totals of a {size_mb:.0f} MB metrics file ({ROWS} rows)",
            samples,
            "reads/s",
            ["whole file (baseline)"],
            note=load_average(),
        )
        ms = 1000 / median(samples["tail first"])
        print(f"status spends {ms:.2f} ms on it (target < 50 ms)")
        record("status goodput read, 100k-row metrics file", f"{ms:.2f} ms", "< 50 ms", ms < 50)


if __name__ == "__main__":
    main()
