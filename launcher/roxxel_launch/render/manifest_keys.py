"""The label and annotation keys, volume names and node paths the rendered manifests use."""

from __future__ import annotations

from collections.abc import Mapping

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "roxxel-launch"
RUN_NAME_LABEL = "roxxel.dev/run-name"
JOB_LABEL = "roxxel.dev/job"
SPEC_ANNOTATION = "roxxel.dev/spec"
EXCLUSIVE_TOPOLOGY_ANNOTATION = "alpha.jobset.sigs.k8s.io/exclusive-topology"
NODEPOOL_LABEL = "cloud.google.com/gke-nodepool"
GCSFUSE_ANNOTATION = "gke-gcsfuse/volumes"
GCSFUSE_DRIVER = "gcsfuse.csi.storage.gke.io"
GCSFUSE_LIMIT_ANNOTATIONS = {
    "cpu": "gke-gcsfuse/cpu-limit",
    "memory": "gke-gcsfuse/memory-limit",
    "ephemeral_storage": "gke-gcsfuse/ephemeral-storage-limit",
}
# The volume name the GCS FUSE driver's sidecar uses for its file cache when present.
GCSFUSE_CACHE_VOLUME = "gke-gcsfuse-cache"
DEFAULT_CONTAINER_ANNOTATION = "kubectl.kubernetes.io/default-container"
DATA_VOLUME = "data"
SHM_VOLUME = "dshm"
# GKE's GPU nodes mount the NVIDIA driver's libraries here; images not built on a CUDA base
# image need it on the loader path (GKE "Run GPUs in GKE Standard node pools").
GKE_NVIDIA_LIB_DIR = "/usr/local/nvidia/lib64"
SPOT_SELECTORS = ("cloud.google.com/gke-spot", "cloud.google.com/gke-preemptible")
# What GKE gives non-system pods when a Spot or preemptible node is reclaimed: the kubelet's
# graceful node shutdown, 15 s by default, at most 120 s with the node pool's setting (GKE,
# "Spot VMs": termination and graceful shutdown of Spot VMs).
SPOT_GRACE_SECONDS = 15


def spot_selectors(node_selectors: Mapping[str, str]) -> list[str]:
    """The :data:`SPOT_SELECTORS` keys that ``node_selectors`` set to ``"true"`` (the pods then
    run on Spot / preemptible nodes)."""
    return [key for key in SPOT_SELECTORS if node_selectors.get(key) == "true"]


def worker_grace_seconds(spec) -> int:  # noqa: ANN001 - a JobSpec (this module imports no spec)
    """The seconds the workers are told they have after SIGTERM (ROXXEL_TERMINATION_GRACE_S):
    ``termination_grace_period``, or on Spot / preemptible nodes the smaller of it and what GKE
    gives (``spot_grace_period``, default :data:`SPOT_GRACE_SECONDS`)."""
    if not spot_selectors(spec.node_selectors):
        return spec.termination_grace_period
    return min(spec.termination_grace_period, spec.spot_grace_period or SPOT_GRACE_SECONDS)


# GKE's GPU maintenance handler taints a node that is about to be terminated for host
# maintenance; Google's GPU recipes tolerate it (AI-Hypercomputer/gpu-recipes,
# src/helm-charts/a3mega/job/templates/workload-job.yaml).
IMPENDING_TERMINATION_TAINT = "cloud.google.com/impending-node-termination"
