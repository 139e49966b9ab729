"""The learning rate of each logging window, from the optimizer's optax schedule."""

from __future__ import annotations

from typing import Any, Callable, Mapping

from roxxel.exit_codes import ConfigTypeError
from roxxel.train.callbacks.base import Callback, Window

__all__ = ["LearningRate"]


class LearningRate(Callback):
    """Adds ``learning_rate`` to each window's metrics: the rate of the window's last update.

    Optax counts updates from 0 (a schedule's ``count`` is the number of updates applied
    before this one), so the update that completed step ``s`` used ``schedule(s - 1)``.

    Args:
        schedule: the optax schedule (``count -> rate``) or the constant rate the optimizer
            uses. The callback cannot read it from an ``nnx.Optimizer``: optax keeps the
            schedule inside the update function, not in the state.

    Raises:
        TypeError: ``schedule`` is neither callable nor a number.
    """

    def __init__(self, schedule: Callable[[int], Any] | float) -> None:
        if not callable(schedule) and not _is_number(schedule):
            raise ConfigTypeError(
                f"learning_rate must be an optax schedule (step -> rate) or a number, got {type(schedule).__name__}"
            )
        self.schedule = schedule

    def window_metrics(self, step: int, window: Window) -> Mapping[str, float]:
        rate = self.schedule(step - 1) if callable(self.schedule) else self.schedule
        return {"learning_rate": float(rate)}


def _is_number(value: Any) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True
