"""A checkpoint directory belongs to one run, written by one trainer at a time.

- **Owner**: the first save records the run's name in ``<directory>/roxxel_run.json``
  (written atomically: a temporary name, then a rename); a checkpointer of another run is
  refused before any restore or save. A renamed job (``--set name=b`` with the YAML's
  ``checkpoint_dir``) would otherwise restore the first job's steps and write its own
  among them, where retention deletes the first job's.
- **Writer**: process 0 of a run holds an exclusive ``flock`` on
  ``<directory>/.roxxel-writer.lock`` for the checkpointer's life (NFS emulates ``flock``
  with POSIX byte-range locks, so it holds across hosts there; the kernel drops it when the
  process dies, so a dead writer's lock is never stale). The file names the holder. On object
  storage (``gs://``) the lock is a lease object (:mod:`roxxel.train.checkpoint.lease`):
  taken with a generation precondition, renewed, taken over once stale.
- **Agreement**: every process of a ``jax.distributed`` run must name the same directory
  and run; one all-gather of a digest checks it (processes started with different
  directories trained, then waited out Orbax's timeout at the final save).
"""

from __future__ import annotations

import datetime
import fcntl
import hashlib
import json
import logging
import os
import socket
import threading
from typing import Any

import numpy as np
from etils import epath

from roxxel.contract import OWNER_FILE as OWNER_FILE  # re-exported: the launcher reads it too
from roxxel.exit_codes import ConfigurationError

log = logging.getLogger("roxxel.checkpoint")

LOCK_FILE = ".roxxel-writer.lock"


class CheckpointOwnerError(ConfigurationError, RuntimeError):
    """The checkpoint directory belongs to another run, another process writes it, or the
    processes of this run disagree on it. A configuration error (exit 78 under
    ``roxxel-worker``): every restart would hit it again."""


def read_owner(directory: epath.Path) -> dict[str, Any] | None:
    """The directory's owner record, or ``None`` when it has none (new, or an older Roxxel's)."""
    path = directory / OWNER_FILE
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise CheckpointOwnerError(
            f"{path}: cannot read the checkpoint directory's owner record ({err}); "
            "restore it, or remove it if this directory belongs to this run"
        ) from err
    return record if isinstance(record, dict) else None


def check_owner(directory: epath.Path, run_name: str | None) -> None:
    """Refuse a run whose name differs from the one the directory records.

    Raises:
        CheckpointOwnerError: names both runs and the two ways on.
    """
    record = read_owner(directory)
    if run_name is None or record is None or record.get("run") == run_name:
        return
    raise CheckpointOwnerError(
        f"checkpoint directory {directory} belongs to run {record.get('run')!r} (since {record.get('created', '?')}), "
        f"not to this run {run_name!r}: restoring it would continue that run's training and this run's saves would "
        f"replace its steps. Give this run a checkpoint directory of its own (with roxxel-launch: --set "
        f"checkpoint_dir=... together with --set name={run_name}), and to start from that run's weights, give "
        f"restore_from={directory} (Checkpointer(restore_from=...), the spec's restore_from): read, never written"
    )


def record_owner(directory: epath.Path, run_name: str | None) -> None:
    """Write the owner record if the directory has none (process 0, at the first save)."""
    if run_name is None or read_owner(directory) is not None:
        return
    record = {"run": run_name, "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    text = json.dumps(record, indent=1) + "\n"
    path = directory / OWNER_FILE
    tmp = directory / f"{OWNER_FILE}.tmp-{os.getpid()}"
    tmp.write_text(text)
    tmp.rename(path)
    log.info("checkpoint directory %s now belongs to run %r", directory, run_name)


class _FileLock:
    """An exclusive ``flock`` on an open descriptor; closing the descriptor drops it."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.lost: str | None = None

    def release(self, remove: bool = True) -> None:
        os.close(self.fd)


_held: dict[str, tuple[Any, int]] = {}  # directory -> (_FileLock | GcsLease, checkpointers holding it)
_held_lock = threading.Lock()


def _holder_line(run_name: str | None) -> str:
    return (
        f"run {run_name!r}, host {socket.gethostname()}, pid {os.getpid()}, since "
        f"{datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}"
    )


def acquire_writer_lock(directory: epath.Path, run_name: str | None) -> str | None:
    """Take the directory's writer lock; ``None`` when taken, else a line naming the holder.
    Reentrant within a process (two checkpointers of one program). On ``gs://`` it is a
    lease (:class:`~roxxel.train.checkpoint.lease.GcsLease`), which may wait up to its ttl
    (``ROXXEL_CHECKPOINT_LEASE_S``, default 30 s) for an existing lease to go stale.

    When the object store fails, it logs a warning and goes on without a lease.
    """
    key = os.fspath(directory)
    with _held_lock:
        if key in _held:
            held, users = _held[key]
            _held[key] = (held, users + 1)
            return None
        taken = _take_lease(key, run_name) if key.startswith("gs://") else _take_flock(key, run_name)
        if isinstance(taken, str):
            return taken
        if taken is not None:
            _held[key] = (taken, 1)
        return None


def _take_lease(key: str, run_name: str | None) -> Any:
    from roxxel.train.checkpoint.lease import DEFAULT_TTL_S, GcsLease

    ttl = float(os.environ.get("ROXXEL_CHECKPOINT_LEASE_S") or DEFAULT_TTL_S)
    try:
        return GcsLease.take(key, {"holder": _holder_line(run_name)}, ttl_s=ttl)
    except Exception as err:  # the store itself failing: the saves will say so; the lease is only a guard
        log.warning(
            "no writer lease on %s (%s: %s): another trainer on it would not be noticed", key, type(err).__name__, err
        )
        return None


def _take_flock(key: str, run_name: str | None) -> _FileLock | str | None:
    path = os.path.join(key, LOCK_FILE)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as err:  # a read-only mount: a reader, not a writer
        log.warning("no writer lock on %s (%s): another trainer on it would not be noticed", key, err)
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
        os.close(fd)
        return holder or "another process (it wrote no details)"
    os.ftruncate(fd, 0)
    os.pwrite(fd, (_holder_line(run_name) + "\n").encode(), 0)
    return _FileLock(fd)


def lock_lost(directory: epath.Path) -> str | None:
    """Why this process no longer holds the directory's writer lock (a lease taken over), or ``None``."""
    with _held_lock:
        held = _held.get(os.fspath(directory))
    return None if held is None else held[0].lost


def release_writer_lock(directory: epath.Path, *, remove: bool = True) -> None:
    """Release one hold of :func:`acquire_writer_lock` (the lock goes with the last).

    ``remove=False`` (after a failed save): a ``gs://`` lease is left to go stale instead
    of deleted, so that a failing store does not hold the exit up (the next writer takes
    it over after its ttl)."""
    key = os.fspath(directory)
    with _held_lock:
        if key not in _held:
            return
        held, users = _held.pop(key)
        if users > 1:
            _held[key] = (held, users - 1)
            return
    held.release(remove=remove)


def identity_digest(directory: epath.Path, run_name: str | None) -> np.ndarray:
    """32 bytes (uint8) that every process of a run must share: its directory and run name."""
    text = json.dumps([os.fspath(directory), run_name])
    return np.frombuffer(hashlib.sha256(text.encode()).digest(), dtype=np.uint8)


def check_agreement(directory: epath.Path, run_name: str | None, lock_holder: str | None) -> None:
    """All processes: one all-gather of (identity digest, process 0's lock verdict); raise the
    same error on every process when they differ or process 0 could not take the lock.

    Raises:
        CheckpointOwnerError: names the processes whose directory or run differs, or the holder.
    """
    import jax

    if jax.process_count() == 1:
        if lock_holder is not None:
            raise _held_elsewhere(directory, lock_holder)
        return
    from jax.experimental import multihost_utils

    mine = np.concatenate([identity_digest(directory, run_name), np.array([lock_holder is not None], np.uint8)])
    everyone = np.asarray(multihost_utils.process_allgather(mine))
    differing = [i for i in range(everyone.shape[0]) if not np.array_equal(everyone[i, :32], everyone[0, :32])]
    if differing:
        raise CheckpointOwnerError(
            f"the processes of this run name different checkpoint directories or run names: process(es) "
            f"{', '.join(map(str, differing))} differ from process 0 (this is process {jax.process_index()}: {directory}, "
            f"run {run_name!r}); give every process the same ROXXEL_CHECKPOINT_DIR and ROXXEL_RUN_NAME"
        )
    if everyone[0, 32]:
        raise _held_elsewhere(directory, lock_holder or "another process (named in process 0's log)")


def _held_elsewhere(directory: epath.Path, holder: str) -> CheckpointOwnerError:
    return CheckpointOwnerError(
        f"checkpoint directory {directory} is being written by another trainer ({holder}); two trainers on one "
        "directory overwrite each other's steps: stop that one, or give this run another checkpoint directory"
    )
