"""The accelerator block of a job spec: a TPU slice, GPU hosts or CPU hosts."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from roxxel_launch import gpu_networking, names, tpu
from roxxel_launch.spec.errors import SpecError, _check
from roxxel_launch.spec.fields import _doc, image_reference_problem

# Resource names the accelerator block owns; users may not set them in `resources`.
TPU_RESOURCE = "google.com/tpu"
GPU_RESOURCE = "nvidia.com/gpu"
TPU_ACCELERATOR_SELECTOR = "cloud.google.com/gke-tpu-accelerator"
TPU_TOPOLOGY_SELECTOR = "cloud.google.com/gke-tpu-topology"
GPU_ACCELERATOR_SELECTOR = "cloud.google.com/gke-accelerator"
# Kubernetes' well-known node label of the machine type: picks v5e/v6e 2x4's layout (tpu.py).
MACHINE_TYPE_SELECTOR = "node.kubernetes.io/instance-type"
# The node label of a TPU7x multi-host node pool's workload policy, as xpk selects it (tpu.py).
PLACEMENT_POLICY_SELECTOR = "cloud.google.com/placement-policy-name"
INT32_MAX = 2**31 - 1
# An Indexed Job runs at most 100,000 pods in parallel (maxParallelismForIndexedJob in
# kubernetes/pkg/apis/batch/validation): the bound of hosts per slice.
MAX_HOSTS_PER_SLICE = 100_000


@dataclasses.dataclass(frozen=True)
class TpuAccelerator:
    """A Cloud TPU slice on GKE; the number of hosts follows from the topology."""

    type: str = _doc("TPU generation: " + ", ".join(tpu.TPU_TYPES) + ".")
    topology: str = _doc("Chip topology of one slice, e.g. 4x4 (v5e/v6e) or 2x2x4 (v4/v5p/tpu7x).")
    chips_per_host: int | None = _doc(
        "Only for topologies served both ways (v5e/v6e 2x4): 8 = one host (ct5lp-hightpu-8t, "
        "ct6e-standard-8t, the default), 4 = two hosts (ct5lp-hightpu-4t, ct6e-standard-4t).",
        default=None,
    )
    placement_policy: str | None = _doc(
        "TPU7x multi-host only: the workload policy the node pool was created with "
        "(gcloud ... node-pools create --placement-policy NAME), selected through the node "
        "label cloud.google.com/placement-policy-name. xpk names it "
        "tpu7x-<2 x chips>-<topology>-placement-policy (tpu7x-128-4x4x4-placement-policy). "
        "Unset: any tpu7x node pool of the topology.",
        default=None,
    )

    def __post_init__(self):
        if self.type not in tpu.TPU_TYPES:
            raise SpecError("type", f"unknown TPU type {self.type!r}", f"Use one of {', '.join(tpu.TPU_TYPES)}.")
        try:
            shape = tpu.tpu_slice(self.type, self.topology, self.chips_per_host)
        except ValueError as err:
            raise SpecError(
                "chips_per_host" if self.chips_per_host and "chips per host" in str(err) else "topology", str(err)
            ) from err
        if self.placement_policy is not None:
            _check(
                "placement_policy",
                names.label_value_problem(self.placement_policy)
                or (None if self.placement_policy else "must not be empty"),
            )
            if not (shape.type.workload_policy and shape.hosts > 1):
                raise SpecError(
                    "placement_policy",
                    f"a {self.type} {self.topology} slice runs on a node pool without a workload policy",
                    "Remove placement_policy (only TPU7x multi-host node pools have one).",
                )

    @property
    def slice(self) -> tpu.TpuSlice:
        return tpu.tpu_slice(self.type, self.topology, self.chips_per_host)


@dataclasses.dataclass(frozen=True)
class GpuAccelerator:
    """NVIDIA GPU hosts on GKE: ``count`` GPUs on each of ``hosts`` hosts."""

    type: str = _doc("Value of the cloud.google.com/gke-accelerator node label, e.g. nvidia-h100-80gb.")
    count: int = _doc("GPUs per host (nvidia.com/gpu limit).")
    hosts: int = _doc("Hosts (pods) per slice.", default=1)
    networking: Literal["none", "tcpx", "tcpxo", "rdma"] | None = _doc(
        "GKE high-bandwidth GPU networking preset: tcpx (A3 High, a3-highgpu-8g), tcpxo (A3 "
        "Mega, a3-megagpu-8g), rdma (A3 Ultra a3-ultragpu-8g / A4 a4-highgpu-8g); none "
        "or unset: the node's default network only.",
        default=None,
    )
    networks: tuple[str, ...] | None = _doc(
        "The node pool's additional network names, in interface order (default: the GKE "
        "recipe's vpc1..vpc4 for tcpx, vpc1..vpc8 for tcpxo, rdma-0..rdma-7 for rdma).",
        default=None,
    )
    daemon_image: str | None = _doc(
        "Image of the TCPX/TCPXO receive-datapath daemon sidecar (default: the GKE recipe's).", default=None
    )

    def __post_init__(self):
        _check("type", names.label_value_problem(self.type) or (None if self.type else "must not be empty"))
        machine = gpu_networking.UNSUPPORTED_GPU_TYPES.get(self.type)
        if machine is not None:
            raise SpecError(
                "type",
                f"{self.type} is {machine}, which {gpu_networking.UNSUPPORTED_GPU_REASON}",
                gpu_networking.UNSUPPORTED_GPU_FIX,
            )
        if not 1 <= self.count <= 16:
            raise SpecError("count", f"must be between 1 and 16 GPUs per host, got {self.count}")
        _check_hosts(self.hosts)
        self._check_networking()

    def _check_networking(self) -> None:
        mode = self.networking or "none"
        if mode == "none":
            if self.networks is not None or self.daemon_image is not None:
                raise SpecError(
                    "networking",
                    "networks and daemon_image need a networking preset",
                    "Set networking: tcpx, tcpxo or rdma, or remove them.",
                )
            return
        preset = gpu_networking.PRESETS[mode]
        if self.type not in preset.gke_accelerators:
            raise SpecError(
                "networking",
                f"{mode} runs on {preset.machine_type} nodes "
                f"({', '.join(preset.gke_accelerators)}), not on {self.type!r}",
                "Pick the preset of your machine type, or networking: none.",
            )
        if self.count != gpu_networking.GPUS_PER_HOST:
            raise SpecError(
                "count",
                f"networking: {mode} needs whole {preset.machine_type} hosts "
                f"({gpu_networking.GPUS_PER_HOST} GPUs), got {self.count}",
            )
        if self.networks is not None:
            if len(self.networks) != len(preset.networks):
                raise SpecError(
                    "networks", f"{mode} uses {len(preset.networks)} additional networks, got {len(self.networks)}"
                )
            for i, network in enumerate(self.networks):
                _check(f"networks[{i}]", names.dns1123_label_problem(network))
            if len(set(self.networks)) != len(self.networks):
                raise SpecError("networks", "a network is named twice")
        if self.daemon_image is not None:
            if preset.daemon_image is None:
                raise SpecError("daemon_image", f"{mode} runs no daemon sidecar", "Remove it.")
            _check("daemon_image", image_reference_problem(self.daemon_image))

    @property
    def network_names(self) -> tuple[str, ...]:
        """The additional networks the preset attaches (empty for networking: none)."""
        if self.networking in (None, "none"):
            return ()
        return self.networks or gpu_networking.PRESETS[self.networking].networks


@dataclasses.dataclass(frozen=True)
class CpuAccelerator:
    """CPU-only hosts (tests, small jobs); size them with ``resources``."""

    hosts: int = _doc("Hosts (pods) per slice.", default=1)

    def __post_init__(self):
        _check_hosts(self.hosts)


def _check_hosts(hosts: int) -> None:
    if not 1 <= hosts <= MAX_HOSTS_PER_SLICE:
        raise SpecError(
            "hosts",
            f"must be at least 1 and at most {MAX_HOSTS_PER_SLICE} (the most pods an "
            f"Indexed Job runs in parallel), got {hosts}",
        )


@dataclasses.dataclass(frozen=True)
class Accelerator:
    """Exactly one of ``tpu``, ``gpu`` or ``cpu`` (the string ``cpu`` means one CPU host)."""

    tpu: TpuAccelerator | None = _doc("A TPU slice.", default=None)
    gpu: GpuAccelerator | None = _doc("GPU hosts.", default=None)
    cpu: CpuAccelerator | None = _doc("CPU hosts.", default=None)

    def __post_init__(self):
        given = [n for n in ("tpu", "gpu", "cpu") if getattr(self, n) is not None]
        if len(given) != 1:
            raise SpecError(
                "",
                f"give exactly one of tpu, gpu, cpu (got {', '.join(given) or 'none'})",
                "For example accelerator: {tpu: {type: v5p, topology: 2x2x2}}.",
            )

    @classmethod
    def _coerce(cls, data: Any) -> Any:
        if data == "cpu":
            return {"cpu": {}}
        return data

    @property
    def kind(self) -> str:
        return "tpu" if self.tpu else "gpu" if self.gpu else "cpu"

    @property
    def hosts_per_slice(self) -> int:
        if self.tpu is not None:
            return self.tpu.slice.hosts
        accelerator = self.gpu or self.cpu
        if accelerator is None:
            raise ValueError("the spec names no accelerator (tpu, gpu or cpu)")
        return accelerator.hosts


def accelerator_node_selectors(accelerator: Accelerator) -> dict[str, str]:
    """The node selectors the accelerator block implies: GKE's TPU accelerator and topology
    labels, the machine type where a topology is served by two host sizes, the TPU7x
    workload policy; GKE's GPU accelerator label."""
    if accelerator.tpu is not None:
        shape = accelerator.tpu.slice
        selectors = {TPU_ACCELERATOR_SELECTOR: shape.type.gke_accelerator, TPU_TOPOLOGY_SELECTOR: shape.topology}
        if shape.layouts > 1:  # the same labels on 4- and 8-chip hosts: name the machine
            selectors[MACHINE_TYPE_SELECTOR] = shape.machine_type
        if accelerator.tpu.placement_policy is not None:
            selectors[PLACEMENT_POLICY_SELECTOR] = accelerator.tpu.placement_policy
        return selectors
    if accelerator.gpu is not None:
        return {GPU_ACCELERATOR_SELECTOR: accelerator.gpu.type}
    return {}
