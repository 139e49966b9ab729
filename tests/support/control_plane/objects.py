"""Objects a cluster admin makes before users submit (docs/run-on-gke.md, "JobSet (and
optionally Kueue)"): a PriorityClass, a ServiceAccount, Kueue's ResourceFlavor, ClusterQueue
and LocalQueue, a ResourceQuota, a PersistentVolume and its claim."""

from __future__ import annotations

from .cluster import ControlPlane

# What one ClusterQueue's quota covers in these tests: more than every node pool together.
QUEUE_RESOURCES = ("cpu", "memory", "ephemeral-storage", "google.com/tpu", "nvidia.com/gpu")
QUEUE_QUOTA = {
    "cpu": "4000",
    "memory": "20000Gi",
    "ephemeral-storage": "4000Gi",
    "google.com/tpu": "128",
    "nvidia.com/gpu": "32",
}


def priority_class(plane: ControlPlane, name: str, value: int = 1000) -> None:
    plane.apply(
        [{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value}],
        name=f"priorityclass-{name}",
    )


def service_account(plane: ControlPlane, namespace: str, name: str) -> None:
    plane.apply(
        [{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}}],
        name=f"sa-{namespace}-{name}",
    )


def kueue_queue(plane: ControlPlane, namespace: str, queue: str, *, quota: dict[str, str] | None = None) -> str:
    """A ResourceFlavor, a ClusterQueue named after the namespace (quota ``quota``, default
    :data:`QUEUE_QUOTA`) and the LocalQueue ``queue`` in ``namespace`` pointing at it; returns
    the ClusterQueue's name."""
    quota = quota or QUEUE_QUOTA
    cluster_queue = f"cq-{namespace}"
    plane.apply(
        [
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "default-flavor"}},
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {"name": cluster_queue},
                "spec": {
                    "namespaceSelector": {},
                    "resourceGroups": [
                        {
                            "coveredResources": list(quota),
                            "flavors": [
                                {
                                    "name": "default-flavor",
                                    "resources": [{"name": r, "nominalQuota": q} for r, q in quota.items()],
                                }
                            ],
                        }
                    ],
                },
            },
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"name": queue, "namespace": namespace},
                "spec": {"clusterQueue": cluster_queue},
            },
        ],
        name=f"kueue-{namespace}-{queue}",
    )
    return cluster_queue


def resource_quota(plane: ControlPlane, namespace: str, hard: dict[str, str]) -> None:
    plane.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": {"name": "quota", "namespace": namespace},
                "spec": {"hard": hard},
            }
        ],
        name=f"quota-{namespace}",
    )


def nfs_claim(plane: ControlPlane, namespace: str, claim: str) -> None:
    """A ReadOnlyMany claim bound to a PersistentVolume of an NFS share (a Filestore's, as in
    the GPU example); kwok mounts nothing, so the share's address is never contacted."""
    plane.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": f"{namespace}-{claim}"},
                "spec": {
                    "capacity": {"storage": "1Ti"},
                    "accessModes": ["ReadOnlyMany"],
                    "nfs": {"server": "filestore.invalid", "path": "/datasets"},
                    "storageClassName": "",
                    "claimRef": {"namespace": namespace, "name": claim},
                },
            },
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": claim, "namespace": namespace},
                "spec": {
                    "accessModes": ["ReadOnlyMany"],
                    "resources": {"requests": {"storage": "1Ti"}},
                    "storageClassName": "",
                    "volumeName": f"{namespace}-{claim}",
                },
            },
        ],
        name=f"pvc-{namespace}-{claim}",
    )
