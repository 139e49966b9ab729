"""Checks against the cluster before the first create: the JobSet CRD and the Kueue queue.

An older JobSet controller serves a CRD whose schema lacks fields the rendered manifest uses
(``failurePolicy.rules``, ``failurePolicy.restartStrategy``); the API server then drops them
silently, and preemptions count against ``max_restarts`` with nobody told. Creates ask for
``fieldValidation=Strict`` (the server refuses unknown fields), and before that the served
schema is read and compared with the manifest, so that the refusal names the field and the
fix. Reading a CRD needs a cluster-scoped permission (``get customresourcedefinitions``)
that a namespaced Role cannot grant: without it the check is skipped (logged) and strict
field validation remains the guard.

JobSet before v0.10.0 has no ``failurePolicy.rules[].onJobFailureMessagePatterns`` (the v0.8.0
and v0.9.1 CRDs lack it; kubernetes-sigs/jobset v0.10.0 added it,
config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml). The rendered ``configError`` rule
uses it to tell a worker's configuration error (exit 78) from a preemption, both of which fail
the child Job with reason ``PodFailurePolicy``. When the served CRD lacks only that field, the
JobSet is sent in the form the older controller accepts (:func:`without_message_patterns`):
no ``configError`` rule, and the Job's exit-78 rule ``Count`` instead of ``FailJob``, so exit 78
fails the child Job with ``BackoffLimitExceeded`` and counts as a restart against
``max_restarts`` (instead of ending the JobSet at once). A warning says so.

A spec with a Kueue ``queue`` needs that LocalQueue in the job's namespace: Kueue leaves a
job whose queue does not exist suspended for ever, with no error anywhere. The same for its
``workload_priority_class``: Kueue creates no Workload for a job whose WorkloadPriorityClass
does not exist, and says so only in an event on the JobSet
(https://kueue.sigs.k8s.io/docs/concepts/workload_priority_class/#referencing-a-workloadpriorityclass).
That class is cluster-scoped: reading it needs a ClusterRole; without one the check is skipped.
Both are read, like Kueue's Workloads, in the API version the cluster prefers among those
roxxel-launch knows: Kueue 0.15 serves ``v1beta2`` and keeps ``v1beta1``
(https://kueue.sigs.k8s.io/docs/reference/kueue.v1beta2/), older releases serve ``v1beta1``
only, and a later one may stop serving it. The versions come from the API server's
discovery document ``/apis`` (the official client's ``ApisApi.get_api_versions``;
https://kubernetes.io/docs/concepts/overview/kubernetes-api/#discovery-api).
"""

from __future__ import annotations

import copy
import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException

from roxxel_launch import contract
from roxxel_launch.backends.base import BackendError, JobNotFoundError
from roxxel_launch.backends.kubernetes.api import (
    JOBSET_GROUP,
    JOBSET_INSTALL_HINT,
    JOBSET_MIN_FULL_VERSION,
    JOBSET_PLURAL,
    JOBSET_VERSION,
    KubernetesApi,
    _resource_type_missing,
    _server_message,
)
from roxxel_launch.spec import JobSpec

logger = logging.getLogger(__name__)

JOBSET_CRD_NAME = f"{JOBSET_PLURAL}.{JOBSET_GROUP}"
KUEUE_GROUP = "kueue.x-k8s.io"
# The Kueue API versions whose LocalQueue, WorkloadPriorityClass and Workload fields this
# package reads, newest first; the last is the one assumed when discovery cannot tell.
KUEUE_VERSIONS = ("v1beta2", "v1beta1")
KUEUE_VERSION = KUEUE_VERSIONS[-1]


def kueue_version(api: KubernetesApi) -> str:
    """The Kueue API version to read: the group's preferred version when roxxel-launch knows
    it, else the newest known one it serves; ``v1beta1`` when discovery is refused or does
    not list Kueue (the read that follows then says what is missing).

    Returns: a version string such as ``v1beta2``. Raises: nothing (logged instead).
    """
    try:
        groups = api.json("list", "APIGroup", None, "(cluster)", api.apis().get_api_versions).get("groups") or []
    except BackendError as err:
        logger.info("cannot read API discovery (%s); assuming %s/%s", err, KUEUE_GROUP, KUEUE_VERSION)
        return KUEUE_VERSION
    group = next((g for g in groups if g.get("name") == KUEUE_GROUP), None)
    if group is None:
        return KUEUE_VERSION
    preferred = (group.get("preferredVersion") or {}).get("version")
    served = {v.get("version") for v in group.get("versions") or []}
    if preferred in KUEUE_VERSIONS:
        return preferred
    known = [v for v in KUEUE_VERSIONS if v in served]
    if not known:
        raise BackendError(
            f"the installed Kueue serves {', '.join(sorted(map(str, served)))}, none of "
            f"{', '.join(KUEUE_VERSIONS)} that roxxel-launch reads. Install a Kueue release "
            "that serves one of them, or remove queue and workload_priority_class from the spec."
        )
    return known[0]


def read_workloads(api: KubernetesApi, obj: Mapping) -> list[dict] | None:
    """Kueue's Workloads of the job ``obj`` (label ``kueue.x-k8s.io/job-uid``); None when they
    cannot be read (no Kueue API, no RBAC permission)."""
    uid = (obj.get("metadata") or {}).get("uid")
    try:
        data = api.json(
            "list",
            "Workload",
            None,
            api.namespace,
            api.custom().list_namespaced_custom_object,
            KUEUE_GROUP,
            kueue_version(api),
            api.namespace,
            "workloads",
            label_selector=f"kueue.x-k8s.io/job-uid={uid}",
        )
    except BackendError as err:
        logger.info("cannot read Kueue Workloads (%s)", err)
        return None
    return list(data.get("items") or [])


def unknown_fields(obj: Any, schema: Mapping, path: str = "") -> Iterator[str]:
    """Paths of ``obj``'s fields that the OpenAPI v3 ``schema`` does not declare.

    Follows ``properties`` and ``items``; a schema with ``additionalProperties`` or
    ``x-kubernetes-preserve-unknown-fields`` accepts any key. The Job template of each
    replicated job (``spec.replicatedJobs[].template``) is not walked: it is a core Job,
    checked against the built-in schemas.
    """
    if isinstance(obj, Mapping):
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            return
        properties = schema.get("properties")
        additional = schema.get("additionalProperties")
        for key, value in obj.items():
            child = f"{path}.{key}" if path else key
            if properties is not None and key in properties:
                if child.endswith("].template") and ".replicatedJobs[" in child:
                    continue
                yield from unknown_fields(value, properties[key], child)
            elif isinstance(additional, Mapping):
                yield from unknown_fields(value, additional, child)
            elif properties is not None and not additional:
                yield child
    elif isinstance(obj, list) and isinstance(schema.get("items"), Mapping):
        for item in obj:
            yield from unknown_fields(item, schema["items"], f"{path}[]")


# The field JobSet v0.10.0 added to failure-policy rules; the configError rule needs it.
MESSAGE_PATTERNS_FIELD = "spec.failurePolicy.rules[].onJobFailureMessagePatterns"
CONFIG_ERROR_RULE = "configError"  # jobset.yaml.j2's rule name


def check_jobset_crd(api: KubernetesApi, jobset: Mapping) -> Mapping:
    """Checks the JobSet against the installed JobSet CRD and returns it as it will be sent:
    unchanged, or without message patterns for a JobSet older than v0.10.0
    (:func:`without_message_patterns`, with a warning). Skipped (logged, ``jobset`` returned)
    when the CRD cannot be read.

    Raises: BackendError naming the fields and the upgrade; JobSet not installed.
    """
    try:
        crd = api.json(
            "read",
            "CustomResourceDefinition",
            JOBSET_CRD_NAME,
            "(cluster)",
            api.apiextensions().read_custom_resource_definition,
            JOBSET_CRD_NAME,
        )
    except JobNotFoundError as err:
        if _resource_type_missing(err.__cause__):  # no apiextensions API answered: skip
            logger.info("cannot read CRD %s here; relying on strict field validation", JOBSET_CRD_NAME)
            return jobset
        raise BackendError(
            f"the JobSet API is not installed in this cluster (no CRD {JOBSET_CRD_NAME}). "
            f"{JOBSET_INSTALL_HINT} — or use workload: indexed-job, which needs no JobSet "
            "controller."
        ) from err
    except BackendError as err:
        if getattr(err.__cause__, "status", None) not in (403, 404):
            raise
        logger.info(
            "cannot read CRD %s (%s); relying on the API server's strict field validation",
            JOBSET_CRD_NAME,
            getattr(err.__cause__, "status", err),
        )
        return jobset
    versions = (crd.get("spec") or {}).get("versions") or []
    served = next((v for v in versions if v.get("name") == JOBSET_VERSION), None)
    if served is None or not served.get("served", True):
        names = ", ".join(v.get("name", "?") for v in versions if v.get("served", True))
        raise BackendError(
            f"the installed JobSet serves {names or 'no version'}, not {JOBSET_VERSION}, "
            f"which roxxel-launch creates. Upgrade JobSet: {JOBSET_INSTALL_HINT}."
        )
    schema = (served.get("schema") or {}).get("openAPIV3Schema") or {}
    missing = sorted(set(unknown_fields({"spec": jobset.get("spec") or {}}, schema)))
    if missing == [MESSAGE_PATTERNS_FIELD]:
        warn_reduced_failure_policy(jobset)
        return without_message_patterns(jobset)
    if missing:
        raise BackendError(
            f"the JobSet installed in this cluster does not know {', '.join(missing)} (its CRD "
            f"{JOBSET_CRD_NAME} {JOBSET_VERSION} has no such field), which this job uses: it "
            "would drop it silently (without failure-policy rules, preemptions count against "
            f"max_restarts). Nothing was created. Upgrade JobSet: {JOBSET_INSTALL_HINT}."
        )
    return jobset


def warn_reduced_failure_policy(jobset: Mapping) -> None:
    """The one warning for a JobSet sent without message patterns (an older JobSet)."""
    logger.warning(
        "%s: the JobSet installed in this cluster is older than %s (its CRD has no "
        "onJobFailureMessagePatterns), so a configuration error (exit %d) counts as a restart against "
        "max_restarts instead of failing the job at once; to fail it at once, %s",
        (jobset.get("metadata") or {}).get("name", "?"),
        JOBSET_MIN_FULL_VERSION,
        contract.CONFIG_ERROR_EXIT_CODE,
        JOBSET_INSTALL_HINT,
    )


_UNKNOWN_FIELD = re.compile(r"(?:unknown field \W*|\.?)(spec\.[\w.\[\]]+?)\W*(?::|\s|$)")


def only_message_patterns_refused(error: str) -> bool:
    """Whether a create's error is strict field validation refusing the failure-policy
    rules' ``onJobFailureMessagePatterns`` and nothing else (the API server names each field:
    ``unknown field "spec.failurePolicy.rules[0].onJobFailureMessagePatterns"``;
    https://kubernetes.io/docs/reference/using-api/api-concepts/#field-validation)."""
    if "onJobFailureMessagePatterns" not in error:
        return False
    fields = set(_UNKNOWN_FIELD.findall(error))
    return bool(fields) and all(
        f.endswith(".onJobFailureMessagePatterns") and "failurePolicy.rules" in f for f in fields
    )


def without_message_patterns(jobset: Mapping) -> dict:
    """The JobSet for a controller older than v0.10.0, which cannot match a child Job's failure
    message: a copy without the ``configError`` rule, whose child Jobs' podFailurePolicy
    ``Count`` exit code 78 instead of failing the Job with reason ``PodFailurePolicy`` (which
    the ``preemption`` rule would restart for free, for ever). With ``backoffLimit: 0`` the
    Job then fails with ``BackoffLimitExceeded``, which no rule matches: the JobSet restarts
    and counts it against ``maxRestarts`` (https://jobset.sigs.k8s.io/docs/concepts/#failure-policy;
    https://kubernetes.io/docs/concepts/workloads/controllers/job/#pod-failure-policy).
    Other rules keep their places, so the Job controller's "rule at index N" messages do too.
    """
    out = copy.deepcopy(dict(jobset))
    policy = out.get("spec", {}).get("failurePolicy") or {}
    policy["rules"] = [r for r in policy.get("rules") or [] if r.get("name") != CONFIG_ERROR_RULE]
    for rjob in out.get("spec", {}).get("replicatedJobs") or []:
        job_spec = (rjob.get("template") or {}).get("spec") or {}
        for rule in (job_spec.get("podFailurePolicy") or {}).get("rules") or []:
            codes = rule.get("onExitCodes") or {}
            if (
                rule.get("action") == "FailJob"
                and codes.get("operator") == "In"
                and contract.CONFIG_ERROR_EXIT_CODE in (codes.get("values") or ())
            ):
                rule["action"] = "Count"
    return out


def check_local_queue(api: KubernetesApi, queue: str, namespace: str, version: str = KUEUE_VERSION) -> None:
    """Refuses a job whose Kueue LocalQueue does not exist in its namespace, read in Kueue's
    API ``version`` (:func:`kueue_version`).

    Raises: BackendError (no such LocalQueue, or no Kueue API at all).
    """
    try:
        api.json(
            "read",
            "LocalQueue",
            queue,
            namespace,
            api.custom().get_namespaced_custom_object,
            KUEUE_GROUP,
            version,
            namespace,
            "localqueues",
            queue,
        )
    except JobNotFoundError as err:
        if _resource_type_missing(err.__cause__):  # the API itself is missing, not the queue
            raise BackendError(
                f"the spec sets queue: {queue}, but Kueue is not installed in this cluster (no "
                f"{KUEUE_GROUP}/{version} API). Install Kueue, or remove `queue` from the "
                "spec."
            ) from err
        raise BackendError(
            f"the spec sets queue: {queue}, but there is no LocalQueue {queue!r} in namespace "
            f"{namespace}: Kueue would leave the job suspended for ever. List the queues "
            f"(kubectl get localqueues -n {namespace}) and fix `queue`, or ask a cluster admin "
            "to create it."
        ) from err
    except BackendError as err:
        if getattr(err.__cause__, "status", None) != 403:
            raise
        logger.info("cannot read LocalQueue %s/%s (forbidden); not checking it", namespace, queue)


def check_workload_priority_class(api: KubernetesApi, name: str, version: str = KUEUE_VERSION) -> None:
    """Refuses a job whose Kueue WorkloadPriorityClass (cluster-scoped) does not exist, read
    in Kueue's API ``version`` (:func:`kueue_version`).

    Skipped (logged) when reading it is forbidden. Raises: BackendError (no such class, or no
    Kueue API at all).
    """
    try:
        api.json(
            "read",
            "WorkloadPriorityClass",
            name,
            "(cluster)",
            api.custom().get_cluster_custom_object,
            KUEUE_GROUP,
            version,
            "workloadpriorityclasses",
            name,
        )
    except JobNotFoundError as err:
        if _resource_type_missing(err.__cause__):
            raise BackendError(
                f"the spec sets workload_priority_class: {name}, but Kueue is not installed in this "
                f"cluster (no {KUEUE_GROUP}/{version} API). Install Kueue, or remove "
                "workload_priority_class and queue from the spec."
            ) from err
        raise BackendError(
            f"the spec sets workload_priority_class: {name}, but there is no WorkloadPriorityClass "
            f"{name!r}: Kueue would create no Workload for the job and leave it suspended. List the "
            "classes (kubectl get workloadpriorityclasses) and fix workload_priority_class, or ask a "
            "cluster admin to create it."
        ) from err
    except BackendError as err:
        if getattr(err.__cause__, "status", None) != 403:
            raise
        logger.info("cannot read WorkloadPriorityClass %s (forbidden); not checking it", name)


def check_priority_class(api: KubernetesApi, spec: JobSpec) -> None:
    """Refuses a job whose pods' ``priority_class`` (a cluster-scoped PriorityClass) does not
    exist. The API server's Priority admission plugin refuses such pods, so the Job
    controller's creates fail with FailedCreate events only
    (https://kubernetes.io/docs/concepts/scheduling-eviction/pod-priority-preemption/#pod-priority);
    under Kueue without a ``workload_priority_class`` it is worse: Kueue takes the workload's
    priority from that class, creates no Workload when it is missing and says nothing, so the
    job stays suspended (kueue pkg/controller/jobframework/reconciler.go,
    pkg/util/priority/priority.go; https://kueue.sigs.k8s.io/docs/concepts/workload_priority_class/).
    Reading it needs a cluster-scoped ``get priorityclasses``: without it the check is skipped
    (logged). Raises: BackendError (no such class)."""
    name = spec.priority_class
    if not name:
        return
    try:
        api.json(
            "read",
            "PriorityClass",
            name,
            "(cluster)",
            k8s_client.SchedulingV1Api(api.api_client).read_priority_class,
            name,
        )
    except JobNotFoundError as err:
        if _resource_type_missing(err.__cause__):
            logger.info("cannot read PriorityClasses here; the priority_class check is skipped")
            return
        what = (
            "Kueue would create no Workload and leave the job suspended with no event"
            if spec.queue and not spec.workload_priority_class
            else "the API server would refuse every pod (FailedCreate events only)"
        )
        raise BackendError(
            f"the spec sets priority_class: {name}, but there is no PriorityClass {name!r} in this cluster: "
            f"{what}. Nothing was created. Create it (kubectl create priorityclass {name} --value=1000), "
            "or fix or remove priority_class in the spec (kubectl get priorityclasses lists them)."
        ) from err
    except BackendError as err:
        if getattr(err.__cause__, "status", None) != 403:
            raise
        logger.info("cannot read PriorityClass %s (forbidden); not checking it", name)


def worker_pod(spec: JobSpec, objects: Sequence[Mapping], namespace: str) -> dict | None:
    """One worker pod as the Job controller would create it from the rendered pod template
    (of the JobSet's replicated job, or of the Indexed Job); None without one."""
    for obj in objects:
        job_spec: Mapping = {}
        if obj.get("kind") == "JobSet":
            rjobs = (obj.get("spec") or {}).get("replicatedJobs") or [{}]
            job_spec = (rjobs[0].get("template") or {}).get("spec") or {}
        elif obj.get("kind") == "Job":
            job_spec = obj.get("spec") or {}
        template = job_spec.get("template")
        if not template:
            continue
        meta = template.get("metadata") or {}
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{spec.name}-admission-check"[:63].rstrip("-"),
                "namespace": namespace,
                "labels": dict(meta.get("labels") or {}),
                "annotations": dict(meta.get("annotations") or {}),
            },
            "spec": copy.deepcopy(dict(template.get("spec") or {})),
        }
    return None


def _admission_fix(server: str, spec: JobSpec, namespace: str) -> str:
    """The fix for an admission refusal of a worker pod, from the server's words."""
    text = server.lower()
    if "priorityclass" in text:
        return (
            f"Create the PriorityClass (kubectl create priorityclass {spec.priority_class} --value=1000) "
            "or fix or remove priority_class in the spec."
        )
    if "service account" in text or "serviceaccount" in text:
        account = spec.service_account or "default"
        return f"Create it (kubectl create serviceaccount {account} -n {namespace}) or fix service_account in the spec."
    if "podsecurity" in text:
        return (
            f"Namespace {namespace} enforces a Pod Security level these pods break (kubectl get namespace "
            f"{namespace} --show-labels: pod-security.kubernetes.io/enforce); use a namespace that allows "
            "them, or ask a cluster admin to relax its level."
        )
    if "quota" in text:
        return f"Lower the job's requests, or ask for more quota (kubectl describe resourcequota -n {namespace})."
    if "autopilot" in text or "gke warden" in text:
        return _autopilot_fix(server, spec)
    return "Fix what it names in the spec (roxxel-launch render shows the pod template)."


# GKE Warden's Autopilot constraints (the keys of its "Violations details": "[denied by KEY]")
# and the spec field behind each, for a worker pod of roxxel-launch's rendering.
_WARDEN_CONSTRAINT = re.compile(r"denied by (autogke-[a-z0-9-]+)")


def _autopilot_fix(server: str, spec: JobSpec) -> str:
    """The spec field behind each GKE Warden constraint the refusal names, and its fix
    (https://cloud.google.com/kubernetes-engine/docs/concepts/autopilot-security: Autopilot
    refuses privileged containers, host namespaces, and capabilities beyond its defaults)."""
    keys = list(dict.fromkeys(_WARDEN_CONSTRAINT.findall(server)))
    fixes = []
    for key in keys:
        if key == "autogke-disallow-hostnamespaces":
            fixes.append(
                "host_network (or a TPU multislice default) puts the pods on the host network: set host_network: false"
            )
        elif key == "autogke-disallow-privilege" and spec.uses_host_network:
            fixes.append(
                "host-network pods run with a privileged worker (security.profile privileged): with host_network: false, "
                "set security.profile: baseline"
            )
        elif key == "autogke-disallow-privilege":
            fixes.append(
                f"security.profile: {spec.security_profile} makes the worker container privileged: set security.profile: baseline"
            )
        elif key == "autogke-default-linux-capabilities":
            fixes.append(
                "a container adds Linux capabilities Autopilot does not allow (accelerator.gpu.networking's presets "
                "add NET_ADMIN and IPC_LOCK): remove the preset"
            )
        else:
            fixes.append(f"constraint {key}")
    said = "; ".join(fixes) if fixes else "privileged containers and host namespaces are refused"
    return f"GKE Autopilot refuses these pods ({said}), or use a GKE Standard cluster."


def check_pod_admission(api: KubernetesApi, spec: JobSpec, objects: Sequence[Mapping]) -> None:
    """A server-side dry run (``dryRun=All``) of one worker pod made from the rendered pod
    template, so that what admission refuses when the Job controller creates the pods is
    refused now, before anything is created: a Pod Security level the namespace enforces, a
    missing ServiceAccount or PriorityClass, a ResourceQuota or LimitRange, GKE Autopilot's
    rules (https://kubernetes.io/docs/reference/using-api/api-concepts/#dry-run: a dry-run
    request runs admission, mutating and validating, and persists nothing). Otherwise these
    show only as FailedCreate events on the child Jobs, and under Kueue the workload holds
    quota with no pods. Needs ``create pods`` in the namespace; without it one warning line
    says the check was not made.

    Raises: BackendError, one line naming the refusal and the fix.
    """
    pod = worker_pod(spec, objects, api.namespace)
    if pod is None:
        return
    try:
        api.create(pod, dry_run=True)
    except BackendError as err:
        cause = err.__cause__
        status = getattr(cause, "status", None)
        server = _server_message(cause) if isinstance(cause, ApiException) else str(err)
        if status == 403 and "cannot create resource" in server:  # RBAC, not admission
            logger.warning(
                "%s: pod admission was not checked before submit (this account may not create pods in %s, "
                "not even as a dry run); a refusal of the pods would show only as FailedCreate events",
                spec.name,
                api.namespace,
            )
            return
        if status not in (400, 403, 422):
            raise
        raise BackendError(
            f"{spec.name}: the API server refuses the job's worker pods ({server}). Nothing was created. "
            f"{_admission_fix(server, spec, api.namespace)}"
        ) from err
    logger.info("%s: a worker pod passes admission (server-side dry run)", spec.name)


# GKE's first version whose GCS FUSE CSI driver serves host-network pods (Standard clusters only):
# GoogleCloudPlatform/gcs-fuse-csi-driver docs/releases.md @5fcdc04, "Host networking support".
GCSFUSE_HOST_NETWORK_GKE = (1, 33, 3, 1226000)
_GKE_VERSION = re.compile(r"v?(\d+)\.(\d+)\.(\d+)(?:-gke\.(\d+))?")


def gke_version(git_version: str) -> tuple[int, int, int, int] | None:
    """``(major, minor, patch, gke build)`` of an API server's ``gitVersion`` such as
    ``v1.33.5-gke.1080000`` (build 0 without a ``-gke.`` suffix); None when unparsable."""
    found = _GKE_VERSION.match(git_version or "")
    if found is None:
        return None
    major, minor, patch, build = found.groups()
    return int(major), int(minor), int(patch), int(build or 0)


def cluster_version(api: KubernetesApi) -> str | None:
    """The API server's ``gitVersion`` (``/version``, ``VersionApi.get_code``); None when it
    cannot be read (logged). Raises: nothing."""
    try:
        return api.json("read", "Version", None, "(cluster)", k8s_client.VersionApi(api.api_client).get_code).get(
            "gitVersion", ""
        )
    except BackendError as err:
        logger.info("cannot read the cluster's version (%s); the checks that need it are skipped", err)
        return None


def check_gcsfuse_host_network(spec: JobSpec, git_version: str | None) -> None:
    """Refuses host-network pods that mount ``data.gcsfuse`` on a GKE cluster older than
    :data:`GCSFUSE_HOST_NETWORK_GKE`: before it the GCS FUSE sidecar of a host-network pod
    authenticates as the node, not the Kubernetes service account, the bucket answers 403 and
    the pods stay in ContainerCreating with FailedMount events. A version without a ``-gke.``
    build (not GKE) or unreadable is not judged. Raises: BackendError naming both fixes."""
    if not (spec.uses_host_network and spec.mounts_gcsfuse) or not git_version or "-gke." not in git_version:
        return
    version = gke_version(git_version)
    if version is None or version >= GCSFUSE_HOST_NETWORK_GKE:
        return
    needed = "{}.{}.{}-gke.{}".format(*GCSFUSE_HOST_NETWORK_GKE)
    raise BackendError(
        f"{spec.name}: its pods use the host network and mount data.gcsfuse, which GKE's GCS FUSE driver serves "
        f"from GKE {needed} on (Standard clusters), and this cluster runs {git_version}: the sidecar would "
        "authenticate as the node, the bucket answer 403 and the pods stay in ContainerCreating (FailedMount). "
        f"Nothing was created. Set host_network: false, or upgrade the cluster to {needed} or later."
    )


def check_multislice_network(spec: JobSpec, git_version: str | None) -> None:
    """Warns (one line) when a TPU multislice job that mounts ``data.gcsfuse`` runs on the pod
    network by default although the cluster's GKE version lets the GCS FUSE driver serve
    host-network pods: its DCN traffic would then take the pod network, where the reference
    TPU JobSets (GKE's, the JobSet project's, xpk's) use the host's. The default stays off
    because a render cannot see the cluster, and Autopilot clusters (which the driver does not
    serve so) run the same versions: the line names ``host_network: true`` as the fix.
    ``git_version``: the API server's ``/version`` (:func:`cluster_version`); None, nothing is
    said. Raises: nothing."""
    if spec.host_network is not None or not (spec.multislice_host_network_fits and spec.mounts_gcsfuse):
        return  # the network chosen in the spec, or not multislice with GCS FUSE
    version = gke_version(git_version or "")
    if version is not None and version >= GCSFUSE_HOST_NETWORK_GKE:
        logger.warning(
            "%s: its %d slices' DCN traffic runs on the pod network (data.gcsfuse keeps multislice pods off the "
            "host network by default), but this cluster (%s) lets GCS FUSE serve host-network pods on Standard "
            "clusters; set host_network: true in the spec to use the host network, as GKE's TPU multislice "
            "JobSets do (not on Autopilot)",
            spec.name,
            spec.num_slices,
            git_version,
        )
