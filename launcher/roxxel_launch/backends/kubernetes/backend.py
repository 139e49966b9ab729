"""The Kubernetes backend: JobSets (or an Indexed Job + headless Service) through the API server.

The verbs live here; the rest is in modules of one responsibility each:
:mod:`.api` (credentials, requests, errors, CRUD by kind, pagination),
:mod:`.retry` (timeouts, backoff, ``Retry-After``), :mod:`.status` (objects
and pods -> :class:`JobStatus`), :mod:`.watch` (``wait`` by a watch),
:mod:`.logs` (``logs``, following across gang restarts),
:mod:`.preflight` (the JobSet CRD, Kueue LocalQueue and WorkloadPriorityClass checks before a
create), :mod:`.fit` (do the cluster's nodes have room for a worker), :mod:`.create` (dry
runs, creates in order, rollback), :mod:`.removal` (the objects that go with a job, waiting
until they are gone), :mod:`.lookup` (a job by name, in this namespace or another) and
:mod:`.listing` (``list``).

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
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from roxxel_launch import contract
from roxxel_launch.backends.base import (
    Backend,
    BackendError,
    JobDetails,
    JobEvent,
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
)
from roxxel_launch.backends.kubernetes.create import create_all, preflight
from roxxel_launch.backends.kubernetes.events import EventReader, StuckPods, job_objects, merge, not_started
from roxxel_launch.backends.kubernetes.listing import job_statuses
from roxxel_launch.backends.kubernetes.logs import check_container, pod_of, read_logs
from roxxel_launch.backends.kubernetes.lookup import find_here, locate
from roxxel_launch.backends.kubernetes.pod_streams import exec_in_pod, forward_port, require_running
from roxxel_launch.backends.kubernetes.preflight import (
    read_workloads,
)
from roxxel_launch.backends.kubernetes.removal import companion_kinds, wait_gone
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
    QUEUE_LABEL,
    SPEC_ANNOTATION,
    render,
)
from roxxel_launch.spec import JobSpec, SpecError, spec_from_dict
from roxxel_launch.validate import DEFAULT_KUBERNETES_VERSION, ManifestError, validate

__all__ = [
    "COMPLETION_INDEX_KEY",
    "JOBSET_GROUP",
    "JOBSET_NAME_LABEL",
    "JOBSET_PLURAL",
    "JOBSET_VERSION",
    "JOB_INDEX_LABEL",
    "JOB_NAME_LABEL",
    "RESTART_ATTEMPT_KEY",
    "KubernetesBackend",
    "job_status",
    "jobset_status",
    "worker_from_pod",
]

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

    def __init__(
        self,
        namespace: str | None = None,
        context: str | None = None,
        *,
        config_file: str | None = None,
        kubernetes_version: str = DEFAULT_KUBERNETES_VERSION,
        poll_seconds: float = 2.0,
        delete_timeout: float | None = None,
        retry: RetryPolicy | None = None,
        stuck_after: float | None = None,
        fit_check: bool = True,
    ):
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
        every namespace (:func:`.lookup.locate`), as a job submitted into its spec's namespace is."""
        found = find_here(self.api, name)
        if found is None and self._namespace is None:
            namespace = locate(self.api, name)
            if namespace is not None:
                logger.info("%s: found in namespace %s", name, namespace)
                self.api.use_namespace(namespace)
                found = find_here(self.api, name)
        return found

    def _require(self, name: str) -> tuple[str, dict]:
        found = self._find(name)
        if found is None:
            raise JobNotFoundError(
                f"no job {name!r} (JobSet or Job) in namespace {self.namespace}"
                + ("" if self._namespace is not None else " or any other namespace this account may list")
                + ". Check the name (roxxel-launch list -A) and the namespace (--namespace)."
            )
        return found

    def _pods(self, kind: str, name: str) -> list[dict]:
        return self.api.list("Pod", pod_selector(kind, name))

    # ------------------------------------------------------------------ Backend

    def _prepare(self, spec: JobSpec) -> tuple[JobSpec, list[dict]]:
        """Renders and validates offline; returns the spec as placed and the objects in order."""
        if self._namespace is not None and spec.namespace != self._namespace:
            logger.info(
                "%s: namespace %s (from --namespace) instead of the spec's %s",
                spec.name,
                self._namespace,
                spec.namespace,
            )
            spec = dataclasses.replace(spec, namespace=self._namespace)
        # Every check and create from here on asks the namespace the objects go to, not the
        # kubeconfig context's (GKE's get-credentials leaves `default` there; the docs' specs
        # say `ml`): a ServiceAccount, LocalQueue or quota is looked up where the pods will be.
        if spec.namespace != self.api.namespace:
            logger.info(
                "%s: working in namespace %s (the spec's), not %s", spec.name, spec.namespace, self.api.namespace
            )
            self.api.use_namespace(spec.namespace)
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
        objects = preflight(self.api, spec, objects, fit_check=self.fit_check)
        return create_all(self.api, spec, objects, dry_run=dry_run)

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
        return sorted((w for w in workers if w.restart_attempt == restarts), key=lambda w: w.process)

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
            for c in (obj.get("status") or {}).get("conditions") or []
        )
        status = status_of(kind, obj, pods)
        queue = ((obj.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL)
        workloads = self._workloads(obj) if queue else None
        if queue:
            note = queue_state(queue, bool((obj.get("spec") or {}).get("suspend")), workloads, status.restarts)
            status = dataclasses.replace(status, message="; ".join(p for p in (status.message, note) if p))
        return JobDetails(
            status=status,
            kind=kind,
            namespace=(obj.get("metadata") or {}).get("namespace") or self.namespace,
            slices=slices,
            hosts_per_slice=hosts,
            conditions=conditions,
            workers=tuple(self._current_workers(kind, obj, pods)),
            events=self._job_events(kind, obj, pods, status, workloads or (), all_events=all_events),
        )

    def _job_events(
        self,
        kind: str,
        obj: Mapping,
        pods: Sequence[Mapping],
        status: JobStatus,
        workloads: Iterable[Mapping],
        *,
        all_events: bool,
    ) -> tuple[JobEvent, ...] | None:
        """With ``all_events``: every event of the job, its child Jobs, its Kueue Workloads
        and its pods (:data:`.events.MAX_PODS` at most). Else, only while the job is Pending,
        Restarting or Suspended: the Warning events of those objects, with only the pods
        not started yet. None when events may not be read."""
        if not all_events and status.state not in (JobState.PENDING, JobState.RESTARTING, JobState.SUSPENDED):
            return ()
        if self._events.forbidden:
            return None
        name = (obj.get("metadata") or {}).get("name", "?")
        children = (
            [(j.get("metadata") or {}).get("name", "?") for j in self.api.list("Job", f"{JOBSET_NAME_LABEL}={name}")]
            if kind == "JobSet"
            else []
        )
        chosen = list(pods) if all_events else not_started(pods)
        found = self._events.read(job_objects(kind, obj, children, chosen, workloads))
        return None if found is None else tuple(merge(found, warnings_only=not all_events))

    def _workloads(self, obj: Mapping) -> builtins.list[dict] | None:
        """Kueue's Workloads of the job; None when they cannot be read (see :func:`.preflight.read_workloads`)."""
        return read_workloads(self.api, obj)

    def list(self, *, all_namespaces: bool = False) -> builtins.list[JobStatus]:
        """The roxxel-launch jobs of this namespace, or with ``all_namespaces`` of every namespace;
        see :func:`.listing.job_statuses`."""
        return job_statuses(self.api, all_namespaces=all_namespaces)

    def delete(self, name: str, *, wait: bool = False) -> None:
        """Deletes the job (foreground: its Jobs and pods go first) and an indexed job's Service.

        With ``wait``, returns only once the objects are gone.
        """
        kind, obj = self._require(name)
        # Looked up first: the garbage collector may remove the Service (owned by the Job)
        # as soon as the Job is gone.
        companions = companion_kinds(self.api, kind, name)
        self.api.delete(kind, name)
        for companion in companions:
            self.api.delete(companion, name)
        if wait:
            wait_gone(
                self.api, kind, name, obj, companions, timeout=self.delete_timeout, poll_seconds=self.poll_seconds
            )

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
        if current.state is JobState.SUCCEEDED:  # resume would refuse it: not "resume continues"
            raise BackendError(
                f"{name} has ended ({current.state.value}); there is nothing to suspend or resume "
                f"(delete it and submit its spec to run it again)"
            )
        if current.state.terminal:
            raise BackendError(
                f"{name} has ended ({current.state.value}); there is nothing to suspend "
                f"(resume continues a preempted or failed job: roxxel-launch resume {name})"
            )
        if kueue_holds(obj):
            uid = (obj.get("metadata") or {}).get("uid")
            raise BackendError(
                f"{kind} {self.namespace}/{name} is queued by Kueue, which owns its spec.suspend and "
                f"would un-suspend it; stop it through its Workload instead: kubectl patch workload -n "
                f"{self.namespace} $(kubectl get workloads -n {self.namespace} -l kueue.x-k8s.io/job-uid={uid} "
                '-o name) --type merge -p \'{"spec":{"active":false}}\''
            )
        if (obj.get("spec") or {}).get("suspend"):
            logger.info("%s %s/%s is suspended already", kind, self.namespace, name)
            return current
        patched = self.api.patch(kind, name, {"spec": {"suspend": True}})
        logger.info("suspended %s %s/%s", kind, self.namespace, name)
        return status_of(kind, patched, self._pods(kind, name))

    def wait(
        self,
        name: str,
        *,
        timeout: float | None = None,
        poll_seconds: float = 2.0,
        evicted_ends: bool = False,
        on_change: Callable[[JobStatus], None] | None = None,
        on_events: Callable[[Sequence[JobEvent]], None] | None = None,
    ) -> JobStatus:
        """:meth:`Backend.wait` by a watch of the job's object (polling only where watches are
        refused; see :mod:`.watch`). A job suspended by Kueue (it has a queue) is
        Kueue's to re-admit: ``evicted_ends`` does not end the wait for it. With
        ``on_events``, pods Pending for ``stuck_after`` seconds are looked at every
        :data:`.events.RECHECK_SECONDS` and their new Warning events reported
        (:class:`.events.StuckPods`)."""
        after = kubernetes_events.STUCK_AFTER_SECONDS if self.stuck_after is None else self.stuck_after
        stuck = None if on_events is None else StuckPods(self._events, after, on_events)

        def status(kind: str, obj: Mapping) -> JobStatus:  # the object as read, its pods now
            pods = self._pods(kind, name)
            current = status_of(kind, obj, pods)
            if stuck is not None and current.state in (JobState.PENDING, JobState.RESTARTING):
                stuck.check(kind, obj, pods)
            return current

        return wait_for_job(
            self.api,
            name,
            find=lambda: self._require(name),
            status=status,
            timeout=timeout,
            poll_seconds=poll_seconds,
            evicted_ends=evicted_ends,
            on_change=on_change,
            recheck_seconds=None if stuck is None else kubernetes_events.RECHECK_SECONDS,
        )

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
                    "run_name, so training restores the last checkpoint from checkpoint_dir)."
                )
            if spec.name != name:
                raise BackendError(f"the spec is for {spec.name!r}, not {name!r}")
            logger.info("%s is gone; submitting the given spec again", name)
            return self.submit(spec)
        kind, obj = found
        meta = obj.get("metadata") or {}
        current = status_of(kind, obj, self._pods(kind, name))
        deleting = bool(meta.get("deletionTimestamp"))
        if not deleting and current.state in (JobState.PENDING, JobState.RUNNING, JobState.RESTARTING):
            raise BackendError(
                f"{name} is {current.state.value} ({current.message}); resume only restarts a "
                f"stopped job. Wait for it to finish (roxxel-launch wait {name}), suspend it "
                f"(roxxel-launch suspend {name}) or delete it first (roxxel-launch delete {name})."
            )
        if not deleting and current.state is JobState.SUSPENDED and kueue_holds(obj):
            logger.info("%s is suspended by Kueue; leaving it to Kueue to re-admit", name)
            return dataclasses.replace(
                current, message=(f"{current.message}; left to Kueue, which re-admits it (not re-created)")
            )
        if (
            not deleting
            and current.state is JobState.SUSPENDED
            and new_spec is None
            and (obj.get("spec") or {}).get("suspend")
        ):
            # Suspended by `roxxel-launch suspend` or kubectl: clearing the flag restarts its
            # pods in the same object (the controllers' resume, see suspend()).
            patched = self.api.patch(kind, name, {"spec": {"suspend": False}})
            logger.info("resumed %s %s/%s (spec.suspend: false)", kind, self.namespace, name)
            return status_of(kind, patched, self._pods(kind, name))
        if not deleting and current.state is JobState.SUCCEEDED:
            raise BackendError(
                f"{name} succeeded; there is nothing to resume. To run it again, delete it "
                f"(roxxel-launch delete {name}) and submit its spec."
            )
        stored = self._stored_spec(kind, obj)
        if stored.name != name:
            raise BackendError(
                f"{kind} {name}: its {SPEC_ANNOTATION} annotation describes "
                f"{stored.name!r}; resubmit the spec file instead."
            )
        if new_spec is not None:  # a fixed YAML: checked against the stored one, then submitted as it
            for change in resume_with_spec(stored, new_spec):
                logger.warning("resuming %s under the new spec: %s", name, change)
            stored = new_spec
        if stored.namespace != self.namespace:  # the job is resumed where it is
            logger.warning("resuming %s in its namespace %s (the spec says %s)", name, self.namespace, stored.namespace)
            stored = dataclasses.replace(stored, namespace=self.namespace)
        # Check offline and against the cluster (CRD, Kueue, fit) before deleting anything: a
        # refusal after the delete would leave no job and no stored spec.
        placed, objects = self._prepare(stored)
        objects = preflight(self.api, placed, objects, fit_check=self.fit_check)
        logger.info(
            "resuming %s (%s, run %s): replacing %s",
            name,
            current.state.value,
            stored.run_name,
            ", ".join(o["kind"] for o in objects),
        )
        companions = companion_kinds(self.api, kind, name)
        if not deleting:
            self.api.delete(kind, name)
        for companion in companions:
            self.api.delete(companion, name)
        wait_gone(self.api, kind, name, obj, companions, timeout=self.delete_timeout, poll_seconds=self.poll_seconds)
        return create_all(self.api, placed, objects, dry_run=False)

    def stored_spec(self, name: str) -> JobSpec | None:
        """The spec the job was submitted with (its ``roxxel.dev/spec`` annotation), for what
        only the spec says (``status`` reads its ``checkpoint_dir``); None when it has none.

        Raises: JobNotFoundError; BackendError when the annotation is not a valid job spec.
        """
        kind, obj = self._require(name)
        if not ((obj.get("metadata") or {}).get("annotations") or {}).get(SPEC_ANNOTATION):
            return None
        return self._stored_spec(kind, obj)

    def _stored_spec(self, kind: str, obj: Mapping) -> JobSpec:
        meta = obj.get("metadata") or {}
        name = meta.get("name", "?")
        text = (meta.get("annotations") or {}).get(SPEC_ANNOTATION)
        if not text:
            raise BackendError(
                f"{kind} {name} has no {SPEC_ANNOTATION} annotation to resume from; resubmit its spec file instead."
            )
        try:
            return spec_from_dict(json.loads(text))
        except (ValueError, SpecError) as err:
            raise BackendError(
                f"{kind} {name}: its {SPEC_ANNOTATION} annotation is not a valid "
                f"job spec ({err}); resubmit its spec file instead."
            ) from err

    # ------------------------------------------------------------------ logs

    def logs(
        self,
        name: str,
        *,
        process: int = 0,
        follow: bool = False,
        all_processes: bool = False,
        since_seconds: int | None = None,
        previous: bool = False,
        container: str | None = None,
    ) -> Iterator[str]:
        """Lines of one process's output (or every process's, prefixed with its rank), from
        its pod of the newest restart attempt; with ``follow``, across gang restarts until
        the job ends; ``container``: another container of the pod. See :func:`.logs.read_logs`."""
        kind, obj = self._require(name)
        return read_logs(
            self.api,
            kind,
            obj,
            process=process,
            follow=follow,
            all_processes=all_processes,
            since_seconds=since_seconds,
            previous=previous,
            poll_seconds=self.poll_seconds,
            container=container,
        )

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

    def exec(
        self,
        name: str,
        command: Sequence[str],
        *,
        process: int = 0,
        container: str | None = None,
        out: Callable[[bytes], None],
        err: Callable[[bytes], None],
    ) -> int:
        """Runs ``command`` in process ``process``'s pod (its current attempt's), in
        ``container`` (None: the worker's), as ``kubectl exec``; the command's exit code.
        See :func:`.pod_streams.exec_in_pod`."""
        pod = self._running_pod(name, process, container)
        container = container or contract.CONTAINER_NAME
        logger.info("exec in pod %s/%s, container %s: %s", self.namespace, pod, container, list(command))
        return exec_in_pod(self.api, pod, container, command, out=out, err=err)

    def port_forward(
        self,
        name: str,
        local_port: int,
        remote_port: int,
        *,
        process: int = 0,
        on_listen: Callable[[str], None] | None = None,
    ) -> None:
        """Forwards 127.0.0.1:``local_port`` to ``remote_port`` of process ``process``'s pod
        until interrupted. See :func:`.pod_streams.forward_port`."""
        pod = self._running_pod(name, process)
        forward_port(self.api, pod, local_port, remote_port, on_listen=on_listen)
