"""What each local worker runs: its command line, its environment, its data directory.

The values follow the pod contract of :mod:`roxxel_launch.contract` (see the "Data
directory" section of :mod:`roxxel_launch.backends.local`).
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Mapping

from roxxel.contract import (
    ENV_MEGASCALE_NUM_SLICES,
    ENV_MEGASCALE_SLICE_ID,
    ENV_TPU_PROCESS_ADDRESSES,
    ENV_TPU_WORKER_HOSTNAMES,
    ENV_TPU_WORKER_ID,
)
from roxxel_launch import contract
from roxxel_launch.backends.base import BackendError

DATA_DIR_ENV = "ROXXEL_LOCAL_DATA_DIR"
"""Environment variable: the local directory that stands for the spec's data volume."""

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


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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

