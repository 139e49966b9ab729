"""The callback protocol: the hooks the Trainer's loop calls, and the window they measure.

The Trainer's core is the step loop; everything else that watches it (throughput, the
learning rate, a profiler trace, a user's experiment tracker) is a :class:`Callback`, as
Keras's callbacks, Levanter's hooks and CLU's periodic actions are. A callback overrides
only the hooks it needs; the others cost nothing (:func:`bound_hooks` skips them). The
hooks are the methods of :class:`Callback`; :data:`HOOKS` lists them from the class itself.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence

from roxxel.train.sections import Section

__all__ = ["HOOKS", "Callback", "Window", "bound_hooks"]


@dataclasses.dataclass(frozen=True)
class Window:
    """The timed part of a logging window, read from the loop's sections
    (:class:`~roxxel.train.sections.TimedSteps`).

    Attributes:
        steps: steps timed in the window; a phase's first step (it compiles) is not timed, so
            this may be 0.
        tokens: global tokens those steps trained (``batch_size * seq_len`` per step, all
            processes together).
        seconds: wall time of those steps: their batch waits and ``step`` sections, up to the
            last one's result (saves, evaluations and callbacks between them are not in it).
        logged: the window ends at this step and is logged (a multiple of ``log_every``, a
            phase's end), on every process alike; False at a checkpoint or preemption step
            inside a window, whose metrics go to the checkpoint's run record only while the
            window goes on.
    """

    steps: int
    tokens: int
    seconds: float
    logged: bool = True


class Callback:
    """Hooks into the training loop, e.g. to send metrics to an experiment tracker.

    Subclass it and override what you need; every process calls them (guard with
    ``jax.process_index() == 0`` to act once per job). They run on the training thread,
    so keep them quick: ``on_batch_begin`` and ``on_batch_end`` run at every step.
    Steps count completed updates: the first step takes the state from step 0 to step 1.
    """

    def on_restore(self, step: int, run: Mapping[str, Any] | None) -> None:
        """After the restore, before the first step: training starts at ``step``, and ``run``
        is the restored step's run record (``Checkpointer.restored_run``: its ``metrics``,
        ``saved_at``, ...), or None when no checkpoint was restored."""

    def on_section(self, event: Section) -> None:
        """After each timed section of the loop (:mod:`roxxel.train.sections`): a restore, a
        compile, a batch wait, a step, a save, a preemption save or an evaluation, with its
        name, step, start (Unix time) and duration (seconds). Runs at every step."""

    def on_batch_begin(self, step: int) -> None:
        """Before the step that takes the state from ``step`` to ``step + 1`` is dispatched."""

    def on_batch_end(self, step: int, loss: Any) -> None:
        """After step ``step`` was dispatched; ``loss`` is its scalar ``jax.Array``, possibly
        still being computed (``loss.block_until_ready()`` waits for the step's device work)."""

    def window_metrics(self, step: int, window: Window) -> Mapping[str, float]:
        """Metrics to add to the window ending at ``step``: called wherever the Trainer
        computes a window's metrics (each logging window, and each checkpoint step, whose
        checkpoint stores them). A name the loss or an earlier callback already gives is an
        error."""
        return {}

    def on_step(self, step: int, metrics: Mapping[str, float]) -> None:
        """After each logging window, with the window's metrics (see docs/logging.md)."""

    def on_eval(self, step: int, results: Mapping[str, float]) -> None:
        """After each evaluation, with what ``eval_fn`` returned (as floats)."""

    def on_checkpoint(self, step: int, directory: str) -> None:
        """After a checkpoint save of ``step`` started (it completes in the background)."""

    def on_run_end(self) -> None:
        """When ``Trainer.run()`` ends, by finishing, a preemption or an error: release what
        the other hooks hold (a profiler trace, a file)."""


HOOKS = tuple(name for name in vars(Callback) if name.startswith(("on_", "window_")))
"""The hook names, in the class's order: what the Trainer looks up once per run."""


def bound_hooks(callbacks: Sequence[Any], name: str) -> list[Callable[..., Any]]:
    """The ``name`` hook of each callback that has its own, in order.

    Hooks left as :class:`Callback`'s no-ops are skipped (the per-step hooks then cost no
    call), and so are missing ones: a callback written before a hook existed, duck-typed
    without subclassing :class:`Callback`, keeps working.
    """
    default = getattr(Callback, name)
    hooks = []
    for cb in callbacks:
        hook = getattr(cb, name, None)
        if hook is not None and getattr(hook, "__func__", None) is not default:
            hooks.append(hook)
    return hooks
