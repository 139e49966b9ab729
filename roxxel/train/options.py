"""The Trainer's options, grouped: when it logs, evaluates and saves; how it reads the data;
how it restores; how its loop runs.

Each group is a frozen dataclass that checks its values when built, so a bad value fails at
the line that wrote it. The grouping follows Orbax's ``CheckpointManagerOptions`` (the
checkpoint cadence as one object, shared by the :class:`~roxxel.train.Checkpointer`),
Levanter's ``TrainerConfig`` and MaxText's config groups (one object per concern, not one
flat list of keywords).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any

from roxxel.data.stream import OUTPUTS
from roxxel.exit_codes import ConfigTypeError, ConfigValueError
from roxxel.train.cadence import Cadence, keywords_checked, positive_int
from roxxel.train.watchdog import DEFAULT_BOUNDS, WatchdogBounds

__all__ = ["Cadence", "DataOptions", "LoopOptions", "RestoreOptions"]


def _a_bool(owner: str, name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ConfigTypeError(f"{owner}.{name} must be True or False, got {value!r}")


@keywords_checked
@dataclass(frozen=True)
class DataOptions:
    """How the Trainer streams the curriculum (the arguments of ``Curriculum.stream``).

    Args:
        seed: the shuffle seed (an int; a NumPy integer is stored as one). Part of the run's identity: a resume under another
            seed is refused. Default 42.
        outputs: ``"tokens"`` (an int ``(batch_size, seq_len)`` array per step) or
            ``"documents"`` (a dict of tokens, segment ids, positions and a loss mask).
        prefetch_size: batches prepared ahead on a background thread (>= 0; 0: none). Default 2.
        data_sharding: the ``jax.sharding.Sharding`` of each batch (default ``None``: rows
            over the mesh's first axis).

    Raises:
        TypeError: a seed that is not an int; an unknown keyword (the message names the closest field).
        ValueError: an unknown ``outputs`` or a negative ``prefetch_size``.
    """

    seed: int = 42
    outputs: str = "tokens"
    prefetch_size: int = 2
    data_sharding: Any = None

    def __post_init__(self) -> None:
        if isinstance(self.seed, bool) or not isinstance(self.seed, numbers.Integral):
            raise ConfigTypeError(f"DataOptions.seed must be an int, got {self.seed!r}")
        object.__setattr__(self, "seed", int(self.seed))  # a NumPy integer, as the run identity takes it
        if self.outputs not in OUTPUTS:
            raise ConfigValueError(f"DataOptions.outputs must be one of {OUTPUTS}, got {self.outputs!r}")
        if isinstance(self.prefetch_size, bool) or not isinstance(self.prefetch_size, int) or self.prefetch_size < 0:
            raise ConfigValueError(
                f"DataOptions.prefetch_size must be an int >= 0 (0: no prefetching), got {self.prefetch_size!r}"
            )


@keywords_checked
@dataclass(frozen=True)
class RestoreOptions:
    """How the Trainer resumes from the latest checkpoint.

    Args:
        allow_changed_run: restore a checkpoint made under another curriculum or dataset
            even where the change alters batches already taken (lengthening the current
            phase and changing later phases are always allowed; see docs/trainer.md).
        partial: resume from a checkpoint of a changed model definition
            (``Checkpointer.restore(partial=True)``): arrays in both are restored, new ones
            keep their initial values, removed ones are reported; the optimizer state is
            restored only when it matches exactly, else re-initialised. Logged. Default: the
            model must be unchanged.

    Raises:
        TypeError: a value that is not a bool; an unknown keyword (the message names the closest field).
    """

    allow_changed_run: bool = False
    partial: bool = False

    def __post_init__(self) -> None:
        _a_bool("RestoreOptions", "allow_changed_run", self.allow_changed_run)
        _a_bool("RestoreOptions", "partial", self.partial)


@keywords_checked
@dataclass(frozen=True)
class LoopOptions:
    """How the Trainer's step loop runs.

    Args:
        grad_accum_steps: micro-batches per optimizer step (>= 1; each phase's
            ``global_batch_size`` must divide by it and by the number of data shards).
        async_queue_depth: steps dispatched ahead of the host before it waits for a result (>= 1).
        handle_sigint: treat Ctrl-C like SIGTERM (save, then exit with the preemption exit
            code; a second Ctrl-C interrupts at once).
        watchdog: the progress watchdog's bounds (:class:`~roxxel.train.watchdog.WatchdogBounds`):
            when a step, an evaluation or a save takes longer, every thread's stack is written
            to stderr and the process exits with ``STALLED_EXIT_CODE`` (43, a counted gang
            restart); ``None`` turns it off. It runs in a job only (more than one process, or
            under ``roxxel-worker``): an interactive session paused in a debugger is not ended.
            Left at its default, ``ROXXEL_WATCHDOG`` (the job spec's ``watchdog`` section)
            may change the bounds or turn it off (:func:`~roxxel.train.watchdog.bounds_from_env`).

    Raises:
        ValueError: a count that is not a positive int.
        TypeError: ``handle_sigint`` not a bool, ``watchdog`` neither WatchdogBounds nor None; an
            unknown keyword (the message names the closest field).
    """

    grad_accum_steps: int = 1
    async_queue_depth: int = 2
    handle_sigint: bool = True
    watchdog: WatchdogBounds | None = DEFAULT_BOUNDS

    def __post_init__(self) -> None:
        positive_int("LoopOptions", "grad_accum_steps", self.grad_accum_steps)
        positive_int("LoopOptions", "async_queue_depth", self.async_queue_depth)
        _a_bool("LoopOptions", "handle_sigint", self.handle_sigint)
        if self.watchdog is not None and not isinstance(self.watchdog, WatchdogBounds):
            raise ConfigTypeError(
                f"LoopOptions.watchdog must be a WatchdogBounds or None (off), got {type(self.watchdog).__name__}"
            )
