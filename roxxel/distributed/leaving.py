"""Leaving the JAX cluster together: every process finishes its device work and meets the others at a
barrier before ``jax.distributed.shutdown``, and a process that raises ends at once instead of
waiting for its peers at JAX's shutdown barrier.
"""

from __future__ import annotations

import logging
import os

logger = logging.getLogger("roxxel.distributed")

_SHUTDOWN_BARRIER_MS = 60_000
_DRAIN_SECONDS = 60.0


def _end_at_once_on_uncaught_errors(process_id: int) -> None:
    """After an uncaught exception, report it and end the process at once.

    Left alone, a process of a multi-process job that raises waits at JAX's shutdown barrier
    (``shutdown_timeout_seconds``, 300 s by default) for peers that wait in turn for it in
    the step's collective: the whole gang hung for 5 minutes, then died by SIGABRT (seen in
    a container run whose process 0 could not create its log directory). Python's exit
    functions still run (loggers flush), except JAX's own, which would wait at that barrier;
    JAX's C++ shutdown does not run either. The exit status stays
    Python's for an uncaught exception (1); a configuration error has been recorded by the
    hook this one wraps (:func:`roxxel.exit_codes.report_configuration_errors`).
    """
    import atexit
    import sys

    previous = sys.excepthook

    def hook(kind, value, tb):
        previous(kind, value, tb)
        from roxxel.log_format import write_line

        write_line(
            sys.stderr,
            logging.ERROR,
            f"roxxel: process {process_id} ends now (exit 1) after an uncaught {kind.__name__}, "
            "without waiting for the other processes at JAX's shutdown barrier",
        )
        try:
            _skip_jax_shutdown_at_exit()
            atexit._run_exitfuncs()  # noqa: SLF001  os._exit below skips atexit; no public call runs its handlers
            logging.shutdown()
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
            os._exit(1)

    sys.excepthook = hook


def _skip_jax_shutdown_at_exit() -> None:
    """Unregisters JAX's exit function (``jax._src.api.clean_up``, private: no public way),
    which shuts ``jax.distributed`` down and so waits at its shutdown barrier."""
    import atexit

    from jax._src import api as jax_api

    clean_up = getattr(jax_api, "clean_up", None)
    if clean_up is not None:
        atexit.unregister(clean_up)


def _finish_local_work(timeout: float = _DRAIN_SECONDS) -> None:
    """Wait (at most ``timeout`` seconds) until every live ``jax.Array`` of this process is computed.

    JAX dispatches asynchronously, and a local device runs its work independently of the
    others: a collective may still be running (or waiting for its peers to join) on one
    device when the program leaves. A process that exits then drops its part, and its peers
    wait for it: seen as a process of a 2-process CPU job hung forever in its exit (the CPU
    client's destructor joining a device thread that waited in Gloo's connect for the
    departed peer). Waiting for every live array, on every process before the shutdown
    barrier, makes each one finish its collectives while its peers are still there. A
    result the program has already dropped without waiting for it cannot be waited for:
    block on results (``jax.block_until_ready``) before leaving.
    """
    import threading

    import jax

    def drain() -> None:
        jax.block_until_ready(jax.live_arrays())

    worker = threading.Thread(target=drain, name="roxxel-drain", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        logger.warning("this process's arrays are still being computed after %g s; leaving without them", timeout)


def _jax_shutdown() -> None:
    """Finish this process's device work, meet every process at a barrier, then shut down.

    A process that shuts down (and exits) while the coordinator's process is still busy
    can leave the coordinator waiting in its own shutdown for a peer that is gone: seen as
    a rank-0 hang after all work was done. Meeting first makes them leave together; a
    peer that never comes only costs the barrier's timeout. Before meeting, each process
    waits for its arrays still being computed (:func:`_finish_local_work`).
    """
    import jax
    from jax._src import distributed as jax_distributed

    client = jax_distributed.global_state.client
    if client is not None and jax.process_count() > 1:
        _finish_local_work()
        try:
            client.wait_at_barrier("roxxel_shutdown", _SHUTDOWN_BARRIER_MS)
        except Exception as e:  # a missing peer: shut down anyway, as JAX would
            logger.warning("not every process reached shutdown within %d s: %s", _SHUTDOWN_BARRIER_MS // 1000, e)
    jax.distributed.shutdown()
