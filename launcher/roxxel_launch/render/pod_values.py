"""The pod template's parts computed from a spec: volumes and mounts, the worker's resources,
tolerations, node selector and ports."""

from __future__ import annotations

from typing import Any

from roxxel_launch import contract, gpu_networking
from roxxel_launch.render.manifest_keys import (
    DATA_VOLUME,
    GCSFUSE_ANNOTATION,
    GCSFUSE_CACHE_VOLUME,
    GCSFUSE_DRIVER,
    GCSFUSE_LIMIT_ANNOTATIONS,
    IMPENDING_TERMINATION_TAINT,
    SHM_VOLUME,
    spot_selectors,
)
from roxxel_launch.spec import (
    EPHEMERAL_STORAGE,
    GPU_RESOURCE,
    TPU_RESOURCE,
    JobSpec,
    accelerator_node_selectors,
    parse_quantity,
)

# ----------------------------------------------------------------------------- volumes


def data_volume(spec: JobSpec) -> dict | None:
    """The read-only ``data`` volume (GCS FUSE, NFS or a PVC), or None without ``data``."""
    data = spec.data
    if data is None:
        return None
    if data.gcsfuse is not None:
        return {
            "name": DATA_VOLUME,
            "csi": {
                "driver": GCSFUSE_DRIVER,
                "readOnly": True,
                "volumeAttributes": data.gcsfuse.volume_attributes(spec.uses_host_network),
            },
        }
    if data.nfs is not None:
        return {"name": DATA_VOLUME, "nfs": {"server": data.nfs.server, "path": data.nfs.path, "readOnly": True}}
    if data.pvc is None:
        raise ValueError("data: none of gcsfuse, nfs and pvc is set")
    return {"name": DATA_VOLUME, "persistentVolumeClaim": {"claimName": data.pvc.claim, "readOnly": True}}


def gcsfuse_extras(spec: JobSpec) -> tuple[dict[str, str], list[dict]]:
    """The sidecar's annotations (injection + explicit limits) and its cache volume, if any."""
    fuse = spec.data.gcsfuse if spec.data is not None else None
    if fuse is None:
        return {}, []
    annotations = {
        GCSFUSE_ANNOTATION: "true",
        GCSFUSE_LIMIT_ANNOTATIONS["cpu"]: fuse.sidecar_cpu_limit,
        GCSFUSE_LIMIT_ANNOTATIONS["memory"]: fuse.sidecar_memory_limit,
        GCSFUSE_LIMIT_ANNOTATIONS["ephemeral_storage"]: fuse.sidecar_ephemeral_storage_limit,
    }
    if fuse.file_cache_mb is None:
        return annotations, []
    # The cache volume holds the bounded cache plus gcsfuse's own bookkeeping: 10% headroom.
    empty_dir = {"sizeLimit": f"{fuse.cache_volume_mib}Mi"}
    if fuse.file_cache_medium == "memory":
        empty_dir["medium"] = "Memory"
    return annotations, [{"name": GCSFUSE_CACHE_VOLUME, "emptyDir": empty_dir}]


def volumes_and_mounts(
    spec: JobSpec, data: dict | None, fuse_volumes: list[dict], networking: gpu_networking.PodAdditions
) -> tuple[list[dict], list[dict[str, Any]]]:
    """The pod's volumes and the worker's mounts: /dev/shm, ``data`` (the volume ``data``
    from :func:`data_volume`), the GCS FUSE cache, the networking preset's, then the spec's."""
    volumes = [{"name": SHM_VOLUME, "emptyDir": {"medium": "Memory"}}]
    mounts: list[dict[str, Any]] = [{"name": SHM_VOLUME, "mountPath": contract.SHM_MOUNT_PATH}]
    if data is not None:
        volumes.append(data)
        mounts.append({"name": DATA_VOLUME, "mountPath": contract.DATA_MOUNT_PATH, "readOnly": True})
    volumes += fuse_volumes + networking.volumes
    mounts += networking.mounts
    for extra in spec.volumes:
        volume, mount = extra.to_k8s()
        volumes.append(volume)
        mounts.append(mount)
    return volumes, mounts


def writable_dirs(spec: JobSpec) -> dict[str, list[dict]]:
    """emptyDir volumes, mounts and env for what the worker writes (contract.WRITABLE_DIRS).

    A variable the user sets already (``env`` or ``env_refs``) keeps the user's value. JAX's
    compilation cache goes to the job's shared cache (``spec.compilation_cache_dir``) where it
    has one, so that every attempt reuses what the last compiled; else to the pod's emptyDir."""
    out: dict[str, list[dict]] = {"volumes": [], "mounts": [], "env": []}
    shared_cache = spec.compilation_cache_dir
    for name, (path, variables) in contract.WRITABLE_DIRS.items():
        out["volumes"].append({"name": name, "emptyDir": {}})
        out["mounts"].append({"name": name, "mountPath": path})
        out["env"] += [
            {"name": key, "value": shared_cache if key == contract.JAX_CACHE_VARIABLE and shared_cache else value}
            for key, value in variables.items()
            if key not in spec.env and key not in spec.env_refs
        ]
    return out


# ----------------------------------------------------------------------------- resources


def _quantity(nbytes: int) -> str:
    return f"{nbytes // 2**20}Mi" if nbytes % 2**20 == 0 else str(nbytes)


def container_resources(spec: JobSpec) -> tuple[dict[str, str], dict[str, str]]:
    """The worker's limits and requests: the spec's, the accelerator's, and the disk file
    cache added to ephemeral-storage. The scheduler places a pod by its containers' requests,
    and the kubelet evicts it when its emptyDirs and containers use more than the sum of their
    limits: the cache volume is counted in both (in the limit only when one is given)."""
    limits = {**spec.resources.limits, **_accelerator_limits(spec)}
    requests = {**spec.resources.requests, **_accelerator_limits(spec)}
    cache = spec.disk_cache_bytes
    if cache:
        own = requests.get(EPHEMERAL_STORAGE, limits.get(EPHEMERAL_STORAGE))
        requests[EPHEMERAL_STORAGE] = _quantity(cache + (0 if own is None else int(parse_quantity(own))))
        if EPHEMERAL_STORAGE in limits:
            limits[EPHEMERAL_STORAGE] = _quantity(cache + int(parse_quantity(limits[EPHEMERAL_STORAGE])))
    return limits, requests


def _accelerator_limits(spec: JobSpec) -> dict[str, str]:
    accelerator = spec.accelerator
    if accelerator.tpu is not None:
        return {TPU_RESOURCE: str(accelerator.tpu.slice.chips_per_host)}
    if accelerator.gpu is not None:
        return {GPU_RESOURCE: str(accelerator.gpu.count)}
    return {}


# ----------------------------------------------------------------------------- placement


def node_selector(spec: JobSpec) -> dict[str, str]:
    """The accelerator's node labels, the spec's, then queued provisioning's."""
    provisioning = spec.queue_provisioning.node_selectors() if spec.queue_provisioning else {}
    return {**accelerator_node_selectors(spec.accelerator), **spec.node_selectors, **provisioning}


def _accelerator_tolerations(spec: JobSpec) -> list[dict]:
    resource = {"tpu": TPU_RESOURCE, "gpu": GPU_RESOURCE}.get(spec.accelerator.kind)
    if resource is None:
        return []
    tolerations = [{"key": resource, "operator": "Exists", "effect": "NoSchedule"}]
    if spec.accelerator.kind == "gpu":
        tolerations.append({"key": IMPENDING_TERMINATION_TAINT, "operator": "Exists"})
    return tolerations


def tolerations(spec: JobSpec) -> list[dict]:
    """The accelerator's, the Spot / preemptible taint's when node_selectors ask for such
    nodes (GKE recommends tainting those pools ``KEY=true:NoSchedule``; a pod that selects
    them without tolerating the taint stays Pending), the queued-provisioning nodes' taint with
    ``queue_provisioning``, then the spec's; each once."""
    spot = [
        {"key": key, "operator": "Equal", "value": "true", "effect": "NoSchedule"}
        for key in spot_selectors(spec.node_selectors)
    ]
    queued = spec.queue_provisioning.tolerations() if spec.queue_provisioning is not None else []
    out: list[dict] = []
    for toleration in _accelerator_tolerations(spec) + spot + queued + [t.to_k8s() for t in spec.tolerations]:
        if toleration not in out:
            out.append(toleration)
    return out


# ----------------------------------------------------------------------------- ports


def tpu_runtime_ports(spec: JobSpec) -> list[dict]:
    """The TPU runtime's named container ports (none off TPU)."""
    if spec.accelerator.kind != "tpu":
        return []
    return [{"name": name, "containerPort": port} for name, port in contract.TPU_RUNTIME_PORTS.items()]
