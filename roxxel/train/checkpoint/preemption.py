"""The step at which every process saves after a preemption notice (SIGTERM).

Under ``jax.distributed``, JAX's preemption sync manager agrees on the step: when a notice
reaches any process, the coordination service collects the step id each process last
passed to ``reached_preemption_sync_point`` and fixes the agreed id at their maximum + 1
(``jax.experimental.multihost_utils.reached_preemption_sync_point``; the counting is in
XLA's ``preemption_sync_manager.cc``). A process that has not called it yet counts as 0.

That is why the ids handed to JAX here are *this attempt's* check count (1, 2, 3, ...),
not training steps: a run restored at step 100 and signalled before its first check
(during the restore, the stream set-up or the first compilation) would otherwise agree on
id 1, which its steps 100, 101, ... never reach, and the notice would be lost (training on
to the end, exit 0, then SIGKILL at the end of the grace period on a cluster). With check
counts the agreed id is at most one past the last check, so the first check after the
notice is the one, on every process.

The ids come from one counter per process (JAX's manager is per process and only moves
forward), and a step is mapped to an id the first time any caller checks it: the
checkpointer before its update, and Orbax's own calls from its save (every process makes
the same calls at the same steps, so the ids agree). An older step (Orbax's background
finalize thread asks about the step it just wrote) is answered from the agreed step and
never sent to JAX, whose counter a smaller id would move back.

In a single process without ``jax.distributed``, a SIGTERM handler (installed at the first
check, restored by :meth:`PreemptionSync.close`) records the signal, and the first step
checked after it is the one.
"""

from __future__ import annotations

import datetime
import itertools
import json
import logging
import os
import signal
import threading
import time
from typing import Any

import jax
from etils import epath
from jax.experimental import multihost_utils

from roxxel.contract import PREEMPTION_FILE
from roxxel.train.checkpoint import _orbax

log = logging.getLogger("roxxel.checkpoint")

_step_ids = itertools.count(1)  # this process's check count, shared by every PreemptionSync
_step_ids_lock = threading.Lock()


def _next_step_id() -> int:
    with _step_ids_lock:
        return next(_step_ids)


def distributed() -> bool:
    """Whether this process is part of a ``jax.distributed`` job (JAX's protocol decides)."""
    return jax.process_count() > 1 or jax.distributed.is_initialized()


class PreemptionSync:
    """One checkpointer's view of the agreed preemption step (see the module docstring).

    Attributes:
        agreed_step: the training step all processes save at, once known; else ``None``.
        agreed_at: ``time.monotonic()`` when this process learned the agreed step (the notice
            came at most one step before); ``None`` before.
        stop_reason: what the log says stopped the run (a SIGTERM, or a Ctrl-C through
            :meth:`request`).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last_step: int | None = None  # the newest step checked
        self._step_id = 0  # the id JAX was given for it
        self.agreed_step: int | None = None
        self.agreed_at: float | None = None
        self.stop_reason = "SIGTERM received"
        self._sigterm = threading.Event()
        self._previous_handler: Any = None
        self._handler_installed = False
        self._warned = False

    def check(self, step: int) -> bool:
        """Whether ``step`` is the agreed step; the checkpointer calls it once per step.

        Single process: installs the SIGTERM handler on the first call (main thread only).
        """
        if distributed():
            if not _orbax.preemption_service_available():
                self._warn_once(
                    "JAX's preemption service is disabled (jax_enable_preemption_service): SIGTERM is not detected"
                )
            return self._agreed_by_jax(step)
        self._install_handler()
        if self.agreed_step is not None:
            return step == self.agreed_step
        if self._sigterm.is_set():
            self.agreed_step, self.agreed_at = step, time.monotonic()
            log.warning("%s: saving step %d and stopping", self.stop_reason, step)
            return True
        return False

    def agreed(self, step: int) -> bool:
        """Whether ``step`` is the agreed step, without side effects in a single process:
        what Orbax's ``CheckpointManager.reached_preemption`` asks from its save and its
        finalize thread."""
        if distributed():
            return self._agreed_by_jax(step)
        return step == self.agreed_step

    def _agreed_by_jax(self, step: int) -> bool:
        with self._lock:
            if self._last_step is not None and step < self._last_step:
                return step == self.agreed_step
            if step != self._last_step:
                self._last_step = step
                self._step_id = _next_step_id()
            try:
                reached = bool(multihost_utils.reached_preemption_sync_point(self._step_id))
            except RuntimeError:  # the preemption service is disabled (jax_enable_preemption_service)
                return False
            if reached and self.agreed_step is None:
                self.agreed_step, self.agreed_at = step, time.monotonic()
                log.warning("preemption notice: every process saves step %d and stops", step)
            return reached

    def request(self) -> None:
        """Act as if this process had received SIGTERM (safe in a signal handler): in a single
        process it records the request; under ``jax.distributed`` it sends SIGTERM to this
        process, which JAX's preemption notifier turns into a step all processes agree on."""
        if distributed():
            os.kill(os.getpid(), signal.SIGTERM)
        else:
            self.stop_reason = "stop requested (Ctrl-C)"
            self._sigterm.set()

    def close(self) -> None:
        """Give SIGTERM back the handler it had before the first check."""
        if not self._handler_installed:
            return
        if (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGTERM) == self._on_sigterm
        ):
            signal.signal(signal.SIGTERM, self._previous_handler)
        self._handler_installed = False

    def _install_handler(self) -> None:
        if self._handler_installed:
            return
        if threading.current_thread() is not threading.main_thread():
            self._warn_once("reached_preemption() called outside the main thread: no SIGTERM handler installed")
            return
        self._previous_handler = signal.signal(signal.SIGTERM, self._on_sigterm)
        self._handler_installed = True

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        self.stop_reason = "SIGTERM received"
        self._sigterm.set()

    def _warn_once(self, message: str) -> None:
        if not self._warned:
            self._warned = True
            log.warning("%s", message)


def record_preemption(directory: epath.Path, step: int, took: float, state_bytes: int) -> None:
    """Write :data:`~roxxel.contract.PREEMPTION_FILE` into ``directory`` (on a local disk under
    a temporary name, then renamed): the step, the seconds its save took after the agreed step
    and the state's bytes, what the next ``validate`` compares the grace period with. Never
    fails the exit (a failure is logged)."""
    record = {
        "step": step,
        "save_s": round(took, 3),
        "process_count": jax.process_count(),
        "state_bytes": state_bytes,
        "at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    text, path = json.dumps(record) + "\n", directory / PREEMPTION_FILE
    try:
        if os.fspath(directory).startswith("gs://"):
            path.write_text(text)  # an object appears whole or not at all; a rename is a slow copy there
        else:
            tmp = directory / f"{PREEMPTION_FILE}.tmp-{os.getpid()}"
            tmp.write_text(text)
            tmp.rename(path)
    except Exception as err:  # the checkpoint is complete; this is only a measurement
        log.warning("could not record the preemption save's time in %s: %s", directory, err)
