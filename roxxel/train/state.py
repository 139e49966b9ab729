"""What a training run checkpoints: an NNX model, its optimizer and the step.

:class:`ModelState` is the unit the :class:`~roxxel.train.checkpoint.Checkpointer`
saves and restores. It owns no arrays itself: it points at live ``nnx`` objects,
and :meth:`ModelState.nnx_state` / :meth:`ModelState.update` move their variables
out and back in, so restoring updates the caller's model and optimizer in place.
"""

from __future__ import annotations

from typing import Any

from flax import nnx

__all__ = ["ModelState"]


class ModelState:
    """A model, its optimizer (optional) and the number of completed steps.

    Args:
        model: the ``nnx.Module`` being trained. May be abstract (built with
            ``nnx.eval_shape``); a restore then fills it with real arrays.
        optimizer: the ``nnx.Optimizer`` updating ``model``, or ``None`` to
            checkpoint the model alone (evaluation, export).
        step: completed optimizer steps, ``>= 0``. The checkpointer sets it on restore.

    Raises:
        TypeError: ``model`` or ``optimizer`` is not an NNX object (``nnx.Pytree``,
            the base of ``nnx.Module`` and ``nnx.Optimizer``), or ``step`` not an ``int``.
        ValueError: ``step < 0``.
    """

    def __init__(self, model: nnx.Module, optimizer: nnx.Optimizer | None = None, step: int = 0) -> None:
        if not isinstance(model, nnx.Pytree):
            raise TypeError(f"model must be an nnx.Module, got {type(model).__name__}")
        if optimizer is not None and not isinstance(optimizer, nnx.Pytree):
            raise TypeError(f"optimizer must be an nnx.Optimizer or None, got {type(optimizer).__name__}")
        if isinstance(step, bool) or not isinstance(step, int):
            raise TypeError(f"step must be an int, got {type(step).__name__}")
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        self.model = model
        self.optimizer = optimizer
        self.step = step

    @classmethod
    def from_object(cls, obj: Any) -> ModelState:
        """Wrap ``obj``: a :class:`ModelState` (returned as is), or any object with a
        ``model`` attribute and optionally an ``optimizer`` (and an int ``step``).

        The wrapper shares ``obj``'s modules, so restoring through it updates them.

        Raises:
            TypeError: ``obj`` has no ``model`` attribute, or its attributes are of
                the wrong types (see the class).
        """
        if isinstance(obj, ModelState):
            return obj
        if not hasattr(obj, "model"):
            raise TypeError(
                f"expected a ModelState or an object with `model` (and `optimizer`) attributes, "
                f"got {type(obj).__name__}"
            )
        step = getattr(obj, "step", 0)
        if isinstance(step, bool) or not isinstance(step, int):
            step = 0
        return cls(obj.model, getattr(obj, "optimizer", None), step)

    def modules(self) -> dict[str, nnx.Pytree]:
        """The checkpointed objects by name: ``{"model": ..., "optimizer": ...}``
        (no ``"optimizer"`` key when there is none)."""
        mods: dict[str, nnx.Pytree] = {"model": self.model}
        if self.optimizer is not None:
            mods["optimizer"] = self.optimizer
        return mods

    def nnx_state(self) -> nnx.State:
        """All variables of :meth:`modules` as one ``nnx.State`` (keys ``"model"`` and
        ``"optimizer"``); arrays keep their shapes, dtypes and shardings. Variables
        shared between the two (none, for a plain ``nnx.Optimizer``) appear once."""
        return nnx.state(self.modules())

    def update(self, state: nnx.State) -> None:
        """Write ``state`` (as :meth:`nnx_state` returns it) into the live modules."""
        nnx.update(self.modules(), state)

    def __repr__(self) -> str:
        opt = type(self.optimizer).__name__ if self.optimizer is not None else None
        return f"ModelState(model={type(self.model).__name__}, optimizer={opt}, step={self.step})"
