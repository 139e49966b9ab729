"""The Trainer's side of one logging window: the losses and aux values of the steps since the
last logged one, and the results still in flight (how far dispatch runs ahead of the host).

Its timing is not here: throughput and the straggler report read it from the loop's
sections (:class:`~roxxel.train.sections.TimedSteps`).
"""

from __future__ import annotations

import collections
import time
from typing import Any

import jax

__all__ = ["StepWindow"]


class StepWindow:
    """The steps of one phase since its last logged window: their losses and aux values, and
    the results still in flight.

    Attributes:
        tokens_per_step: global tokens of one step of the phase (``batch_size * seq_len``).
        compiled: the phase's first step (it compiles) has run.
        compile_s: that step's seconds, until a logged window reports them (else None).
    """

    def __init__(self, tokens_per_step: int):
        self.tokens_per_step = tokens_per_step
        self.pending: collections.deque = collections.deque()
        self.losses: list = []
        self.auxes: list = []
        self.compiled = False
        self.compile_s: float | None = None

    def add(self, loss: jax.Array, aux: Any, queue_depth: int, settle: bool) -> float:
        """Add a step's results; block until the oldest is computed once more than
        ``queue_depth`` are in flight, or, when ``settle``, until this one is (and with it
        every older one: each step needs the state the one before made). Returns the
        seconds blocked."""
        self.losses.append(loss)
        self.auxes.append(aux)
        if settle:
            self.pending.clear()
            return _wait(loss)
        self.pending.append(loss)
        return _wait(self.pending.popleft()) if len(self.pending) > queue_depth else 0.0

    def restart(self) -> None:
        """A new window after a logged one (the results in flight stay in flight)."""
        self.losses, self.auxes = [], []


def _wait(loss: jax.Array) -> float:
    started = time.perf_counter()
    loss.block_until_ready()
    return time.perf_counter() - started
