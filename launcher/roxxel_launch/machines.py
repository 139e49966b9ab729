"""The GKE machine types that serve TPU and GPU node pools: vCPUs, memory and accelerators per
host, as Google Cloud publishes them (TPU: "TPU versions" and GKE "Plan TPUs", the machine
types ct4p-/ct5lp-/ct5p-/ct6e-; GPU: Compute Engine "GPU machine types", A3 and A4).

Used where the cluster shows no node of a pool (one that scales from zero, DWS flex-start,
auto-provisioning): a worker that asks for more vCPUs or memory than the whole machine has can
never be scheduled there, so ``submit`` refuses it instead of leaving its pods Pending. The
figures are the machine's; GKE keeps part of each for its daemons, so a request near them may
still not fit (the fit check compares with a node's allocatable once nodes exist). A machine
type missing here is not judged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from decimal import Decimal

from roxxel_launch.tpu import TPU_TYPES

TPU_LABEL = "cloud.google.com/gke-tpu-accelerator"
GPU_LABEL = "cloud.google.com/gke-accelerator"


@dataclasses.dataclass(frozen=True)
class Machine:
    """One machine type: ``vcpus`` cores, ``memory_gib`` GiB (Compute Engine's "GB" are GiB),
    ``accelerators`` chips or GPUs."""

    name: str
    vcpus: int
    memory_gib: int
    accelerators: int

    def capacity(self) -> dict[str, Decimal]:
        """Resource name -> amount, as a pod requests them (cores, bytes)."""
        return {"cpu": Decimal(self.vcpus), "memory": Decimal(self.memory_gib) * 2**30}


MACHINES: Mapping[str, Machine] = {
    m.name: m
    for m in (
        Machine("ct4p-hightpu-4t", 240, 407, 4),
        Machine("ct5lp-hightpu-1t", 24, 48, 1),
        Machine("ct5lp-hightpu-4t", 112, 192, 4),
        Machine("ct5lp-hightpu-8t", 224, 384, 8),
        Machine("ct5p-hightpu-4t", 208, 448, 4),
        Machine("ct6e-standard-1t", 44, 176, 1),
        Machine("ct6e-standard-4t", 180, 720, 4),
        Machine("ct6e-standard-8t", 180, 1440, 8),
        Machine("a3-highgpu-8g", 208, 1872, 8),
        Machine("a3-megagpu-8g", 208, 1872, 8),
        Machine("a3-ultragpu-8g", 224, 2952, 8),
        Machine("a4-highgpu-8g", 224, 3968, 8),
    )
}
# The machine type of each GPU (cloud.google.com/gke-accelerator) with 8 GPUs a host.
GPU_MACHINES = {
    "nvidia-h100-80gb": "a3-highgpu-8g",
    "nvidia-h100-mega-80gb": "a3-megagpu-8g",
    "nvidia-h200-141gb": "a3-ultragpu-8g",
    "nvidia-b200": "a4-highgpu-8g",
}


def machine_for(selector: Mapping[str, str], requests: Mapping[str, Decimal]) -> Machine | None:
    """The machine type of the nodes a worker with this node ``selector`` and these
    ``requests`` runs on: a TPU host by its accelerator label and chips per host
    (``google.com/tpu``), an 8-GPU A3/A4 host by its GPU label; None when not known."""
    tpu = next((t for t in TPU_TYPES.values() if t.gke_accelerator == selector.get(TPU_LABEL)), None)
    if tpu is not None:
        chips = int(requests.get("google.com/tpu", 0))
        return MACHINES.get(tpu.machine_types.get(chips, ""))
    gpu = GPU_MACHINES.get(selector.get(GPU_LABEL, ""))
    if gpu is not None and requests.get("nvidia.com/gpu") == 8:
        return MACHINES[gpu]
    return None
