"""Creating a job's objects for ``submit`` and ``resume``: the checks against the cluster
(JobSet CRD, Kueue, fit), a server-side dry run of each object, the creates in order, the
rollback of a failed submit, and an indexed job's Service owned by its Job."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from roxxel_launch.backends.base import (
    RENAME_HINT,
    RESUME_HINT,
    BackendError,
    JobExistsError,
    JobState,
    JobStatus,
)
from roxxel_launch.backends.kubernetes.api import KubernetesApi
from roxxel_launch.backends.kubernetes.fit import check_fit
from roxxel_launch.backends.kubernetes.preflight import (
    check_gcsfuse_host_network,
    check_jobset_crd,
    check_local_queue,
    check_multislice_network,
    check_pod_admission,
    check_priority_class,
    check_workload_priority_class,
    cluster_version,
    kueue_version,
    only_message_patterns_refused,
    warn_reduced_failure_policy,
    without_message_patterns,
)
from roxxel_launch.backends.kubernetes.quota import check_gang_quota
from roxxel_launch.backends.kubernetes.removal import companion_kinds
from roxxel_launch.spec import JobSpec

logger = logging.getLogger(__name__)


def create_all(api: KubernetesApi, spec: JobSpec, objects: Sequence[dict], *, dry_run: bool) -> JobStatus:
    """The dry runs, then the creates of ``submit`` (and of ``resume``), once :func:`preflight` has
    passed; on a failure, what was created is deleted again (:func:`rollback`).

    Raises: JobExistsError, BackendError (with what the rollback did added)."""
    objects = [dry_run_create(api, spec, obj) for obj in objects]
    idents = ", ".join(f"{o['kind']}/{o['metadata']['name']}" for o in objects)
    logger.info("server-side dry run accepted %s in namespace %s", idents, spec.namespace)
    if dry_run:
        return JobStatus(
            name=spec.name,
            state=JobState.PENDING,
            processes=spec.num_processes,
            message=f"dry run: the API server accepted {idents}; nothing was created",
        )
    created: list[dict] = []
    answers: list[dict] = []
    try:
        for obj in objects:
            answers.append(api.create(obj, dry_run=False))
            created.append(obj)
    except BaseException as err:
        undo = rollback(api, created)
        if not undo:
            raise
        if isinstance(err, BackendError):
            raise type(err)(f"{err} {undo}") from err
        err.add_note(undo)
        raise
    logger.info("created %s in namespace %s", idents, spec.namespace)
    own_companions(api, created, answers)
    created_at = next(
        (a.get("metadata", {}).get("creationTimestamp") for a in answers if a.get("kind") in ("JobSet", "Job")), None
    )
    return JobStatus(
        name=spec.name,
        state=JobState.PENDING,
        processes=spec.num_processes,
        message=f"created {idents}",
        created=created_at,
    )


def own_companions(api: KubernetesApi, created: Sequence[Mapping], answers: Sequence[Mapping]) -> None:
    """An indexed job's headless Service gets its Job as owner (the uid comes from the
    create's answer), so that `kubectl delete job` removes the Service too. The job
    runs either way: a failure here is logged, and `roxxel-launch delete` still
    removes the Service."""
    job = next((a for a in answers if a.get("kind") == "Job"), None)
    if job is None:
        return
    for obj in created:
        if obj["kind"] != "Service":
            continue
        try:
            api.set_owner("Service", obj["metadata"]["name"], job)
        except BackendError as err:
            logger.warning(
                "could not make Job %s the owner of its Service (%s); `roxxel-launch delete` still removes both",
                obj["metadata"]["name"],
                err,
            )


def preflight(api: KubernetesApi, spec: JobSpec, objects: Sequence[dict], *, fit_check: bool) -> list[dict]:
    """The installed JobSet CRD serves every field the JobSet uses (or the JobSet is sent in
    the form an older JobSet accepts), and the spec's Kueue LocalQueue and
    WorkloadPriorityClass exist (see :mod:`.preflight`), the nodes can hold a worker
    (:mod:`.fit`), the whole gang fits the namespace's ResourceQuotas (:mod:`.quota`); a
    multislice job on the pod network hears whether it could use the host's.

    Every check asks ``spec.namespace``, where the objects go; ``api`` must work in it.

    Returns: the objects to create, in order. Raises: BackendError."""
    if api.namespace != spec.namespace:
        raise ValueError(
            f"preflight of {spec.name}: the API works in {api.namespace}, the job goes to {spec.namespace}"
        )
    logger.info("%s: checking the cluster in namespace %s", spec.name, spec.namespace)
    objects = [dict(check_jobset_crd(api, obj)) if obj["kind"] == "JobSet" else obj for obj in objects]
    git_version = cluster_version(api) if spec.mounts_gcsfuse else None
    check_gcsfuse_host_network(spec, git_version)
    check_multislice_network(spec, git_version)
    check_priority_class(api, spec)
    if fit_check:
        check_fit(api, objects)
    else:
        logger.info("%s: the fit check is skipped (--skip-fit-check)", spec.name)
    if spec.queue or spec.workload_priority_class:
        version = kueue_version(api)
        if spec.queue:
            check_local_queue(api, spec.queue, api.namespace, version)
        if spec.workload_priority_class:
            check_workload_priority_class(api, spec.workload_priority_class, version)
    check_gang_quota(api, spec, objects)
    check_pod_admission(api, spec, objects)
    return objects


def dry_run_create(api: KubernetesApi, spec: JobSpec, obj: dict) -> dict:
    """A server-side dry run of one create; returns the object to create. A companion
    (Service, NetworkPolicy) that exists already is either the job's, and the error names
    the job, or one of ours left behind by a job deleted with kubectl (no JobSet/Job of that
    name any more), which is deleted so that the job can be made again. A JobSet that strict
    field validation refuses for ``onJobFailureMessagePatterns`` alone (a JobSet older than
    v0.10.0 whose CRD could not be read before) is tried again without message patterns
    (:func:`.preflight.without_message_patterns`), with the same warning as the CRD check's."""
    try:
        api.create(obj, dry_run=True)
        return obj
    except JobExistsError:
        if obj["kind"] not in ("Service", "NetworkPolicy"):
            raise
        workload = "JobSet" if spec.workload == "jobset" else "Job"
        if api.get(workload, spec.name) is not None:
            raise JobExistsError(
                f"{workload} {api.namespace}/{spec.name} already exists. Delete it "
                f"(roxxel-launch delete {spec.name}), resume it (roxxel-launch resume "
                f"{spec.name}), or {RENAME_HINT}. {RESUME_HINT}."
            ) from None
        if obj["kind"] not in companion_kinds(api, workload, spec.name):
            raise  # not ours (or not ours to remove): the 409 stands
    except BackendError as err:
        if obj["kind"] != "JobSet" or not only_message_patterns_refused(str(err)):
            raise
        warn_reduced_failure_policy(obj)
        reduced = without_message_patterns(obj)
        api.create(reduced, dry_run=True)
        return reduced
    logger.warning(
        "%s %s/%s is left over from a deleted job of that name; replacing it", obj["kind"], api.namespace, spec.name
    )
    api.delete(obj["kind"], spec.name)
    api.create(obj, dry_run=True)
    return obj


def rollback(api: KubernetesApi, created: list[dict]) -> str:
    """Deletes objects a failed submit created; says what happened (for the error)."""
    if not created:
        return ""
    undone, left = [], []
    for obj in reversed(created):
        kind, name = obj["kind"], obj["metadata"]["name"]
        namespace = obj["metadata"].get("namespace") or api.namespace
        try:
            api.delete(kind, name, namespace)
            undone.append(f"{kind}/{name}")
        except BackendError as err:
            logger.error("rollback: could not delete %s %s/%s: %s", kind, namespace, name, err)
            left.append(
                f"{kind}/{name} ({err}; delete it by hand: kubectl delete {kind.lower()} {name} -n {namespace})"
            )
    text = f"Rolled back: deleted {', '.join(undone)}." if undone else ""
    if left:
        text += f" Could NOT roll back: {'; '.join(left)}."
    return text.strip()
