"""The local backend: a job spec's N workers as processes on this machine.

``roxxel-launch submit SPEC --local`` renders the same manifest as a cluster submit
(:func:`roxxel_launch.render.render`) and runs each of its pods as a local process, the way
the kubelet and the Job and JobSet controllers would, so the code path that runs on a
laptop is the one that runs on a cluster:

- every pod of the JobSet (or Indexed Job) is one worker process, running its container's
  ``command`` + ``args`` with its ``env`` resolved as the kubelet does (downward-API
  ``fieldRef`` values from the labels and annotations the controllers add, the completion
  index, ``$(VAR)`` expansion), on top of the environment of the process that submits (or
  resumes) the job (:mod:`roxxel_launch.backends.local.pods`); the workers run in the directory
  the job was submitted from (kept for ``resume``);
- when a worker fails, the manifest's ``podFailurePolicy``, ``backoffLimit`` and JobSet
  ``failurePolicy`` decide (:mod:`roxxel_launch.backends.local.policy`): re-create the pod,
  restart the whole gang (``BlockingRecreate``: all old workers are gone before new ones
  start), or fail;
- Ctrl-C / SIGTERM are turned into SIGTERM for every worker, followed by SIGKILL after the
  pod's grace period, and the job's exit status is the contract's
  (:mod:`roxxel.exit_codes`): 0 done, 42 preempted after a checkpoint, else the failing code.

The module map: :mod:`roxxel_launch.backends.local.rundir` (the run directory's files),
:mod:`roxxel_launch.backends.process_plan` (shared with any backend that runs the pods itself:
each pod's command, env and volumes as the manifest gives them, over
:mod:`roxxel_launch.backends.rendered_pods`), :mod:`roxxel_launch.backends.local.policy` (restart
or fail, from exit codes and the manifest's policies), :mod:`roxxel_launch.backends.local.pods` (a
process plan as a local process), :mod:`roxxel_launch.backends.local.supervisor` (the process that runs
the attempts: restarts, signals, grace periods), :mod:`roxxel_launch.backends.local.runtime`
(what starts, signals and stops one pod's worker: a process, :mod:`roxxel_launch.backends.local.processes`,
or with ``runtime="podman"`` (CLI ``--runtime podman``) a container of the manifest's image,
:mod:`roxxel_launch.backends.local.containers`),
:mod:`roxxel_launch.backends.local.netns` (``--netns``),
:mod:`roxxel_launch.backends.local.run_options` (:class:`LocalOptions` and their checks); this
module is the :class:`~roxxel_launch.backends.base.Backend` on top of them.

Network
=======
Only DNS names are mapped. By default every worker runs on this machine's loopback: the
pods' hostnames and DNS names (``<pod>.<subdomain>`` and its ``.svc.cluster.local`` form)
point at 127.0.0.1 through ``ROXXEL_HOST_ALIASES``, which :func:`roxxel.distributed.detect`
applies to the coordinator it derives from the manifest's environment; as all pods share
one loopback, the coordinator's port is mapped to a fresh free port per attempt (so that
concurrent local jobs cannot collide). With ``network="netns"`` (CLI ``--netns``) each
worker is a network host of its own, with its pod's hostname, and its ``/etc/hosts`` maps
the manifest's DNS names to the pods' addresses (:mod:`roxxel_launch.backends.local.netns`);
nothing else is mapped. Without root the supervisor says so in one line and uses loopback.

Data directory
==============
A pod gets ``ROXXEL_DATA_DIR=/data`` when the spec has a ``data`` volume; a local run
cannot mount that volume. ``ROXXEL_DATA_DIR`` is, in this order: the ``data_dir``
argument (CLI ``--data-dir``), ``$ROXXEL_LOCAL_DATA_DIR``; the workers get it whether or
not the spec has a ``data`` volume. Without either, a spec with a ``data`` volume is refused
(:class:`BackendError` saying how to fix it) and a spec without one leaves the variable
unset, as in a pod. The directory must exist; a relative path is
taken relative to the working directory.

``ROXXEL_CHECKPOINT_DIR`` is the spec's ``checkpoint_dir`` as it is (an absolute local
path or ``gs://...``), unset when the spec has none, as in a pod.

``delete`` stops a running job and removes its whole run directory, logs included, so the
name can be used again (like deleting a JobSet, whose pods' logs go with it): copy the
logs first if you want to keep them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from roxxel.wording import count
from roxxel_launch import names
from roxxel_launch.backends.base import (
    RENAME_HINT,
    RESUME_HINT,
    Backend,
    BackendError,
    JobExistsError,
    JobNotFoundError,
    JobState,
    JobStatus,
    StopReason,
    resume_with_spec,
)
from roxxel_launch.backends.local.checkpoint_owner import check_checkpoint_owner
from roxxel_launch.backends.local.pods import DATA_DIR_ENV, resolve_data_dir, worker_processes
from roxxel_launch.backends.local.run_options import (
    DEFAULT_MAX_WORKERS,
    MAX_WORKERS_ENV,
    NETWORKS,
    LocalOptions,
    check_options,
    check_worker_count,
    max_workers_setting,
)
from roxxel_launch.backends.local.rundir import (
    ATTEMPT_HEADER,
    GRACE_CAP_SECONDS,
    LAUNCH_FILE,
    LOCK_FILE,
    POLL_SECONDS,
    SPEC_FILE,
    STATUS_FILE,
    SUPERVISOR_LOG,
    TAIL_LINES,
    job_running,
    lock_is_held,
    log_tail,
    now,
    read_json,
    read_log,
    status_from_dict,
    write_json,
)
from roxxel_launch.backends.local.runtimes import runtime_for
from roxxel_launch.backends.local.supervisor import Supervisor

# What the module held before its free functions moved out: users and tests import them here.
__all__ = [
    "ATTEMPT_HEADER",
    "DATA_DIR_ENV",
    "DEFAULT_MAX_WORKERS",
    "DEFAULT_ROOT",
    "GRACE_CAP_SECONDS",
    "MAX_WORKERS_ENV",
    "NETWORKS",
    "LocalBackend",
    "LocalOptions",
    "POLL_SECONDS",
    "ROOT_ENV",
    "check_worker_count",
    "max_workers_setting",
    "resolve_data_dir",
    "worker_processes",
]

logger = logging.getLogger("roxxel_launch.backends.local")

ROOT_ENV = "ROXXEL_LOCAL_ROOT"
"""Environment variable: the directory that holds the local runs."""
DEFAULT_ROOT = os.path.join("runs", "local")
"""Root of the local runs when neither ``root`` nor ``$ROXXEL_LOCAL_ROOT`` is given (relative
to the current directory)."""
HANDSHAKE_SECONDS = 60.0
"""Seconds ``submit``/``resume`` wait for a detached supervisor to take over the run."""


class LocalBackend(Backend):
    """Runs jobs as processes on this machine (see the module docstring).

    Args:
        root: directory holding one run directory per job; default ``$ROXXEL_LOCAL_ROOT``,
            else ``./runs/local``. Created when the first job is submitted.
        options: how jobs run (see :class:`LocalOptions`); default: detached, on loopback.
    """

    def __init__(self, root: str | os.PathLike | None = None, options: LocalOptions | None = None):
        root = root if root is not None else os.environ.get(ROOT_ENV) or DEFAULT_ROOT
        self.root = Path(root).expanduser().absolute()
        self.options = options if options is not None else LocalOptions()

    # -- paths -----------------------------------------------------------------------------
    def run_dir(self, name: str) -> Path:
        """The run directory of job ``name`` (whether or not it exists).

        Raises:
            JobNotFoundError: ``name`` is not a valid job name (so it cannot name a job).
        """
        problem = names.dns1035_label_problem(name) if isinstance(name, str) else "is not a string"
        if problem:
            raise JobNotFoundError(f"no local job {name!r}: {problem}")
        return self.root / name

    def _existing(self, name: str) -> Path:
        run_dir = self.run_dir(name)
        if not (run_dir / STATUS_FILE).is_file():
            raise JobNotFoundError(
                f"no local job {name!r} in {self.root} (see `roxxel-launch list --local`; "
                f"runs are kept under ${ROOT_ENV} or ./{DEFAULT_ROOT})"
            )
        return run_dir

    # -- Backend API -----------------------------------------------------------------------
    def submit(self, spec, *, dry_run: bool = False) -> JobStatus:
        """Create the run directory of ``spec`` and start its supervisor, as :attr:`options` say.

        Args:
            spec: a validated ``roxxel_launch.spec.JobSpec``.
            dry_run: check everything (name free, data directory) and start nothing.

        Returns:
            The job's status: terminal with ``options.foreground``, else as the supervisor
            started it.

        Raises:
            JobExistsError: a local job of that name exists.
            BackendError: bad data directory, device count or network, more workers than
                ``max_workers``, the supervisor did not start, or ``foreground`` outside the
                main thread.
            OSError: the run directory cannot be written.
        """
        opts = self.options
        cwd = os.path.abspath(opts.cwd or os.getcwd())
        check_options(spec, opts)
        check_checkpoint_owner(spec)
        if spec.env_from:  # the kubelet would read them; nothing here can
            logger.warning(
                "%s: env_from (%s) is not read by a local run: set those variables in the "
                "environment of `roxxel-launch submit --local`",
                spec.name,
                count(len(spec.env_from), "source"),
            )
        resolved_data = resolve_data_dir(spec, opts.data_dir, cwd=cwd)
        run_dir = self.run_dir(spec.name)
        if run_dir.exists():
            raise self._exists_error(spec.name, run_dir)
        # Every pod's command and environment, resolved now: a broken manifest starts nothing.
        argv, _ = worker_processes(spec, run_dir, data_dir=resolved_data)[0]
        if dry_run:
            return JobStatus(
                name=spec.name,
                state=JobState.PENDING,
                processes=spec.num_processes,
                run_dir=str(run_dir),
                message=f"dry run: would start {count(spec.num_processes, 'local worker')}: "
                f"{shlex.join(argv)} in {cwd}",
            )
        from roxxel_launch.spec import spec_to_dict

        self.root.mkdir(parents=True, exist_ok=True)
        try:
            run_dir.mkdir()
        except FileExistsError:
            raise self._exists_error(spec.name, run_dir) from None
        created = now()
        write_json(run_dir / SPEC_FILE, spec_to_dict(spec))
        write_json(
            run_dir / LAUNCH_FILE,
            {
                "cwd": cwd,
                "data_dir": resolved_data,
                "devices_per_worker": opts.devices_per_worker,
                "python": sys.executable,
                "network": opts.network,
                "runtime": opts.runtime,
                "created": created,
            },
        )
        write_json(
            run_dir / STATUS_FILE,
            {
                "name": spec.name,
                "state": JobState.PENDING.value,
                "processes": spec.num_processes,
                "max_restarts": spec.max_restarts,
                "restarts": 0,
                "resumes": 0,
                "exit_code": None,
                "message": "",
                "created": created,
                "updated": created,
                "supervisor_pid": None,
                "pids": [],
                "worker_exit_codes": [],
                "failed_process": None,
                "attempts": [],
            },
        )
        logger.info("local job %s: run directory %s", spec.name, run_dir)
        return self._start(run_dir, resume=False)

    def status(self, name: str) -> JobStatus:
        """The job's status as ``status.json`` records it.

        A job whose record is not terminal but whose supervisor is gone (killed, machine
        rebooted) is reported ``Failed`` with a message saying so; it can be resumed.

        Raises:
            JobNotFoundError: no local job of that name.
        """
        run_dir = self._existing(name)
        data = read_json(run_dir / STATUS_FILE)
        status = status_from_dict(data, run_dir)
        if (
            not status.state.terminal
            and data.get("supervisor_pid") is not None
            and not lock_is_held(run_dir / LOCK_FILE)
        ):
            # Re-read: the supervisor may have finished between the two reads.
            data = read_json(run_dir / STATUS_FILE)
            status = status_from_dict(data, run_dir)
            if not status.state.terminal:
                status = dataclasses.replace(
                    status,
                    state=JobState.FAILED,
                    reason=StopReason.FAILED,
                    message=f"the supervisor (pid {data['supervisor_pid']}) ended without recording a final "
                    f"state (was {status.state.value}); see {run_dir / SUPERVISOR_LOG}",
                )
        return status

    def logs(
        self,
        name: str,
        *,
        process: int = 0,
        follow: bool = False,
        all_processes: bool = False,
        since_seconds: int | None = None,
        previous: bool = False,
        container: str | None = None,
    ) -> Iterator[str]:
        """Lines (without newline) of worker ``process``'s log, every attempt, with headers.

        Args:
            name: the job.
            process: ``0 <= process < processes``.
            follow: keep reading while the job's supervisor runs; stop once it has ended
                and the log is read to its end.

        Raises:
            JobNotFoundError: no local job of that name.
            BackendError: ``process`` out of range; ``all_processes``, ``since_seconds``,
                ``previous`` or ``container``, which read pods on Kubernetes.
        """
        if container is not None:
            raise BackendError(
                "--container reads a container of a Kubernetes pod; a local run has only the "
                "worker, whose log this is (drop --container)"
            )
        if all_processes or since_seconds is not None or previous:
            raise BackendError(
                "--all, --since and --previous read pods on Kubernetes; a local "
                f"run's logs are the files worker-N.log in its run directory "
                f"(roxxel-launch status {name} --local names it)"
            )
        run_dir = self._existing(name)
        processes = read_json(run_dir / STATUS_FILE)["processes"]
        if not 0 <= process < processes:
            raise BackendError(f"job {name!r} has processes 0 to {processes - 1}; there is no process {process}")
        return read_log(run_dir, run_dir / f"worker-{process}.log", follow)

    def exec(self, name: str, command, *, process: int = 0, container: str | None = None, out, err) -> int:
        """Refused: a local worker is a process (or a podman or docker container) of this machine.

        Raises: JobNotFoundError; BackendError saying what to run instead."""
        from roxxel_launch.backends.local.containers import ENGINES, RUN_LABEL, run_id

        run_dir = self._existing(name)
        try:
            engine = read_json(run_dir / LAUNCH_FILE).get("runtime")
        except (OSError, ValueError):
            engine = None
        where = f"run the command here, in its run directory {run_dir}"
        if engine in ENGINES:  # only a container run's message names the engine
            where = (
                f"{engine} ps --filter label={RUN_LABEL}={run_id(run_dir)} lists its containers, "
                f"then {engine} exec CONTAINER ..."
            )
        raise BackendError(
            f"exec runs a command in a Kubernetes pod; {name}'s local workers run on this machine: {where}"
        )

    def port_forward(self, name: str, local_port: int, remote_port: int, *, process: int = 0, on_listen=None) -> None:
        """Refused: a local worker's ports are this machine's already.

        Raises: JobNotFoundError; BackendError saying which address to open instead."""
        self._existing(name)
        raise BackendError(
            f"port-forward reaches a port of a Kubernetes pod; {name}'s local workers listen "
            f"on this machine already: open 127.0.0.1:{remote_port} (with --netns, the "
            "worker's own address; see roxxel-launch status --local)"
        )

    def list(self, *, all_namespaces: bool = False) -> list[JobStatus]:
        """Every local job under the root, sorted by name.

        Raises: BackendError for ``all_namespaces`` (namespaces are Kubernetes')."""
        if all_namespaces:
            raise BackendError(
                f"--all-namespaces lists Kubernetes namespaces; local jobs have none: they are "
                f"kept in {self.root} (drop -A)"
            )
        if not self.root.is_dir():
            return []
        out = []
        for entry in sorted(self.root.iterdir()):
            if (entry / STATUS_FILE).is_file() and not names.dns1035_label_problem(entry.name):
                out.append(self.status(entry.name))
        return out

    def _stop(self, name: str, run_dir: Path) -> None:
        """SIGTERM to a running supervisor (it stops its workers as for Ctrl-C); SIGKILL to it
        when it has not ended after ``options.stop_timeout`` seconds (default: the grace
        period + 30)."""
        data = read_json(run_dir / STATUS_FILE)
        lock = run_dir / LOCK_FILE
        supervisor = data.get("supervisor_pid")
        timeout = self.options.stop_timeout
        if lock_is_held(lock) and supervisor:
            if timeout is None:
                spec = read_json(run_dir / SPEC_FILE)
                timeout = min(spec.get("termination_grace_period", 300), GRACE_CAP_SECONDS) + 30
            logger.info("stopping local job %s: SIGTERM to its supervisor (pid %d)", name, supervisor)
            with contextlib.suppress(ProcessLookupError):
                os.kill(supervisor, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while lock_is_held(lock) and time.monotonic() < deadline:
                time.sleep(POLL_SECONDS)
            if lock_is_held(lock):
                logger.warning(
                    "the supervisor of %s (pid %d) did not stop within %gs; killing it and its workers",
                    name,
                    supervisor,
                    timeout,
                )
                with contextlib.suppress(ProcessLookupError):
                    os.kill(supervisor, signal.SIGKILL)

    def delete(self, name: str, *, wait: bool = False) -> None:
        """Stop the job if it runs, then remove its run directory (logs included).

        A running supervisor gets SIGTERM and stops its workers as for Ctrl-C; if it has not
        ended after ``options.stop_timeout`` seconds (default: the grace period + 30), it and
        every worker process group recorded in ``status.json`` are SIGKILLed. Always returns
        once the processes and the run directory are gone, so ``wait`` changes nothing here.

        Raises:
            JobNotFoundError: no local job of that name.
            OSError: the run directory cannot be removed.
        """
        run_dir = self._existing(name)
        self._stop(name, run_dir)
        # Workers of a supervisor that was killed: they may still run.
        runtime = runtime_for(read_json(run_dir / LAUNCH_FILE).get("runtime"), run_dir)
        for pid in read_json(run_dir / STATUS_FILE).get("pids", []):
            if runtime.remove_leftover(pid):
                logger.warning("killed leftover worker process group %d of job %s", pid, name)
        for left in runtime.remove_run():
            logger.warning("removed %s of job %s", left, name)
        if read_json(run_dir / LAUNCH_FILE).get("network") == "netns":
            from roxxel_launch.backends.local import netns

            if netns.unavailable_reason() is None:
                netns.cleanup_stale()  # the namespaces a killed supervisor left
        shutil.rmtree(run_dir)
        logger.info("deleted local job %s (%s)", name, run_dir)

    def suspend(self, name: str) -> JobStatus:
        """Stop a running job as Ctrl-C does (SIGTERM to its supervisor, which gives its workers
        the grace period to checkpoint) and keep its run directory: it ends Preempted (stopped
        by the user) and ``resume`` continues it.

        Raises:
            JobNotFoundError: no local job of that name.
            BackendError: the job is not running.
        """
        run_dir = self._existing(name)
        status = self.status(name)
        if status.state is JobState.SUCCEEDED:  # resume would refuse it: not "resume it"
            raise BackendError(
                f"local job {name!r} succeeded; there is nothing to suspend or resume "
                "(delete it to run it again from scratch)"
            )
        if not job_running(status.state, run_dir):
            raise BackendError(
                f"local job {name!r} is {status.state.value.lower()}, not running; there is "
                f"nothing to suspend (resume it: roxxel-launch resume {name} --local)"
            )
        self._stop(name, run_dir)
        return self.status(name)

    def resume(self, name: str, *, spec=None, new_spec=None) -> JobStatus:
        """Run a preempted or failed job again from ``spec.json`` and ``launch.json``; the
        training program restores its last checkpoint itself. Restarts count from 0 again.
        Runs in the foreground or detached as :attr:`options` say.

        Args:
            name: the job.
            spec: for a job whose run directory was deleted: its ``JobSpec``, submitted again
                with this backend's options (same run name and checkpoint_dir, so training
                restores its last checkpoint). Ignored while the run directory exists.
            new_spec: a fixed spec to resume under instead of the stored one (checked by
                :func:`~roxxel_launch.backends.base.resume_with_spec`, then stored).

        Raises:
            JobNotFoundError: no local job of that name, and no ``spec``.
            BackendError: the job is running, it succeeded (nothing to resume), or ``spec``
                names another job.
        """
        if spec is not None and not (self.run_dir(name) / STATUS_FILE).is_file():
            if spec.name != name:
                raise BackendError(f"the spec is for {spec.name!r}, not {name!r}")
            return self.submit(spec)
        status = self.status(name)
        if status.run_dir is None:
            raise BackendError(f"job {name}: the local backend's status names no run directory")
        run_dir = Path(status.run_dir)
        if job_running(status.state, run_dir):
            raise BackendError(
                f"local job {name!r} is {status.state.value.lower()}: wait for it "
                f"(`roxxel-launch wait {name} --local`) or stop it first"
            )
        if status.state is JobState.SUCCEEDED:
            raise BackendError(
                f"local job {name!r} succeeded; there is nothing to resume (delete it to run it again from scratch)"
            )
        if new_spec is not None:
            from roxxel_launch.spec import spec_from_dict, spec_to_dict

            for change in resume_with_spec(spec_from_dict(read_json(run_dir / SPEC_FILE)), new_spec):
                logger.warning("resuming %s under the new spec: %s", name, change)
            write_json(run_dir / SPEC_FILE, spec_to_dict(new_spec))
        return self._start(run_dir, resume=True)

    # -- starting a supervisor ---------------------------------------------------------------
    def _start(self, run_dir: Path, *, resume: bool) -> JobStatus:
        if self.options.foreground:
            stderr_level = logging.getLogger().getEffectiveLevel()
            return Supervisor(run_dir, echo=self.options.echo, resume=resume, stderr_level=stderr_level).run()
        return self._spawn_detached(run_dir, resume=resume)

    def _spawn_detached(self, run_dir: Path, *, resume: bool) -> JobStatus:
        launch = read_json(run_dir / LAUNCH_FILE)
        # No supervisor runs (checked by the caller): clear the pid so that the handshake
        # below sees the new supervisor's own record.
        data = read_json(run_dir / STATUS_FILE)
        data["supervisor_pid"] = None
        write_json(run_dir / STATUS_FILE, data)
        cmd = [sys.executable, "-m", "roxxel_launch.backends.local.supervisor", "supervise", str(run_dir)]
        if resume:
            cmd.append("--resume")
        with open(run_dir / SUPERVISOR_LOG, "ab") as log:
            proc = subprocess.Popen(
                cmd,
                cwd=launch["cwd"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,
            )
        logger.info("started the supervisor of %s: pid %d", run_dir.name, proc.pid)
        deadline = time.monotonic() + HANDSHAKE_SECONDS
        while time.monotonic() < deadline:
            data = read_json(run_dir / STATUS_FILE)
            if data.get("supervisor_pid") == proc.pid:
                return status_from_dict(data, run_dir)
            if proc.poll() is not None:
                tail = "\n".join(log_tail(run_dir / SUPERVISOR_LOG, TAIL_LINES, since_header=False))
                raise BackendError(
                    f"the supervisor of {run_dir.name} exited with {proc.returncode} before it "
                    f"started the job; last lines of {run_dir / SUPERVISOR_LOG}:\n{tail}"
                )
            time.sleep(0.05)
        raise BackendError(
            f"the supervisor of {run_dir.name} (pid {proc.pid}) did not take over within "
            f"{HANDSHAKE_SECONDS:g}s; see {run_dir / SUPERVISOR_LOG}"
        )

    def _exists_error(self, name: str, run_dir: Path) -> JobExistsError:
        """What to do about an existing job of that name, by its state: only a job that
        ended without succeeding can be resumed."""
        delete = f"`roxxel-launch delete {name} --local`"
        try:
            state = self.status(name).state
        except BackendError:  # a half-made run directory: only deleting it helps
            state = JobState.FAILED
        if job_running(state, run_dir):
            return JobExistsError(
                f"a local job named {name!r} is {state.value.lower()} ({run_dir}): follow it with "
                f"`roxxel-launch logs {name} --local -f`, wait for it with `roxxel-launch wait {name} "
                f"--local`, or stop and remove it with {delete}"
            )
        if state is JobState.SUCCEEDED:
            checkpoints = read_json(run_dir / SPEC_FILE).get("checkpoint_dir")
            kept = (
                f" and remove its checkpoints ({checkpoints}), which that keeps: a new run would "
                "restore the last one and train no step"
                if checkpoints
                else ""
            )
            return JobExistsError(
                f"a local job named {name!r} already succeeded ({run_dir}): to run it again, delete it "
                f"with {delete}{kept}; or {RENAME_HINT}"
            )
        return JobExistsError(
            f"a local job named {name!r} already exists and is {state.value.lower()} ({run_dir}): resume "
            f"it with `roxxel-launch resume {name} --local`, or delete it with {delete}. {RESUME_HINT}"
        )
