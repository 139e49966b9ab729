"""The API server's conventions the simulated cluster shares: the kinds it serves (resource,
kind, group, apiVersion), the labels the Job and JobSet controllers put on pods, and the
error answer, a ``Status`` object
(https://kubernetes.io/docs/reference/using-api/api-concepts/#resources: Status;
https://jobset.sigs.k8s.io/docs/concepts/ for the ``jobset.sigs.k8s.io/*`` labels,
https://kubernetes.io/docs/concepts/workloads/controllers/job/#completion-mode for
``batch.kubernetes.io/job-completion-index``).
"""

from __future__ import annotations

import re


FOLLOW_LIMIT_S = 20.0  # a followed log stream (or a watch) never stays open longer than this

KINDS = {
    "jobsets": ("JobSet", "jobset.x-k8s.io", "jobset.x-k8s.io/v1alpha2"),
    "jobs": ("Job", "batch", "batch/v1"),
    "services": ("Service", "", "v1"),
    "networkpolicies": ("NetworkPolicy", "networking.k8s.io", "networking.k8s.io/v1"),
    "pods": ("Pod", "", "v1"),
    "events": ("Event", "", "v1"),
    "resourcequotas": ("ResourceQuota", "", "v1"),
    "nodes": ("Node", "", "v1"),
}
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
OUTCOMES = ("succeed", "fail", "preempt", "evict", "run")

JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
RJOB_NAME = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


def status_object(code: int, reason: str, message: str, **details) -> dict:
    """An API server error answer (``kind: Status``)."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": details,
        "code": code,
    }
