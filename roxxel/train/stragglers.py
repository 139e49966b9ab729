"""Name the process that slows every step: a straggler report at each logging window.

In a ``jax.distributed`` job every step waits for its slowest process, so the step time is
the same everywhere and names no host. What differs is the *host time*: the part of a step
a process spends on its own work (waiting for its batch, the host side of dispatch)
rather than blocked on results that need every process. Each process reads it from the
loop's sections (:mod:`roxxel.train.sections`: the ``data_wait`` and ``step`` sections of
the window's timed steps, less the time a step waited for results), as a listener: the
Trainer runs one in every job, as a callback. At each logged window one all-gather of one
number per process (every process logs at the same steps) gives rank 0 the spread. It adds
``host_time_s_median`` (of the processes other than the slowest), ``host_time_s_max`` and
``slowest_process`` to the window's metrics (so to the metrics file and TensorBoard), and
warns when one process's host time stays above ``threshold`` x the median for
``windows`` consecutive windows.

What it cannot see: a slow accelerator (its device time is everybody's step time) or a
slow network link (a collective's time): those show as a slower step on every host.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import numpy as np

from roxxel.train.callbacks.base import Callback, Window
from roxxel.train.sections import Section, TimedSteps

__all__ = ["StragglerReport"]

log = logging.getLogger("roxxel.train")


class StragglerReport(Callback):
    """Gathers each process's host time per step at every logged window (a callback: the
    Trainer adds a default one unless ``callbacks=`` holds one).

    Args:
        threshold: a process is slow when its host time exceeds this multiple of the others' median.
        windows: ... for this many consecutive windows before rank 0 warns (a one-off
            hiccup, e.g. a garbage collection, is not a straggler); the warning repeats
            every ``10 * windows`` windows while it lasts.
        min_gap_s: and by at least this many seconds per step (noise on fast steps).
    """

    def __init__(self, threshold: float = 1.5, windows: int = 3, min_gap_s: float = 0.005) -> None:
        self.threshold = threshold
        self.windows = windows
        self.min_gap_s = min_gap_s
        self._suspect: int | None = None
        self._streak = 0
        self._timed = TimedSteps()

    def on_section(self, event: Section) -> None:
        self._timed.observe(event)

    def window_metrics(self, step: int, window: Window) -> Mapping[str, float]:
        """At a logged window: :meth:`observe` this process's host seconds per timed step
        (0.0 when none was timed), then a new window; nothing at a checkpoint inside one."""
        if not window.logged:
            return {}
        timed = self._timed
        host_time_s = timed.host_seconds / timed.steps if timed.steps else 0.0
        timed.reset()
        return self.observe(step, host_time_s)

    def observe(self, step: int, host_time_s: float) -> dict[str, float]:
        """Gather ``host_time_s`` (seconds per step) from every process; all processes call it
        at the same steps (a collective). Returns the metrics to add (none in one process)."""
        import jax

        if jax.process_count() == 1:
            return {}
        from jax.experimental import multihost_utils

        times = np.asarray(multihost_utils.process_allgather(np.array([host_time_s], np.float64))).reshape(-1)
        slowest = int(np.argmax(times))
        worst = float(times[slowest])
        median = float(np.median(np.delete(times, slowest)))  # of the others: with 2 processes, the other one
        slow = worst > self.threshold * median and worst - median > self.min_gap_s
        if slow and slowest == self._suspect:
            self._streak += 1
        else:
            self._suspect, self._streak = (slowest, 1) if slow else (None, 0)
        if self._streak and self._streak % (10 * self.windows) == self.windows and jax.process_index() == 0:
            log.warning(
                "process %d is a straggler at step %d: %.3f s of host time per step, %.1fx the median "
                "of the others (%.3f s) for %d logging windows; every step waits for it. Look at its host: data input "
                "(a slow mount), CPU contention, a noisy neighbour",
                slowest,
                step,
                worst,
                worst / max(median, 1e-12),
                median,
                self.windows,
            )
        return {"host_time_s_median": median, "host_time_s_max": worst, "slowest_process": float(slowest)}
