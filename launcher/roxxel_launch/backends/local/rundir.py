"""The run directory of a local job: its files, and how they are read and written.

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
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from roxxel_launch.backends.base import BackendError, JobState, JobStatus, StopReason

SPEC_FILE = "spec.json"
LAUNCH_FILE = "launch.json"
STATUS_FILE = "status.json"
SUPERVISOR_LOG = "supervisor.log"
LOCK_FILE = "supervisor.lock"
ATTEMPT_HEADER = "===== roxxel-launch:"
"""Start of the line written to every worker log before each attempt."""
TAIL_LINES = 20
"""Lines of a failed worker's log quoted in the job's message."""
GRACE_CAP_SECONDS = 30
"""Seconds: the most a local run waits between SIGTERM and SIGKILL, whatever the spec says."""
POLL_SECONDS = 0.1
"""Seconds between two looks of the supervisor at its workers."""


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as JSON under a temporary name and rename it: readers never see a prefix."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def log_tail(path: Path, lines: int, *, since_header: bool = True) -> list[str]:
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
                out = out[i + 1 :]
                break
    return out[-lines:]


def acquire_lock(lock_path: Path, *, wait: float = 2.0) -> int:
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


def lock_is_held(lock_path: Path) -> bool:
    """True while another process holds an exclusive ``flock`` on ``lock_path`` (a supervisor's lock).

    A missing file is not held. The probe takes a shared lock without blocking and releases it
    at once by closing its descriptor.
    """
    try:
        fd = os.open(lock_path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # also releases the probe's shared lock
    return False


def status_from_dict(data: Mapping[str, Any], run_dir: Path) -> JobStatus:
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


def job_running(state: JobState, run_dir: Path) -> bool:
    """Whether a local job is still running: its record is not final yet, or its supervisor
    still holds the run's lock (it is finishing: writing the final record, stopping workers)."""
    return not state.terminal or lock_is_held(run_dir / LOCK_FILE)


def read_log(run_dir: Path, path: Path, follow: bool) -> Iterator[str]:
    """Lines (without newline, undecodable bytes replaced) of the log at ``path``; with
    ``follow``, keeps reading while the run's supervisor holds its lock, and stops once it has
    let go and the log is read to its end. A log not written yet reads as empty."""
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
