"""A ``jax.profiler`` trace of a window of steps, for TensorBoard's profile plugin."""

from __future__ import annotations

import logging
import os
from typing import Any, Callable

import jax

from roxxel.exit_codes import ConfigValueError
from roxxel.train.callbacks.base import Callback

__all__ = ["Profile", "check_window"]

log_info = logging.getLogger("roxxel.train").info


class Profile(Callback):
    """Record a ``jax.profiler`` trace of steps ``first..last`` (1-based, inclusive) into ``directory``.

    The trace starts just before step ``first`` is dispatched and stops after step ``last``'s
    device work finished (the step's loss is waited for), so it covers that step whole. A run
    that ends inside the window (``stop_at_step``, a preemption, an error) stops it there.
    ``tensorboard --logdir DIR`` shows it in the Profile tab when ``directory`` is
    ``DIR/profile`` (the plugin's layout: ``plugins/profile/<run>/*.xplane.pb`` below it).

    Args:
        steps: ``(first, last)`` with ``1 <= first <= last``.
        directory: where the trace goes (``os.path.join(save_path, "profile")`` puts it
            beside the run's logs, where the Trainer's deprecated ``profile_steps=`` put it).
        log: where the "profile ... written to" line goes (default: the run's log when a
            Trainer runs it, which also writes the ``roxxel.train`` Python logger; else that logger).

    Raises:
        ValueError: ``steps`` is not two ints with ``1 <= first <= last``.
    """

    def __init__(self, steps: tuple[int, int], directory: str, log: Callable[[str], None] | None = None) -> None:
        self.first, self.last = check_window(steps)
        self.directory, self.log = directory, log
        self.active = False

    def on_batch_begin(self, step: int) -> None:
        if not self.active and step + 1 == self.first:
            jax.profiler.start_trace(self.directory)
            self.active = True

    def on_batch_end(self, step: int, loss: Any) -> None:
        if self.active and step >= self.last:
            loss.block_until_ready()  # the trace covers the device work of the last step
            self._stop()

    def on_run_end(self) -> None:
        if self.active:
            self._stop()

    def _stop(self) -> None:
        jax.profiler.stop_trace()
        self.active = False
        run_dir = os.path.dirname(os.path.normpath(self.directory)) or "."
        msg = f"profile of steps {self.first}..{self.last} written to {self.directory} (tensorboard --logdir {run_dir})"
        (self.log or log_info)(msg)


def check_window(steps: Any) -> tuple[int, int]:
    """``steps`` as ``(first, last)``; raises ``ValueError`` unless two ints with ``1 <= first <= last``."""
    try:
        first, last = steps
    except (TypeError, ValueError):
        first = last = None
    if not (isinstance(first, int) and isinstance(last, int) and 1 <= first <= last):
        raise ConfigValueError(f"profile_steps must be (first, last) with 1 <= first <= last, got {steps!r}")
    return first, last
