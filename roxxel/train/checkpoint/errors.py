"""The checkpointer's errors, and :class:`Preempted`, the exit after a preemption save."""

from __future__ import annotations

from typing import Any

from roxxel.exit_codes import PREEMPTED_EXIT_CODE, ConfigurationError


class CheckpointSaveError(RuntimeError):
    """An asynchronous save failed; no complete checkpoint exists for ``step``.

    Attributes:
        step: the step whose save failed, or ``None`` when unknown.
    """

    def __init__(self, message: str, step: int | None = None) -> None:
        super().__init__(message)
        self.step = step


class CheckpointRestoreError(RuntimeError):
    """A step could not be read (damaged files, unreadable metadata, a state that does not fit).

    Attributes:
        step: the step that failed.
        earlier_steps: the complete steps before it, any of which ``restore(step=N)`` can load.
    """

    def __init__(self, message: str, *, step: int, earlier_steps: list[int]) -> None:
        super().__init__(message)
        self.step = step
        self.earlier_steps = earlier_steps


class CheckpointCorruptError(CheckpointRestoreError):
    """A restored array does not match the checksum recorded when its step was saved.

    Attributes:
        array: the array's path in the state, e.g. ``"model/l1/kernel"``.
    """

    def __init__(self, message: str, *, step: int, earlier_steps: list[int], array: str) -> None:
        super().__init__(message, step=step, earlier_steps=earlier_steps)
        self.array = array


class ModelChangeError(CheckpointRestoreError, ConfigurationError):
    """The live model does not fit the checkpoint: an array differs in shape or dtype, or
    (without ``partial=True``) arrays were added or removed.

    Attributes:
        array: the first offending array's path, e.g. ``"model/l1/kernel"``.
        saved: its ``(shape, dtype)`` in the checkpoint, ``None`` when the checkpoint lacks it.
        current: its ``(shape, dtype)`` in the live model, ``None`` when the model lacks it.
    """

    def __init__(
        self,
        message: str,
        *,
        step: int,
        earlier_steps: list[int],
        array: str,
        saved: tuple[tuple[int, ...], str] | None,
        current: tuple[tuple[int, ...], str] | None,
    ) -> None:
        super().__init__(message, step=step, earlier_steps=earlier_steps)
        self.array = array
        self.saved = saved
        self.current = current


class RunMismatchError(ConfigurationError, ValueError):
    """The checkpoint was saved by a run with a different fingerprint.

    Attributes:
        step: the checkpoint's step.
        changes: one line per difference, e.g. ``"phases[1].batch_size: 16 -> 32"``.
        saved: the fingerprint stored in the checkpoint.
        current: the fingerprint of this run.
    """

    def __init__(self, message: str, *, step: int, changes: list[str], saved: Any, current: Any) -> None:
        super().__init__(message)
        self.step = step
        self.changes = changes
        self.saved = saved
        self.current = current


class Preempted(SystemExit):
    """Raised after a preemption checkpoint of ``step`` is complete on every process.

    A ``SystemExit`` whose ``code`` is :data:`~roxxel.exit_codes.PREEMPTED_EXIT_CODE`:
    generic ``except Exception`` handlers let it through, ``finally`` blocks and context
    managers run, and uncaught it makes the interpreter exit with that code. An
    entrypoint may catch it to log and ``sys.exit(err.code)`` itself.

    Attributes:
        step: the step that was saved (training resumes from it).
        code: ``PREEMPTED_EXIT_CODE`` (42).
    """

    def __init__(self, step: int) -> None:
        super().__init__(PREEMPTED_EXIT_CODE)
        self.step = step

    def __str__(self) -> str:
        return f"preempted: checkpoint of step {self.step} is complete; exit code {PREEMPTED_EXIT_CODE}"


def one_line(err: BaseException, width: int = 300) -> str:
    """``err``'s message on one line, cut to ``width`` characters."""
    text = " ".join(str(err).split())
    return text if len(text) <= width else text[: width - 3] + "..."
