"""The control plane's nodes: kwok-managed Node objects shaped like GKE node pools.

kwok (sigs.k8s.io/kwok) plays the kubelet of every Node annotated ``kwok.x-k8s.io/node: fake``:
it marks them Ready and keeps their leases, and moves each pod the scheduler binds to one of
them to Running (its ``pod-ready`` stage) and finalises its deletion (``pod-delete``). No
container runs and no log is written: that is what kwok cannot give, and the cluster tests say
what they check instead. Pods are never completed by kwok (its ``pod-complete`` stage is left
out), so that tests decide how a pod ends by patching its status, as a kubelet would report it.

Each pool is what GKE registers for its machine type: the labels the launcher's node selectors
and the JobSet/TPU conventions use (``cloud.google.com/gke-nodepool``,
``cloud.google.com/gke-tpu-accelerator``, ``cloud.google.com/gke-tpu-topology``,
``cloud.google.com/gke-accelerator``, ``node.kubernetes.io/instance-type``), GKE's taints on
accelerator pools (``google.com/tpu=present:NoSchedule``, ``nvidia.com/gpu=present:NoSchedule``),
and allocatable resources a little under the machine's (GKE reserves some for its daemons).
Machine sizes are Google Cloud's published ones (ct5p-hightpu-4t: 208 vCPU, 448 GB, 4 chips;
ct5lp-hightpu-4t: 112 vCPU, 192 GB, 4 chips; ct6e-standard-4t: 180 vCPU, 720 GB, 4 chips;
a3-highgpu-8g: 208 vCPU, 1,872 GB, 8 H100 80GB; e2-standard-8: 8 vCPU, 32 GB).
"""

from __future__ import annotations

from dataclasses import dataclass, field

KWOK_ANNOTATION = {"kwok.x-k8s.io/node": "fake"}
TPU_TAINT = {"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"}
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


@dataclass(frozen=True)
class Pool:
    """One GKE node pool: ``hosts`` nodes of one machine type."""

    name: str
    machine_type: str
    hosts: int
    allocatable: dict[str, str]
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[dict, ...] = ()

    def nodes(self) -> list[dict]:
        """The pool's Node objects, named as GKE names them (``gke-CLUSTER-POOL-...``)."""
        return [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": f"gke-roxxel-{self.name}-{index}",
                    "annotations": dict(KWOK_ANNOTATION),
                    "labels": {
                        "kubernetes.io/hostname": f"gke-roxxel-{self.name}-{index}",
                        "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": "amd64",
                        "type": "kwok",
                        "cloud.google.com/gke-nodepool": self.name,
                        "cloud.google.com/machine-family": self.machine_type.split("-")[0],
                        "node.kubernetes.io/instance-type": self.machine_type,
                        "topology.kubernetes.io/zone": "us-east5-a",
                        **self.labels,
                    },
                },
                "spec": {"taints": [dict(t) for t in self.taints]},
                "status": {"allocatable": dict(self.allocatable), "capacity": dict(self.allocatable)},
            }
            for index in range(self.hosts)
        ]


def _tpu(name: str, machine: str, accelerator: str, topology: str, hosts: int, cpu: str, memory: str) -> Pool:
    return Pool(
        name,
        machine,
        hosts,
        {"cpu": cpu, "memory": memory, "google.com/tpu": "4", "ephemeral-storage": "43Gi", "pods": "110"},
        {"cloud.google.com/gke-tpu-accelerator": accelerator, "cloud.google.com/gke-tpu-topology": topology},
        (TPU_TAINT,),
    )


# Two v5p 2x2x4 slices (the multislice example: JobSet's exclusive placement puts each slice in
# its own pool), a v5e 4x4 and a v6e 4x4 slice (4 hosts each), two A3 High hosts, a CPU pool.
POOLS = (
    _tpu("v5p-a", "ct5p-hightpu-4t", "tpu-v5p-slice", "2x2x4", 4, "207", "440Gi"),
    _tpu("v5p-b", "ct5p-hightpu-4t", "tpu-v5p-slice", "2x2x4", 4, "207", "440Gi"),
    _tpu("v5e", "ct5lp-hightpu-4t", "tpu-v5-lite-podslice", "4x4", 4, "111", "185Gi"),
    _tpu("v6e", "ct6e-standard-4t", "tpu-v6e-slice", "4x4", 4, "179", "700Gi"),
    Pool(
        "a3-high",
        "a3-highgpu-8g",
        2,
        {"cpu": "207", "memory": "1800Gi", "nvidia.com/gpu": "8", "ephemeral-storage": "200Gi", "pods": "110"},
        {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb", "cloud.google.com/gke-gpu": "true"},
        (GPU_TAINT,),
    ),
    Pool(
        "cpu",
        "e2-standard-8",
        2,
        {"cpu": "7910m", "memory": "29Gi", "ephemeral-storage": "90Gi", "pods": "110"},
    ),
)


def all_nodes() -> list[dict]:
    """Every pool's Node objects."""
    return [node for pool in POOLS for node in pool.nodes()]
