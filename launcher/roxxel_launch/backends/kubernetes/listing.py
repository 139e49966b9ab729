"""``list``: the roxxel-launch jobs of one namespace or of all, with their pods' states."""

from __future__ import annotations

import dataclasses
import logging

from kubernetes.client.exceptions import ApiException

from roxxel_launch.backends.base import (
    BackendError,
    JobStatus,
)
from roxxel_launch.backends.kubernetes.api import KubernetesApi, _resource_type_missing, _server_message
from roxxel_launch.backends.kubernetes.status import JOB_NAME_LABEL, JOBSET_NAME_LABEL, status_of
from roxxel_launch.render import MANAGED_BY, MANAGED_BY_LABEL, RUN_NAME_LABEL

logger = logging.getLogger(__name__)


def job_statuses(api: KubernetesApi, *, all_namespaces: bool = False) -> list[JobStatus]:
    """The roxxel-launch jobs of this namespace, or with ``all_namespaces`` of every
    namespace (one list of JobSets, Jobs and pods across namespaces each, as ``kubectl get
    -A`` reads them: https://kubernetes.io/docs/reference/kubectl/generated/kubectl_get/),
    sorted by namespace and name.

    Raises: BackendError; listing across namespaces needs ``list`` on jobsets, jobs and
    pods at the cluster scope (a ClusterRole): a 403 says so in one line naming the fix.
    """
    selector = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
    try:
        found = list_jobs(api, selector, all_namespaces)
        pods = api.list_all_namespaces("Pod", RUN_NAME_LABEL) if all_namespaces else api.list("Pod", RUN_NAME_LABEL)
    except BackendError as err:
        cause = err.__cause__
        if not (all_namespaces and isinstance(cause, ApiException) and cause.status == 403):
            raise
        raise BackendError(
            f"this account may not list jobs across namespaces ({_server_message(cause)}); "
            "list one namespace with -n NAMESPACE, or ask a cluster admin for a ClusterRole with "
            "list on jobsets.jobset.x-k8s.io, jobs.batch and pods (check: kubectl auth can-i list "
            "jobsets.jobset.x-k8s.io --all-namespaces)"
        ) from cause
    by_owner: dict[tuple[str, str, str], list[dict]] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        namespace = meta.get("namespace") or ""
        if JOBSET_NAME_LABEL in labels:
            by_owner.setdefault((namespace, "JobSet", labels[JOBSET_NAME_LABEL]), []).append(pod)
        elif JOB_NAME_LABEL in labels:
            by_owner.setdefault((namespace, "Job", labels[JOB_NAME_LABEL]), []).append(pod)
    statuses = []
    for kind, obj in found:
        meta = obj["metadata"]
        namespace = meta.get("namespace") or api.namespace
        pods_of = by_owner.get((namespace, kind, meta["name"]), [])
        statuses.append(dataclasses.replace(status_of(kind, obj, pods_of), namespace=namespace))
    return sorted(statuses, key=lambda s: (s.namespace or "", s.name))


def list_jobs(api: KubernetesApi, selector: str, all_namespaces: bool) -> list[tuple[str, dict]]:
    """("JobSet" | "Job", object) of every roxxel-launch job; a JobSet's child Jobs left out."""

    def listed(kind: str) -> list[dict]:
        if all_namespaces:
            return api.list_all_namespaces(kind, selector)
        return api.list(kind, selector)

    found: list[tuple[str, dict]] = []
    try:
        found += [("JobSet", o) for o in listed("JobSet")]
    except BackendError as err:
        cause = err.__cause__
        if not (isinstance(cause, ApiException) and _resource_type_missing(cause)):
            raise
        logger.info("no JobSet API in this cluster; listing Jobs only")
    for job in listed("Job"):
        meta = job.get("metadata") or {}
        if JOBSET_NAME_LABEL in (meta.get("labels") or {}) or any(
            o.get("kind") == "JobSet" for o in meta.get("ownerReferences") or []
        ):
            continue  # a JobSet's child Job carries the JobSet's labels
        found.append(("Job", job))
    return found
