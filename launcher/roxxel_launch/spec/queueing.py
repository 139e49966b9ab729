"""What the spec tells Kueue besides the queue: the workload's priority and where its pods
may go (topology-aware scheduling). Both act only on a job that Kueue manages, one with a
``queue``; :func:`check_queueing` refuses them without one.

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
"""

from __future__ import annotations

import dataclasses
from typing import Any

from roxxel_launch import names
from roxxel_launch.spec.errors import SpecError, _check
from roxxel_launch.spec.fields import _doc, _one_of

PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
REQUIRED_TOPOLOGY_ANNOTATION = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_TOPOLOGY_ANNOTATION = "kueue.x-k8s.io/podset-preferred-topology"

_LEVEL_FIX = ("Give the node label key of a level of the cluster's Kueue Topology, e.g. "
              "cloud.google.com/gce-topology-block or kubernetes.io/hostname.")


@dataclasses.dataclass(frozen=True)
class Topology:
    """Kueue topology-aware scheduling: the level of the cluster's Topology within one domain
    of which all the job's pods must (required) or should (preferred) run. The pods of all
    slices form one PodSet: `required` puts every slice in one domain."""

    required: str | None = _doc(
        "Node label key of the level (e.g. cloud.google.com/gce-topology-block): Kueue admits the "
        f"job only when all its pods fit in one domain of it ({REQUIRED_TOPOLOGY_ANNOTATION}).",
        default=None)
    preferred: str | None = _doc(
        "Node label key of the level: one domain of it if the pods fit, else the next level up, "
        f"else spread ({PREFERRED_TOPOLOGY_ANNOTATION}).", default=None)

    def __post_init__(self):
        field = _one_of(self, ("required", "preferred"))
        _check(field, names.qualified_name_problem(getattr(self, field)), _LEVEL_FIX)

    def pod_annotations(self) -> dict[str, str]:
        """The pod template's annotation Kueue reads: {annotation key: node label key}."""
        if self.required is not None:
            return {REQUIRED_TOPOLOGY_ANNOTATION: self.required}
        return {PREFERRED_TOPOLOGY_ANNOTATION: self.preferred or ""}


def check_queueing(spec: Any) -> None:
    """Refuses Kueue fields that are malformed or would do nothing (no ``queue``).

    Args:
        spec: the JobSpec being checked (its ``queue``, ``workload_priority_class``, ``topology``).

    Raises:
        SpecError: a priority class name that is not a DNS-1123 subdomain of at most 63
            characters (it is a label value), or a priority / topology without a queue.
    """
    name = spec.workload_priority_class
    if name is not None:
        _check("workload_priority_class", names.dns1123_subdomain_problem(name) or names.label_value_problem(name),
               "Give the name of a WorkloadPriorityClass (kubectl get workloadpriorityclasses).")
    for field in ("workload_priority_class", "topology"):
        if getattr(spec, field) is not None and spec.queue is None:
            raise SpecError(field, "is set without queue, and Kueue reads it only from a job it manages: it "
                            "would do nothing", f"Set queue to your LocalQueue too, or remove {field}.")
