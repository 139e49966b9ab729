"""Every use of Orbax's and JAX's private APIs, in one place, with the versions they were tested on.

Each function degrades to the public behaviour when the private name is gone (a future
layout); :func:`check_versions` says when the installed versions are outside the tested
ranges (``pyproject.toml`` pins the same ranges).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import logging
import re
import threading
import time
from collections.abc import Iterator

import orbax.checkpoint as ocp

log = logging.getLogger("roxxel.checkpoint")

TESTED: dict[str, tuple[str, str]] = {
    "orbax-checkpoint": ("0.12", "0.13"),
    "jax": ("0.6", "0.11"),
}
"""Distribution -> (lowest version, first version not tested), as ``>=low,<high`` in
``pyproject.toml`` (tests/architecture/test_pinned_versions.py keeps the two equal). The
private names used here were read in orbax-checkpoint 0.12.8 and jax 0.10.2."""


def _release(version: str) -> tuple[int, ...]:
    """The leading release numbers of a version string: ``"0.12.8rc1"`` -> ``(0, 12, 8)``."""
    match = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(part) for part in match.group(0).split(".")) if match else ()


def untested_versions() -> list[str]:
    """One line per installed distribution of :data:`TESTED` outside its tested range."""
    lines = []
    for name, (low, high) in TESTED.items():
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        if not _release(low) <= _release(installed) < _release(high):
            lines.append(
                f"{name} {installed} is installed, but Roxxel's checkpointer uses private parts of it "
                f"tested on >={low},<{high} (roxxel/train/checkpoint/_orbax.py): preemption and "
                f"failed-save handling may not work; install a version in that range"
            )
    return lines


def current_operation_id() -> str | None:
    """Orbax's id of the save just started (its background threads wait on signals keyed by it)."""
    try:
        from orbax.checkpoint._src.futures import synchronization  # private: pinned Orbax version
    except ImportError:  # pragma: no cover - layout of a future Orbax
        return None
    return synchronization.OperationIdGenerator.get_current_operation_id()


def writer_threads(operation_id: str | None = None) -> list[threading.Thread]:
    """Orbax's live background threads of a save (its commit futures' ``_SignalingThread``s:
    the threads that create the step's directories and write its files), of
    ``operation_id`` or of any save. Private Orbax API (pinned); ``[]`` without it."""
    try:
        from orbax.checkpoint._src.futures import future
    except ImportError:  # pragma: no cover - layout of a future Orbax
        return []
    kind = getattr(future, "_SignalingThread", None)
    if kind is None:  # pragma: no cover - layout of a future Orbax
        return []
    return [
        t
        for t in threading.enumerate()
        if isinstance(t, kind)
        and t.is_alive()
        and (operation_id is None or getattr(t, "_operation_id", None) == operation_id)
    ]


def release_waiters(operation_id: str | None) -> None:
    """After a failed save, cancel its background threads, then send the signals they wait for.

    When the thread that creates the step directory fails, Orbax never sends "directory
    created"; about 30 non-daemon threads then wait for it for Orbax's coordination timeout
    (300 s), and the interpreter cannot exit until they give up. Each still waiting is
    cancelled first (Orbax's ``_SignalingThread.cancel``: it returns without running its
    write), then the signals wake them, so they end at once and none writes after the
    failure. Before, the signals alone let them run their writes: one that found the step's
    directory re-created (a new checkpointer, a retry) wrote ``<step>.orbax-checkpoint-tmp/...``
    into it. A thread already writing (its event loop running: the directory exists) is left
    to finish, and ``close()`` waits for it before removing the step: cancelling its task did
    not stop the storage's write in flight, which then completed into the thread's closed
    event loop ("Event loop is closed" through the unraisable-exception hook, after about one
    failed save in four on a loaded machine). Private Orbax API (pinned).
    """
    if operation_id is None:
        return
    try:
        from orbax.checkpoint._src.futures import future, synchronization
    except ImportError:  # pragma: no cover - layout of a future Orbax
        return
    for thread in writer_threads(operation_id):
        if getattr(thread, "main_task", None) is not None:  # set by Orbax's run_sync while it writes
            continue
        try:
            thread.cancel()  # type: ignore[attr-defined]
        except Exception:  # its loop may have just closed: it is ending anyway
            log.debug("could not cancel Orbax's thread %s", thread.name, exc_info=True)
    signals = [s for s in synchronization.HandlerAwaitableSignal if s.name != "AWAITABLE_SIGNALS_CONTRACT"]
    try:
        future.set_signals(signals, operation_id=operation_id)
    except Exception:  # the coordination service may be gone too: nothing more to release
        log.debug("could not release Orbax's waiting threads", exc_info=True)


def join_save(manager: ocp.CheckpointManager, deadline: float) -> bool:
    """Wait until the manager's background save has ended (True) or ``deadline`` has passed
    (False). Joins Orbax's finalize thread without its ``join`` override, which raises the
    save's error once per calling thread: the caller's ``wait_until_finished`` must get it.
    Private Orbax API (pinned version); without it, polls ``is_saving_in_progress``."""
    ref = getattr(manager, "_finalize_thread", None)
    thread = ref.get() if ref is not None and hasattr(ref, "get") else None
    if isinstance(thread, threading.Thread):
        threading.Thread.join(thread, max(0.0, deadline - time.monotonic()))
        return not thread.is_alive()
    while manager.is_saving_in_progress():  # pragma: no cover - layout of a future Orbax
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def preemption_service_available() -> bool:
    try:
        from jax._src import distributed as jax_distributed  # no public accessor
    except ImportError:  # pragma: no cover - layout of a future jax
        return True
    state = jax_distributed.global_state
    return getattr(state, "client", None) is None or getattr(state, "preemption_sync_manager", True) is not None


def await_tmp_cleanup(manager: ocp.CheckpointManager) -> None:
    """Wait for Orbax's background removal of half-written steps (started by the manager).

    Only Orbax's ``save`` waits for it; without this a restore-only checkpointer could
    close while that thread still talks to storage.
    """
    wait = getattr(manager, "_maybe_await_cleanup_tmp_directory", None)
    if wait is not None:
        wait()


#: The longest a failed restore waits for its other reads before Orbax closes their loop (a
#: read stuck on a dead mount must not hold up the error; what is still running then may print
#: Orbax's noise as before).
FINISH_READS_S = 10.0

_restoring = threading.local()  # .on: this thread is inside reads_finish_before_failing()


@contextlib.contextmanager
def reads_finish_before_failing() -> Iterator[None]:
    """Inside it, a restore whose TensorStore read fails lets its other reads finish (up to
    :data:`FINISH_READS_S`) before Orbax closes their event loop.

    Orbax runs each restore on a new event loop (``asyncio_utils._run_sync_via_new_loop``)
    and closes it as soon as the restore returns or raises. When one read fails (a damaged or
    missing file), the others of that restore are still running: each then finishes into the
    closed loop (``call_soon_threadsafe``: "Event loop is closed", printed through Python's
    unraisable-exception hook, one per read) and leaves asyncio's "Future exception was never
    retrieved" behind, after Roxxel's own one-line error. Here the loop first runs what is left
    to its end, their errors retrieved (the first one is raised, as before), then closes.
    Only this thread's restores: Orbax's background saves and a successful restore are
    unchanged. Private Orbax API (pinned); without it, nothing changes.
    """
    _install_finishing_loop()
    previous = getattr(_restoring, "on", False)
    _restoring.on = True
    try:
        yield
    finally:
        _restoring.on = previous


def _install_finishing_loop() -> None:
    try:
        from orbax.checkpoint._src import asyncio_utils  # private: pinned Orbax version
    except ImportError:  # pragma: no cover - layout of a future Orbax
        return
    original = getattr(asyncio_utils, "_run_sync_via_new_loop", None)
    if not callable(original) or getattr(original, "_roxxel_finishes_reads", False):
        return

    def run_sync_via_new_loop(coro):  # Orbax's, plus the finishing of what a failed restore left
        loop = asyncio.new_event_loop()
        try:
            asyncio.set_event_loop(loop)
            try:
                return loop.run_until_complete(coro)
            except BaseException:
                left = [task for task in asyncio.all_tasks(loop) if not task.done()]
                if left and getattr(_restoring, "on", False):
                    done, _ = loop.run_until_complete(asyncio.wait(left, timeout=FINISH_READS_S))
                    for task in done:
                        if not task.cancelled():
                            task.exception()  # retrieved: the restore's first error is the one raised
                raise
        finally:
            asyncio.set_event_loop(None)
            loop.close()

    # Private access: our mark on our own replacement (installed once); Orbax's private loop runner is
    # this module's reason to be (pinned in pyproject.toml, tests/architecture/test_pinned_versions.py).
    run_sync_via_new_loop._roxxel_finishes_reads = True  # type: ignore[attr-defined]  # noqa: SLF001
    asyncio_utils._run_sync_via_new_loop = run_sync_via_new_loop  # noqa: SLF001  (see above)


def coordination_client() -> object | None:
    """JAX's client of the job's coordination service (its key-value store), or ``None`` in a
    job without ``jax.distributed``. Private JAX API (``jax._src.distributed.global_state``,
    as Orbax's own multi-process signals use it); ``None`` without it."""
    try:
        from jax._src import distributed as jax_distributed
    except ImportError:  # pragma: no cover - layout of a future jax
        return None
    return getattr(jax_distributed.global_state, "client", None)
