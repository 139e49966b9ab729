"""Measuring methods users can trust: interleaved rounds of fixed-length windows, medians and spreads.

Every figure is the rate of a method over a window of at least ``window`` seconds; the
methods of one table run one after another in each round (the order rotated every round,
so a burst of load from other processes hits them alike), and the table reports the
median over rounds with the spread (min-max) next to it. Memory is read as ``RssAnon``
from ``/proc/self/status``: ``VmRSS`` also counts page cache mapped by the process, which
the kernel reclaims at will and which is not host memory the loader holds.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from typing import Callable

Runner = Callable[[float], float]  # given a window in seconds, runs at least that long and returns a rate


def over_window(step: Callable[[], int], window: float) -> float:
    """Call ``step`` (returns units done) until ``window`` seconds have passed; units per second."""
    units = 0
    t0 = time.perf_counter()
    while True:
        units += step()
        dt = time.perf_counter() - t0
        if dt >= window:
            return units / dt


def interleaved(methods: dict[str, Runner], rounds: int, window: float) -> dict[str, list[float]]:
    """Rates of every method in ``rounds`` interleaved rounds (rotated order), keyed by name."""
    names = list(methods)
    out: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            out[name].append(methods[name](window))
    return out


def median(samples: list[float]) -> float:
    return statistics.median(samples)


def spread(samples: list[float]) -> str:
    """``min-max`` as a percentage of the median (how much to trust the median)."""
    m = median(samples)
    if not m:
        return "-"
    return f"{(min(samples) - m) / m * 100:+.0f}/{(max(samples) - m) / m * 100:+.0f}%"


def rss_anon_bytes() -> int:
    """This process's anonymous resident memory (``RssAnon`` of ``/proc/self/status``), in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("/proc/self/status has no RssAnon line (Linux >= 4.5 needed)")


def load_average() -> str:
    """The 1-minute load average and the CPU count (how loaded the machine was)."""
    return f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"


def record(target: str, value: str, goal: str, met: bool | None) -> None:
    """Append one target's result to the summary file ``bench/run.py`` prints at the end (if it asked for one)."""
    path = os.environ.get("ROXXEL_BENCH_SUMMARY")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"target": target, "value": value, "goal": goal, "met": met}) + "\n")
