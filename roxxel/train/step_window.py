"""The Trainer's accounting of one logging window: the losses and aux values of the steps since
the last logged one, the results still in flight (how far dispatch runs ahead of the host),
and the timing that throughput and the straggler report are computed from."""

from __future__ import annotations

import collections
import time
from typing import Any

import jax

from roxxel.train.callbacks.base import Window

__all__ = ["StepWindow"]


class StepWindow:
    """The steps of one phase since its last logged window: their losses and aux values, the
    results still in flight, and the timing (the phase's first step compiles: not timed)."""

    def __init__(self, tokens_per_step: int):
        self.tokens_per_step = tokens_per_step
        self.pending: collections.deque = collections.deque()
        self.losses: list = []
        self.auxes: list = []
        self.timed_start: float | None = None
        self.timed_steps = 0
        self.compile_s: float | None = None
        self.waited = 0.0  # seconds blocked on results (the rest is this host's own time)

    def start_timing(self, loss: jax.Array, t0: float) -> float:
        """Wait for the phase's first step (compiled in its call) and start timing; returns its seconds."""
        loss.block_until_ready()
        self.timed_start = time.perf_counter()
        self.compile_s = self.timed_start - t0
        return self.compile_s

    def add(self, loss: jax.Array, aux: Any, queue_depth: int) -> None:
        """Add a step's results; wait for the oldest once more than ``queue_depth`` are in
        flight (bounds how far dispatch runs ahead)."""
        self.losses.append(loss)
        self.auxes.append(aux)
        self.pending.append(loss)
        if len(self.pending) > queue_depth:
            self.wait_for(self.pending.popleft())

    def wait_for(self, loss: jax.Array) -> None:
        """Block until ``loss`` is computed; the seconds count as waited, not as host time."""
        t_wait = time.perf_counter()
        loss.block_until_ready()
        self.waited += time.perf_counter() - t_wait

    def elapsed(self) -> float:
        """Seconds since the window's timing started (``RuntimeError`` before the first step)."""
        if self.timed_start is None:
            raise RuntimeError("StepWindow.elapsed before the first step")  # every step starts timing first
        return time.perf_counter() - self.timed_start

    def measured(self, elapsed: float) -> Window:
        """The timed steps, as callbacks see them."""
        return Window(steps=self.timed_steps, tokens=self.timed_steps * self.tokens_per_step, seconds=elapsed)

    def host_seconds_per_step(self, elapsed: float) -> float:
        """Seconds per timed step this host spent not waiting for the devices."""
        return (elapsed - self.waited) / self.timed_steps if self.timed_steps else 0.0

    def restart(self) -> None:
        """A new window after a logged one (the results in flight stay in flight)."""
        self.losses, self.auxes, self.timed_start, self.timed_steps, self.waited = [], [], time.perf_counter(), 0, 0.0
