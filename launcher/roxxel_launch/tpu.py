"""Supported Cloud TPU types on GKE and the slice shape each topology implies.

A TPU slice is requested on GKE by two node selectors (accelerator and topology) and a
per-host chip count; the number of hosts (pods) follows from them:
hosts per slice = chips in the topology / chips per host. Single-host topologies put every
chip on one host. The table is data, so adding a generation is one entry.

Source: GKE's "Plan TPUs in GKE" page
(https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus), which lists for each
TPU version its ``cloud.google.com/gke-tpu-accelerator`` value, machine types and
topologies. Some topologies exist both ways: v5e / v6e ``2x4`` is one host of 8 chips
(ct5lp-hightpu-8t, ct6e-standard-8t, the default here) or two hosts of 4 chips
(ct5lp-hightpu-4t, ct6e-standard-4t: what xpk calls v5litepod-8 / v6e-8 on multi-host node
pools); ``chips_per_host`` picks between them. Both layouts carry the same accelerator and
topology labels, so the pods of a two-host ``2x4`` slice (4 chips each) would also fit, two
at a time, on one 8-chip host: such a slice also selects its machine type through the
well-known node label ``node.kubernetes.io/instance-type``
(https://kubernetes.io/docs/reference/labels-annotations-taints/#nodekubernetesioinstance-type),
which only the 4-chip hosts carry.

TPU7x (Ironwood, https://cloud.google.com/kubernetes-engine/docs/concepts/tpu-ironwood):
``1x1x1`` is one chip on ``tpu7x-standard-1t``, ``2x2x1`` one ``tpu7x-standard-4t`` host, and
the multi-host shapes follow xpk's rule (dimensions 2x2x2, 2x2x4, 2x4x4 or multiples of 4,
at most 144 cubes of 4x4x4 chips: ``generate_tpu_topologies(max_cubes=144)`` in
AI-Hypercomputer/xpk ``src/xpk/core/system_characteristics.py``, commit 367c838). Its
multi-host node pools are created with a workload policy (``--placement-policy``, which
replaces ``--tpu-topology``); xpk selects those nodes by the policy's name through the node
label ``cloud.google.com/placement-policy-name`` (``create_placement_policy_label`` in
xpk ``src/xpk/core/scheduling.py``, same commit).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping


@dataclasses.dataclass(frozen=True)
class TpuType:
    """One TPU generation as GKE exposes it.

    Attributes:
      name: the short name used in job specs (``v5p``).
      gke_accelerator: value of the ``cloud.google.com/gke-tpu-accelerator`` node label.
      chips_per_host: chips on each host of a multi-host slice.
      single_host: topologies served by one host, mapped to that host's chip count.
      multi_host: topologies that span several hosts of ``chips_per_host`` chips.
      machine_types: GKE machine type of a host, by its chip count.
      workload_policy: whether multi-host node pools are created with a workload policy
        (``--placement-policy``) whose name the nodes carry (TPU7x).
    """

    name: str
    gke_accelerator: str
    chips_per_host: int
    single_host: Mapping[str, int]
    multi_host: frozenset[str]
    machine_types: Mapping[int, str]
    workload_policy: bool = False

    def topologies(self) -> list[str]:
        """Every valid topology, smallest first."""
        return sorted({*self.single_host, *self.multi_host}, key=lambda t: (chips_in(t), t))


@dataclasses.dataclass(frozen=True)
class TpuSlice:
    """The shape of one slice: what the pods request and how many of them there are."""

    type: TpuType
    topology: str
    chips: int
    hosts: int
    chips_per_host: int

    @property
    def machine_type(self) -> str:
        """The GKE machine type of each host (``ct5lp-hightpu-4t``)."""
        return self.type.machine_types[self.chips_per_host]

    @property
    def layouts(self) -> int:
        """How many host layouts serve this topology: 2 for v5e/v6e ``2x4``, else 1."""
        multi = self.topology in self.type.multi_host and self.chips > self.type.chips_per_host
        return 1 + (self.topology in self.type.single_host and multi)


def chips_in(topology: str) -> int:
    """Chips in a topology string such as ``4x4`` or ``2x2x4``."""
    return math.prod(int(d) for d in topology.split("x"))


def _cubes(max_chips: int, max_dim: int) -> frozenset[str]:
    # v4/v5p 3-D slices: AxBxC with A <= B <= C, all of A, B, C in {2, 4} or all multiples
    # of 4 (Cloud TPU's rule for v4 and v5p), more than one host, at most a full pod.
    small = [2, 4]
    large = list(range(4, max_dim + 1, 4))
    shapes = set()
    for dims in (small, large):
        for a, b, c in itertools.combinations_with_replacement(dims, 3):
            if 4 < a * b * c <= max_chips:
                shapes.add(f"{a}x{b}x{c}")
    return frozenset(shapes)


_PLANES = frozenset({"4x4", "4x8", "8x8", "8x16", "16x16"})

TPU_TYPES: Mapping[str, TpuType] = {
    t.name: t
    for t in (
        TpuType("v4", "tpu-v4-podslice", 4, {"2x2x1": 4}, _cubes(4096, 16), {4: "ct4p-hightpu-4t"}),
        # 2x4 is single-host (8 chips) or multi-host (2 hosts x 4 chips): see the module doc.
        TpuType(
            "v5e",
            "tpu-v5-lite-podslice",
            4,
            {"1x1": 1, "2x2": 4, "2x4": 8},
            _PLANES | {"2x4"},
            {1: "ct5lp-hightpu-1t", 4: "ct5lp-hightpu-4t", 8: "ct5lp-hightpu-8t"},
        ),
        TpuType("v5p", "tpu-v5p-slice", 4, {"2x2x1": 4}, _cubes(6144, 24), {4: "ct5p-hightpu-4t"}),
        TpuType(
            "v6e",
            "tpu-v6e-slice",
            4,
            {"1x1": 1, "2x2": 4, "2x4": 8},
            _PLANES | {"2x4"},
            {1: "ct6e-standard-1t", 4: "ct6e-standard-4t", 8: "ct6e-standard-8t"},
        ),
        # TPU7x (Ironwood): one chip, or 3-D slices of 4-chip hosts up to 9,216 chips with
        # any side a multiple of 4 up to 256 (xpk's rule): see the module doc.
        TpuType(
            "tpu7x",
            "tpu7x",
            4,
            {"1x1x1": 1, "2x2x1": 4},
            _cubes(9216, 256),
            {1: "tpu7x-standard-1t", 4: "tpu7x-standard-4t"},
            workload_policy=True,
        ),
    )
}


def tpu_slice(type_name: str, topology: str, chips_per_host: int | None = None) -> TpuSlice:
    """Looks up a TPU type and topology; raises ``ValueError`` naming the valid choices.

    Args:
        type_name: e.g. ``v5e``.
        topology: e.g. ``2x4``.
        chips_per_host: for a topology served both by one host and by several (v5e/v6e
            ``2x4``), which one; None: the single-host one.
    """
    tpu = TPU_TYPES.get(type_name)
    if tpu is None:
        raise ValueError(f"unknown TPU type {type_name!r}; supported types are {', '.join(TPU_TYPES)}")
    single = tpu.single_host.get(topology)
    multi = topology in tpu.multi_host and chips_in(topology) > tpu.chips_per_host
    if single is None and not multi:
        choices = tpu.topologies()
        shown = ", ".join(choices[:12]) + (", ..." if len(choices) > 12 else "")
        raise ValueError(f"{topology!r} is not a {type_name} topology; use one of {shown}")
    layouts = {c for c in (single, tpu.chips_per_host if multi else None) if c is not None}
    if chips_per_host is not None and chips_per_host not in layouts:
        raise ValueError(
            f"a {type_name} {topology} slice has {' or '.join(map(str, sorted(layouts)))} "
            f"chips per host, not {chips_per_host}"
        )
    if single is not None and chips_per_host in (None, single):
        return TpuSlice(tpu, topology, single, 1, single)
    chips = chips_in(topology)
    return TpuSlice(tpu, topology, chips, chips // tpu.chips_per_host, tpu.chips_per_host)
