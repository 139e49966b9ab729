"""Loop events: the timed sections of a training loop, told to whoever listens.

A training loop spends its time in a few kinds of work: restoring a checkpoint, compiling
(a phase's first step), waiting for a batch, running a step, saving, saving at a
preemption, evaluating. The Trainer times each one as a :class:`Section` and hands it to
its listeners: the progress watchdog, which also hears when a section begins (it bounds the
work in progress), a :class:`TimedSteps` that reads each logging window's timed steps
(the ``Window`` the callbacks' throughput is computed from), and the callbacks'
``on_section`` hook (the straggler report, a goodput report, a tracker). One event type and
one hook, so a new report is one listener, not one more hook into the loop; the shape
follows CLU's timed sections (``clu.periodic_actions``) and the events MaxText's goodput
recorder keeps (``ml-goodput-measurement``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence

__all__ = [
    "COMPILE",
    "DATA_WAIT",
    "EVAL",
    "PREEMPTION_SAVE",
    "RESTORE",
    "SAVE",
    "SECTIONS",
    "STEP",
    "LoopSections",
    "Section",
    "TimedSteps",
]

RESTORE = "restore"
"""Reading the latest checkpoint back (``step``: the step restored, 0 when there was none)."""
COMPILE = "compile"
"""A phase's first step: its compilation (or a cache hit) and its execution, waited for."""
DATA_WAIT = "data_wait"
"""Waiting for the next batch (the first of a phase includes the stream's set-up)."""
STEP = "step"
"""Dispatching a compiled step, waiting for an older one when too many are in flight, and at
the end of a logging window (or a checkpoint's) for its own result."""
SAVE = "save"
"""Starting a checkpoint save (its copy to the host), or waiting for the last one to complete."""
PREEMPTION_SAVE = "preemption_save"
"""Saving the agreed step after a preemption notice, until the checkpoint is complete."""
EVAL = "eval"
"""One evaluation (``eval_fn``)."""
SECTIONS = (RESTORE, COMPILE, DATA_WAIT, STEP, SAVE, PREEMPTION_SAVE, EVAL)
"""Every section name, in the order a run first meets them."""


@dataclasses.dataclass(frozen=True)
class Section:
    """One timed section of the loop.

    Attributes:
        name: one of :data:`SECTIONS`.
        step: the step it belongs to: for ``data_wait``, ``compile`` and ``step`` the update
            that takes the state to ``step`` (1-based, as callbacks count steps); for
            ``save``, ``preemption_save`` and ``eval`` the state's step; for ``restore`` the
            step restored.
        start: when it began, Unix time in seconds (``time.time()``).
        duration: how long it took, seconds (``time.perf_counter()`` differences).
        waited: of ``duration``, the seconds blocked on the devices' results (a ``step``
            or ``compile`` waiting for a step's loss); the rest is this host's own work.
            0.0 for the sections that do not wait on results.
    """

    name: str
    step: int
    start: float
    duration: float
    waited: float = 0.0


class LoopSections:
    """Times sections and tells the listeners.

    Args:
        ended: called with each finished :class:`Section`, in order (the callbacks'
            ``on_section`` hooks).
        began: called with ``(name, step)`` as a section begins (the watchdog).
    """

    def __init__(
        self, ended: Sequence[Callable[[Section], None]] = (), began: Sequence[Callable[[str, int], None]] = ()
    ) -> None:
        self._ended = tuple(ended)
        self._began = tuple(began)

    def begin(self, name: str, step: int) -> tuple[float, float]:
        """Start ``name``; returns its start (Unix time, performance counter) for :meth:`end`."""
        for hook in self._began:
            hook(name, step)
        return time.time(), time.perf_counter()

    def end(self, name: str, step: int, started: tuple[float, float], waited: float = 0.0) -> float:
        """Finish ``name`` (begun with :meth:`begin`, whose return is ``started``; ``waited``:
        the seconds of it blocked on results). Returns its duration in seconds."""
        duration = time.perf_counter() - started[1]
        if self._ended:
            event = Section(name, step, started[0], duration, waited)
            for hook in self._ended:
                hook(event)
        return duration

    @contextlib.contextmanager
    def timed(self, name: str, step: int) -> Iterator[None]:
        """Time the ``with`` block as ``name`` (told also when it ends by an exception: the
        time was spent)."""
        started = self.begin(name, step)
        try:
            yield
        finally:
            self.end(name, step, started)


class TimedSteps:
    """A logging window's timed steps, read from the sections: what throughput and host-time
    reports are computed from (feed it every :class:`Section`, :meth:`reset` it when a window
    is logged).

    A phase's first step compiles: its ``compile`` section and the batch wait before it are
    left out. Every other step counts its ``data_wait`` and its ``step`` section, and a
    window's last step waits in its ``step`` section for its own result, so ``seconds`` is
    the steps' wall time up to their last result; time between sections (callbacks,
    logging, saves, evaluations) is not in it. A ``restore`` (a new ``Trainer.run()``)
    starts afresh.

    Attributes:
        steps: ``step`` sections since the last reset.
        seconds: their ``data_wait`` and ``step`` sections' durations, summed (seconds).
        waited: of ``seconds``, the time blocked on the devices' results (``Section.waited``).
    """

    def __init__(self) -> None:
        self.steps, self.seconds, self.waited = 0, 0.0, 0.0
        self._batch_wait = 0.0  # the data_wait before the next step, counted with it

    @property
    def host_seconds(self) -> float:
        """Of ``seconds``, this host's own work: waiting for batches, dispatching steps."""
        return self.seconds - self.waited

    def observe(self, event: Section) -> None:
        """Count ``event`` (a listener: pass it where :class:`LoopSections` takes ``ended``)."""
        name = event.name
        if name == DATA_WAIT:
            self._batch_wait = event.duration
        elif name == STEP:
            self.steps += 1
            self.seconds += self._batch_wait + event.duration
            self.waited += event.waited
            self._batch_wait = 0.0
        elif name == COMPILE:
            self._batch_wait = 0.0
        elif name == RESTORE:
            self.reset()

    def reset(self) -> None:
        """A new window (the batch wait already told, of the next step, stays)."""
        self.steps, self.seconds, self.waited = 0, 0.0, 0.0
