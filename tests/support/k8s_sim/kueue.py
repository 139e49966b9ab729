"""Kueue, as far as the launcher meets it (https://kueue.sigs.k8s.io/docs/concepts/):
LocalQueues and WorkloadPriorityClasses that exist or not, the API versions served, one
Workload per queued JobSet or Job (https://kueue.sigs.k8s.io/docs/concepts/workload/) and
the requeue of an evicted workload
(https://kueue.sigs.k8s.io/docs/concepts/workload/#requeuing-strategy).
"""

from __future__ import annotations

import time
from typing import Any

from support.k8s_sim.api import status_object
from support.k8s_sim.request import Request
from support.k8s_sim.store import selector_matches


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
            items.append(workload(r, n, ns, obj, workload_labels))
        return 200, {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "WorkloadList", "metadata": {}, "items": items}

    def _kueue_readmits(self, key: tuple[str, str, str]) -> None:
        """Kueue's requeue of an evicted workload (https://kueue.sigs.k8s.io/docs/concepts/
        workload/#requeuing-strategy): after ``readmit_after`` ticks it is admitted again,
        un-suspended, and its pods start; the next planned outcome then applies to it."""
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
        obj["status"] = {"restarts": 0} if key[0] == "jobsets" else {}
        self._start_pods(key[0], obj)
        self._arm(key)
        self._real.readmissions += 1


def workload(resource: str, name: str, ns: str, obj: dict, labels: dict) -> dict:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    suspended = bool(obj["spec"].get("suspend"))
    evicted = any(c.get("type") == "Suspended" for c in (obj.get("status") or {}).get("conditions") or [])
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
    if evicted:
        conditions.append(
            {
                "type": "Evicted",
                "status": "True",
                "reason": "Preempted",
                "message": "Preempted to accommodate a workload (UID: w-2) due to prioritization in the ClusterQueue",
                "lastTransitionTime": now,
            }
        )
    kind = "jobset" if resource == "jobsets" else "job"
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": f"{kind}-{name}-1a2b3", "namespace": ns, "labels": labels},
        "spec": {"queueName": obj["metadata"]["labels"].get("kueue.x-k8s.io/queue-name")},
        "status": {"conditions": conditions},
    }
