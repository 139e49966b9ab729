"""Loop events: the timed sections of a training loop, told to whoever listens.

A training loop spends its time in a few kinds of work: restoring a checkpoint, compiling
(a phase's first step), waiting for a batch, running a step, saving, saving at a
preemption, evaluating. The Trainer times each one as a :class:`Section` and hands it to
its listeners: the callbacks' ``on_section`` hook (a goodput report, a tracker) and the
progress watchdog, which also hears when a section begins (it bounds the work in
progress). One event type and one hook, so a new report is one listener, not one more
hook into the loop; the shape follows CLU's timed sections (``clu.periodic_actions``) and
the events MaxText's goodput recorder keeps (``ml-goodput-measurement``).
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
]

RESTORE = "restore"
"""Reading the latest checkpoint back (``step``: the step restored, 0 when there was none)."""
COMPILE = "compile"
"""A phase's first step: its compilation (or a cache hit) and its execution, waited for."""
DATA_WAIT = "data_wait"
"""Waiting for the next batch (the first of a phase includes the stream's set-up)."""
STEP = "step"
"""Dispatching a compiled step, and waiting for an older one when too many are in flight."""
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
    """

    name: str
    step: int
    start: float
    duration: float


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

    def end(self, name: str, step: int, started: tuple[float, float]) -> None:
        """Finish ``name`` (begun with :meth:`begin`, whose return is ``started``)."""
        duration = time.perf_counter() - started[1]
        if self._ended:
            event = Section(name, step, started[0], duration)
            for hook in self._ended:
                hook(event)

    @contextlib.contextmanager
    def timed(self, name: str, step: int) -> Iterator[None]:
        """Time the ``with`` block as ``name`` (told also when it ends by an exception: the
        time was spent)."""
        started = self.begin(name, step)
        try:
            yield
        finally:
            self.end(name, step, started)
