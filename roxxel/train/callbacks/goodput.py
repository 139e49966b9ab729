"""Goodput: the share of a run's time that trained the model, and where the rest of it went.

A listener of the loop's sections (:mod:`roxxel.train.sections`). Its totals run across the
attempts of a run (a preemption, a crash, a stall restart the job from its last checkpoint):
they are window metrics, so each checkpoint's run record holds them, and a resumed run
continues from the totals its restored step was saved with. The accounting follows MaxText's
goodput recorder (``ml-goodput-measurement``: productive step time against each kind of
badput, and the progress a disruption threw away), on Roxxel's sections.

Seconds, totals over the run's attempts:

- ``goodput_productive_s``: ``step`` sections, the compiled steps (their dispatch, and the
  waits for older steps' results: the devices' time);
- ``badput_<section>_s`` for ``restore``, ``compile``, ``data_wait``, ``save``,
  ``preemption_save`` and ``eval``: their sections;
- ``badput_redone_s``: what an earlier attempt spent on steps past the checkpoint this
  attempt resumed from, which it trains again: ``badput_redone_steps`` (the last step that
  attempt logged in ``run_dir``'s metrics file, less the restored step) times the run's mean
  productive step time. A Roxxel preemption saves the step it reached and redoes none; a
  crash, a stall (exit 43) or a kill redoes those since the last checkpoint;
- ``badput_restart_s``: the rest of the time between the restored step's save (the run
  record's ``saved_at``) and this attempt's restore: the earlier attempt's end (the
  preemption save itself: its record was written as it began), the restart, the program's
  start;
- ``badput_other_s``: the loop's time outside every section (logging, metrics, callbacks).

``goodput_total_s`` is their sum, from the first attempt's ``Trainer.run()`` (its program's
start before that is not measured), ``goodput`` the productive share of it (0..1), and
``goodput_attempts`` the attempts so far (each ``run()`` is one: it restores).
"""

from __future__ import annotations

import datetime
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from roxxel.train.callbacks.base import Callback, Window
from roxxel.train.metrics_file import METRICS_CSV, read_metrics
from roxxel.train.sections import RESTORE, SECTIONS, STEP, Section

__all__ = ["BADPUT", "Goodput"]

BADPUT = tuple(name for name in SECTIONS if name != STEP) + ("redone", "restart", "other")
"""The kinds of badput, each logged as ``badput_<kind>_s``."""
_PRODUCTIVE, _STEPS, _ATTEMPTS, _REDONE_STEPS = (
    "goodput_productive_s",
    "goodput_steps",
    "goodput_attempts",
    "badput_redone_steps",
)


class Goodput(Callback):
    """Adds the run's goodput and badput totals to each window's metrics (see the module docstring).

    Args:
        run_dir: the directory of the run's metrics file (the Trainer's ``save_path``, the
            Logger's ``log_dir``), where a resumed run finds the last step an earlier attempt
            logged: the steps it redoes, to the logging interval (``log_every``). None: steps
            lost after a checkpoint count as restart time.
        clock: Unix time in seconds (tests give a fake one).
    """

    def __init__(self, run_dir: str | os.PathLike[str] | None = None, clock: Callable[[], float] = time.time) -> None:
        self.run_dir = None if run_dir is None else os.fspath(run_dir)
        self._clock = clock
        self._carried: dict[str, float] = {}  # the restored step's totals
        self._seconds = dict.fromkeys((*SECTIONS, "redone", "restart"), 0.0)  # this attempt's
        self._steps = 0
        self._started: float | None = None  # this attempt's first section (its restore)

    def on_section(self, event: Section) -> None:
        if event.name == RESTORE:  # a run() begins: a new attempt, whose totals on_restore carries over
            self._seconds = dict.fromkeys(self._seconds, 0.0)
            self._steps, self._started = 0, event.start
        elif self._started is None:
            self._started = event.start
        self._seconds[event.name] += event.duration
        if event.name == STEP:
            self._steps += 1

    def on_restore(self, step: int, run: Mapping[str, Any] | None) -> None:
        saved = (run or {}).get("metrics") or {}
        self._carried = {k: float(v) for k, v in saved.items() if k.startswith(("goodput_", "badput_"))}
        saved_at = (run or {}).get("saved_at")
        if self._started is None or not isinstance(saved_at, str):
            return
        gap = max(0.0, self._started - datetime.datetime.fromisoformat(saved_at).timestamp())
        redone = self._logged_after(step)
        steps = self._carried.get(_STEPS, 0.0)
        per_step = self._carried.get(_PRODUCTIVE, 0.0) / steps if steps else 0.0
        self._seconds["redone"] = min(gap, redone * per_step)
        self._seconds["restart"] = gap - self._seconds["redone"]
        self._carried[_REDONE_STEPS] = self._carried.get(_REDONE_STEPS, 0.0) + redone

    def window_metrics(self, step: int, window: Window) -> Mapping[str, float]:
        return self.totals()

    def totals(self) -> dict[str, float]:
        """The metrics as of now: the restored totals plus this attempt's."""
        carried, seconds = self._carried, self._seconds
        elapsed = self._clock() - self._started if self._started is not None else 0.0
        other = max(0.0, elapsed - sum(seconds[name] for name in SECTIONS))
        out = {f"badput_{kind}_s": carried.get(f"badput_{kind}_s", 0.0) + seconds.get(kind, 0.0) for kind in BADPUT}
        out["badput_other_s"] += other
        out[_REDONE_STEPS] = carried.get(_REDONE_STEPS, 0.0)
        out[_PRODUCTIVE] = carried.get(_PRODUCTIVE, 0.0) + seconds[STEP]
        out[_STEPS] = carried.get(_STEPS, 0.0) + self._steps
        out[_ATTEMPTS] = carried.get(_ATTEMPTS, 0.0) + 1
        total = out[_PRODUCTIVE] + sum(out[f"badput_{kind}_s"] for kind in BADPUT)
        out["goodput_total_s"] = total
        out["goodput"] = out[_PRODUCTIVE] / total if total > 0 else 0.0
        return out

    def _logged_after(self, step: int) -> int:
        """Steps past ``step`` that an earlier attempt logged in ``run_dir``'s metrics file (0 without one)."""
        if self.run_dir is None or not step or not os.path.exists(os.path.join(self.run_dir, METRICS_CSV)):
            return 0
        logged = [s for series in read_metrics(self.run_dir).values() for s, _ in series]
        return max(0, max(logged, default=step) - step)
