"""What the spec tells Kueue besides the queue: the workload's priority, where its pods
may go (topology-aware scheduling) and how its nodes are provisioned (flex-start with queued
provisioning). All act only on a job that Kueue manages, one with a ``queue``;
:func:`check_queueing` refuses them without one.

Where Kueue reads each (the places the renderer writes them):

- ``workload_priority_class``: the label ``kueue.x-k8s.io/priority-class`` on the job
  object itself (the JobSet's or the Job's metadata), naming a cluster-scoped
  WorkloadPriorityClass (https://kueue.sigs.k8s.io/docs/concepts/workload_priority_class/).
  It orders and preempts workloads in their ClusterQueue without changing the pods'
  PriorityClass (``priority_class``).
- ``topology``: the annotation ``kueue.x-k8s.io/podset-required-topology`` or
  ``kueue.x-k8s.io/podset-preferred-topology`` on the pod template's metadata, not the job's
  (https://kueue.sigs.k8s.io/docs/tasks/run/topology_aware_scheduling/; for a JobSet, the pod
  template of its replicated job: https://kueue.sigs.k8s.io/docs/tasks/run/jobsets/). Its
  value is the node label key of a level of the cluster's Topology object; Kueue refuses a
  value that is not a label key (``ValidateTASPodSetRequest`` in kubernetes-sigs/kueue
  ``pkg/controller/jobframework/tas_validation.go``).
- ``topology.slice_required`` / ``topology.slice_size``: the pod-template annotations
  ``kueue.x-k8s.io/podset-slice-required-topology`` and ``kueue.x-k8s.io/podset-slice-size``
  (kubernetes-sigs/kueue ``apis/kueue/v1beta2/topology_types.go``): the PodSet is cut into
  slices of ``slice_size`` pods, each in one domain of the level. Kueue requires both or
  neither, a size of at least 1 and at most the PodSet's pod count (tas_validation.go), and
  places whole slices only (``tr.Count%sliceSize`` in ``pkg/cache/scheduler/tas_flavor_snapshot.go``):
  the size must divide the pod count.
- ``queue_provisioning``: GKE flex-start with queued provisioning (Dynamic Workload
  Scheduler) through Kueue's ProvisioningRequest admission check. Kueue passes every
  ``provreq.kueue.x-k8s.io/*`` annotation of the job object to the ProvisioningRequest it
  creates (``FilterProvReqAnnotations`` on the job's annotations,
  ``pkg/controller/jobframework/utils.go``; Kueue docs "Provisioning Admission Check
  Controller", Job annotations); the pods tolerate the ``cloud.google.com/gke-queued``
  taint of such nodes and select them (xpk ``src/xpk/core/capacity.py``, flex-start).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from roxxel_launch import names
from roxxel_launch.spec.errors import SpecError, _check
from roxxel_launch.spec.fields import _doc

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
REQUIRED_TOPOLOGY_ANNOTATION = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_TOPOLOGY_ANNOTATION = "kueue.x-k8s.io/podset-preferred-topology"
SLICE_REQUIRED_TOPOLOGY_ANNOTATION = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE_ANNOTATION = "kueue.x-k8s.io/podset-slice-size"
# Annotations of the job object that Kueue copies into its ProvisioningRequest's parameters.
PROVREQ_PREFIX = "provreq.kueue.x-k8s.io/"
MAX_RUN_DURATION_ANNOTATION = PROVREQ_PREFIX + "maxRunDurationSeconds"
# The taint and label GKE puts on nodes of a queued-provisioning (flex-start) node pool.
QUEUED_NODE_KEY = "cloud.google.com/gke-queued"
# GKE flex-start VMs run for at most seven days.
MAX_RUN_DURATION_SECONDS = 7 * 24 * 3600

_LEVEL_FIX = (
    "Give the node label key of a level of the cluster's Kueue Topology, e.g. "
    "cloud.google.com/gce-topology-block or kubernetes.io/hostname."
)


@dataclasses.dataclass(frozen=True)
class Topology:
    """Kueue topology-aware scheduling: the level of the cluster's Topology within one domain
    of which all the job's pods must (required) or should (preferred) run, and/or slices of
    the pods that must each run within one domain of a level (slice_required, slice_size).
    The pods of all slices form one PodSet: `required` puts every slice in one domain."""

    required: str | None = _doc(
        "Node label key of the level (e.g. cloud.google.com/gce-topology-block): Kueue admits the "
        f"job only when all its pods fit in one domain of it ({REQUIRED_TOPOLOGY_ANNOTATION}).",
        default=None,
    )
    preferred: str | None = _doc(
        "Node label key of the level: one domain of it if the pods fit, else the next level up, "
        f"else spread ({PREFERRED_TOPOLOGY_ANNOTATION}).",
        default=None,
    )
    slice_required: str | None = _doc(
        "Node label key of the level each slice of slice_size pods must fit in one domain of, e.g. "
        f"cloud.google.com/gce-topology-subblock ({SLICE_REQUIRED_TOPOLOGY_ANNOTATION}); needs slice_size.",
        default=None,
    )
    slice_size: int | None = _doc(
        f"Pods per slice ({SLICE_SIZE_ANNOTATION}): at least 1, dividing the job's pod count "
        "(num_slices x hosts); needs slice_required.",
        default=None,
    )

    def __post_init__(self):
        given = [f for f in ("required", "preferred", "slice_required") if getattr(self, f) is not None]
        if not given:
            raise SpecError("", "give required, preferred or slice_required (got none)")
        if self.required is not None and self.preferred is not None:
            raise SpecError("", "give at most one of required, preferred (got required, preferred)")
        for field in given:
            _check(field, names.qualified_name_problem(getattr(self, field)), _LEVEL_FIX)
        if (self.slice_required is None) != (self.slice_size is None):
            missing = "slice_size" if self.slice_size is None else "slice_required"
            raise SpecError(
                missing,
                f"is required with {'slice_required' if missing == 'slice_size' else 'slice_size'} (Kueue needs both)",
            )
        if self.slice_size is not None and self.slice_size < 1:
            raise SpecError("slice_size", f"must be at least 1, got {self.slice_size}")

    def pod_annotations(self) -> dict[str, str]:
        """The pod template's annotations Kueue reads: {annotation key: node label key or size}."""
        out = {}
        if self.required is not None:
            out[REQUIRED_TOPOLOGY_ANNOTATION] = self.required
        elif self.preferred is not None:
            out[PREFERRED_TOPOLOGY_ANNOTATION] = self.preferred
        if self.slice_required is not None:
            out[SLICE_REQUIRED_TOPOLOGY_ANNOTATION] = self.slice_required
            out[SLICE_SIZE_ANNOTATION] = str(self.slice_size)
        return out

    def slice_size_problem(self, pods: int) -> str | None:
        """Why ``slice_size`` cannot cut ``pods`` pods (the job's PodSet) into whole slices, or None."""
        if self.slice_size is None or (self.slice_size <= pods and pods % self.slice_size == 0):
            return None
        return f"{self.slice_size} does not divide the job's {pods} pods into whole slices"


@dataclasses.dataclass(frozen=True)
class QueueProvisioning:
    """GKE flex-start with queued provisioning (Dynamic Workload Scheduler), through Kueue's
    ProvisioningRequest admission check: all the job's nodes are obtained at once. The pods
    tolerate and select the queued-provisioning nodes; the cluster's ClusterQueue must carry
    the ProvisioningRequest admission check (GKE "Run a large-scale workload with flex-start
    with queued provisioning")."""

    max_run_duration_seconds: int | None = _doc(
        "Longest the nodes are kept for the job, in seconds, at most 604800 (seven days, GKE's "
        f"flex-start limit); the {MAX_RUN_DURATION_ANNOTATION} annotation on the JobSet / Job. "
        "Unset: GKE's default (seven days).",
        default=None,
    )

    def __post_init__(self):
        seconds = self.max_run_duration_seconds
        if seconds is not None and not 1 <= seconds <= MAX_RUN_DURATION_SECONDS:
            raise SpecError(
                "max_run_duration_seconds",
                f"must be between 1 and {MAX_RUN_DURATION_SECONDS} seconds (seven days), got {seconds}",
            )

    def job_annotations(self) -> dict[str, str]:
        """The job object's annotations Kueue passes to the ProvisioningRequest."""
        seconds = self.max_run_duration_seconds
        return {} if seconds is None else {MAX_RUN_DURATION_ANNOTATION: str(seconds)}

    @staticmethod
    def node_selectors() -> dict[str, str]:
        """The queued-provisioning nodes' label (xpk's flex-start node selector)."""
        return {QUEUED_NODE_KEY: "true"}

    @staticmethod
    def tolerations() -> list[dict[str, str]]:
        """The taint GKE puts on queued-provisioning nodes, tolerated."""
        return [{"key": QUEUED_NODE_KEY, "operator": "Exists", "effect": "NoSchedule"}]


def check_queueing(spec: Any) -> None:
    """Refuses Kueue fields that are malformed or would do nothing (no ``queue``).

    Args:
        spec: the JobSpec being checked (its ``queue``, ``workload_priority_class``, ``topology``,
            ``queue_provisioning``, ``num_processes``).

    Raises:
        SpecError: a priority class name that is not a DNS-1123 subdomain of at most 63
            characters (it is a label value), a slice size that does not divide the pod
            count, or a priority / topology / queue provisioning without a queue.
    """
    name = spec.workload_priority_class
    if name is not None:
        _check(
            "workload_priority_class",
            names.dns1123_subdomain_problem(name) or names.label_value_problem(name),
            "Give the name of a WorkloadPriorityClass (kubectl get workloadpriorityclasses).",
        )
    if spec.topology is not None:
        _check(
            "topology.slice_size",
            spec.topology.slice_size_problem(spec.num_processes),
            "Give a divisor of the pod count, e.g. the hosts of one slice.",
        )
    for field in ("workload_priority_class", "topology", "queue_provisioning"):
        if getattr(spec, field) is not None and spec.queue is None:
            raise SpecError(
                field,
                "is set without queue, and Kueue reads it only from a job it manages: it would do nothing",
                f"Set queue to your LocalQueue too, or remove {field}.",
            )
