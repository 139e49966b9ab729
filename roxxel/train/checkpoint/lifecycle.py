"""The checkpointer's life in the process: Orbax's background tracebacks kept out of the
terminal, deadlines on calls into storage, and the exit hook that closes every open
:class:`~roxxel.train.checkpoint.Checkpointer` so a failed save ends the process non-zero."""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
import time
import weakref
from typing import Any

from roxxel.train.checkpoint.errors import CheckpointSaveError

ORBAX_DETAILS_LOGGER = "roxxel.checkpoint.orbax"
"""Where Orbax's tracebacks from background threads go (at DEBUG), instead of the terminal.
The Trainer writes this logger's records to the run's system log."""


class _OrbaxTracebacks(logging.Filter):
    """On the ``absl`` logger: divert Orbax's ERROR records that carry a traceback (each
    failed background thread logs one, ~30 per failed save) to :data:`ORBAX_DETAILS_LOGGER`;
    the error itself reaches the user once, as :class:`CheckpointSaveError`."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.levelno >= logging.ERROR and "orbax" in record.pathname:
            logging.getLogger(ORBAX_DETAILS_LOGGER).debug("%s", record.getMessage(), exc_info=record.exc_info)
            return False
        return True


_orbax_filter = _OrbaxTracebacks()


def keep_short(err: BaseException) -> None:
    """Send the full traceback of Orbax's ``err`` to :data:`ORBAX_DETAILS_LOGGER`, then drop the
    tracebacks from its chain, so the :class:`CheckpointSaveError` raised from it prints as a few
    lines (the cause's type and message stay, as ``__cause__``)."""
    logging.getLogger(ORBAX_DETAILS_LOGGER).debug("Orbax's error", exc_info=err)
    seen = set()
    link: BaseException | None = err
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        link.__traceback__ = None
        link = link.__cause__ or link.__context__


def divert_orbax_tracebacks() -> None:
    absl_logger = logging.getLogger("absl")
    if _orbax_filter not in absl_logger.filters:
        absl_logger.addFilter(_orbax_filter)


open_checkpointers: weakref.WeakSet[Any] = weakref.WeakSet()
_exit_hook_installed = False
_save_failed = False  # a save or close failed in this process: storage threads may still retry
STRAGGLER_GRACE_S = 2.0
"""Seconds the exit waits, after a failed save, for storage threads still retrying (gcsfs
retries a request 6 times over ~30 s and cannot be told fewer; TensorStore up to 32)."""


def mark_failed() -> None:
    global _save_failed
    _save_failed = True


class DeadlinePassed(TimeoutError):
    """A call still running at its deadline (its thread is left to end, or to the exit hook)."""


def call_with_deadline(release: Any, deadline: float, what: str) -> None:
    """Run ``release()`` in a daemon thread; raise its error, or :class:`DeadlinePassed` at
    ``deadline`` (an object store answering errors keeps its client retrying far past the
    timeout: gcsfs retries each request 6 times, ~30 s, and has no setting for fewer)."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            release()
        except BaseException as err:  # re-raised in the caller's thread
            errors.append(err)

    thread = threading.Thread(target=run, name=f"roxxel-checkpoint-close: {what}", daemon=True)
    thread.start()
    thread.join(max(0.0, deadline - time.monotonic()))
    if thread.is_alive():
        raise DeadlinePassed(f"{what} did not finish within the checkpointer's timeout")
    if errors:
        raise errors[0]


WRITER_GRACE_S = 30.0
"""Seconds ``close()`` waits, after a failed save, for the storage threads still writing it."""


def writers_alive(deadline: float) -> list[threading.Thread]:
    """Wait until no non-daemon thread but this one and the main thread runs (Orbax's writers
    are such threads), or ``deadline`` (``time.monotonic()``) passes; the ones still alive."""
    while True:
        alive = [
            t
            for t in threading.enumerate()
            if t.is_alive()
            and not t.daemon
            and t is not threading.current_thread()
            and t is not threading.main_thread()
        ]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.05)


def _stragglers_alive() -> list[threading.Thread]:
    """Non-daemon threads other than this one still alive after a short grace period. Polled:
    Orbax's threads re-raise their error from ``join()``."""
    return writers_alive(time.monotonic() + STRAGGLER_GRACE_S)


def _close_at_exit() -> None:
    """Runs when the main thread ends, before Python waits for non-daemon threads: close every
    open Checkpointer, so a save that failed unseen ends the process with status 1 and one
    line, instead of a silent exit 0 after Orbax's threads time out (300 s)."""
    failed: Exception | None = None
    for ckpt in list(open_checkpointers):
        try:
            ckpt.close()
        except CheckpointSaveError as err:
            failed = failed or err
        except Exception as err:  # pragma: no cover - defensive: exiting anyway
            failed = failed or err
    if failed is None:
        if not _save_failed:
            return
        alive = _stragglers_alive()
        if not alive:
            return
        # The process would wait for them for minutes; it ends now, non-zero, since a save failed.
        sys.stderr.write(
            f"roxxel: exiting with status 1: a checkpoint save failed and {len(alive)} storage threads still retry it\n"
        )
    else:
        sys.stderr.write(f"roxxel: {type(failed).__name__}: {failed}\n")
    sys.stderr.flush()
    # Flush loggers (they registered with atexit), then fail the process. Private access: os._exit skips
    # atexit, whose handlers no public call runs.
    atexit._run_exitfuncs()  # noqa: SLF001  (see above)
    logging.shutdown()
    os._exit(1)


_versions_checked = False


def warn_untested_versions() -> None:
    """Once per process: warn when the installed Orbax or JAX is outside the tested range."""
    global _versions_checked
    if _versions_checked:
        return
    _versions_checked = True
    from roxxel.train.checkpoint import _orbax

    for line in _orbax.untested_versions():
        logging.getLogger("roxxel.checkpoint").warning("%s", line)


def install_exit_hook() -> None:
    global _exit_hook_installed
    if _exit_hook_installed:
        return
    _exit_hook_installed = True
    register = getattr(threading, "_register_atexit", None)  # what concurrent.futures uses
    if register is not None:
        register(_close_at_exit)
    else:  # pragma: no cover - a Python without it
        atexit.register(_close_at_exit)
