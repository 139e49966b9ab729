"""How the supervisor runs one pod's worker: the seam between the supervisor and what runs it.

The supervisor decides *when* a pod's worker starts, is signalled and is stopped (attempts,
restarts, grace periods: :mod:`roxxel_launch.backends.local.supervisor`); a
:class:`WorkerRuntime` does it for one worker, and a :class:`RunningWorker` is that worker
while it runs. A runtime also turns the manifest's pods into each attempt's commands and
environments (:meth:`WorkerRuntime.commands`). :class:`ProcessRuntime` (the default): each
worker is a process in its own process group (:mod:`roxxel_launch.backends.local.processes`);
:class:`~roxxel_launch.backends.local.containers.ContainerRuntime` (``--runtime podman``):
each is a container of the manifest's image.
:func:`roxxel_launch.backends.local.runtimes.runtime_for` picks one by name.
"""

from __future__ import annotations

import abc
import contextlib
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any

from roxxel_launch.backends import rendered_pods
from roxxel_launch.backends.local.pods import (
    LocalSettings,
    free_port,
    host_aliases,
    secret_from_environment,
    worker_process,
)
from roxxel_launch.backends.local.processes import (
    group_alive,
    is_local_worker,
    kill_group,
    with_parent_death_signal,
)
from roxxel_launch.backends.process_plan import plans

__all__ = ["ENGINE_FAILURE", "ProcessRuntime", "RunningWorker", "WorkerCommand", "WorkerRuntime", "default_runtime"]

logger = logging.getLogger("roxxel_launch.backends.local")

ENGINE_FAILURE = "EngineError"
"""The :meth:`RunningWorker.termination` reason of a worker whose container the engine could
not start (exit 125-127 before the program ran): the job fails, not restarted, as a
configuration error."""

WorkerCommand = tuple[list[str], dict[str, str]]
"""One pod's worker for an attempt: its command line and its whole environment."""


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

    def termination(self) -> tuple[str, str] | None:
        """Once the worker has ended (and before :meth:`kill`): why, where the runtime knows
        more than the exit code, as a container status says it: ``(reason, message)``, e.g.
        ``("OOMKilled", "...")``, or :data:`ENGINE_FAILURE` (the engine could not start
        it); None where the exit code says it all."""
        return None


class WorkerRuntime(abc.ABC):
    """Starts pods' workers, and removes what a killed supervisor left running."""

    name: str
    """The runtime's name in :data:`RUNTIMES`."""

    @abc.abstractmethod
    def commands(
        self,
        pods: Sequence[rendered_pods.RenderedPod],
        settings: LocalSettings,
        *,
        restart_attempt: int | None,
        network: Any = None,
    ) -> tuple[str, list[WorkerCommand]]:
        """The coordinator address the workers of one attempt will use, and each pod's
        command and environment, in process order.

        Args:
            pods: the manifest's pods.
            settings: what this machine puts in place of the cluster.
            restart_attempt: the JobSet's restarts so far (None for a bare Job's pods).
            network: a :class:`~roxxel_launch.backends.local.netns.PodNetwork` with
                ``--netns``, else None.

        Raises:
            BackendError: a pod's env or command has no local value, or its environment
                does not identify a process.
        """

    @abc.abstractmethod
    def start(
        self,
        index: int,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str,
        log: IO[bytes],
        wrap: Callable[[list[str]], list[str]] | None = None,
    ) -> RunningWorker:
        """Starts pod ``index``'s worker running ``argv`` (as :meth:`commands` gave it) with
        exactly ``env``, in ``cwd``, its output (stdout and stderr) appended to ``log``, its
        stdin empty.

        ``wrap``: puts the runtime's command line into the pod's network namespace
        (``--netns``: :meth:`roxxel_launch.backends.local.netns.PodNetwork.wrap`; it execs in
        place, so the worker's pid stays the one returned).
        """

    def attempt_over(self) -> None:
        """Every worker of the attempt has ended: release what the attempt held."""

    @abc.abstractmethod
    def remove_leftover(self, pid: int) -> bool:
        """Ends the worker recorded as ``pid`` if it still runs and is still a roxxel worker
        (a recorded id may have been reused); True when there was one."""

    def remove_run(self) -> list[str]:
        """Removes whatever a killed supervisor of this run left behind (besides the workers
        :meth:`remove_leftover` ends); what it removed."""
        return []


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

    name = "process"

    def __init__(self, python: str):
        self.python = python

    def commands(
        self,
        pods: Sequence[rendered_pods.RenderedPod],
        settings: LocalSettings,
        *,
        restart_attempt: int | None,
        network: Any = None,
    ) -> tuple[str, list[WorkerCommand]]:
        """Each pod's process plan (:mod:`roxxel_launch.backends.process_plan`) as a local
        process (:func:`~roxxel_launch.backends.local.pods.worker_process`). On loopback the
        pods' DNS names point at 127.0.0.1 and the coordinator's port is a free one (see
        :func:`~roxxel_launch.backends.local.pods.host_aliases`); with a ``network`` each pod
        has its own address and its names resolve there. Secrets' values come from this
        process's environment (that of ``submit``)."""
        ips = None if network is None else [network.address(i) for i in range(len(pods))]
        secret = secret_from_environment(os.environ)
        planned = plans(pods, restart_attempt=restart_attempt, pod_ips=ips, secret=secret)
        if network is not None:
            return network.coordinator_address, [worker_process(plan, settings) for plan in planned]
        aliases, address = None, planned[0].coordinator_address
        if address is not None:
            port = free_port()
            aliases = host_aliases(pods, address, port)
            logger.info("the pods' DNS names point at 127.0.0.1; the coordinator %s at 127.0.0.1:%d", address, port)
            address = f"127.0.0.1:{port}"
        commands = [worker_process(plan, settings, aliases=aliases) for plan in planned]
        return address or "none", commands

    def start(
        self,
        index: int,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str,
        log: IO[bytes],
        wrap: Callable[[list[str]], list[str]] | None = None,
    ) -> RunningWorker:
        command = with_parent_death_signal(self.python, list(argv))
        if wrap is not None:
            command = wrap(command)
        return _WorkerProcess(
            subprocess.Popen(
                command,
                cwd=cwd,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                process_group=0,
            )
        )

    def remove_leftover(self, pid: int) -> bool:
        if is_local_worker(pid) and group_alive(pid):
            kill_group(pid)
            return True
        return False


def default_runtime(python: str | None = None) -> WorkerRuntime:
    """The runtime of local runs: :class:`ProcessRuntime`, its shim run by ``python``
    (default: this interpreter)."""
    return ProcessRuntime(python or sys.executable)
