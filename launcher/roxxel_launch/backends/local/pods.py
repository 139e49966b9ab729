"""A pod of the rendered manifest as a local process: its command line and environment.

Everything comes from the job's process plans (:mod:`roxxel_launch.backends.process_plan`:
each pod's command, env and volumes as the manifest gives them); this module only puts this
machine in place of the cluster: the image's environment is the launcher's
own (its Python first on ``PATH``), the data volume is a local directory
(:func:`resolve_data_dir`), emptyDir volumes are directories of the run, and the pods' DNS
names point at this machine (:func:`host_aliases`).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from roxxel import contract as shared
from roxxel.contract import (
    ENV_MEGASCALE_NUM_SLICES,
    ENV_MEGASCALE_SLICE_ID,
    ENV_TPU_PROCESS_ADDRESSES,
    ENV_TPU_WORKER_HOSTNAMES,
    ENV_TPU_WORKER_ID,
)
from roxxel_launch import contract
from roxxel_launch.backends import rendered_pods
from roxxel_launch.backends.base import BackendError
from roxxel_launch.backends.process_plan import ProcessPlan, SecretLookup, mounts, spec_plans

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


@dataclasses.dataclass(frozen=True)
class LocalSettings:
    """What this machine puts in place of the cluster for every pod of a run.

    Attributes:
        python: the interpreter whose folder leads ``PATH`` (the image's ``bin``).
        run_dir: the run directory; emptyDir volumes live under ``<run_dir>/pods/<pod>/``.
        data_dir: the local directory mounted in place of the data volume, or None.
        devices_per_worker: CPU devices each worker's JAX sees (``XLA_FLAGS``), or None.
    """

    python: str
    run_dir: Path
    data_dir: str | None = None
    devices_per_worker: int | None = None


def volume_paths(pod: rendered_pods.RenderedPod, settings: LocalSettings) -> dict[str, str]:
    """Mount path -> local directory of the volumes a local process can stand in for: the
    data volume (``settings.data_dir``) and every emptyDir except ``/dev/shm`` (a directory
    of the pod under the run directory, new for every attempt as a new pod's is)."""
    out = {}
    for mount in mounts(pod):
        if mount.data and settings.data_dir is not None:
            out[mount.path] = settings.data_dir
        elif mount.scratch:
            out[mount.path] = str(settings.run_dir / "pods" / pod.name / mount.name)
    return out


def _map_path(value: str, paths: Mapping[str, str]) -> str:
    """A value naming a mount path, as the local process sees it: the mount path itself
    (``TMPDIR=/tmp``) for every volume, paths below it for the data volume only. (A path
    below ``/tmp`` on this machine, such as a local ``checkpoint_dir``, is this machine's.)"""
    for mount, local in paths.items():
        if value == mount:
            return local
        if mount == contract.DATA_MOUNT_PATH and value.startswith(mount + "/"):
            return local + value[len(mount) :]
    return value


def host_aliases(pods: Sequence[rendered_pods.RenderedPod], coordinator_address: str, port: int) -> str:
    """``ROXXEL_HOST_ALIASES`` for a run on one loopback: every pod's hostname and DNS names
    -> 127.0.0.1, and the coordinator's ``name:port`` -> ``127.0.0.1:<port>`` (a pod port
    that concurrent local jobs could not all bind on one machine).

    Raises:
        BackendError: the coordinator is no pod's DNS name (the workers could never meet).
    """
    names = [n for pod in pods for n in (pod.name, *pod.dns_names)]
    host = coordinator_address.rpartition(":")[0]
    if host not in names:
        raise BackendError(
            f"the pods would connect to the coordinator {coordinator_address}, which is no "
            f"pod's DNS name ({', '.join(names)}): fix the template or the environment "
            "contract so that both name process 0's pod"
        )
    return ",".join([f"{n}=127.0.0.1" for n in names] + [f"{coordinator_address}=127.0.0.1:{port}"])


def secret_from_environment(base: Mapping[str, str]) -> SecretLookup:
    """``(name, valueFrom) -> value`` for the process plans: a Secret's or
    ConfigMap's key, which a local run cannot read, is taken from ``base`` by the variable's name.

    Raises (when called):
        BackendError: the variable is not in ``base`` and its reference is not optional.
    """

    def secret(name: str, source: Mapping[str, Any]) -> str | None:
        if name in base:
            return base[name]
        ref = source.get("secretKeyRef") or source.get("configMapKeyRef") or {}
        if ref.get("optional"):
            return None
        kind = "Secret" if "secretKeyRef" in source else "ConfigMap"
        raise BackendError(
            f"env {name} comes from the {kind} {ref.get('name')!r} (key {ref.get('key')!r}), "
            f"which a local run cannot read: set {name} in the environment of "
            "`roxxel-launch submit --local`"
        )

    return secret


def worker_process(
    plan: ProcessPlan,
    settings: LocalSettings,
    *,
    aliases: str | None = None,
    base_env: Mapping[str, str] | None = None,
) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of ``plan``'s worker container as a local process.

    The environment is, in this order: ``base_env`` (default ``os.environ``) without the
    variables the launcher owns (``contract.RESERVED_ENV_NAMES``, GKE's ``TPU_*`` /
    ``MEGASCALE_*``) and with ``JAX_PLATFORMS=cpu`` unless it sets it: the image's
    environment; then the plan's ``env`` (the container's, as the kubelet resolves it), with
    paths under the mounted data and emptyDir volumes mapped to their local directories
    (:func:`volume_paths`); ``ROXXEL_HOST_ALIASES`` when given; ``PATH`` led by the folder of
    ``settings.python`` (the image's ``bin``); ``XLA_FLAGS`` with
    ``--xla_force_host_platform_device_count`` when ``settings.devices_per_worker`` is set.
    The command is the plan's, expanded against that mapped env, its first word looked up on
    that ``PATH`` as a container runtime does.

    Raises:
        BackendError: a command not found on ``PATH``.
    """
    base = os.environ if base_env is None else base_env
    paths = volume_paths(plan.pod, settings)
    own = {k: _map_path(v, paths) for k, v in plan.env.items()}
    if settings.data_dir is not None:  # also without a data volume in the spec: --data-dir is never dropped
        own.setdefault(shared.ENV_DATA_DIR, settings.data_dir)
    env = {k: v for k, v in base.items() if k not in _OWNED_ENV}
    env.setdefault("JAX_PLATFORMS", "cpu")
    env.update(own)
    if aliases:
        env[shared.ENV_HOST_ALIASES] = aliases
    bin_dir = os.path.dirname(settings.python)
    env["PATH"] = os.pathsep.join([bin_dir] + [p for p in env.get("PATH", "").split(os.pathsep) if p and p != bin_dir])
    if settings.devices_per_worker is not None:
        env["XLA_FLAGS"] = with_device_count(env.get("XLA_FLAGS", ""), settings.devices_per_worker)
    argv = plan.argv_for(own)
    found = shutil.which(argv[0], path=env["PATH"])
    if found is None:
        raise BackendError(
            f"pod {plan.pod.name}: the container's command {argv[0]!r} is not on PATH "
            f"({env['PATH']}); install the package that provides it in {bin_dir}"
        )
    return [os.path.abspath(found), *argv[1:]], env


def with_device_count(xla_flags: str, devices: int) -> str:
    """``xla_flags`` with ``--xla_force_host_platform_device_count=devices`` in place of any
    earlier count: the CPU devices each worker's JAX sees.

    Raises:
        BackendError: ``devices`` < 1.
    """
    if devices < 1:
        raise BackendError(f"devices_per_worker must be >= 1, got {devices}")
    flags = [f for f in xla_flags.split() if not f.startswith(_XLA_DEVICE_COUNT_FLAG)]
    return " ".join([*flags, f"{_XLA_DEVICE_COUNT_FLAG}={devices}"])


def make_volume_dirs(pod: rendered_pods.RenderedPod, settings: LocalSettings) -> None:
    """Fresh, empty directories for ``pod``'s emptyDir volumes (a new pod's are empty)."""
    folder = settings.run_dir / "pods" / pod.name
    shutil.rmtree(folder, ignore_errors=True)
    for local in volume_paths(pod, settings).values():
        if local.startswith(str(folder)):
            os.makedirs(local, exist_ok=True)


def resolve_data_dir(
    spec, data_dir: str | None, *, environ: Mapping[str, str] | None = None, cwd: str | None = None
) -> str | None:
    """The local ``ROXXEL_DATA_DIR`` of a run (see "Data directory" in the docstring of
    :mod:`roxxel_launch.backends.local.backend`).

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
                f"--data-dir PATH (or set {DATA_DIR_ENV}); the workers get it as {shared.ENV_DATA_DIR}"
            )
        return None
    path = os.path.abspath(os.path.join(cwd or os.getcwd(), os.path.expanduser(data_dir)))
    if not os.path.isdir(path):
        raise BackendError(f"data directory {path!r} (from {origin}) does not exist or is not a directory")
    return path


def worker_processes(
    spec,
    run_dir: Path,
    *,
    data_dir: str | None = None,
    devices_per_worker: int | None = None,
    python: str | None = None,
    base_env: Mapping[str, str] | None = None,
) -> list[tuple[list[str], dict[str, str]]]:
    """``(argv, env)`` of every pod of ``spec``'s rendered manifest as a local process, in
    process order, on loopback and before any restart (the coordinator's DNS name is not yet
    mapped to a port here), from the job's process plans
    (:func:`roxxel_launch.backends.process_plan.spec_plans`: each pod's environment makes it
    process ``i`` of ``n``, as :func:`roxxel.distributed.detect` reads it in a pod).

    Raises:
        BackendError: the manifest holds no pods, an env entry or command has no local
            value, or a pod's environment does not make it process ``i`` of ``n``.
    """
    base = os.environ if base_env is None else base_env
    settings = LocalSettings(
        python=python or sys.executable, run_dir=run_dir, data_dir=data_dir, devices_per_worker=devices_per_worker
    )
    planned = spec_plans(spec, secret=secret_from_environment(base))
    return [worker_process(plan, settings, base_env=base) for plan in planned]
