"""Kueue, as far as the launcher meets it (https://kueue.sigs.k8s.io/docs/concepts/):
LocalQueues and WorkloadPriorityClasses that exist or not, the API versions served, one
Workload per queued JobSet or Job (https://kueue.sigs.k8s.io/docs/concepts/workload/) and
the requeue of an evicted workload
(https://kueue.sigs.k8s.io/docs/concepts/workload/#requeuing-strategy).

An eviction and its readmission, as Kueue records them on the Workload
(kubernetes-sigs/kueue@ff69552e79ad21652c36caa97038382e55625cf7): ``Evict``
(``pkg/workload/evict/evict.go``) sets ``Evicted`` True with the reason (``Preempted``,
``Deactivated``, ``PodsReadyTimeout``, ``AdmissionCheck``, ``ClusterQueueStopped``, ...;
``apis/kueue/v1beta2/workload_types.go``), ``QuotaReserved`` / ``Admitted`` turn False, and
``status.schedulingStats.evictions`` counts it by ``{reason, underlyingCause}`` (a field of
Kueue 0.12 and newer); Kueue's job reconciler then sets the job's ``spec.suspend`` (the JobSet
controller suspends the child Jobs, whose pods are deleted). When Kueue admits it again,
``SetQuotaReservation`` (``pkg/workload/workload.go``) sets ``QuotaReserved`` True and turns
``Evicted`` False with reason ``QuotaReserved`` and the message ``Previously: <the eviction's
message>``; the job is un-suspended and its pods are created again: new pods in the same
JobSet restart attempt (``status.restarts`` is not changed by a suspension; the JobSet
controller's ``resumeJobsIfNecessary``, kubernetes-sigs/jobset
``pkg/controllers/jobset_controller.go``). A Workload belongs to one job object (label
``kueue.x-k8s.io/job-uid``): a job deleted and created again starts with no evictions.
"""

from __future__ import annotations

import time
from typing import Any

from support.k8s_sim.api import status_object
from support.k8s_sim.request import Request
from support.k8s_sim.store import selector_matches


# The Evicted condition of a workload preempted in its ClusterQueue (reason
# WorkloadEvictedByPreemption; the message of pkg/scheduler/preemption/preemption.go's
# preemptionMessage).
EVICTED_PREEMPTED = (
    "Preempted",
    "Preempted to accommodate a workload (UID: w-2, JobUID: uid-2) due to prioritization in the "
    "ClusterQueue; preemptor path: /cluster-queue; preemptee path: /cluster-queue",
)
# A workload whose spec.active was set false (reason WorkloadDeactivated; the message of
# pkg/controller/core/workload_controller.go).
EVICTED_DEACTIVATED = ("Deactivated", "The workload is deactivated")


class Kueue:
    """Kueue objects and re-admission (a mixin of ``FakeKubernetes``)."""

    def kueue(
        self, *queues: str, priority_classes: tuple[str, ...] = (), versions: tuple[str, ...] = ("v1beta1",)
    ) -> None:
        """Install Kueue with these LocalQueues in the namespace and these (cluster-scoped)
        WorkloadPriorityClasses (none of either: no Kueue API), serving these API versions,
        the preferred one first (Kueue 0.15 serves v1beta2 and v1beta1); discovery (``/apis``)
        lists them, and a path of another version is not found, as on a real API server."""
        with self._lock:
            self._real.local_queues = set(queues)
            self._real.priority_classes = set(priority_classes)
            self._real.kueue_versions = tuple(versions)

    def kueue_evict(
        self, name: str, eviction: tuple[str, str] = EVICTED_PREEMPTED, *, resource: str = "jobsets"
    ) -> None:
        """Kueue evicts the queued job ``name`` now, with ``eviction`` (the reason and message
        of its Workload's ``Evicted`` condition, e.g. :data:`EVICTED_DEACTIVATED`): the job is
        suspended and its pods deleted (the ``evict`` outcome of :meth:`plan`)."""
        with self._lock:
            key = (resource, self.namespace, name)
            self._scripts.pop(key, None)
            self._real.eviction = eviction
            try:
                self._apply(key, "evict")
            finally:
                self._real.eviction = EVICTED_PREEMPTED

    def kueue_readmit(self, name: str, *, resource: str = "jobsets") -> None:
        """Kueue admits the evicted job ``name`` again now (see :meth:`_kueue_readmits`)."""
        with self._lock:
            key = (resource, self.namespace, name)
            self._real.requeues[key] = 1
            self._kueue_readmits(key)
            self._touch(self.objects[key])
            self._lock.notify_all()

    def _kueue_answer(
        self, request: Request, resource: str, group: str, namespace: str | None, name: str | None
    ) -> tuple[int, Any]:
        real = self._real
        if real.local_queues is None or (
            group == "kueue.x-k8s.io"
            and not any(request.path.startswith(f"/apis/kueue.x-k8s.io/{v}/") for v in real.kueue_versions)
        ):
            # Kueue is not installed, or does not serve this version: no such API
            return 404, status_object(404, "NotFound", "the server could not find the requested resource")
        if resource == "localqueues":
            if name not in real.local_queues:
                return 404, status_object(
                    404,
                    "NotFound",
                    f'localqueues.kueue.x-k8s.io "{name}" not found',
                    name=name,
                    group=group,
                    kind=resource,
                )
            return 200, {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "LocalQueue",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"clusterQueue": "cluster-queue"},
            }
        if resource == "workloadpriorityclasses":
            if name not in real.priority_classes:
                return 404, status_object(
                    404,
                    "NotFound",
                    f'workloadpriorityclasses.kueue.x-k8s.io "{name}" not found',
                    name=name,
                    group=group,
                    kind=resource,
                )
            return 200, {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": name},
                "value": 1000,
            }
        # workloads: one per JobSet/Job with a queue, as Kueue's job controller makes them
        # (label kueue.x-k8s.io/job-uid; conditions QuotaReserved, Admitted, Evicted).
        selector = request.query.get("labelSelector") or ""
        items = []
        for (r, ns, n), obj in sorted(self.objects.items()):
            labels = obj["metadata"].get("labels") or {}
            if (
                r not in ("jobsets", "jobs")
                or ns != namespace
                or "kueue.x-k8s.io/queue-name" not in labels
                or labels.get("jobset.sigs.k8s.io/jobset-name")
            ):
                continue
            workload_labels = {"kueue.x-k8s.io/job-uid": obj["metadata"]["uid"]}
            if not selector_matches(selector, workload_labels):
                continue
            evictions = real.evictions.get(obj["metadata"]["uid"], [])
            items.append(workload(r, n, ns, obj, workload_labels, evictions))
        return 200, {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "WorkloadList", "metadata": {}, "items": items}

    def _kueue_readmits(self, key: tuple[str, str, str]) -> None:
        """Kueue's requeue of an evicted workload (https://kueue.sigs.k8s.io/docs/concepts/
        workload/#requeuing-strategy): after ``readmit_after`` ticks it is admitted again,
        un-suspended, and its pods start (new pods, the JobSet's restart attempt unchanged); the
        next planned outcome then applies to it."""
        obj = self.objects.get(key)
        if (
            obj is None
            or not obj["spec"].get("suspend")
            or "kueue.x-k8s.io/queue-name" not in (obj["metadata"].get("labels") or {})
        ):
            return
        left = self._real.requeues.get(key, self._real.readmit_after) - 1
        self._real.requeues[key] = left
        if left > 0:
            return
        del self._real.requeues[key]
        obj["spec"]["suspend"] = False
        # A suspension leaves a JobSet's restart count as it was: its new pods are of the
        # same restart attempt (the JobSet controller's resumeJobsIfNecessary).
        kept = {k: v for k, v in (obj.get("status") or {}).items() if k in ("restarts", "restartsCountTowardsMax")}
        obj["status"] = {"restarts": 0, **kept} if key[0] == "jobsets" else {}
        self._start_pods(key[0], obj)
        self._arm(key)
        self._real.readmissions += 1


def workload(
    resource: str, name: str, ns: str, obj: dict, labels: dict, evictions: list[tuple[str, str]] | None = None
) -> dict:
    """The Workload of a queued job: admitted while it runs, waiting while it is suspended,
    ``Evicted`` after an eviction (see the module docstring for a readmission's record)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    suspended = bool(obj["spec"].get("suspend"))
    evictions = list(evictions or [])
    evicted = any(c.get("type") == "Suspended" for c in (obj.get("status") or {}).get("conditions") or [])
    if evicted and not evictions:
        evictions = [EVICTED_PREEMPTED]
    conditions = [
        {
            "type": "QuotaReserved",
            "status": "False" if suspended else "True",
            "reason": "Pending" if suspended else "QuotaReserved",
            "message": "couldn't assign flavors to pod set slice: insufficient quota for google.com/tpu in flavor v5p"
            if suspended
            else "Quota reserved in ClusterQueue cluster-queue",
            "lastTransitionTime": now,
        },
        {
            "type": "Admitted",
            "status": "False" if suspended else "True",
            "reason": "NoReservation" if suspended else "Admitted",
            "message": "The workload has no reservation" if suspended else "The workload is admitted",
            "lastTransitionTime": now,
        },
    ]
    status: dict = {"conditions": conditions}
    if evictions:
        reason, message = evictions[-1]
        readmitted = not suspended
        conditions.append(
            {
                "type": "Evicted",
                "status": "False" if readmitted else "True",
                "reason": "QuotaReserved" if readmitted else reason,
                "message": f"Previously: {message}" if readmitted else message,
                "lastTransitionTime": now,
            }
        )
        counts: dict[str, int] = {}
        for r, _ in evictions:
            counts[r] = counts.get(r, 0) + 1
        status["schedulingStats"] = {
            "evictions": [{"reason": r, "underlyingCause": "", "count": n} for r, n in counts.items()]
        }
    kind = "jobset" if resource == "jobsets" else "job"
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": f"{kind}-{name}-1a2b3", "namespace": ns, "labels": labels},
        "spec": {"queueName": obj["metadata"]["labels"].get("kueue.x-k8s.io/queue-name")},
        "status": status,
    }
