"""The asynchronous save in flight: which step, Orbax's operation id and the deadline it must
end by; waiting for it within that deadline (Orbax's own timeout bounds only its barriers);
and, after a failure, the half-written steps it leaves."""

from __future__ import annotations

import logging
import os
import shutil
import time

import jax
import orbax.checkpoint as ocp
from etils import epath

from roxxel.train.checkpoint import _orbax, lifecycle
from roxxel.train.checkpoint.errors import CheckpointSaveError

log = logging.getLogger("roxxel.checkpoint")


class PendingSave:
    """The save of one :class:`~roxxel.train.checkpoint.Checkpointer` whose completion has not
    been checked, and every step it started (to clean up after a failure).

    Args:
        manager: the checkpointer's Orbax manager.
        directory: its checkpoint directory (for messages and clean-up).
        timeout: seconds one save may take, from its start (for the message).
    """

    def __init__(self, manager: ocp.CheckpointManager, directory: epath.Path, timeout: float) -> None:
        self._manager = manager
        self._directory = directory
        self._timeout = timeout
        self.step: int | None = None  # a save whose completion has not been checked
        self._operation: str | None = None  # Orbax's operation id of that save
        self._deadline: float | None = None  # time.monotonic() that save must end by
        self.abandoned = False  # that save outlived its deadline: its threads may still run
        self.failed = False  # a save failed (raised once): close() still waits for its writers
        self.saved_steps: set[int] = set()  # steps this checkpointer saved

    def started(self, step: int, deadline: float) -> None:
        """Orbax's manager has just started saving ``step`` (its operation is the current one)."""
        self.saved_steps.add(step)
        self.step = step
        self._operation = _orbax.current_operation_id()
        self._deadline = deadline

    def wait(self) -> None:
        """Wait for the pending save until its deadline. Orbax's own timeout bounds only its
        barriers; a storage client retrying errors (gcsfs: 6 tries, ~30 s) outlasts it, so
        the wait itself is bounded: past the deadline the save is abandoned and every later
        wait fails at once (its threads still hold Orbax's manager; the exit hook ends the
        process non-zero).

        Raises:
            CheckpointSaveError: the save failed or outlived its deadline.
        """
        step = self.step
        try:
            if self._deadline is not None and not _orbax.join_save(self._manager, self._deadline):
                raise lifecycle.DeadlinePassed(f"the save of step {step}")
            self._manager.wait_until_finished()  # raises a failed save's error, once per thread
        except lifecycle.DeadlinePassed:
            self.abandoned = True
            self.failed = True
            lifecycle.mark_failed()
            _orbax.release_waiters(self._operation)
            raise CheckpointSaveError(
                f"the asynchronous save of step {step} to {self._directory} did not finish within "
                f"the checkpointer's timeout ({self._timeout:g} s): the storage keeps failing or is "
                "too slow; the step is left incomplete (restore takes an earlier one)",
                step=step,
            ) from None
        except Exception as err:
            self.step = None
            self._deadline = None
            self.failed = True
            lifecycle.mark_failed()
            _orbax.release_waiters(self._operation)
            lifecycle.keep_short(err)
            raise CheckpointSaveError(
                f"the asynchronous save of step {step} to {self._directory} failed: {type(err).__name__}: {err}",
                step=step,
            ) from err
        if step is not None:
            log.debug("save of step %d is complete", step)
        self.step = None
        self._deadline = None

    def remove_failed_steps(self, deadline: float) -> None:
        """After a failed save: wait (bounded) for the storage threads still writing it, then
        remove the half-written step directories this checkpointer started (process 0, local
        disks; Orbax removes them on object storage when the next manager opens). Otherwise
        they went on writing ``<step>.orbax-checkpoint-tmp`` after close, and a new
        checkpointer's first save of that step failed with "Directory not empty"."""
        alive = lifecycle.writers_alive(min(deadline, time.monotonic() + lifecycle.WRITER_GRACE_S))
        if alive or jax.process_index() != 0 or os.fspath(self._directory).startswith("gs://"):
            if alive:
                log.warning(
                    "%d storage threads still write to %s after the failed save; its half-written steps "
                    "are left for the next checkpointer to remove",
                    len(alive),
                    self._directory,
                )
            return
        complete = set(self._manager.all_steps())
        for step in sorted(self.saved_steps - complete):
            for leftover in self._directory.glob(f"{step}.orbax-checkpoint-tmp*"):
                shutil.rmtree(os.fspath(leftover), ignore_errors=True)
                log.info("removed %s, left by the failed save of step %d", leftover, step)
