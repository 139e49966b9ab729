"""The Kubernetes backend: JobSets (or an Indexed Job + headless Service) through the API server.

The verbs live here; the rest is in modules of one responsibility each:
:mod:`.api` (credentials, requests, errors, CRUD by kind, pagination),
:mod:`.retry` (timeouts, backoff, ``Retry-After``), :mod:`.status` (objects
and pods -> :class:`JobStatus`), :mod:`.watch` (``wait`` by a watch),
:mod:`.logs` (``logs``, following across gang restarts) and
:mod:`.preflight` (the JobSet CRD, Kueue LocalQueue and WorkloadPriorityClass checks before a
create) and :mod:`.fit` (do the cluster's nodes have room for a worker).

What each operation does on the cluster:

* ``submit``: render, validate offline (names, enums, the official schema of built-in kinds),
  check the installed JobSet CRD, the Kueue LocalQueue and WorkloadPriorityClass, that the
  cluster's nodes can hold a worker (:mod:`.fit`, unless ``fit_check=False``), then a server-side dry run
  (``dryRun=All``) of every object, then the real creates in order (Service and
  NetworkPolicy before the Job or JobSet), all with strict field validation. A create that
  fails after an earlier one succeeded deletes what was created, so a job is never left
  half made. An indexed job's Service is then owned by its Job.
* ``status``: reads the JobSet (or Job) and its pods; see :func:`jobset_status` and
  :func:`job_status` for how they map to :class:`JobState`.
* ``wait``: watches the JobSet (or Job); see :mod:`.watch`.
* ``logs``: the pod of one process (JobSet: job-index = process // hosts_per_slice,
  completion index = process % hosts_per_slice) of the newest restart attempt, followed
  across gang restarts with ``follow``.
* ``delete``: foreground propagation (the object goes only after its Jobs and pods), and
  the objects created alongside it: the headless Service of an indexed job and the job's
  NetworkPolicy (both carry the job's name and the managed-by label).
* ``suspend``: sets the object's ``spec.suspend`` (the controllers delete its pods; the
  object and its stored spec stay).
* ``resume``: clears ``spec.suspend`` of a job suspended that way; re-creates any other
  stopped job from the spec stored in its ``roxxel.dev/spec`` annotation, under the same run
  name and checkpoint_dir, so training restores its last checkpoint; a job suspended by
  Kueue is left to Kueue.
"""

from __future__ import annotations

import builtins
import dataclasses
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from kubernetes.client.exceptions import ApiException

from roxxel_launch import contract
from roxxel_launch.backends.base import (
    RENAME_HINT,
    RESUME_HINT,
    Backend,
    BackendError,
    JobDetails,
    JobEvent,
    JobExistsError,
    JobNotFoundError,
    JobState,
    JobStatus,
    Worker,
    resume_with_spec,
)
from roxxel_launch.backends.kubernetes import events as kubernetes_events
from roxxel_launch.backends.kubernetes.api import (
    JOBSET_GROUP,
    JOBSET_PLURAL,
    JOBSET_VERSION,
    KubernetesApi,
    _resource_type_missing,
    _server_message,
)
from roxxel_launch.backends.kubernetes.events import EventReader, StuckPods, job_objects, merge, not_started
from roxxel_launch.backends.kubernetes.fit import check_fit
from roxxel_launch.backends.kubernetes.logs import check_container, pod_of, read_logs
from roxxel_launch.backends.kubernetes.pod_streams import exec_in_pod, forward_port, require_running
from roxxel_launch.backends.kubernetes.preflight import (
    KUEUE_GROUP,
    check_jobset_crd,
    check_local_queue,
    check_multislice_network,
    check_workload_priority_class,
    kueue_version,
)
from roxxel_launch.backends.kubernetes.retry import RetryPolicy
from roxxel_launch.backends.kubernetes.status import (
    _CONDITION_FIELDS,
    COMPLETION_INDEX_KEY,
    JOB_INDEX_LABEL,
    JOB_NAME_LABEL,
    JOBSET_NAME_LABEL,
    RESTART_ATTEMPT_KEY,
    _int,
    job_status,
    jobset_status,
    kueue_holds,
    pod_selector,
    queue_state,
    shape,
    status_of,
    worker_from_pod,
)
from roxxel_launch.backends.kubernetes.watch import wait_for_job
from roxxel_launch.render import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    QUEUE_LABEL,
    RUN_NAME_LABEL,
    SPEC_ANNOTATION,
    render,
)
from roxxel_launch.spec import JobSpec, SpecError, spec_from_dict
from roxxel_launch.validate import DEFAULT_KUBERNETES_VERSION, ManifestError, validate

__all__ = ["COMPLETION_INDEX_KEY", "JOBSET_GROUP", "JOBSET_NAME_LABEL", "JOBSET_PLURAL",
           "JOBSET_VERSION", "JOB_INDEX_LABEL", "JOB_NAME_LABEL", "RESTART_ATTEMPT_KEY",
           "KubernetesBackend", "job_status", "jobset_status", "worker_from_pod"]

logger = logging.getLogger(__name__)

# Creation order: a Service before the Job whose pods it names.
# A NetworkPolicy before the pods it protects, so that no pod ever runs unprotected.
_CREATE_ORDER = {"Service": 0, "NetworkPolicy": 0, "Job": 1, "JobSet": 1}


# ----------------------------------------------------------------------------- the backend


class KubernetesBackend(Backend):
    """Runs jobs as JobSets (or Indexed Jobs + headless Services) on a Kubernetes cluster.

    Args:
        namespace: where jobs live. None: the kubeconfig context's namespace (the pod's own
            namespace in-cluster), else ``default``. When given, ``submit`` places the job in
            it whatever the spec's ``namespace`` says.
        context: kubeconfig context; None uses the current one. Asking for a context makes
            the backend use the kubeconfig even inside a pod.
        config_file: kubeconfig path; None: ``$KUBECONFIG``, else ``~/.kube/config``.
        kubernetes_version: the schema version for the offline check of built-in kinds.
        poll_seconds: pause between polls while waiting (resume, delete(wait=True), logs -f).
        delete_timeout: seconds ``resume`` and ``delete(wait=True)`` wait for the old objects
            to go; None: the job's termination grace period plus 300 s.
        retry: timeouts and retries of every API call (:class:`RetryPolicy`; tests pass
            one on a simulated clock).
        stuck_after: seconds a pod may stay Pending before ``wait`` reports its Warning
            events; None: :data:`.events.STUCK_AFTER_SECONDS`.
        fit_check: compare each worker's requests with the cluster's nodes before submit
            (:mod:`.fit`); False for clusters whose nodes this account may not list, or
            whose node pools at zero (not listed) would hold the job.

    Constructing reads nothing and sends nothing; the first API call loads the credentials.
    """

    def __init__(self, namespace: str | None = None, context: str | None = None, *,
                 config_file: str | None = None,
                 kubernetes_version: str = DEFAULT_KUBERNETES_VERSION,
                 poll_seconds: float = 2.0, delete_timeout: float | None = None,
                 retry: RetryPolicy | None = None, stuck_after: float | None = None,
                 fit_check: bool = True):
        self._namespace = namespace
        self.fit_check = fit_check
        self.api = KubernetesApi(namespace, context, config_file=config_file, retry=retry)
        self.stuck_after = stuck_after
        self._events = EventReader(self.api)
        self.kubernetes_version = kubernetes_version
        self.poll_seconds = poll_seconds
        self.delete_timeout = delete_timeout

    @property
    def namespace(self) -> str:
        """The namespace this backend works in (loads the config when not given)."""
        return self.api.namespace

    def close(self) -> None:
        self.api.close()

    def __enter__(self) -> KubernetesBackend:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


    def _find(self, name: str) -> tuple[str, dict] | None:
        """("JobSet" | "Job", object) of a roxxel-launch job, or None when there is none.

        Without ``--namespace``, a job that is not in the context's namespace is looked for in
        every namespace (:meth:`_locate`), as a job submitted into its spec's namespace is."""
        found = self._find_here(name)
        if found is None and self._namespace is None:
            namespace = self._locate(name)
            if namespace is not None:
                logger.info("%s: found in namespace %s", name, namespace)
                self.api.use_namespace(namespace)
                found = self._find_here(name)
        return found

    def _locate(self, name: str) -> str | None:
        """The one other namespace holding roxxel-launch job ``name``, from a list of JobSets and
        Jobs across namespaces; None when there is none, or when listing across namespaces is
        not allowed (a namespaced Role: the caller's not-found error stands and names -n).

        Raises: BackendError naming the namespaces when several hold a job of that name."""
        selector, fields = f"{MANAGED_BY_LABEL}={MANAGED_BY}", f"metadata.name={name}"
        namespaces: set[str] = set()
        for kind in ("JobSet", "Job"):
            try:
                items = self.api.list_all_namespaces(kind, selector, fields)
            except BackendError as err:
                if getattr(err.__cause__, "status", None) not in (403, 404):
                    raise
                logger.info("cannot list %ss across namespaces (%s)", kind, err)
                continue
            namespaces |= {(o.get("metadata") or {}).get("namespace") or "" for o in items
                           if JOBSET_NAME_LABEL not in ((o.get("metadata") or {}).get("labels") or {})}
        namespaces.discard(self.namespace)
        if len(namespaces) > 1:
            raise BackendError(f"jobs named {name!r} exist in namespaces {', '.join(sorted(namespaces))}: "
                               "choose one with -n/--namespace")
        return next(iter(namespaces), None)

    def _find_here(self, name: str) -> tuple[str, dict] | None:
        for kind in ("JobSet", "Job"):
            obj = self.api.get(kind, name)
            if obj is None:
                continue
            meta = obj.get("metadata") or {}
            labels = meta.get("labels") or {}
            parent = labels.get(JOBSET_NAME_LABEL) or next(
                (o.get("name") for o in meta.get("ownerReferences") or []
                 if o.get("kind") == "JobSet"), None)
            if kind == "Job" and parent:
                raise JobNotFoundError(
                    f"Job {self.namespace}/{name} is a child of JobSet {parent}: use the "
                    f"JobSet's name ({parent}).")
            if labels.get(MANAGED_BY_LABEL) != MANAGED_BY:
                raise BackendError(
                    f"{kind} {self.namespace}/{name} was not created by roxxel-launch (no "
                    f"{MANAGED_BY_LABEL}={MANAGED_BY} label); manage it with kubectl.")
            return kind, obj
        return None

    def _require(self, name: str) -> tuple[str, dict]:
        found = self._find(name)
        if found is None:
            raise JobNotFoundError(
                f"no job {name!r} (JobSet or Job) in namespace {self.namespace}"
                + ("" if self._namespace is not None else " or any other namespace this account may list")
                + ". Check the name (roxxel-launch list -A) and the namespace (--namespace).")
        return found

    def _pods(self, kind: str, name: str) -> list[dict]:
        return self.api.list("Pod", pod_selector(kind, name))

    # ------------------------------------------------------------------ Backend

    def _prepare(self, spec: JobSpec) -> tuple[JobSpec, list[dict]]:
        """Renders and validates offline; returns the spec as placed and the objects in order."""
        if self._namespace is not None and spec.namespace != self._namespace:
            logger.info("%s: namespace %s (from --namespace) instead of the spec's %s",
                        spec.name, self._namespace, spec.namespace)
            spec = dataclasses.replace(spec, namespace=self._namespace)
        rendered = render(spec)
        try:
            validate(rendered.objects, schema=True, kubernetes_version=self.kubernetes_version)
        except ManifestError as err:
            raise BackendError(f"{spec.name}: nothing was sent; {err}") from err
        objects = sorted(rendered.objects, key=lambda o: _CREATE_ORDER.get(o["kind"], 2))
        return spec, objects

    def submit(self, spec: JobSpec, *, dry_run: bool = False) -> JobStatus:
        """Creates the job's objects after a server-side dry run of each.

        Raises:
            JobExistsError: an object of that name exists (found by the dry run).
            BackendError: the offline checks, the dry run or a create failed; whatever this
                call created before the failure has been deleted again.
        """
        spec, objects = self._prepare(spec)
        self._preflight(spec, objects)
        return self._create_all(spec, objects, dry_run=dry_run)

    def _create_all(self, spec: JobSpec, objects: Sequence[dict], *, dry_run: bool) -> JobStatus:
        """The dry runs, then the creates of :meth:`submit`, once its checks have passed."""
        for obj in objects:
            self._dry_run_create(spec, obj)
        idents = ", ".join(f"{o['kind']}/{o['metadata']['name']}" for o in objects)
        logger.info("server-side dry run accepted %s in namespace %s", idents, spec.namespace)
        if dry_run:
            return JobStatus(name=spec.name, state=JobState.PENDING,
                             processes=spec.num_processes,
                             message=f"dry run: the API server accepted {idents}; nothing was "
                                     "created")
        created: list[dict] = []
        answers: list[dict] = []
        try:
            for obj in objects:
                answers.append(self.api.create(obj, dry_run=False))
                created.append(obj)
        except BaseException as err:
            undo = self._rollback(created)
            if not undo:
                raise
            if isinstance(err, BackendError):
                raise type(err)(f"{err} {undo}") from err
            err.add_note(undo)
            raise
        logger.info("created %s in namespace %s", idents, spec.namespace)
        self._own_companions(created, answers)
        created_at = next((a.get("metadata", {}).get("creationTimestamp") for a in answers
                           if a.get("kind") in ("JobSet", "Job")), None)
        return JobStatus(name=spec.name, state=JobState.PENDING, processes=spec.num_processes,
                         message=f"created {idents}", created=created_at)

    def _own_companions(self, created: Sequence[Mapping], answers: Sequence[Mapping]) -> None:
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
                self.api.set_owner("Service", obj["metadata"]["name"], job)
            except BackendError as err:
                logger.warning("could not make Job %s the owner of its Service (%s); "
                               "`roxxel-launch delete` still removes both",
                               obj["metadata"]["name"], err)

    def _preflight(self, spec: JobSpec, objects: Sequence[Mapping]) -> None:
        """The installed JobSet CRD serves every field the JobSet uses, and the spec's Kueue
        LocalQueue and WorkloadPriorityClass exist (see :mod:`.preflight`), and the nodes can hold
        a worker (:mod:`.fit`). Raises: BackendError."""
        for obj in objects:
            if obj["kind"] == "JobSet":
                check_jobset_crd(self.api, obj)
        check_multislice_network(self.api, spec)
        if self.fit_check:
            check_fit(self.api, objects)
        else:
            logger.info("%s: the fit check is skipped (--skip-fit-check)", spec.name)
        if spec.queue or spec.workload_priority_class:
            version = kueue_version(self.api)
            if spec.queue:
                check_local_queue(self.api, spec.queue, self.namespace, version)
            if spec.workload_priority_class:
                check_workload_priority_class(self.api, spec.workload_priority_class, version)

    def _dry_run_create(self, spec: JobSpec, obj: Mapping) -> None:
        """A server-side dry run of one create. A companion (Service, NetworkPolicy) that
        exists already is either the job's, and the error names the job, or one of ours
        left behind by a job deleted with kubectl (no JobSet/Job of that name any more),
        which is deleted so that the job can be made again."""
        try:
            self.api.create(obj, dry_run=True)
            return
        except JobExistsError:
            if obj["kind"] not in ("Service", "NetworkPolicy"):
                raise
            workload = "JobSet" if spec.workload == "jobset" else "Job"
            if self.api.get(workload, spec.name) is not None:
                raise JobExistsError(
                    f"{workload} {self.namespace}/{spec.name} already exists. Delete it "
                    f"(roxxel-launch delete {spec.name}), resume it (roxxel-launch resume "
                    f"{spec.name}), or {RENAME_HINT}. {RESUME_HINT}.") from None
            if obj["kind"] not in self._companions(workload, spec.name):
                raise  # not ours (or not ours to remove): the 409 stands
        logger.warning("%s %s/%s is left over from a deleted job of that name; replacing it",
                       obj["kind"], self.namespace, spec.name)
        self.api.delete(obj["kind"], spec.name)
        self.api.create(obj, dry_run=True)

    def _rollback(self, created: list[dict]) -> str:
        """Deletes objects a failed submit created; says what happened (for the error)."""
        if not created:
            return ""
        undone, left = [], []
        for obj in reversed(created):
            kind, name = obj["kind"], obj["metadata"]["name"]
            namespace = obj["metadata"].get("namespace") or self.namespace
            try:
                self.api.delete(kind, name, namespace)
                undone.append(f"{kind}/{name}")
            except BackendError as err:
                logger.error("rollback: could not delete %s %s/%s: %s", kind, namespace, name, err)
                left.append(f"{kind}/{name} ({err}; delete it by hand: kubectl delete "
                            f"{kind.lower()} {name} -n {namespace})")
        text = f"Rolled back: deleted {', '.join(undone)}." if undone else ""
        if left:
            text += f" Could NOT roll back: {'; '.join(left)}."
        return text.strip()

    def status(self, name: str) -> JobStatus:
        kind, obj = self._require(name)
        return status_of(kind, obj, self._pods(kind, name))

    def workers(self, name: str) -> list[Worker]:
        """The worker pods of the current attempt, by process (for a per-slice table)."""
        kind, obj = self._require(name)
        return self._current_workers(kind, obj, self._pods(kind, name))

    def _current_workers(self, kind: str, obj: Mapping, pods: Iterable[Mapping]) -> list[Worker]:
        hosts, _, _ = shape(kind, obj)
        restarts = _int(((obj.get("status") or {}).get("restarts")), 0)
        workers = [worker_from_pod(p, hosts) for p in pods]
        return sorted((w for w in workers if w.restart_attempt == restarts),
                      key=lambda w: w.process)

    def details(self, name: str, *, all_events: bool = False) -> JobDetails:
        """Status, conditions and the current attempt's worker pods, from one read of each,
        and the job's events (see :meth:`Backend.details` and :meth:`_job_events`).

        Raises: JobNotFoundError.
        """
        kind, obj = self._require(name)
        pods = self._pods(kind, name)
        hosts, slices, _ = shape(kind, obj)
        conditions = tuple(
            {key: c.get(key) for key in _CONDITION_FIELDS if c.get(key) is not None}
            for c in (obj.get("status") or {}).get("conditions") or [])
        status = status_of(kind, obj, pods)
        queue = ((obj.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL)
        workloads = self._workloads(obj) if queue else None
        if queue:
            note = queue_state(queue, bool((obj.get("spec") or {}).get("suspend")), workloads)
            status = dataclasses.replace(status, message="; ".join(
                p for p in (status.message, note) if p))
        return JobDetails(status=status, kind=kind,
                          namespace=(obj.get("metadata") or {}).get("namespace") or self.namespace,
                          slices=slices, hosts_per_slice=hosts, conditions=conditions,
                          workers=tuple(self._current_workers(kind, obj, pods)),
                          events=self._job_events(kind, obj, pods, status, workloads or (),
                                                  all_events=all_events))

    def _job_events(self, kind: str, obj: Mapping, pods: Sequence[Mapping], status: JobStatus,
                    workloads: Iterable[Mapping], *, all_events: bool) -> tuple[JobEvent, ...] | None:
        """With ``all_events``: every event of the job, its child Jobs, its Kueue Workloads
        and its pods (:data:`.events.MAX_PODS` at most). Else, only while the job is Pending,
        Restarting or Suspended: the Warning events of those objects, with only the pods
        not started yet. None when events may not be read."""
        if not all_events and status.state not in (JobState.PENDING, JobState.RESTARTING,
                                                   JobState.SUSPENDED):
            return ()
        if self._events.forbidden:
            return None
        name = (obj.get("metadata") or {}).get("name", "?")
        children = [(j.get("metadata") or {}).get("name", "?") for j in
                    self.api.list("Job", f"{JOBSET_NAME_LABEL}={name}")] if kind == "JobSet" else []
        chosen = list(pods) if all_events else not_started(pods)
        found = self._events.read(job_objects(kind, obj, children, chosen, workloads))
        return None if found is None else tuple(merge(found, warnings_only=not all_events))

    def _workloads(self, obj: Mapping) -> builtins.list[dict] | None:
        """Kueue's Workloads of the job (label ``kueue.x-k8s.io/job-uid``); None when they
        cannot be read (no Kueue API, no RBAC permission)."""
        uid = (obj.get("metadata") or {}).get("uid")
        try:
            data = self.api.json("list", "Workload", None, self.namespace,
                                 self.api.custom().list_namespaced_custom_object, KUEUE_GROUP,
                                 kueue_version(self.api), self.namespace, "workloads",
                                 label_selector=f"kueue.x-k8s.io/job-uid={uid}")
        except BackendError as err:
            logger.info("cannot read Kueue Workloads (%s)", err)
            return None
        return list(data.get("items") or [])

    def list(self, *, all_namespaces: bool = False) -> builtins.list[JobStatus]:
        """The roxxel-launch jobs of this namespace, or with ``all_namespaces`` of every
        namespace (one list of JobSets, Jobs and pods across namespaces each, as ``kubectl get
        -A`` reads them: https://kubernetes.io/docs/reference/kubectl/generated/kubectl_get/),
        sorted by namespace and name.

        Raises: BackendError; listing across namespaces needs ``list`` on jobsets, jobs and
        pods at the cluster scope (a ClusterRole): a 403 says so in one line naming the fix.
        """
        selector = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
        try:
            found = self._list_jobs(selector, all_namespaces)
            pods = (self.api.list_all_namespaces("Pod", RUN_NAME_LABEL) if all_namespaces
                    else self.api.list("Pod", RUN_NAME_LABEL))
        except BackendError as err:
            cause = err.__cause__
            if not (all_namespaces and isinstance(cause, ApiException) and cause.status == 403):
                raise
            raise BackendError(
                f"this account may not list jobs across namespaces ({_server_message(cause)}); "
                "list one namespace with -n NAMESPACE, or ask a cluster admin for a ClusterRole with "
                "list on jobsets.jobset.x-k8s.io, jobs.batch and pods (check: kubectl auth can-i list "
                "jobsets.jobset.x-k8s.io --all-namespaces)") from cause
        by_owner: dict[tuple[str, str, str], builtins.list[dict]] = {}
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
            namespace = meta.get("namespace") or self.namespace
            pods_of = by_owner.get((namespace, kind, meta["name"]), [])
            statuses.append(dataclasses.replace(status_of(kind, obj, pods_of), namespace=namespace))
        return sorted(statuses, key=lambda s: (s.namespace or "", s.name))

    def _list_jobs(self, selector: str, all_namespaces: bool) -> builtins.list[tuple[str, dict]]:
        """("JobSet" | "Job", object) of every roxxel-launch job; a JobSet's child Jobs left out."""
        def listed(kind: str) -> builtins.list[dict]:
            if all_namespaces:
                return self.api.list_all_namespaces(kind, selector)
            return self.api.list(kind, selector)

        found: builtins.list[tuple[str, dict]] = []
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
                    o.get("kind") == "JobSet" for o in meta.get("ownerReferences") or []):
                continue  # a JobSet's child Job carries the JobSet's labels
            found.append(("Job", job))
        return found

    def delete(self, name: str, *, wait: bool = False) -> None:
        """Deletes the job (foreground: its Jobs and pods go first) and an indexed job's Service.

        With ``wait``, returns only once the objects are gone.
        """
        kind, obj = self._require(name)
        # Looked up first: the garbage collector may remove the Service (owned by the Job)
        # as soon as the Job is gone.
        companions = self._companions(kind, name)
        self.api.delete(kind, name)
        for companion in companions:
            self.api.delete(companion, name)
        if wait:
            self._wait_gone(kind, name, obj, companions)

    def suspend(self, name: str) -> JobStatus:
        """Sets the job's ``spec.suspend`` by a merge patch; the object, its stored spec and its
        status stay, and :meth:`resume` clears the flag again.

        What the controllers then do: the JobSet controller suspends every child Job ("Suspend
        suspends all running child Jobs when set to true", the JobSet API,
        https://jobset.sigs.k8s.io/docs/reference/jobset.v1alpha2/), and the Job controller
        deletes a suspended Job's active pods, which get SIGTERM and their grace period; pods
        ended by a suspension do not count as failures, and resuming creates them again
        (https://kubernetes.io/docs/concepts/workloads/controllers/job/#suspending-a-job).
        A worker that checkpoints on SIGTERM therefore loses no step.

        Raises:
            JobNotFoundError: no such job.
            BackendError: the job has ended, or it has a Kueue queue: Kueue owns its
                ``spec.suspend`` (it un-suspends what it admitted) and stops a job through its
                Workload's ``spec.active`` instead
                (https://kueue.sigs.k8s.io/docs/concepts/workload/#active).
        """
        kind, obj = self._require(name)
        current = status_of(kind, obj, self._pods(kind, name))
        if current.state.terminal:
            raise BackendError(f"{name} has ended ({current.state.value}); there is nothing to suspend "
                               f"(resume continues a preempted or failed job: roxxel-launch resume {name})")
        if kueue_holds(obj):
            uid = (obj.get("metadata") or {}).get("uid")
            raise BackendError(
                f"{kind} {self.namespace}/{name} is queued by Kueue, which owns its spec.suspend and "
                f"would un-suspend it; stop it through its Workload instead: kubectl patch workload -n "
                f"{self.namespace} $(kubectl get workloads -n {self.namespace} -l kueue.x-k8s.io/job-uid={uid} "
                "-o name) --type merge -p '{\"spec\":{\"active\":false}}'")
        if (obj.get("spec") or {}).get("suspend"):
            logger.info("%s %s/%s is suspended already", kind, self.namespace, name)
            return current
        patched = self.api.patch(kind, name, {"spec": {"suspend": True}})
        logger.info("suspended %s %s/%s", kind, self.namespace, name)
        return status_of(kind, patched, self._pods(kind, name))

    def _companions(self, kind: str, name: str) -> builtins.list[str]:  # `list` is a method here
        """Kinds of the objects created alongside the job that go with it: an indexed job's
        headless Service, and the NetworkPolicy of either kind (same name, our label)."""
        found = []
        for companion in (["Service"] if kind == "Job" else []) + ["NetworkPolicy"]:
            try:
                obj = self.api.get(companion, name)
            except BackendError as err:
                cause = err.__cause__
                if companion != "NetworkPolicy" or getattr(cause, "status", None) != 403:
                    raise
                # A job submitted with security.network_policy: false by an account that
                # may not read NetworkPolicies: nothing of ours to delete there.
                logger.warning("cannot read NetworkPolicy %s/%s (%s); leaving it", self.namespace,
                               name, err)
                continue
            if obj is None:
                continue
            labels = (obj.get("metadata") or {}).get("labels") or {}
            if labels.get(MANAGED_BY_LABEL) != MANAGED_BY:
                logger.warning("%s %s/%s was not created by roxxel-launch; leaving it",
                               companion, self.namespace, name)
                continue
            found.append(companion)
        return found

    def _wait_gone(self, kind: str, name: str, obj: Mapping, companions: Sequence[str]) -> None:
        timeout = self.delete_timeout
        if timeout is None:
            timeout = self._grace_period(kind, obj) + 300
        deadline = time.monotonic() + timeout
        pending = [kind, *companions]
        while True:
            pending = [k for k in pending if self.api.get(k, name) is not None]
            if not pending:
                return
            if time.monotonic() >= deadline:
                raise BackendError(
                    f"{', '.join(pending)} {self.namespace}/{name} still exists {timeout:.0f} s "
                    f"after deletion (pods finishing a checkpoint, or a stuck finalizer). Wait "
                    f"and retry, and check: kubectl get pods -n {self.namespace} "
                    f"-l {pod_selector(kind, name)}")
            logger.info("waiting for %s %s/%s to be deleted", ", ".join(pending),
                        self.namespace, name)
            time.sleep(self.poll_seconds)

    @staticmethod
    def _grace_period(kind: str, obj: Mapping) -> int:
        spec = obj.get("spec") or {}
        if kind == "JobSet":
            rjobs = spec.get("replicatedJobs") or [{}]
            spec = (rjobs[0].get("template") or {}).get("spec") or {}
        pod_spec = (spec.get("template") or {}).get("spec") or {}
        return _int(pod_spec.get("terminationGracePeriodSeconds"), 30)

    def wait(self, name: str, *, timeout: float | None = None, poll_seconds: float = 2.0,
             evicted_ends: bool = False,
             on_change: Callable[[JobStatus], None] | None = None,
             on_events: Callable[[Sequence[JobEvent]], None] | None = None) -> JobStatus:
        """:meth:`Backend.wait` by a watch of the job's object (polling only where watches are
        refused; see :mod:`.watch`). A job suspended by Kueue (it has a queue) is
        Kueue's to re-admit: ``evicted_ends`` does not end the wait for it. With
        ``on_events``, pods Pending for ``stuck_after`` seconds are looked at every
        :data:`.events.RECHECK_SECONDS` and their new Warning events reported
        (:class:`.events.StuckPods`)."""
        after = kubernetes_events.STUCK_AFTER_SECONDS if self.stuck_after is None \
            else self.stuck_after
        stuck = None if on_events is None else StuckPods(self._events, after, on_events)

        def status(kind: str, obj: Mapping) -> JobStatus:  # the object as read, its pods now
            pods = self._pods(kind, name)
            current = status_of(kind, obj, pods)
            if stuck is not None and current.state in (JobState.PENDING, JobState.RESTARTING):
                stuck.check(kind, obj, pods)
            return current

        return wait_for_job(self.api, name, find=lambda: self._require(name), status=status,
                            timeout=timeout, poll_seconds=poll_seconds, evicted_ends=evicted_ends,
                            on_change=on_change,
                            recheck_seconds=None if stuck is None
                            else kubernetes_events.RECHECK_SECONDS)

    def resume(self, name: str, *, spec: JobSpec | None = None, new_spec: JobSpec | None = None) -> JobStatus:
        """Re-creates a stopped job so that training continues from its last checkpoint.

        The spec comes from the ``roxxel.dev/spec`` annotation of the existing object (the
        effective spec it was submitted with: same run name and checkpoint_dir). The old
        object is deleted (foreground) and gone before the new one is created. A job that
        was deleted already can be resumed only with ``spec``.

        A job whose ``spec.suspend`` is set and has no Kueue queue (``roxxel-launch suspend``,
        or kubectl) is resumed in place: the flag is cleared (a merge patch), so the same object
        starts its pods again; with ``new_spec`` it is re-created under that spec instead.

        Resumes Failed, Preempted and Suspended jobs. A job suspended by Kueue (queued, or
        evicted and requeued) is left to Kueue, which re-admits it in its turn: re-creating
        it would send it to the back of the queue and fight Kueue's own requeue. Its status
        is returned unchanged. A Suspended job without a queue is re-created.

        Raises:
            JobNotFoundError: no such job and no ``spec``.
            BackendError: the job is Pending, Running or Restarting (wait or delete it), it
                succeeded, its annotation is missing or unreadable, or the checks of
                :meth:`submit` refuse the spec (before anything is deleted).
        """
        found = self._find(name)
        if found is None:
            if spec is None:
                raise JobNotFoundError(
                    f"no job {name!r} in namespace {self.namespace} to resume: it was deleted, "
                    "so its stored spec is gone. Submit its spec file again (same name and "
                    "run_name, so training restores the last checkpoint from checkpoint_dir).")
            if spec.name != name:
                raise BackendError(f"the spec is for {spec.name!r}, not {name!r}")
            logger.info("%s is gone; submitting the given spec again", name)
            return self.submit(spec)
        kind, obj = found
        meta = obj.get("metadata") or {}
        current = status_of(kind, obj, self._pods(kind, name))
        deleting = bool(meta.get("deletionTimestamp"))
        if not deleting and current.state in (JobState.PENDING, JobState.RUNNING,
                                              JobState.RESTARTING):
            raise BackendError(
                f"{name} is {current.state.value} ({current.message}); resume only restarts a "
                f"stopped job. Wait for it to finish (roxxel-launch wait {name}), suspend it "
                f"(roxxel-launch suspend {name}) or delete it first (roxxel-launch delete {name}).")
        if not deleting and current.state is JobState.SUSPENDED and kueue_holds(obj):
            logger.info("%s is suspended by Kueue; leaving it to Kueue to re-admit", name)
            return dataclasses.replace(current, message=(
                f"{current.message}; left to Kueue, which re-admits it (not re-created)"))
        if not deleting and current.state is JobState.SUSPENDED and new_spec is None and \
                (obj.get("spec") or {}).get("suspend"):
            # Suspended by `roxxel-launch suspend` or kubectl: clearing the flag restarts its
            # pods in the same object (the controllers' resume, see suspend()).
            patched = self.api.patch(kind, name, {"spec": {"suspend": False}})
            logger.info("resumed %s %s/%s (spec.suspend: false)", kind, self.namespace, name)
            return status_of(kind, patched, self._pods(kind, name))
        if not deleting and current.state is JobState.SUCCEEDED:
            raise BackendError(
                f"{name} succeeded; there is nothing to resume. To run it again, delete it "
                f"(roxxel-launch delete {name}) and submit its spec.")
        stored = self._stored_spec(kind, obj)
        if stored.name != name:
            raise BackendError(f"{kind} {name}: its {SPEC_ANNOTATION} annotation describes "
                               f"{stored.name!r}; resubmit the spec file instead.")
        if new_spec is not None:  # a fixed YAML: checked against the stored one, then submitted as it
            for change in resume_with_spec(stored, new_spec):
                logger.warning("resuming %s under the new spec: %s", name, change)
            stored = new_spec
        # Check offline and against the cluster (CRD, Kueue, fit) before deleting anything: a
        # refusal after the delete would leave no job and no stored spec.
        placed, objects = self._prepare(stored)
        self._preflight(placed, objects)
        logger.info("resuming %s (%s, run %s): replacing %s", name, current.state.value,
                    stored.run_name, ", ".join(o["kind"] for o in objects))
        companions = self._companions(kind, name)
        if not deleting:
            self.api.delete(kind, name)
        for companion in companions:
            self.api.delete(companion, name)
        self._wait_gone(kind, name, obj, companions)
        return self._create_all(placed, objects, dry_run=False)

    def _stored_spec(self, kind: str, obj: Mapping) -> JobSpec:
        meta = obj.get("metadata") or {}
        name = meta.get("name", "?")
        text = (meta.get("annotations") or {}).get(SPEC_ANNOTATION)
        if not text:
            raise BackendError(f"{kind} {name} has no {SPEC_ANNOTATION} annotation to resume "
                               "from; resubmit its spec file instead.")
        try:
            return spec_from_dict(json.loads(text))
        except (ValueError, SpecError) as err:
            raise BackendError(f"{kind} {name}: its {SPEC_ANNOTATION} annotation is not a valid "
                               f"job spec ({err}); resubmit its spec file instead.") from err

    # ------------------------------------------------------------------ logs

    def logs(self, name: str, *, process: int = 0, follow: bool = False,
             all_processes: bool = False, since_seconds: int | None = None,
             previous: bool = False, container: str | None = None) -> Iterator[str]:
        """Lines of one process's output (or every process's, prefixed with its rank), from
        its pod of the newest restart attempt; with ``follow``, across gang restarts until
        the job ends; ``container``: another container of the pod. See :func:`.logs.read_logs`."""
        kind, obj = self._require(name)
        return read_logs(self.api, kind, obj, process=process, follow=follow,
                         all_processes=all_processes, since_seconds=since_seconds,
                         previous=previous, poll_seconds=self.poll_seconds, container=container)

    # ------------------------------------------------------------------ exec, port-forward

    def _running_pod(self, name: str, process: int, container: str | None = None) -> str:
        """The name of ``process``'s current pod, once checked: it runs (and has ``container``)."""
        kind, obj = self._require(name)
        pod = pod_of(self.api, kind, obj, process)
        who = f"process {process} of {name}"
        if container is not None:
            check_container(pod, container, who)
        require_running(pod, who)
        return pod["metadata"]["name"]

    def exec(self, name: str, command: Sequence[str], *, process: int = 0,
             container: str | None = None, out: Callable[[bytes], None],
             err: Callable[[bytes], None]) -> int:
        """Runs ``command`` in process ``process``'s pod (its current attempt's), in
        ``container`` (None: the worker's), as ``kubectl exec``; the command's exit code.
        See :func:`.pod_streams.exec_in_pod`."""
        pod = self._running_pod(name, process, container)
        container = container or contract.CONTAINER_NAME
        logger.info("exec in pod %s/%s, container %s: %s", self.namespace, pod, container, list(command))
        return exec_in_pod(self.api, pod, container, command, out=out, err=err)

    def port_forward(self, name: str, local_port: int, remote_port: int, *, process: int = 0,
                     on_listen: Callable[[str], None] | None = None) -> None:
        """Forwards 127.0.0.1:``local_port`` to ``remote_port`` of process ``process``'s pod
        until interrupted. See :func:`.pod_streams.forward_port`."""
        pod = self._running_pod(name, process)
        forward_port(self.api, pod, local_port, remote_port, on_listen=on_listen)
