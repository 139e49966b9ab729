"""How the supervisor runs one pod's worker: the seam between the supervisor and what runs it.

The supervisor decides *when* a pod's worker starts, is signalled and is stopped (attempts,
restarts, grace periods: :mod:`roxxel_launch.backends.local.supervisor`); a
:class:`WorkerRuntime` does it for one worker, and a :class:`RunningWorker` is that worker
while it runs. The one runtime is :class:`ProcessRuntime` (and the default): each worker is
a process in its own process group (:mod:`roxxel_launch.backends.local.processes`).
"""

from __future__ import annotations

import abc
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import IO

from roxxel_launch.backends.local.processes import (
    group_alive,
    is_local_worker,
    kill_group,
    with_parent_death_signal,
)

__all__ = ["ProcessRuntime", "RunningWorker", "WorkerRuntime", "default_runtime"]


class RunningWorker(abc.ABC):
    """One pod's worker, started by a :class:`WorkerRuntime`."""

    pid: int
    """The id recorded in ``status.json`` (for a process: its pid, also its process group)."""

    @abc.abstractmethod
    def poll(self) -> int | None:
        """The worker's return code once it has ended (as ``Popen.returncode``: ``-N`` for
        signal N), else None."""

    @abc.abstractmethod
    def wait(self) -> int:
        """Waits until the worker has ended; its return code."""

    @abc.abstractmethod
    def terminate(self) -> None:
        """Asks the worker to stop (SIGTERM to its entrypoint, as the kubelet's stop); no
        error when it has ended already."""

    @abc.abstractmethod
    def kill(self) -> bool:
        """Ends whatever the worker still runs at once (SIGKILL, as at the end of a grace
        period or when its container ends); False when nothing was left."""


class WorkerRuntime(abc.ABC):
    """Starts pods' workers, and removes what a killed supervisor left running."""

    @abc.abstractmethod
    def start(self, argv: Sequence[str], *, env: Mapping[str, str], cwd: str, log: IO[bytes],
              wrap: Callable[[list[str]], list[str]] | None = None) -> RunningWorker:
        """Starts a worker running ``argv`` (an absolute path first) with exactly ``env``, in
        ``cwd``, its output (stdout and stderr) appended to ``log``, its stdin empty.

        ``wrap``: puts the runtime's command line into the pod's network namespace
        (``--netns``: :meth:`roxxel_launch.backends.local.netns.PodNetwork.wrap`; it execs in
        place, so the worker's pid stays the one returned).
        """

    @abc.abstractmethod
    def remove_leftover(self, pid: int) -> bool:
        """Ends the worker recorded as ``pid`` if it still runs and is still a roxxel worker
        (a recorded id may have been reused); True when there was one."""


class _WorkerProcess(RunningWorker):
    """A worker process; leads its own process group (pgid == pid)."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.pid = proc.pid

    def poll(self) -> int | None:
        return self.proc.poll()

    def wait(self) -> int:
        return self.proc.wait()

    def terminate(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGTERM)

    def kill(self) -> bool:
        return kill_group(self.pid)


class ProcessRuntime(WorkerRuntime):
    """Each worker is a process in its own process group, so that the pod (its entrypoint and
    whatever the command started) is signalled as one, and a terminal's Ctrl-C reaches the
    supervisor alone (see :mod:`roxxel_launch.backends.local.supervisor`). On Linux each gets
    SIGTERM when the supervisor dies (:func:`~roxxel_launch.backends.local.processes.with_parent_death_signal`).

    Args:
        python: the interpreter that runs the parent-death shim (the run's Python).
    """

    def __init__(self, python: str):
        self.python = python

    def start(self, argv: Sequence[str], *, env: Mapping[str, str], cwd: str, log: IO[bytes],
              wrap: Callable[[list[str]], list[str]] | None = None) -> RunningWorker:
        command = with_parent_death_signal(self.python, list(argv))
        if wrap is not None:
            command = wrap(command)
        return _WorkerProcess(subprocess.Popen(command, cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL,
                                               stdout=log, stderr=subprocess.STDOUT, process_group=0))

    def remove_leftover(self, pid: int) -> bool:
        if is_local_worker(pid) and group_alive(pid):
            kill_group(pid)
            return True
        return False


def default_runtime(python: str | None = None) -> WorkerRuntime:
    """The runtime of local runs: :class:`ProcessRuntime`, its shim run by ``python``
    (default: this interpreter)."""
    return ProcessRuntime(python or sys.executable)
