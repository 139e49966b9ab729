"""What rendering refuses (a :class:`~roxxel_launch.spec.SpecError`) and what it only warns
about: a spec that validates but cannot run as manifests, or would run badly on GKE."""

from __future__ import annotations

import json
import logging
import math
import pathlib
from collections.abc import Mapping

from roxxel.contract import PREEMPTION_FILE
from roxxel_launch import gpu_networking
from roxxel_launch.render.manifest_keys import (
    GKE_NVIDIA_LIB_DIR,
    SPEC_ANNOTATION,
    SPOT_GRACE_SECONDS,
    spot_selectors,
    worker_grace_seconds,
)
from roxxel_launch.spec import DEFAULT_NODE_EPHEMERAL_STORAGE, JobSpec, SpecError

# The package's logger: users filter on it, and docs/troubleshooting.md quotes its lines.
logger = logging.getLogger("roxxel_launch.render")

# Kubernetes refuses an object whose annotations (keys + values) exceed 256 KiB in total
# (TotalAnnotationSizeLimitB in apimachinery's ValidateAnnotations).
MAX_ANNOTATIONS_BYTES = 256 * 1024
PREEMPTION_SAVE_MARGIN = 1.5
"""How much longer than the last measured preemption save the grace period should be (the
notice arrives up to one step before the agreed step, and storage varies)."""


def check_spec(field: str, problem: str | None, fix: str = "") -> None:
    """Raises SpecError(field, problem, fix) when there is a problem."""
    if problem:
        raise SpecError(field, problem, fix)


def checkpoint_problem(spec: JobSpec, path: str | None = None) -> str | None:
    """A local checkpoint_dir (or ``path``: the compilation cache) is only durable on a pod if
    a writable extra volume backs it."""
    path = spec.checkpoint_dir if path is None else path
    if path is None or "://" in path:
        return None
    for volume in spec.volumes:
        root = volume.mount_path.rstrip("/")
        if (path == root or path.startswith(root + "/")) and not volume.read_only and volume.empty_dir is None:
            return None
    return (
        f"{path!r} is a local path, and no writable persistent volume (pvc or nfs in "
        "volumes, read_only: false) is mounted there: a pod's own file system is lost on "
        "every restart, and so would be the checkpoints"
    )


def size_problem(annotations: Mapping[str, str]) -> str | None:
    """Annotations over Kubernetes' total size limit (:data:`MAX_ANNOTATIONS_BYTES`)."""
    size = sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items())
    if size > MAX_ANNOTATIONS_BYTES:
        return (
            f"the annotations take {size} bytes, more than the {MAX_ANNOTATIONS_BYTES} "
            f"Kubernetes allows (the whole spec is stored in {SPEC_ANNOTATION})"
        )
    return None


def networking_env_problem(spec: JobSpec, networking: gpu_networking.PodAdditions) -> str | None:
    """A variable the GPU networking preset sets that the spec sets too (LD_LIBRARY_PATH aside)."""
    return next(
        (
            f"{key} is set by accelerator.gpu.networking"
            for key in networking.env
            if key != "LD_LIBRARY_PATH" and (key in spec.env or key in spec.env_refs)
        ),
        None,
    )


def warn(spec: JobSpec) -> None:
    """Logs one warning line for each thing in ``spec`` that GKE would run badly."""
    _warn_spot(spec)
    _warn_preemption_save(spec)
    _warn_ephemeral_storage(spec)
    _warn_gcsfuse_identity(spec)
    _warn_host_network_identity(spec)
    _warn_library_path(spec)


def _warn_spot(spec: JobSpec) -> None:
    """One line for pods on Spot / preemptible nodes: what a preemption save must fit in."""
    spot = spot_selectors(spec.node_selectors)
    if not spot:
        return
    grace = worker_grace_seconds(spec)
    logger.warning(
        "%s: the pods target Spot / preemptible nodes (%s), whose reclaim GKE gives pods %d s (%s): a "
        "preemption save must fit in %d s (the workers are told ROXXEL_TERMINATION_GRACE_S=%d%s); only the last "
        "periodic checkpoint is sure to survive a slower one, so size the Trainer's save_interval_steps for it",
        spec.name,
        spot[0],
        spec.spot_grace_period or SPOT_GRACE_SECONDS,
        "spot_grace_period"
        if spec.spot_grace_period
        else "the default; spot_grace_period sets a node pool's longer one",
        grace,
        grace,
        f", not termination_grace_period's {spec.termination_grace_period}"
        if grace < spec.termination_grace_period
        else "",
    )


def _warn_preemption_save(spec: JobSpec) -> None:
    """Warn when the last preemption save recorded in a local ``checkpoint_dir`` (by the
    training program's checkpointer: ``roxxel_preemption.json``) would not fit the grace period."""
    path = spec.checkpoint_dir
    if path is None or "://" in path:
        return
    try:
        record = json.loads((pathlib.Path(path) / PREEMPTION_FILE).read_text())
        took = float(record["save_s"])
        gib = float(record.get("state_bytes") or 0) / 2**30
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return  # none, or not a record the checkpointer wrote: nothing to compare with
    if not 0 <= took < 86400 or not math.isfinite(gib):
        return
    need = math.ceil(took * PREEMPTION_SAVE_MARGIN) + 10
    if spec.termination_grace_period < need:
        logger.warning(
            "%s: the last preemption save of this run took %.1f s (step %s, %.2f GiB on %s processes, "
            "%s); termination_grace_period is %d s: raise it to at least %d s, or a preemption's save is "
            "cut off by SIGKILL and the steps since the last periodic checkpoint are lost",
            spec.name,
            took,
            record.get("step"),
            gib,
            record.get("process_count"),
            record.get("at"),
            spec.termination_grace_period,
            need,
        )


def _warn_ephemeral_storage(spec: JobSpec) -> None:
    need = spec.ephemeral_storage_bytes
    if spec.node_ephemeral_storage is None and need > DEFAULT_NODE_EPHEMERAL_STORAGE:
        logger.warning(
            "%s: each pod needs %.1f GiB of node ephemeral storage (gcsfuse file cache, "
            "GCS FUSE sidecar and ephemeral-storage requests) but a node with GKE's default 100 GB boot disk "
            "offers about %.1f GiB: the pods stay Pending there. Set node_ephemeral_storage "
            "to your nodes' allocatable (larger boot disk or local SSD), or lower file_cache_mb",
            spec.name,
            need / 2**30,
            DEFAULT_NODE_EPHEMERAL_STORAGE / 2**30,
        )


def _warn_gcsfuse_identity(spec: JobSpec) -> None:
    if spec.mounts_gcsfuse and spec.service_account is None:
        logger.warning(
            "%s: no service_account; reading a bucket through GCS FUSE usually "
            "needs one bound to a cloud identity (Workload Identity)",
            spec.name,
        )


def _warn_host_network_identity(spec: JobSpec) -> None:
    """Host-network pods reach Cloud Storage as the node's service account, not the pod's.

    The GKE metadata server, which hands a pod its Kubernetes service account's Workload
    Identity, serves pods on the pod network; a host-network pod's requests to the metadata
    address reach the node's Compute Engine metadata server ("Workload Identity Federation for
    GKE", Limitations: https://cloud.google.com/kubernetes-engine/docs/concepts/workload-identity
    #limitations). Orbax (TensorStore) and the writer lease then write ``gs://`` with the node
    pool's service account and its access scopes, whose default (``devstorage.read_only``,
    https://cloud.google.com/kubernetes-engine/docs/how-to/access-scopes) refuses every write
    with 403 at the first save, possibly hours in. xpk creates TPU node pools with
    ``--scopes=storage-full,gke-default,...`` (AI-Hypercomputer/xpk src/xpk/core/nodepool.py,
    commit 446cfe1); ``--scopes`` replaces the default list, hence ``gke-default``. The GCS
    FUSE data volume is not concerned: the driver gets the pod's own token there
    (``hostNetworkPodKSA``)."""
    path = spec.checkpoint_dir
    if not spec.uses_host_network or path is None or not path.startswith("gs://"):
        return
    logger.warning(
        "%s: the pods run on the host network, where Workload Identity does not apply, so they write "
        "checkpoint_dir %s as the node pool's service account (a default node pool's scopes, "
        "devstorage.read_only, fail the first save with 403): create the node pool with "
        "--scopes=storage-full,gke-default (as xpk does) and grant its service account roles/storage.objectUser on the "
        'bucket (docs/run-on-gke.md, "Host-network pods write as the node"), or set host_network: false',
        spec.name,
        path,
    )


def _warn_library_path(spec: JobSpec) -> None:
    # An env_refs value is read from a Secret or ConfigMap: nothing to check here.
    if spec.accelerator.kind != "gpu" or "LD_LIBRARY_PATH" in spec.env_refs:
        return
    library_path = spec.env.get("LD_LIBRARY_PATH")
    if library_path is not None and GKE_NVIDIA_LIB_DIR not in library_path.split(":"):
        logger.warning(
            "%s: env LD_LIBRARY_PATH does not include %s, where GKE mounts the "
            "NVIDIA driver's libraries: JAX may not find CUDA",
            spec.name,
            GKE_NVIDIA_LIB_DIR,
        )
