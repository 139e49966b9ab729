"""The local backend: a job spec's N workers as processes on this machine.

``roxxel-launch submit SPEC --local`` runs the same contract as a pod, so the code path
that runs on a laptop is the one that runs on a cluster:

- every worker is ``python -m roxxel.worker -- COMMAND...`` (the image's entrypoint), with
  the environment variables a pod gets where they make sense (names from
  :mod:`roxxel_launch.contract`): ``ROXXEL_COORDINATOR_ADDRESS=127.0.0.1:<free port>``,
  ``ROXXEL_NUM_PROCESSES``, ``ROXXEL_PROCESS_ID``, ``ROXXEL_RUN_NAME``,
  ``ROXXEL_CHECKPOINT_DIR``, ``ROXXEL_DATA_DIR`` and the spec's ``env``, on top of the
  environment of the process that submits (or resumes) the job, with ``JAX_PLATFORMS=cpu``
  unless that environment or the spec sets it (see :func:`worker_env`); the workers run
  in the directory the job was submitted from (kept for ``resume``);
- the workers are restarted together when one fails, like a JobSet with
  ``restartStrategy: BlockingRecreate``: all old workers are gone before new ones start,
  up to the spec's ``max_restarts``;
- Ctrl-C / SIGTERM are turned into SIGTERM for every worker, followed by SIGKILL after the
  grace period, and the job's exit status is the contract's
  (:mod:`roxxel.exit_codes`): 0 done, 42 preempted after a checkpoint, else the failing code.

Run directory
=============
Runs live under a root directory (``root`` argument, else ``$ROXXEL_LOCAL_ROOT``, else
``./runs/local``), one directory per job name:

``spec.json``
    the effective job spec (``--set`` overrides applied), as plain data.
``launch.json``
    the local settings of the run: working directory, data directory, devices per worker,
    Python interpreter, network (``loopback`` or ``netns``). ``resume`` reuses them.
``status.json``
    written atomically (temporary file + rename) by the supervisor at every change: state,
    restarts, exit code, message, the supervisor's pid, the current workers' pids and
    exit codes, and the history of attempts (pids, coordinator, outcome of each).
``worker-<i>.log``
    stdout and stderr of worker ``i``; every attempt is appended after a header line
    that starts with :data:`ATTEMPT_HEADER`.
``supervisor.log``
    what the supervisor did (starts, failures, restarts, signals), at INFO level.
``supervisor.lock``
    held (``flock``) by the running supervisor; how ``status`` tells a live job from one
    whose supervisor was killed (a pid alone could have been reused).

The supervisor
==============
One supervisor process per running job starts the workers, watches them (every
:data:`POLL_SECONDS`), restarts them and writes ``status.json``. With
``LocalOptions(foreground=True)`` (the CLI's default) ``submit`` runs it inside the calling process and echoes worker 0's output with
the prefix ``[worker 0] ``; otherwise it is a detached process
(``python -m roxxel_launch.backends.local supervise RUN_DIR``, in its own session, so
closing the terminal does not stop it).

Every worker runs in **its own process group**. A terminal's Ctrl-C is delivered to the
whole foreground process group; if the workers shared it, every training process would
get SIGINT at the same moment as the supervisor (Python turns it into KeyboardInterrupt,
exit code 1), the supervisor could not tell a user's stop from a crash, and a gang
restart could race the shutdown. With separate groups the supervisor alone receives
Ctrl-C and decides: it sends SIGTERM (the preemption signal the trainer handles by saving
a checkpoint and exiting 42) to each worker's ``roxxel-worker`` process, which forwards it
to the training command, waits up to the grace period, then SIGKILLs the whole group, so
that nothing the training command started survives. A second Ctrl-C skips the grace
period. On Linux each worker also gets SIGTERM if the supervisor dies
(``PR_SET_PDEATHSIG``), so a killed supervisor does not leave workers behind.

Grace period = the spec's ``termination_grace_period`` capped at
:data:`GRACE_CAP_SECONDS` for local runs. (A program that has initialised
``jax.distributed`` catches SIGTERM through JAX's preemption notifier: unless it saves
and exits itself, it is stopped by the SIGKILL at the end of the grace period.)

Outcomes of an attempt (the first worker that ends with a code other than 0 decides):

- every worker exits 0: ``Succeeded``, exit 0 (a worker that exits 0 early waits for the
  others, like a completed pod);
- exit 42 (preempted after a checkpoint): the others get SIGTERM, the job becomes
  ``Preempted`` (terminal), exit 42; :meth:`LocalBackend.resume` runs it again and the
  training program restores its last checkpoint;
- exit 78 (:data:`roxxel.exit_codes.CONFIG_ERROR_EXIT_CODE`, a configuration error before
  the first step): the others get SIGTERM and the job is ``Failed`` with 78 at once, no
  restart (as the rendered ``podFailurePolicy`` does on a cluster);
- any other code (a worker killed by signal ``N`` gives ``128 + N``): the others get
  SIGTERM and the job is ``Restarting`` until all of them are gone; then every worker
  starts again (a new coordinator port, an attempt header in each log). After
  ``max_restarts`` gang restarts the job is ``Failed`` with that worker's exit code and a
  message that names it and quotes the last lines of its log;
- Ctrl-C / SIGTERM / SIGHUP to the supervisor: ``Preempted`` (42) when the workers
  exited 42 (or 0), ``Succeeded`` if they had all finished, else ``Failed`` with
  ``128 + signal`` (130 for Ctrl-C, 143 for SIGTERM). A job is never restarted after a
  stop request.

When a worker's ``roxxel-worker`` process ends, whatever is left in its process group is
SIGKILLed, as when a container ends.

Network
=======
By default every worker runs on this machine's loopback with a fresh coordinator port per
attempt. With ``network="netns"`` (CLI ``--netns``) each worker is a network host of its
own, with its pod's hostname and the manifest's DNS names (:mod:`roxxel_launch.backends.netns`);
without root the supervisor says so in one line and uses loopback.

Data directory
==============
A pod gets ``ROXXEL_DATA_DIR=/data`` when the spec has a ``data`` volume; a local run
cannot mount that volume. ``ROXXEL_DATA_DIR`` is, in this order: the ``data_dir``
argument (CLI ``--data-dir``), ``$ROXXEL_LOCAL_DATA_DIR``; without either a spec with a
``data`` volume is refused (:class:`BackendError` saying how to fix it) and a spec without
one leaves the variable unset, as in a pod. The directory must exist; a relative path is
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
import datetime
import fcntl
import json
import logging
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from roxxel import exit_codes
from roxxel.contract import (
    ENV_MEGASCALE_NUM_SLICES,
    ENV_MEGASCALE_SLICE_ID,
    ENV_TPU_PROCESS_ADDRESSES,
    ENV_TPU_WORKER_HOSTNAMES,
    ENV_TPU_WORKER_ID,
)
from roxxel.wording import count
from roxxel_launch import contract, names
from roxxel_launch.backends.base import (
    Backend,
    BackendError,
    JobExistsError,
    JobNotFoundError,
    JobState,
    JobStatus,
    StopReason,
    lock_is_held,
)

__all__ = [
    "ATTEMPT_HEADER",
    "DATA_DIR_ENV",
    "DEFAULT_ROOT",
    "GRACE_CAP_SECONDS",
    "LocalBackend",
    "LocalOptions",
    "POLL_SECONDS",
    "ROOT_ENV",
    "resolve_data_dir",
    "worker_command",
    "worker_env",
]

logger = logging.getLogger("roxxel_launch.backends.local")

ROOT_ENV = "ROXXEL_LOCAL_ROOT"
"""Environment variable: the directory that holds the local runs."""
DEFAULT_ROOT = os.path.join("runs", "local")
"""Root of the local runs when neither ``root`` nor ``$ROXXEL_LOCAL_ROOT`` is given (relative
to the current directory)."""
DATA_DIR_ENV = "ROXXEL_LOCAL_DATA_DIR"
"""Environment variable: the local directory that stands for the spec's data volume."""
GRACE_CAP_SECONDS = 30
"""Seconds: the most a local run waits between SIGTERM and SIGKILL, whatever the spec says."""
DEFAULT_MAX_WORKERS = 64
"""The most workers a local run starts unless told otherwise (``--max-workers``,
``$ROXXEL_LOCAL_MAX_WORKERS``): every worker is a Python process with JAX loaded."""
MAX_WORKERS_ENV = "ROXXEL_LOCAL_MAX_WORKERS"
"""Environment variable: the local worker cap (see :data:`DEFAULT_MAX_WORKERS`)."""
POLL_SECONDS = 0.1
"""Seconds between two looks of the supervisor at its workers."""
ATTEMPT_HEADER = "===== roxxel-launch:"
"""Start of the line written to every worker log before each attempt."""
TAIL_LINES = 20
"""Lines of a failed worker's log quoted in the job's message."""
HANDSHAKE_SECONDS = 60.0
"""Seconds ``submit``/``resume`` wait for a detached supervisor to take over the run."""
NETWORKS = ("loopback", "netns")
"""Values of :attr:`LocalOptions.network`: every worker on loopback, or each in its own network
namespace (:mod:`roxxel_launch.backends.netns`)."""

SPEC_FILE = "spec.json"
LAUNCH_FILE = "launch.json"
STATUS_FILE = "status.json"
SUPERVISOR_LOG = "supervisor.log"
LOCK_FILE = "supervisor.lock"

_XLA_DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"
# Inherited variables the launcher owns (or that would mislead process detection): never
# passed through from the caller's environment.
_OWNED_ENV = frozenset(contract.RESERVED_ENV_NAMES) | {
    ENV_TPU_WORKER_HOSTNAMES,
    ENV_TPU_PROCESS_ADDRESSES,
    ENV_TPU_WORKER_ID,
    ENV_MEGASCALE_NUM_SLICES,
    ENV_MEGASCALE_SLICE_ID,
}
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


# ------------------------------------------------------------------------------------
# The worker environment
# ------------------------------------------------------------------------------------


def worker_command(spec, python: str | None = None) -> list[str]:
    """The command line of one local worker: ``PYTHON -m roxxel.worker -- COMMAND...``.

    Args:
        spec: a ``roxxel_launch.spec.JobSpec``.
        python: the interpreter; default ``sys.executable``.
    """
    return [python or sys.executable, "-m", "roxxel.worker", "--", *spec.command]


def worker_env(
    spec,
    process_id: int,
    coordinator_address: str,
    *,
    base_env: Mapping[str, str] | None = None,
    data_dir: str | None = None,
    devices_per_worker: int | None = None,
) -> dict[str, str]:
    """The environment of local worker ``process_id``: what a pod gets, on loopback.

    ``base_env`` (default ``os.environ``) without the variables the launcher owns
    (``contract.RESERVED_ENV_NAMES``, GKE's ``TPU_*``/``MEGASCALE_*``), then the spec's
    ``env``, then ``ROXXEL_COORDINATOR_ADDRESS``, ``ROXXEL_NUM_PROCESSES``,
    ``ROXXEL_PROCESS_ID``, ``ROXXEL_RUN_NAME``, ``ROXXEL_CHECKPOINT_DIR`` (when the spec has
    one), ``ROXXEL_DATA_DIR`` (when ``data_dir`` is given); ``JAX_PLATFORMS=cpu`` unless
    ``base_env`` or the spec sets it; ``XLA_FLAGS`` gains
    ``--xla_force_host_platform_device_count=N`` (replacing an earlier one) when
    ``devices_per_worker`` is given. ``PATH`` starts with the folder of the Python that
    runs the launcher, so ``python`` and the ``roxxel`` commands in a spec's command are
    that environment's, as they are the image's in a pod.

    Args:
        spec: a ``roxxel_launch.spec.JobSpec``.
        process_id: ``0 <= process_id < spec.num_processes``.
        coordinator_address: ``host:port`` of process 0's coordinator.
        base_env: the environment to start from.
        data_dir: value of ``ROXXEL_DATA_DIR`` (see :func:`resolve_data_dir`).
        devices_per_worker: CPU devices each worker's JAX sees (>= 1).

    Raises:
        ValueError: ``process_id`` out of range or ``devices_per_worker < 1``.
    """
    if not 0 <= process_id < spec.num_processes:
        raise ValueError(f"process_id {process_id} is not in [0, {spec.num_processes})")
    env = {k: v for k, v in (os.environ if base_env is None else base_env).items() if k not in _OWNED_ENV}
    env.update(spec.env)
    env[contract.ROXXEL_COORDINATOR_ADDRESS] = coordinator_address
    env[contract.ROXXEL_NUM_PROCESSES] = str(spec.num_processes)
    env[contract.ROXXEL_PROCESS_ID] = str(process_id)
    for var in contract.run_env(run_name=spec.run_name, checkpoint_dir=spec.checkpoint_dir, data_dir=data_dir):
        env[var.name] = var.literal()
    env.setdefault("JAX_PLATFORMS", "cpu")
    bin_dir = os.path.dirname(sys.executable)
    env["PATH"] = os.pathsep.join([bin_dir] + [p for p in env.get("PATH", "").split(os.pathsep) if p and p != bin_dir])
    if devices_per_worker is not None:
        if devices_per_worker < 1:
            raise ValueError(f"devices_per_worker must be >= 1, got {devices_per_worker}")
        flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith(_XLA_DEVICE_COUNT_FLAG)]
        flags.append(f"{_XLA_DEVICE_COUNT_FLAG}={devices_per_worker}")
        env["XLA_FLAGS"] = " ".join(flags)
    return env


def resolve_data_dir(
    spec, data_dir: str | None, *, environ: Mapping[str, str] | None = None, cwd: str | None = None
) -> str | None:
    """The local ``ROXXEL_DATA_DIR`` of a run (see "Data directory" in the module docstring).

    Args:
        spec: a ``roxxel_launch.spec.JobSpec``.
        data_dir: the ``--data-dir`` value, or None.
        environ: where ``ROXXEL_LOCAL_DATA_DIR`` is looked up; default ``os.environ``.
        cwd: base of a relative path; default the current directory.

    Returns:
        An absolute path, or None when the workers get no ``ROXXEL_DATA_DIR``.

    Raises:
        BackendError: the spec has a data volume and no local directory is given, or the
            directory does not exist.
    """
    environ = os.environ if environ is None else environ
    origin = "--data-dir"
    if not data_dir:
        data_dir, origin = environ.get(DATA_DIR_ENV) or None, f"${DATA_DIR_ENV}"
    if data_dir is None:
        if spec.data is not None:
            raise BackendError(
                f"job {spec.name!r} mounts a data volume at {contract.DATA_MOUNT_PATH} in its pods, "
                "which a local run cannot mount: give a local copy or mount of the data with "
                f"--data-dir PATH (or set {DATA_DIR_ENV}); the workers get it as {contract.ROXXEL_DATA_DIR}"
            )
        return None
    path = os.path.abspath(os.path.join(cwd or os.getcwd(), os.path.expanduser(data_dir)))
    if not os.path.isdir(path):
        raise BackendError(f"data directory {path!r} (from {origin}) does not exist or is not a directory")
    return path


# ------------------------------------------------------------------------------------
# Small helpers
# ------------------------------------------------------------------------------------


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _write_json(path: Path, data: Any) -> None:
    """Write ``data`` as JSON under a temporary name and rename it: readers never see a prefix."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def _read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _tail(path: Path, lines: int, *, since_header: bool = True) -> list[str]:
    """The last ``lines`` lines of a log (of its last attempt only when ``since_header``)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 256 * 1024))
            text = f.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return []
    out = text.splitlines()
    if since_header:
        for i in range(len(out) - 1, -1, -1):
            if out[i].startswith(ATTEMPT_HEADER):
                out = out[i + 1:]
                break
    return out[-lines:]


def _acquire_lock(lock_path: Path, *, wait: float = 2.0) -> int:
    """Take the run's lock for the life of a supervisor; retries briefly because status
    probes hold it (shared) for an instant. Raises BackendError if another supervisor has it."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                raise BackendError(
                    f"another supervisor is running the job in {lock_path.parent}; "
                    "wait for it, or stop it with `roxxel-launch delete NAME --local`"
                ) from None
            time.sleep(0.05)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_group(pgid: int, signo: int = signal.SIGKILL) -> bool:
    """Signal a whole process group; False if it has no member left."""
    try:
        os.killpg(pgid, signo)
    except ProcessLookupError:
        return False
    return True


def _is_local_worker(pid: int) -> bool:
    """True when ``pid`` is (still) a roxxel worker process (Linux: its command line); a pid
    recorded earlier may have been reused by an unrelated process."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().split(b"\0")
    except OSError:
        return False
    return b"roxxel.worker" in cmdline


# Run by each new worker process before it becomes ``python -m roxxel.worker``: ask Linux to
# SIGTERM it when the supervisor dies (PR_SET_PDEATHSIG survives execve), then exec. This
# runs in the new process rather than as a Popen preexec_fn, which would force a plain
# fork() of the supervisor, unsafe when the supervisor is multi-threaded (e.g. a process
# that has imported JAX and runs a foreground job).
_PDEATHSIG_SHIM = (
    "import ctypes, os, signal, sys\n"
    f"ctypes.CDLL(None, use_errno=True).prctl({_PR_SET_PDEATHSIG}, int(signal.SIGTERM), 0, 0, 0)\n"
    "if os.getppid() != int(sys.argv[1]):\n"  # the supervisor died before prctl took effect
    "    os.kill(os.getpid(), signal.SIGTERM)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


def _with_parent_death_signal(cmd: list[str]) -> list[str]:
    """``cmd`` (starting with an absolute Python path) behind the parent-death shim on Linux;
    unchanged elsewhere."""
    if not sys.platform.startswith("linux"):
        return cmd
    return [cmd[0], "-S", "-c", _PDEATHSIG_SHIM, str(os.getpid()), *cmd]


class _LogEcho:
    """Copies new complete lines of a growing log file to a stream, with a prefix."""

    def __init__(self, path: Path, prefix: str, out: IO[str]):
        self.path, self.prefix, self.out = path, prefix, out
        self.offset = path.stat().st_size if path.exists() else 0
        self.partial = b""

    def pump(self, *, final: bool = False) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return
        self.offset += len(data)
        data = self.partial + data
        *lines, self.partial = data.split(b"\n")
        if final and self.partial:
            lines.append(self.partial)
            self.partial = b""
        if lines:
            self.out.write("".join(f"{self.prefix}{line.decode('utf-8', errors='replace')}\n" for line in lines))
            self.out.flush()


# ------------------------------------------------------------------------------------
# The supervisor
# ------------------------------------------------------------------------------------


@dataclasses.dataclass
class _Worker:
    index: int
    proc: subprocess.Popen
    exit_code: int | None = None
    exit_order: int | None = None
    group_killed: bool = False  # SIGKILL went to its whole group: members may still be unreaped


@dataclasses.dataclass
class _Outcome:
    kind: str  # "succeeded" | "preempted" | "failure" | "stopped"
    codes: list[int | None]
    worker: int | None = None  # the first failing (or preempted) worker

    def failing_worker(self) -> tuple[int, int]:
        """``(index, exit code)`` of the worker that decided a "failure" or "preempted" outcome."""
        code = None if self.worker is None else self.codes[self.worker]
        if self.worker is None or code is None:
            raise RuntimeError(f"a {self.kind!r} outcome names no worker that exited (codes {self.codes})")
        return self.worker, code


class _Supervisor:
    """Runs one job's attempts in the calling process (see the module docstring)."""

    def __init__(self, run_dir: Path, *, echo: IO[str] | None, resume: bool, stderr_level: int | None):
        self.run_dir = run_dir
        self.echo = echo
        self.resume = resume
        self.stderr_level = stderr_level
        self.workers: list[_Worker] = []
        self.signals: list[int] = []
        self.exits_seen = 0
        self.network = None  # a netns.PodNetwork in --netns runs

    # -- entry point -------------------------------------------------------------------
    def run(self) -> JobStatus:
        if threading.current_thread() is not threading.main_thread():
            raise BackendError("a local job runs its supervisor in the main thread only (it handles signals)")
        lock_fd = _acquire_lock(self.run_dir / LOCK_FILE)
        try:
            with self._logging(), self._signal_handlers():
                self._load()
                try:
                    with self._pod_network():
                        return self._supervise()
                except BaseException as err:
                    logger.exception("supervisor error; stopping every worker")
                    self._stop_workers(grace=0.0)
                    self._finish(JobState.FAILED, 1, f"the local supervisor failed: {err!r} "
                                 f"(see {self.run_dir / SUPERVISOR_LOG})", StopReason.FAILED)
                    raise
        finally:
            os.close(lock_fd)

    @contextlib.contextmanager
    def _logging(self):
        handlers: list[logging.Handler] = [logging.FileHandler(self.run_dir / SUPERVISOR_LOG, encoding="utf-8")]
        handlers[0].setFormatter(logging.Formatter("%(asctime)s %(levelname)s: %(message)s"))
        handlers[0].setLevel(logging.INFO)
        if self.stderr_level is not None:
            handlers.append(logging.StreamHandler(sys.stderr))
            handlers[-1].setFormatter(logging.Formatter("[roxxel-launch] %(levelname)s: %(message)s"))
            handlers[-1].setLevel(self.stderr_level)
        previous = (logger.level, logger.propagate)
        logger.setLevel(logging.INFO if self.stderr_level is None else min(logging.INFO, self.stderr_level))
        logger.propagate = False
        for h in handlers:
            logger.addHandler(h)
        try:
            yield
        finally:
            for h in handlers:
                logger.removeHandler(h)
                h.close()
            logger.setLevel(previous[0])
            logger.propagate = previous[1]

    @contextlib.contextmanager
    def _signal_handlers(self):
        def handler(signo: int, _frame: object) -> None:
            self.signals.append(signo)

        previous = {signo: signal.signal(signo, handler) for signo in _STOP_SIGNALS}
        try:
            yield
        finally:
            for signo, old in previous.items():
                signal.signal(signo, old)

    @contextlib.contextmanager
    def _pod_network(self):
        """``self.network``: the run's network namespaces with ``--netns``, else None (loopback)."""
        if self.launch.get("network", "loopback") != "netns":
            yield
            return
        from roxxel_launch.backends import netns

        reason = netns.unavailable_reason()
        if reason is not None:
            logger.warning("--netns: %s; running the workers on loopback instead", reason)
            yield
            return
        with netns.PodNetwork(self.spec, self.launch.get("python")) as self.network:
            yield
        self.network = None

    def _worker_name(self, i: int) -> str:
        """``worker i``, with its host in --netns runs (which host failed is what a user asks)."""
        if self.network is None:
            return f"worker {i}"
        return f"worker {i} (host {self.network.hosts[i].hostname}, {self.network.address(i)})"

    # -- state ---------------------------------------------------------------------------
    def _load(self) -> None:
        from roxxel_launch.spec import spec_from_dict

        self.spec = spec_from_dict(_read_json(self.run_dir / SPEC_FILE))
        self.launch = _read_json(self.run_dir / LAUNCH_FILE)
        self.status = _read_json(self.run_dir / STATUS_FILE)
        self.grace = float(min(self.spec.termination_grace_period, GRACE_CAP_SECONDS))
        if self.resume:
            self.status["resumes"] = self.status.get("resumes", 0) + 1
            logger.info("resuming job %s (resume %d)", self.spec.name, self.status["resumes"])
        self.status.update(
            state=JobState.PENDING.value,
            restarts=0,
            exit_code=None,
            message="",
            reason=None,
            supervisor_pid=os.getpid(),
            pids=[],
            worker_exit_codes=[],
            failed_process=None,
        )
        self.status.setdefault("attempts", [])
        self._save()

    def _save(self) -> None:
        self.status["updated"] = _now()
        _write_json(self.run_dir / STATUS_FILE, self.status)

    def _finish(self, state: JobState, code: int, message: str,
                reason: StopReason | None = None) -> JobStatus:
        self.status.update(state=state.value, exit_code=code, message=message,
                           reason=None if reason is None else reason.value)
        self._save()
        # INFO: the caller reports the outcome (the CLI prints it; status() returns it).
        logger.info("job %s %s (exit code %d)%s", self.spec.name, state.value.lower(), code,
                    f": {message}" if message else "")
        return _status_from_dict(self.status, self.run_dir)

    # -- attempts ------------------------------------------------------------------------
    def _supervise(self) -> JobStatus:
        max_restarts = self.spec.max_restarts
        while True:
            outcome = self._attempt()
            if outcome.kind == "succeeded":
                return self._finish(JobState.SUCCEEDED, exit_codes.SUCCESS, "")
            if outcome.kind == "preempted":
                return self._finish(
                    JobState.PREEMPTED,
                    exit_codes.PREEMPTED_EXIT_CODE,
                    f"worker {outcome.worker} exited {exit_codes.PREEMPTED_EXIT_CODE} (preempted after a "
                    "complete checkpoint); resume with `roxxel-launch resume "
                    f"{self.spec.name} --local`",
                    StopReason.PREEMPTED,
                )
            if outcome.kind == "stopped":
                return self._finish_stopped(outcome)
            # A worker failed.
            i, code = outcome.failing_worker()
            what = f"{self._worker_name(i)} exited with {code} ({exit_codes.describe(code)})"
            restarts = self.status["restarts"]
            if self.signals:
                return self._finish(JobState.FAILED, code, f"{what}; not restarted: stop requested by "
                                    f"{signal.Signals(self.signals[0]).name}", StopReason.STOPPED_BY_USER)
            if code == exit_codes.CONFIG_ERROR_EXIT_CODE:
                return self._finish_failed(i, code, f"{what}; not restarted: a configuration error "
                                           "fails the same way on every attempt", StopReason.CONFIG_ERROR)
            if restarts < max_restarts:
                self.status.update(restarts=restarts + 1, state=JobState.RESTARTING.value,
                                   message=f"{what}; gang restart {restarts + 1} of at most {max_restarts}")
                self._save()
                logger.warning("%s; gang restart %d of at most %d", what, restarts + 1, max_restarts)
                continue
            return self._finish_failed(i, code, f"{what}; max_restarts ({max_restarts}) used up after "
                                       f"{count(restarts, 'gang restart')}", StopReason.RESTARTS_EXHAUSTED)

    def _finish_failed(self, worker: int, code: int, what: str, reason: StopReason) -> JobStatus:
        log = self.run_dir / f"worker-{worker}.log"
        tail = "\n".join(_tail(log, TAIL_LINES)) or "(empty)"
        self.status["failed_process"] = worker
        return self._finish(JobState.FAILED, code, f"{what}. Last lines of {log}:\n{tail}", reason)

    def _finish_stopped(self, outcome: _Outcome) -> JobStatus:
        signo = self.signals[0]
        name = signal.Signals(signo).name
        codes = outcome.codes
        code_text = ", ".join(f"worker {i}: {c}" for i, c in enumerate(codes))
        if all(c in (exit_codes.SUCCESS, exit_codes.PREEMPTED_EXIT_CODE) for c in codes):
            if exit_codes.PREEMPTED_EXIT_CODE in codes:
                return self._finish(
                    JobState.PREEMPTED, exit_codes.PREEMPTED_EXIT_CODE,
                    f"stopped by {name}; the workers saved a checkpoint ({code_text}); resume with "
                    f"`roxxel-launch resume {self.spec.name} --local`", StopReason.STOPPED_BY_USER)
            return self._finish(JobState.SUCCEEDED, exit_codes.SUCCESS, f"all workers had finished when {name} came")
        return self._finish(JobState.FAILED, exit_codes.SIGNAL_EXIT_BASE + signo,
                            f"stopped by {name} ({code_text})", StopReason.STOPPED_BY_USER)

    def _attempt(self) -> _Outcome:
        spec, n = self.spec, self.spec.num_processes
        number = len(self.status["attempts"]) + 1
        if self.network is not None:
            self.network.up()  # fresh pods' network for every attempt, as a gang restart recreates pods
            address = self.network.coordinator_address
        else:
            address = f"127.0.0.1:{_free_port()}"
        record = {"attempt": number, "started": _now(), "coordinator_address": address,
                  "restart": self.status["restarts"], "resume": self.status.get("resumes", 0),
                  "pids": [], "exit_codes": [], "outcome": None, "ended": None}
        if self.network is not None:
            record["hosts"] = self.network.describe()
        self.status["attempts"].append(record)
        self.workers, self.exits_seen = [], 0
        echo = _LogEcho(self.run_dir / "worker-0.log", "[worker 0] ", self.echo) if self.echo else None
        cmd = worker_command(spec, self.launch.get("python"))
        argv = _with_parent_death_signal(cmd)
        logger.info("attempt %d: starting %s, coordinator %s: %s", number, count(n, "worker"), address, shlex.join(cmd))
        for i in range(n):
            if self.signals:
                break
            env = worker_env(spec, i, address, data_dir=self.launch.get("data_dir"),
                             devices_per_worker=self.launch.get("devices_per_worker"))
            worker_argv = argv
            if self.network is not None:
                env, worker_argv = self.network.worker_env(i, env), self.network.wrap(i, argv)
            with open(self.run_dir / f"worker-{i}.log", "ab") as log:
                log.write(f"{ATTEMPT_HEADER} attempt {number} (restart {record['restart']}, resume "
                          f"{record['resume']}) of job {spec.name}, process {i} of {n}, coordinator "
                          f"{address}, {_now()} =====\n".encode())
                log.flush()
                proc = subprocess.Popen(
                    worker_argv, cwd=self.launch["cwd"], env=env, stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT, process_group=0)
            self.workers.append(_Worker(i, proc))
            logger.info("%s: pid %d", self._worker_name(i), proc.pid)
        record["pids"] = [w.proc.pid for w in self.workers]
        # After a gang restart the message keeps saying why it happened.
        self.status.update(state=JobState.RUNNING.value, pids=record["pids"], worker_exit_codes=[None] * n)
        self._save()

        outcome = None
        while outcome is None:
            if echo:
                echo.pump()
            self._reap()
            if self.signals or len(self.workers) < n:
                if self.signals:
                    logger.warning("%s received: stopping %s (SIGTERM, then SIGKILL after %gs; "
                                   "a second Ctrl-C kills them at once)",
                                   signal.Signals(self.signals[0]).name, count(n, "worker"), self.grace)
                self._stop_workers(self.grace, echo=echo)
                outcome = _Outcome("stopped", self._codes(n))
                break
            # (exit order, exit code, worker) of the workers that ended, in the order they ended.
            exited = sorted((w.exit_order, w.exit_code, w) for w in self.workers
                            if w.exit_order is not None and w.exit_code is not None)
            stopped_early = [(code, w) for _, code, w in exited if code != exit_codes.SUCCESS]
            if stopped_early:
                # The first worker that ended with anything but 0 decides: 42 preempted, else failed.
                first_code, first = stopped_early[0]
                kind = "preempted" if first_code == exit_codes.PREEMPTED_EXIT_CODE else "failure"
                what = (f"{self._worker_name(first.index)} exited with {first_code} "
                        f"({exit_codes.describe(first_code)})")
                if kind == "failure" and not self.signals and self.status["restarts"] < spec.max_restarts \
                        and first_code != exit_codes.CONFIG_ERROR_EXIT_CODE:
                    # BlockingRecreate: the restart is under way while the old workers go.
                    self.status.update(state=JobState.RESTARTING.value,
                                       message=f"{what}; stopping every worker for a gang restart")
                    self._save()
                logger.warning("%s: stopping the other workers", what)
                self._stop_workers(self.grace, echo=echo)
                # The job's verdict is the first worker's; the others were stopped by us.
                outcome = _Outcome(kind, self._codes(n), first.index)
                break
            if len(exited) == n:
                outcome = _Outcome("succeeded", self._codes(n))
                break
            time.sleep(POLL_SECONDS)
        if echo:
            echo.pump(final=True)
        if self.network is not None:
            self.network.down()  # every worker of the attempt is gone
        record.update(exit_codes=outcome.codes, outcome=outcome.kind, ended=_now())
        self.status["worker_exit_codes"] = outcome.codes
        self._save()
        return outcome

    def _codes(self, n: int) -> list[int | None]:
        codes: list[int | None] = [None] * n
        for w in self.workers:
            codes[w.index] = w.exit_code
        return codes

    def _reap(self) -> None:
        """Collect the exit codes of workers that ended; kill what they left in their group."""
        changed = False
        for w in self.workers:
            if w.exit_code is None and w.proc.poll() is not None:
                w.exit_code = exit_codes.from_returncode(w.proc.returncode)
                self.exits_seen += 1
                w.exit_order = self.exits_seen
                changed = True
                logger.info("worker %d (pid %d) exited with %d (%s)", w.index, w.proc.pid, w.exit_code,
                            exit_codes.describe(w.exit_code))
                # Like a container that ends: nothing it started may outlive it.
                if _kill_group(w.proc.pid) and not w.group_killed:
                    logger.warning("worker %d left processes in its process group %d; killed them",
                                   w.index, w.proc.pid)
        if changed:
            self.status["worker_exit_codes"] = self._codes(len(self.workers))
            self._save()

    def _stop_workers(self, grace: float, *, echo: _LogEcho | None = None) -> None:
        """SIGTERM every running worker, wait up to ``grace`` seconds (less after a second stop
        signal), SIGKILL the process groups of those left, and reap them all."""
        self._reap()
        running = [w for w in self.workers if w.exit_code is None]
        for w in running:
            logger.info("worker %d: SIGTERM to pid %d", w.index, w.proc.pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(w.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while any(w.exit_code is None for w in self.workers):
            forced = len(self.signals) >= 2  # a second Ctrl-C: no more waiting
            if time.monotonic() >= deadline or forced:
                left = [w for w in self.workers if w.exit_code is None]
                reason = "a second stop signal" if forced else f"the grace period ({grace:g}s)"
                logger.warning("after %s, SIGKILL to the process groups of workers %s", reason,
                               ", ".join(str(w.index) for w in left))
                for w in left:
                    _kill_group(w.proc.pid)
                    w.group_killed = True
                for w in left:
                    w.proc.wait()
                self._reap()
                break
            if echo:
                echo.pump()
            time.sleep(POLL_SECONDS)
            self._reap()


def _status_from_dict(data: Mapping[str, Any], run_dir: Path) -> JobStatus:
    return JobStatus(
        name=data["name"],
        state=JobState(data["state"]),
        processes=data["processes"],
        restarts=data.get("restarts", 0),
        exit_code=data.get("exit_code"),
        message=data.get("message", ""),
        reason=StopReason(data["reason"]) if data.get("reason") else None,
        run_dir=str(run_dir),
        created=data.get("created"),
    )


# ------------------------------------------------------------------------------------
# The backend
# ------------------------------------------------------------------------------------


def max_workers_setting(max_workers: int | None = None) -> int:
    """The local worker cap: ``max_workers``, else ``$ROXXEL_LOCAL_MAX_WORKERS``, else the default.

    Raises:
        BackendError: the cap (or the variable) is not a positive integer.
    """
    if max_workers is None:
        text = os.environ.get(MAX_WORKERS_ENV)
        if text is None:
            return DEFAULT_MAX_WORKERS
        try:
            max_workers = int(text)
        except ValueError:
            raise BackendError(f"${MAX_WORKERS_ENV}={text!r} is not an integer") from None
    if max_workers < 1:
        raise BackendError(f"the local worker cap must be at least 1, got {max_workers}")
    return max_workers


def check_worker_count(spec, max_workers: int | None = None) -> None:
    """Refuses a spec with more processes than a local run may start (each is a Python + JAX).

    Raises:
        BackendError: naming the count, the cap and how to raise it.
    """
    cap = max_workers_setting(max_workers)
    if spec.num_processes > cap:
        raise BackendError(
            f"{spec.name}: {spec.num_processes} worker processes is more than the local cap of {cap}; "
            f"shrink the job for a local run (e.g. --set accelerator=cpu) or raise the cap with "
            f"--max-workers N (or ${MAX_WORKERS_ENV})")


@dataclasses.dataclass(frozen=True)
class LocalOptions:
    """How the local backend runs its jobs: what a cluster would decide for the pods.

    Attributes:
        foreground: ``submit`` and ``resume`` run the supervisor in this process (main
            thread only) and return when the job is terminal; otherwise they start a
            detached supervisor and return once it runs.
        echo: with ``foreground``, a text stream that gets worker 0's output, each line
            prefixed ``[worker 0] ``; None: logs only.
        data_dir: local directory given to the workers as ``ROXXEL_DATA_DIR`` (see
            :func:`resolve_data_dir`).
        devices_per_worker: CPU devices per worker (``XLA_FLAGS``), >= 1; None: JAX's default.
        cwd: the workers' working directory; default the current directory at ``submit``.
        network: one of :data:`NETWORKS`: ``loopback``, or ``netns`` for a network
            namespace per worker (needs root; loopback with a warning otherwise).
        max_workers: the most worker processes this machine may start for one job;
            None: ``$ROXXEL_LOCAL_MAX_WORKERS``, else :data:`DEFAULT_MAX_WORKERS`.
        stop_timeout: seconds ``delete`` waits for a running supervisor to stop its workers
            before it SIGKILLs them; None: the job's grace period (capped at
            :data:`GRACE_CAP_SECONDS`) + 30.
    """

    foreground: bool = False
    echo: IO[str] | None = None
    data_dir: str | None = None
    devices_per_worker: int | None = None
    cwd: str | None = None
    network: str = "loopback"
    max_workers: int | None = None
    stop_timeout: float | None = None


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
                f"runs are kept under ${ROOT_ENV} or ./{DEFAULT_ROOT})")
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
        data_dir, devices_per_worker, network = opts.data_dir, opts.devices_per_worker, opts.network
        max_workers = opts.max_workers
        cwd = os.path.abspath(opts.cwd or os.getcwd())
        if devices_per_worker is not None and devices_per_worker < 1:
            raise BackendError(f"devices per worker must be at least 1, got {devices_per_worker}")
        if network not in NETWORKS:
            raise BackendError(f"network must be one of {', '.join(NETWORKS)}, got {network!r}")
        if network == "netns":
            from roxxel_launch.backends import netns

            netns.pod_hosts(spec)  # the pods' names and coordinator, checked before anything starts
        check_worker_count(spec, max_workers)
        resolved_data = resolve_data_dir(spec, data_dir, cwd=cwd)
        run_dir = self.run_dir(spec.name)
        if run_dir.exists():
            raise self._exists_error(spec.name, run_dir)
        if dry_run:
            return JobStatus(
                name=spec.name, state=JobState.PENDING, processes=spec.num_processes, run_dir=str(run_dir),
                message=f"dry run: would start {count(spec.num_processes, 'local worker')}: "
                        f"{shlex.join(worker_command(spec))} in {cwd}")
        from roxxel_launch.spec import spec_to_dict

        self.root.mkdir(parents=True, exist_ok=True)
        try:
            run_dir.mkdir()
        except FileExistsError:
            raise self._exists_error(spec.name, run_dir) from None
        created = _now()
        _write_json(run_dir / SPEC_FILE, spec_to_dict(spec))
        _write_json(run_dir / LAUNCH_FILE, {
            "cwd": cwd, "data_dir": resolved_data, "devices_per_worker": devices_per_worker,
            "python": sys.executable, "network": network, "created": created})
        _write_json(run_dir / STATUS_FILE, {
            "name": spec.name, "state": JobState.PENDING.value, "processes": spec.num_processes,
            "max_restarts": spec.max_restarts, "restarts": 0, "resumes": 0, "exit_code": None,
            "message": "", "created": created, "updated": created, "supervisor_pid": None,
            "pids": [], "worker_exit_codes": [], "failed_process": None, "attempts": []})
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
        data = _read_json(run_dir / STATUS_FILE)
        status = _status_from_dict(data, run_dir)
        if not status.state.terminal and data.get("supervisor_pid") is not None \
                and not lock_is_held(run_dir / LOCK_FILE):
            # Re-read: the supervisor may have finished between the two reads.
            data = _read_json(run_dir / STATUS_FILE)
            status = _status_from_dict(data, run_dir)
            if not status.state.terminal:
                status = dataclasses.replace(
                    status, state=JobState.FAILED, reason=StopReason.FAILED,
                    message=f"the supervisor (pid {data['supervisor_pid']}) ended without recording a final "
                            f"state (was {status.state.value}); see {run_dir / SUPERVISOR_LOG}")
        return status

    def logs(self, name: str, *, process: int = 0, follow: bool = False,
             all_processes: bool = False, since_seconds: int | None = None,
             previous: bool = False) -> Iterator[str]:
        """Lines (without newline) of worker ``process``'s log, every attempt, with headers.

        Args:
            name: the job.
            process: ``0 <= process < processes``.
            follow: keep reading while the job's supervisor runs; stop once it has ended
                and the log is read to its end.

        Raises:
            JobNotFoundError: no local job of that name.
            BackendError: ``process`` out of range.
        """
        if all_processes or since_seconds is not None or previous:
            raise BackendError("--all, --since and --previous read pods on Kubernetes; a local "
                               f"run's logs are the files worker-N.log in its run directory "
                               f"(roxxel-launch status {name} --local names it)")
        run_dir = self._existing(name)
        count = _read_json(run_dir / STATUS_FILE)["processes"]
        if not 0 <= process < count:
            raise BackendError(f"job {name!r} has processes 0 to {count - 1}; there is no process {process}")
        return self._read_log(run_dir, run_dir / f"worker-{process}.log", follow)

    @staticmethod
    def _read_log(run_dir: Path, path: Path, follow: bool) -> Iterator[str]:
        offset, partial = 0, b""
        while True:
            alive = follow and lock_is_held(run_dir / LOCK_FILE)
            try:
                with open(path, "rb") as f:
                    f.seek(offset)
                    data = f.read()
            except FileNotFoundError:
                data = b""
            offset += len(data)
            *lines, partial = (partial + data).split(b"\n")
            for line in lines:
                yield line.decode("utf-8", errors="replace")
            if not alive and not data:
                if partial:
                    yield partial.decode("utf-8", errors="replace")
                return
            if not data:
                time.sleep(0.2)

    def list(self) -> list[JobStatus]:
        """Every local job under the root, sorted by name."""
        if not self.root.is_dir():
            return []
        out = []
        for entry in sorted(self.root.iterdir()):
            if (entry / STATUS_FILE).is_file() and not names.dns1035_label_problem(entry.name):
                out.append(self.status(entry.name))
        return out

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
        data = _read_json(run_dir / STATUS_FILE)
        lock = run_dir / LOCK_FILE
        supervisor = data.get("supervisor_pid")
        timeout = self.options.stop_timeout
        if lock_is_held(lock) and supervisor:
            if timeout is None:
                spec = _read_json(run_dir / SPEC_FILE)
                timeout = min(spec.get("termination_grace_period", 300), GRACE_CAP_SECONDS) + 30
            logger.info("stopping local job %s: SIGTERM to its supervisor (pid %d)", name, supervisor)
            with contextlib.suppress(ProcessLookupError):
                os.kill(supervisor, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while lock_is_held(lock) and time.monotonic() < deadline:
                time.sleep(POLL_SECONDS)
            if lock_is_held(lock):
                logger.warning("the supervisor of %s (pid %d) did not stop within %gs; killing it and its workers",
                               name, supervisor, timeout)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(supervisor, signal.SIGKILL)
        # Workers of a supervisor that was killed: their groups may still exist.
        for pid in _read_json(run_dir / STATUS_FILE).get("pids", []):
            if _is_local_worker(pid) and _group_alive(pid):
                logger.warning("killing leftover worker process group %d of job %s", pid, name)
                _kill_group(pid)
        if _read_json(run_dir / LAUNCH_FILE).get("network") == "netns":
            from roxxel_launch.backends import netns

            if netns.unavailable_reason() is None:
                netns.cleanup_stale()  # the namespaces a killed supervisor left
        shutil.rmtree(run_dir)
        logger.info("deleted local job %s (%s)", name, run_dir)

    def resume(self, name: str, *, spec=None) -> JobStatus:
        """Run a preempted or failed job again from ``spec.json`` and ``launch.json``; the
        training program restores its last checkpoint itself. Restarts count from 0 again.
        Runs in the foreground or detached as :attr:`options` say.

        Args:
            name: the job.
            spec: for a job whose run directory was deleted: its ``JobSpec``, submitted again
                with this backend's options (same run name and checkpoint_dir, so training
                restores its last checkpoint). Ignored while the run directory exists.

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
        if not status.state.terminal or lock_is_held(run_dir / LOCK_FILE):
            raise BackendError(f"local job {name!r} is {status.state.value.lower()}: wait for it "
                               f"(`roxxel-launch wait {name} --local`) or stop it first")
        if status.state is JobState.SUCCEEDED:
            raise BackendError(f"local job {name!r} succeeded; there is nothing to resume "
                               f"(delete it to run it again from scratch)")
        return self._start(run_dir, resume=True)

    # -- starting a supervisor ---------------------------------------------------------------
    def _start(self, run_dir: Path, *, resume: bool) -> JobStatus:
        if self.options.foreground:
            stderr_level = logging.getLogger().getEffectiveLevel()
            return _Supervisor(run_dir, echo=self.options.echo, resume=resume,
                               stderr_level=stderr_level).run()
        return self._spawn_detached(run_dir, resume=resume)

    def _spawn_detached(self, run_dir: Path, *, resume: bool) -> JobStatus:
        launch = _read_json(run_dir / LAUNCH_FILE)
        # No supervisor runs (checked by the caller): clear the pid so that the handshake
        # below sees the new supervisor's own record.
        data = _read_json(run_dir / STATUS_FILE)
        data["supervisor_pid"] = None
        _write_json(run_dir / STATUS_FILE, data)
        cmd = [sys.executable, "-m", "roxxel_launch.backends.local", "supervise", str(run_dir)]
        if resume:
            cmd.append("--resume")
        with open(run_dir / SUPERVISOR_LOG, "ab") as log:
            proc = subprocess.Popen(cmd, cwd=launch["cwd"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=log, start_new_session=True)
        logger.info("started the supervisor of %s: pid %d", run_dir.name, proc.pid)
        deadline = time.monotonic() + HANDSHAKE_SECONDS
        while time.monotonic() < deadline:
            data = _read_json(run_dir / STATUS_FILE)
            if data.get("supervisor_pid") == proc.pid:
                return _status_from_dict(data, run_dir)
            if proc.poll() is not None:
                tail = "\n".join(_tail(run_dir / SUPERVISOR_LOG, TAIL_LINES, since_header=False))
                raise BackendError(f"the supervisor of {run_dir.name} exited with {proc.returncode} before it "
                                   f"started the job; last lines of {run_dir / SUPERVISOR_LOG}:\n{tail}")
            time.sleep(0.05)
        raise BackendError(f"the supervisor of {run_dir.name} (pid {proc.pid}) did not take over within "
                           f"{HANDSHAKE_SECONDS:g}s; see {run_dir / SUPERVISOR_LOG}")

    @staticmethod
    def _exists_error(name: str, run_dir: Path) -> JobExistsError:
        return JobExistsError(
            f"a local job named {name!r} already exists ({run_dir}): resume it with "
            f"`roxxel-launch resume {name} --local`, or delete it with `roxxel-launch delete {name} --local`")


# ------------------------------------------------------------------------------------
# Detached supervisor: python -m roxxel_launch.backends.local supervise RUN_DIR [--resume]
# ------------------------------------------------------------------------------------


def _main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) not in (2, 3) or args[0] != "supervise" or (len(args) == 3 and args[2] != "--resume"):
        sys.stderr.write("usage: python -m roxxel_launch.backends.local supervise RUN_DIR [--resume]\n")
        return exit_codes.USAGE_ERROR
    status = _Supervisor(Path(args[1]), echo=None, resume=len(args) == 3, stderr_level=None).run()
    return status.exit_code if status.exit_code is not None else 1


if __name__ == "__main__":
    raise SystemExit(_main())
