"""A job's processes from its rendered manifest: what each pod's worker container runs, with
which environment and volumes, for any backend that runs the pods itself.

This is the one place that knows how a pod's container becomes a process. The local backend's
runtimes (a process of this machine's Python, or a podman / docker container) start from
these plans and put this machine in place of the cluster; a Slurm or Ray backend would start
from the same plans. The pods are those the JobSet or Job controllers would create
(:func:`roxxel_launch.backends.rendered_pods.manifest_pods`), and one plan is the worker
container (:data:`roxxel_launch.contract.CONTAINER_NAME`) of one pod:

- ``argv``: the container's ``command`` + ``args``, ``$(VAR)``-expanded against its ``env``
  (Kubernetes' rules: :func:`~roxxel_launch.backends.rendered_pods.expand`); the command
  replaces the image's entrypoint, so a plan without one is refused;
- ``env``: the container's ``env`` as the kubelet resolves it
  (:func:`~roxxel_launch.backends.rendered_pods.container_env`): entries in order, the
  downward-API fields from the labels and annotations the controllers add (the JobSet's
  restart attempt included), ``JOB_COMPLETION_INDEX``; nothing of the environment of the
  machine that plans (a backend adds what its "image" gives);
- ``mounts``: the container's ``volumeMounts`` joined with the pod's ``volumes``;
- ``process``, ``num_processes``, ``coordinator_address``: what
  :func:`roxxel.distributed.detect` reads from ``env`` (the contract of
  :mod:`roxxel.contract`). :func:`plans` checks that pod ``i`` is process ``i`` of ``n`` and
  that every pod names the same coordinator, so a backend that honours the plans starts a job
  whose workers can meet.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from roxxel import distributed
from roxxel_launch import contract
from roxxel_launch.backends.base import BackendError
from roxxel_launch.backends.rendered_pods import (
    RenderedPod,
    UnresolvedReference,
    container_argv,
    container_env,
    manifest_pods,
)

__all__ = ["Mount", "ProcessPlan", "SecretLookup", "mounts", "plan", "plans", "rendered_objects", "spec_plans"]

SecretLookup = Callable[[str, Mapping[str, Any]], "str | None"]
"""``(variable name, valueFrom) -> value`` for ``secretKeyRef`` / ``configMapKeyRef`` entries
(None: an optional one that is absent); see :func:`rendered_pods.container_env`."""


@dataclasses.dataclass(frozen=True)
class Mount:
    """One volume mount of the worker container, joined with the pod's volume of that name.

    Attributes:
        name: the volume's name in the pod.
        path: where the container sees it (``mountPath``).
        kind: the volume's source, as the pod spec names it: ``emptyDir``,
            ``persistentVolumeClaim``, ``csi`` (GCS FUSE), ``nfs``, ``hostPath``, ...;
            ``unknown`` when the pod has no volume of that name.
        read_only: the mount's ``readOnly``; None where the manifest does not say (Kubernetes
            then mounts it read-write).
        size_limit: an emptyDir's ``sizeLimit`` as the manifest writes it (a Kubernetes
            quantity such as ``8Gi``); None for no limit, or another kind.
    """

    name: str
    path: str
    kind: str
    read_only: bool | None
    size_limit: str | None

    @property
    def data(self) -> bool:
        """The job's data volume (at :data:`roxxel_launch.contract.DATA_MOUNT_PATH`)."""
        return self.path == contract.DATA_MOUNT_PATH

    @property
    def shm(self) -> bool:
        """The pod's shared memory (an emptyDir at :data:`roxxel_launch.contract.SHM_MOUNT_PATH`)."""
        return self.kind == "emptyDir" and self.path == contract.SHM_MOUNT_PATH

    @property
    def scratch(self) -> bool:
        """An emptyDir other than ``/dev/shm``: an empty directory for every new pod."""
        return self.kind == "emptyDir" and not self.shm


@dataclasses.dataclass(frozen=True)
class ProcessPlan:
    """One process of a job: the worker container of one pod (see the module docstring).

    Attributes:
        process: its JAX process id, as the worker derives it from ``env``.
        num_processes: the job's process count, likewise.
        coordinator_address: ``host:port`` of process 0's coordination service, as the pods'
            DNS name gives it (before any ``ROXXEL_HOST_ALIASES``); None for one process
            without one.
        pod: the pod (name, DNS names, grace period, its whole spec).
        image: the container's image.
        command: the container's ``command`` as written (it replaces the image's entrypoint).
        args: its ``args`` as written.
        env: the container's environment as the kubelet resolves it, in order.
        mounts: its volume mounts, in order.
        working_dir: its ``workingDir``; None: the image's.
        resources: its ``resources`` (``limits`` and ``requests`` as the manifest writes them).
    """

    process: int
    num_processes: int
    coordinator_address: str | None
    pod: RenderedPod
    image: str
    command: tuple[str, ...]
    args: tuple[str, ...]
    env: Mapping[str, str]
    mounts: tuple[Mount, ...]
    working_dir: str | None
    resources: Mapping[str, Any]

    def argv_for(self, env: Mapping[str, str]) -> list[str]:
        """``command`` + ``args`` expanded against ``env``: the plan's own, or a backend's
        version of it (paths mapped to this machine's, say).

        Raises:
            BackendError: the container has no ``command`` (there is no image entrypoint to
                fall back on outside a container runtime).
        """
        try:
            return container_argv({"name": contract.CONTAINER_NAME, "command": self.command, "args": self.args}, env)
        except ValueError as err:
            raise BackendError(f"pod {self.pod.name}: {err}") from None

    @property
    def argv(self) -> list[str]:
        """``command`` + ``args`` expanded against :attr:`env` (see :meth:`argv_for`)."""
        return self.argv_for(self.env)


def rendered_objects(spec) -> tuple[dict, ...]:
    """The manifests ``submit`` would send to a cluster for ``spec`` (without the checks that
    only a cluster needs, such as a durable checkpoint volume)."""
    from roxxel_launch.render import render

    return render(spec, cluster=False).objects


def mounts(pod: RenderedPod) -> tuple[Mount, ...]:
    """The worker container's volume mounts, each joined with the pod's volume of its name.

    Raises:
        KeyError: the pod has no worker container.
    """
    container = pod.container(contract.CONTAINER_NAME)
    volumes = {v["name"]: v for v in pod.spec.get("volumes") or ()}
    mounts = []
    for mount in container.get("volumeMounts") or ():
        volume = volumes.get(mount["name"], {})
        kind = next((k for k in volume if k != "name"), "unknown")
        size = (volume.get("emptyDir") or {}).get("sizeLimit") if kind == "emptyDir" else None
        read_only = mount.get("readOnly")
        mounts.append(
            Mount(mount["name"], mount["mountPath"], kind, None if read_only is None else bool(read_only), size)
        )
    return tuple(mounts)


def plan(
    pod: RenderedPod, *, restart_attempt: int | None, pod_ip: str = "127.0.0.1", secret: SecretLookup | None = None
) -> ProcessPlan:
    """One pod's plan (see :func:`plans` for the arguments), checked only to identify a
    process: which one is :func:`plans`'s check, over all the pods.

    Raises:
        BackendError: an env entry with no value here, or an environment that does not
            identify a process.
    """
    container = pod.container(contract.CONTAINER_NAME)
    try:
        env = container_env(pod, container, restart_attempt=restart_attempt, pod_ip=pod_ip, secret=secret)
    except UnresolvedReference as err:
        raise BackendError(str(err)) from None
    try:
        detected = distributed.detect(env)
    except ValueError as err:
        raise BackendError(f"pod {pod.name}: the rendered environment does not identify a process: {err}") from None
    return ProcessPlan(
        process=detected.process_id,
        num_processes=detected.num_processes,
        coordinator_address=detected.coordinator_address,
        pod=pod,
        image=str(container.get("image", "")),
        command=tuple(str(c) for c in container.get("command") or ()),
        args=tuple(str(a) for a in container.get("args") or ()),
        env=env,
        mounts=mounts(pod),
        working_dir=container.get("workingDir"),
        resources=container.get("resources") or {},
    )


def plans(
    pods: Sequence[RenderedPod],
    *,
    restart_attempt: int | None,
    pod_ips: Sequence[str] | None = None,
    secret: SecretLookup | None = None,
) -> list[ProcessPlan]:
    """One plan per pod, in the pods' order, which is process order (checked).

    Args:
        pods: the pods of one rendered job (:func:`~roxxel_launch.backends.rendered_pods.manifest_pods`).
        restart_attempt: the JobSet's restarts so far (its pods' ``restart-attempt`` label);
            None for a bare Job's pods, which have none.
        pod_ips: each pod's ``status.podIP`` (default 127.0.0.1 for all).
        secret: where ``secretKeyRef`` / ``configMapKeyRef`` values come from; None: such an
            entry is an error.

    Raises:
        BackendError: no pods; an env entry with no value here; a pod whose environment does
            not identify a process, that is not process ``i`` of ``len(pods)``, or that names
            another coordinator than process 0.
    """
    if not pods:
        raise BackendError("the rendered job has no pods")
    ips = list(pod_ips) if pod_ips is not None else ["127.0.0.1"] * len(pods)
    if len(ips) != len(pods):
        raise BackendError(f"{len(ips)} pod addresses for {len(pods)} pods")
    out = [plan(pod, restart_attempt=restart_attempt, pod_ip=ip, secret=secret) for pod, ip in zip(pods, ips)]
    for i, one in enumerate(out):
        if (one.process, one.num_processes) != (i, len(out)):
            raise BackendError(
                f"pod {one.pod.name}: the rendered environment makes it process "
                f"{one.process} of {one.num_processes}, not {i} of {len(out)}"
            )
        if one.coordinator_address != out[0].coordinator_address:
            raise BackendError(
                f"pod {one.pod.name} would connect to the coordinator {one.coordinator_address}, "
                f"process 0 ({out[0].pod.name}) to {out[0].coordinator_address}: fix the template so that "
                "every pod names process 0's pod"
            )
    return out


def spec_plans(
    spec,
    *,
    restarts: int = 0,
    pod_ips: Sequence[str] | None = None,
    secret: SecretLookup | None = None,
) -> list[ProcessPlan]:
    """:func:`plans` of the pods of ``spec``'s rendered manifest (:func:`rendered_objects`).

    Args:
        spec: a validated ``roxxel_launch.spec.JobSpec``.
        restarts: the gang restarts so far (a JobSet's pods carry it; a bare Job's do not).
        pod_ips, secret: as for :func:`plans`.

    Raises:
        BackendError: the manifests hold no JobSet or Indexed Job, or as :func:`plans`.
    """
    try:
        pods = manifest_pods(rendered_objects(spec))
    except ValueError as err:
        raise BackendError(f"job {spec.name!r}: {err}") from None
    attempt = restarts if pods and pods[0].replicated_job is not None else None
    return plans(pods, restart_attempt=attempt, pod_ips=pod_ips, secret=secret)
