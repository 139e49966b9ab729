"""A pod's worker container as the options of ``podman create`` (or ``docker create``) and its
environment, from the job's process plan (:mod:`roxxel_launch.backends.process_plan`): what
:class:`~roxxel_launch.backends.local.containers.ContainerRuntime` creates each attempt's
containers with (its module docstring says what each pod setting becomes, and where docker
differs from podman).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from fractions import Fraction
from pathlib import Path
from typing import Any

from roxxel import contract as shared
from roxxel_launch import contract
from roxxel_launch.backends import rendered_pods
from roxxel_launch.backends.base import BackendError
from roxxel_launch.backends.local.pods import LocalSettings, secret_from_environment
from roxxel_launch.backends.process_plan import Mount, ProcessPlan, mounts, plan

__all__ = [
    "OUTPUTS_DIR",
    "container_env",
    "container_options",
    "is_docker",
    "memory_limit",
    "plan_env",
    "resource_options",
]

logger = logging.getLogger("roxxel_launch.backends.local")

OUTPUTS_DIR = "outputs"
"""The run directory's folder bound into every container as ``ROXXEL_OUTPUT_DIR``."""


def is_docker(engine: str) -> bool:
    """Whether ``engine`` (a name or a path) is docker, whose options differ from podman's."""
    return Path(engine).name == "docker"


def _security_options(pod_sc: Mapping[str, Any], sc: Mapping[str, Any], *, docker: bool = False) -> list[str]:
    user = sc.get("runAsUser", pod_sc.get("runAsUser"))
    group = sc.get("runAsGroup", pod_sc.get("runAsGroup"))
    args = []
    if user is not None:
        args += ["--user", f"{user}:{group}" if group is not None else str(user)]
    if "fsGroup" in pod_sc:
        args += ["--group-add", str(pod_sc["fsGroup"])]
    for extra in pod_sc.get("supplementalGroups") or ():
        args += ["--group-add", str(extra)]
    if sc.get("readOnlyRootFilesystem"):
        # Without --read-only-tmpfs=false podman would add writable /tmp, /run and /var/tmp,
        # which a pod's read-only root does not have.
        # (docker adds none.)
        args += ["--read-only"] if docker else ["--read-only", "--read-only-tmpfs=false"]
    for cap in (sc.get("capabilities") or {}).get("drop") or ():
        args += ["--cap-drop", cap]
    for cap in (sc.get("capabilities") or {}).get("add") or ():
        args += ["--cap-add", cap]
    if sc.get("allowPrivilegeEscalation") is False:
        args += ["--security-opt", "no-new-privileges"]
    if sc.get("privileged"):  # security.profile: privileged (all devices and capabilities, as the kubelet gives)
        args += ["--privileged=true"]
    return args


def _bind(source: str, target: str, *, read_only: bool, chown: bool = False, docker: bool = False) -> list[str]:
    """A bind mount; ``chown``: the pod's user may write it (podman's ``U`` option; docker has
    none: the directory is made writable by every user, as an emptyDir is)."""
    if "," in source or "," in target:
        raise BackendError(
            f"cannot bind {source!r} at {target!r} into a container: a path with ',' "
            "cannot be given to podman --mount; use a path without one"
        )
    options = ["type=bind", f"source={source}", f"destination={target}"]
    if chown and not read_only and docker:
        Path(source).chmod(0o1777)
    options += ["ro=true"] if read_only else (["U=true"] if chown and not docker else [])
    return ["--mount", ",".join(options)]


def _volume_options(
    pod: rendered_pods.RenderedPod, container: Mapping[str, Any], settings: LocalSettings, *, docker: bool = False
) -> tuple[list[str], list[str]]:
    """The volume options of the pod's mounts (:func:`~roxxel_launch.backends.process_plan.mounts`),
    and what cannot be mounted here (one line each)."""
    args: list[str] = []
    skipped: list[str] = []
    for mount in mounts(pod):
        if mount.shm:
            args += ["--shm-size", _podman_size(mount.size_limit) if mount.size_limit else "64m"]
        elif mount.scratch:
            args += _empty_dir(mount, _pod_user(pod, container), docker=docker)
        elif mount.data and settings.data_dir is not None:
            read_only = mount.read_only is not False  # the data volume: read-only unless the manifest says
            args += _bind(settings.data_dir, mount.path, read_only=read_only, docker=docker)
        else:
            skipped.append(f"volume {mount.name!r} ({mount.kind}) at {mount.path}")
    return args, skipped


def _empty_dir(mount: Mount, user: tuple[int, int] | None, *, docker: bool) -> list[str]:
    """An emptyDir as a tmpfs, writable by the pod's user whatever the image has at its path:
    runc gives a tmpfs over an image directory that directory's mode (0700 for the image's
    $HOME), so the tmpfs is also given to the pod's user (podman's U option, docker's
    uid/gid). docker's --mount tmpfs is noexec, which a kubelet's emptyDir is not: its
    --tmpfs takes exec."""
    size = mount.size_limit
    if docker:
        options = ["rw", "exec", "nosuid", "nodev", "mode=1777"]
        options += [f"uid={user[0]}", f"gid={user[1]}"] if user else []
        options += [f"size={_podman_size(size)}"] if size else []
        return ["--tmpfs", f"{mount.path}:{','.join(options)}"]
    options = ["type=tmpfs", f"destination={mount.path}", "tmpfs-mode=1777", "U=true"]
    return ["--mount", ",".join(options + ([f"tmpfs-size={_podman_size(size)}"] if size else []))]


def _pod_user(pod: rendered_pods.RenderedPod, container: Mapping[str, Any]) -> tuple[int, int] | None:
    """The container's ``runAsUser`` and group (``runAsGroup``, else the user's id), or None (root)."""
    pod_sc, sc = pod.spec.get("securityContext") or {}, container.get("securityContext") or {}
    user = sc.get("runAsUser", pod_sc.get("runAsUser"))
    if not user:
        return None
    group = sc.get("runAsGroup", pod_sc.get("runAsGroup"))
    return int(user), int(group if group is not None else user)


def _podman_size(quantity: str) -> str:
    """A Kubernetes quantity (``1Gi``, ``512Mi``, ``100M``, bytes) as bytes for podman."""
    from roxxel_launch.spec.fields import parse_quantity

    return str(int(parse_quantity(str(quantity))))


def resource_options(container: Mapping[str, Any]) -> list[str]:
    """The container's ``resources`` as the kubelet applies them (see the module docstring).

    A memory limit is the container's memory with no swap beside it (the kubelet runs pods
    without swap); a cpu limit is a CFS quota (``--cpus``), at most this machine's cores (an
    engine refuses more); a cpu request is the container's weight, 1024 shares per core (the
    kubelet's ``cpu.shares``). Without a limit the container has none, as on a node.
    """
    import os

    from roxxel_launch.spec.fields import parse_quantity

    resources = container.get("resources") or {}
    limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
    args: list[str] = []
    if "memory" in limits:
        memory = _podman_size(limits["memory"])
        args += ["--memory", memory, "--memory-swap", memory]
    if "cpu" in limits:
        cores = parse_quantity(str(limits["cpu"]))
        host = os.cpu_count() or 1
        if cores > host:
            logger.info(
                "the cpu limit %s is more than this machine's %d cores: the container gets %d",
                limits["cpu"],
                host,
                host,
            )
            cores = Fraction(host)
        args += ["--cpus", f"{float(cores):g}"]
    if "cpu" in requests:
        args += ["--cpu-shares", str(max(2, int(parse_quantity(str(requests["cpu"])) * 1024)))]
    return args


def memory_limit(container: Mapping[str, Any]) -> str | None:
    """The container's memory limit as the manifest writes it (``8Gi``), or None."""
    return ((container.get("resources") or {}).get("limits") or {}).get("memory")


def _local_paths(env: Mapping[str, str], *, docker: bool = False) -> list[str]:
    """Bind options for the run's outputs, its local checkpoint directory and compilation cache
    (read-write, given to the pod's user) and a local ``restore_from`` (read-only): object-store
    URLs need no mount."""
    args: list[str] = []
    outputs = env.get(shared.ENV_OUTPUT_DIR, "")
    if outputs.startswith("/"):
        Path(outputs).mkdir(parents=True, exist_ok=True)
        args += _bind(outputs, outputs, read_only=False, chown=True, docker=docker)
    checkpoint = env.get(shared.ENV_CHECKPOINT_DIR, "")
    if checkpoint.startswith("/"):
        Path(checkpoint).mkdir(parents=True, exist_ok=True)
        args += _bind(checkpoint, checkpoint, read_only=False, chown=True, docker=docker)
    # The job's shared compilation cache (spec compilation_cache), unless it is inside the
    # checkpoint directory bound above (its default place).
    cache = env.get(contract.JAX_CACHE_VARIABLE, "")
    inside = checkpoint.startswith("/") and (cache == checkpoint or cache.startswith(checkpoint.rstrip("/") + "/"))
    if cache.startswith("/") and not inside and not cache.startswith(contract.JAX_CACHE_MOUNT_PATH):
        Path(cache).mkdir(parents=True, exist_ok=True)
        args += _bind(cache, cache, read_only=False, chown=True, docker=docker)
    source = env.get(shared.ENV_RESTORE_FROM, "")
    if source.startswith("/") and Path(source).is_dir():
        args += _bind(source, source, read_only=True, docker=docker)
    return args


def container_options(
    pod: rendered_pods.RenderedPod, settings: LocalSettings, env: Mapping[str, str], *, engine: str = "podman"
) -> list[str]:
    """`podman create` options for ``pod``'s worker container (see the module docstring):
    user and groups, read-only root, capabilities, privilege escalation, resources, volumes,
    ``env``.

    Raises:
        BackendError: a path that cannot be mounted.
    """
    docker = is_docker(engine)
    container = pod.container(contract.CONTAINER_NAME)
    args = _security_options(
        pod.spec.get("securityContext") or {}, container.get("securityContext") or {}, docker=docker
    )
    volumes, skipped = _volume_options(pod, container, settings, docker=docker)
    for what in skipped:
        logger.warning("pod %s: %s is not mounted in a local container", pod.name, what)
    args += resource_options(container) + volumes + _local_paths(env, docker=docker)
    if not docker:  # podman's own TERM=xterm and container=podman, which a pod (and docker) has not
        args += [a for name in ("TERM", "container") if name not in env for a in ("--unsetenv", name)]
    for name, value in env.items():
        args += ["--env", f"{name}={value}"]
    return args


def container_env(
    pod: rendered_pods.RenderedPod,
    settings: LocalSettings,
    *,
    restart_attempt: int | None,
    pod_ip: str,
    base_env: Mapping[str, str],
) -> dict[str, str]:
    """The worker container's environment: ``pod``'s process plan
    (:func:`roxxel_launch.backends.process_plan.plan`, ``secretKeyRef``/``configMapKeyRef``
    values taken from ``base_env``) made a local container's by :func:`plan_env`.

    Raises:
        BackendError: an env entry with no local value, or one that identifies no process.
    """
    secret = secret_from_environment(base_env)
    return plan_env(plan(pod, restart_attempt=restart_attempt, pod_ip=pod_ip, secret=secret), settings)


def plan_env(planned: ProcessPlan, settings: LocalSettings) -> dict[str, str]:
    """A process plan's environment in a local container: the plan's (the manifest's ``env``
    as the kubelet resolves it), then ``ROXXEL_DATA_DIR=/data`` with ``--data-dir``,
    ``ROXXEL_OUTPUT_DIR`` (the run's ``outputs`` directory) unless set, ``JAX_PLATFORMS=cpu``
    unless set, and the ``--devices-per-worker`` flag in ``XLA_FLAGS``."""
    env = dict(planned.env)
    env.setdefault(shared.ENV_OUTPUT_DIR, str(Path(settings.run_dir).absolute() / OUTPUTS_DIR))
    if settings.data_dir is not None:
        env.setdefault(shared.ENV_DATA_DIR, contract.DATA_MOUNT_PATH)
    env.setdefault("JAX_PLATFORMS", "cpu")
    if settings.devices_per_worker is not None:
        from roxxel_launch.backends.local.pods import with_device_count

        env["XLA_FLAGS"] = with_device_count(env.get("XLA_FLAGS", ""), settings.devices_per_worker)
    return env
