"""The Kubernetes backend: JobSets (or an Indexed Job + headless Service) through the API server.

Built on the official ``kubernetes`` client. Credentials load lazily, on the first API call
(constructing a :class:`KubernetesBackend` touches neither files nor the network): in a pod
(``KUBERNETES_SERVICE_HOST`` set, no ``context`` asked for) the service account comes
first, else the kubeconfig (``KUBECONFIG`` or ``~/.kube/config``) with the given context.

What each operation does on the cluster:

* ``submit``: render, validate offline (names, enums, the official schema of built-in kinds),
  then a server-side dry run (``dryRun=All``) of every object, then the real creates in
  order (Service and NetworkPolicy before the Job or JobSet). A create that fails after an earlier one succeeded deletes
  what was created, so a job is never left half made.
* ``status``: reads the JobSet (or Job) and its pods; see :func:`jobset_status` and
  :func:`job_status` for how they map to :class:`JobState`.
* ``logs``: the pod of one process (JobSet: job-index = process // hosts_per_slice,
  completion index = process % hosts_per_slice) of the newest restart attempt.
* ``delete``: foreground propagation (the object goes only after its Jobs and pods), and
  the objects created alongside it: the headless Service of an indexed job and the job's
  NetworkPolicy (both carry the job's name and the managed-by label).
* ``resume``: re-creates a stopped job from the spec stored in its ``roxxel.dev/spec``
  annotation, under the same run name and checkpoint_dir, so training restores its last
  checkpoint.

Responses are read as raw JSON (``_preload_content=False``) rather than through the
client's models, so pods, Jobs and JobSets are all plain dicts with the API's field names.
Every :class:`~kubernetes.client.exceptions.ApiException` becomes a :class:`BackendError`
(or :class:`JobNotFoundError` / :class:`JobExistsError`) whose message names the problem
and the fix.
"""

from __future__ import annotations

import builtins
import codecs
import dataclasses
import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import urllib3
import yaml
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from roxxel.wording import as_clause
from roxxel_launch import contract
from roxxel_launch.backends.base import (
    Backend,
    BackendError,
    JobDetails,
    JobExistsError,
    JobNotFoundError,
    JobState,
    JobStatus,
    StopReason,
    Worker,
)
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

logger = logging.getLogger(__name__)

JOBSET_GROUP = "jobset.x-k8s.io"
JOBSET_VERSION = "v1alpha2"
JOBSET_PLURAL = "jobsets"
# Labels the JobSet and Job controllers put on pods (and child Jobs).
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
RESTART_ATTEMPT_KEY = "jobset.sigs.k8s.io/restart-attempt"  # a label and an annotation
COMPLETION_INDEX_KEY = "batch.kubernetes.io/job-completion-index"  # label (1.28+) and annotation
JOB_NAME_LABEL = "job-name"  # set by the Job controller on every pod it creates
FIELD_MANAGER = "roxxel-launch"
FOREGROUND = "Foreground"
JOBSET_INSTALL_HINT = (
    "install JobSet (v0.8.0 or newer): kubectl apply --server-side -f "
    "https://github.com/kubernetes-sigs/jobset/releases/download/v0.8.0/manifests.yaml")
INCLUSTER_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
DEFAULT_KUBECONFIG = "~/.kube/config"

# Creation order: a Service before the Job whose pods it names.
# A NetworkPolicy before the pods it protects, so that no pod ever runs unprotected.
_CREATE_ORDER = {"Service": 0, "NetworkPolicy": 0, "Job": 1, "JobSet": 1}
# What RBAC calls each kind, for "kubectl auth can-i VERB RESOURCE" hints.
_RBAC_RESOURCE = {"JobSet": f"{JOBSET_PLURAL}.{JOBSET_GROUP}", "Job": "jobs.batch",
                  "Service": "services", "Pod": "pods", "Pod log": "pods/log",
                  "NetworkPolicy": "networkpolicies.networking.k8s.io"}
_RBAC_VERB = {"create": "create", "read": "get", "list": "list", "delete": "delete",
              "read logs of": "get"}
_RUNNING_PHASES = ("Running", "Succeeded")
_CONDITION_FIELDS = ("type", "status", "reason", "message", "lastTransitionTime")


# ----------------------------------------------------------------------------- worker view


def _int(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _pod_key(pod: Mapping, key: str) -> str | None:
    meta = pod.get("metadata") or {}
    value = (meta.get("labels") or {}).get(key)
    if value is None:
        value = (meta.get("annotations") or {}).get(key)
    return value


def worker_from_pod(pod: Mapping, hosts_per_slice: int) -> Worker:
    """A :class:`Worker` from a pod's JSON (labels, annotations, status)."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    slice_index = _int(_pod_key(pod, JOB_INDEX_LABEL), 0)
    index = _int(_pod_key(pod, COMPLETION_INDEX_KEY), -1)
    phase = status.get("phase") or "Pending"
    exit_code = finished_at = None
    reason, message = status.get("reason") or "", status.get("message") or ""
    containers = status.get("containerStatuses") or []
    container = next((c for c in containers if c.get("name") == contract.CONTAINER_NAME),
                     containers[0] if containers else None)
    if container is not None:
        state = container.get("state") or {}
        if "terminated" in state:
            terminated = state["terminated"] or {}
            exit_code = terminated.get("exitCode")
            finished_at = terminated.get("finishedAt")
            reason = terminated.get("reason") or reason
            message = terminated.get("message") or message
        elif "waiting" in state:
            waiting = state["waiting"] or {}
            reason = waiting.get("reason") or reason
            message = waiting.get("message") or message
    for condition in status.get("conditions") or []:
        # A disruption (preemption, eviction, node drain) explains more than "Error".
        if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
            reason = condition.get("reason") or "DisruptionTarget"
            message = condition.get("message") or message
        elif (condition.get("type") == "PodScheduled" and condition.get("status") == "False"
              and not reason):
            reason = condition.get("reason") or "Unschedulable"
            message = condition.get("message") or message
    return Worker(
        process=slice_index * hosts_per_slice + max(index, 0),
        slice=slice_index,
        index=index,
        pod=meta.get("name", "?"),
        phase=phase,
        restart_attempt=_int(_pod_key(pod, RESTART_ATTEMPT_KEY), 0),
        exit_code=exit_code,
        reason=reason,
        message=message,
        finished_at=finished_at,
        terminating=bool(meta.get("deletionTimestamp")),
    )


def _true_conditions(status: Mapping) -> dict[str, dict]:
    return {c.get("type"): c for c in status.get("conditions") or [] if c.get("status") == "True"}


def _condition_text(condition: Mapping | None) -> str:
    if not condition:
        return ""
    return ": ".join(p for p in (condition.get("reason"), condition.get("message")) if p)


def _first_failure(workers: Iterable[Worker]) -> Worker | None:
    """The worker that failed first (the likely cause; peers often fail because it did)."""
    failed = [w for w in workers if (w.exit_code not in (None, 0)) or w.phase == "Failed"]
    if not failed:
        return None
    # A peer that saved a checkpoint and exited 42 after SIGTERM is a consequence, not a cause.
    causes = [w for w in failed if w.exit_code != contract.PREEMPTED_EXIT_CODE] or failed
    return min(causes, key=lambda w: (w.finished_at or "~", w.process))


# Why a pod stopped when the cluster, not the program, stopped it (the reasons of its
# DisruptionTarget condition): preemption, eviction, node drain or loss.
_DISRUPTION_REASONS = ("DisruptionTarget", "PreemptionByScheduler", "PreemptionByKubeScheduler",
                       "TerminationByKubelet", "EvictionByEvictionAPI", "DeletionByTaintManager",
                       "DeletionByPodGC")


def _failed(worker: Worker) -> bool:
    return worker.exit_code not in (None, 0) or worker.phase == "Failed"


def _preempted(worker: Worker) -> bool:
    """A worker stopped by the cluster, or one that saved a checkpoint after SIGTERM (exit 42)."""
    return worker.exit_code == contract.PREEMPTED_EXIT_CODE or worker.reason in _DISRUPTION_REASONS


def _failed_exit_code(worker: Worker | None) -> int:
    if worker is None or worker.exit_code in (None, 0, contract.PREEMPTED_EXIT_CODE):
        return 1
    return worker.exit_code


# The reason of a JobSet's Failed condition once failurePolicy.maxRestarts is used up.
_JOBSET_MAX_RESTARTS_REASON = "ReachedMaxRestarts"


def _failure_reason(worker: Worker | None) -> StopReason:
    """CONFIG_ERROR when the first failed worker exited with the configuration-error code."""
    if worker is not None and worker.exit_code == contract.CONFIG_ERROR_EXIT_CODE:
        return StopReason.CONFIG_ERROR
    return StopReason.FAILED


def _progress(workers: list[Worker], processes: int, slices: int) -> str:
    """'3/8 workers running; slice 0: 3 Running, 1 Pending; slice 1: no pods'."""
    running = sum(w.phase in _RUNNING_PHASES for w in workers)
    parts = [f"{running}/{processes} workers running"]
    if slices > 1 or running < processes:
        for s in range(slices):
            phases: dict[str, int] = {}
            for w in workers:
                if w.slice == s:
                    phases[w.phase] = phases.get(w.phase, 0) + 1
            counts = ", ".join(f"{n} {phase}" for phase, n in sorted(phases.items()))
            parts.append(f"slice {s}: {counts or 'no pods'}")
    waiting = next((w for w in sorted(workers, key=lambda w: w.process)
                    if w.phase not in _RUNNING_PHASES and w.reason), None)
    if waiting is not None:
        parts.append(f"waiting: {waiting.describe()}")
    return "; ".join(parts)


def _jobset_shape(jobset: Mapping) -> tuple[int, int, int]:
    """(hosts per slice, slices, processes) of a JobSet, from its spec."""
    rjobs = (jobset.get("spec") or {}).get("replicatedJobs") or []
    processes = 0
    for rjob in rjobs:
        job_spec = (rjob.get("template") or {}).get("spec") or {}
        processes += (rjob.get("replicas") or 1) * (job_spec.get("parallelism")
                                                    or job_spec.get("completions") or 1)
    if not rjobs:
        return 1, 0, 0
    first = (rjobs[0].get("template") or {}).get("spec") or {}
    return (first.get("completions") or first.get("parallelism") or 1,
            rjobs[0].get("replicas") or 1, processes)


def _job_shape(job: Mapping) -> tuple[int, int, int]:
    spec = job.get("spec") or {}
    hosts = spec.get("completions") or spec.get("parallelism") or 1
    return hosts, 1, hosts


def _suspended_message(obj: Mapping, conditions: Mapping) -> str:
    queue = ((obj.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL)
    text = _condition_text(conditions.get("Suspended")) or "suspended"
    if queue:
        return f"{text}; waiting for Kueue to admit it (queue {queue})"
    return f"{text}; un-suspend it or resume it (roxxel-launch resume)"


def jobset_status(jobset: Mapping, pods: Iterable[Mapping]) -> JobStatus:
    """Maps a JobSet and its pods to a :class:`JobStatus`.

    Succeeded: terminalState Completed (or condition Completed). Failed: terminalState Failed
    (or condition Failed), with the condition and the first failed worker's exit code and
    reason — or Preempted (exit code 42) when every failed worker of the last attempt was
    preempted or exited 42 after saving a checkpoint. Suspended: spec.suspend or condition
    Suspended (Kueue holds or evicted it).
    Otherwise the pods of the current attempt (restart-attempt == status.restarts) decide:
    Running when every worker runs (and no pod of an older attempt remains), else Restarting
    after a gang restart (status.restarts > 0), else Pending.
    """
    meta = jobset.get("metadata") or {}
    spec = jobset.get("spec") or {}
    status = jobset.get("status") or {}
    name = meta.get("name", "?")
    hosts, slices, processes = _jobset_shape(jobset)
    restarts = _int(status.get("restarts"), 0)
    conditions = _true_conditions(status)
    workers = [worker_from_pod(p, hosts) for p in pods]
    current = [w for w in workers if w.restart_attempt == restarts and not w.terminating]
    stale = [w for w in workers if w.restart_attempt < restarts]
    common = dict(name=name, processes=processes, restarts=restarts,
                  created=meta.get("creationTimestamp"))
    notes = []
    if restarts:
        counted = status.get("restartsCountTowardsMax")
        limit = (spec.get("failurePolicy") or {}).get("maxRestarts")
        if counted is not None:
            # The rest were free: child Jobs failed by their podFailurePolicy (a DisruptionTarget
            # pod condition — preemption, API, taint or node-pressure eviction — or exit 42).
            free = max(restarts - _int(counted, 0), 0)
            notes.append(f"{restarts} restarts, {counted} counted toward max_restarts={limit}, "
                         f"{free} free (preemption or eviction)")
    if meta.get("deletionTimestamp"):
        notes.append("being deleted")
    terminal = status.get("terminalState")

    def message(text: str) -> str:
        return "; ".join(p for p in (text, *notes) if p)

    if terminal == "Completed" or "Completed" in conditions:
        return JobStatus(state=JobState.SUCCEEDED, exit_code=0,
                         message=message(_condition_text(conditions.get("Completed"))), **common)
    if terminal == "Failed" or "Failed" in conditions:
        text = _condition_text(conditions.get("Failed")) or "failed"
        # The JobSet's failure policy restarts the gang on a preemption without counting it,
        # so a JobSet that ends Failed normally ran out of max_restarts on real errors. When
        # every failed worker of its last attempt was preempted instead (a JobSet controller
        # without failure-policy rules, or a policy edited by hand), it is Preempted: resume
        # continues it from its checkpoint.
        failed_now = [w for w in current if _failed(w)] or [w for w in workers if _failed(w)]
        if failed_now and all(_preempted(w) for w in failed_now):
            preempted = min(failed_now, key=lambda w: (w.finished_at or "~", w.process))
            text = (f"preempted ({text}; {preempted.describe()}); `roxxel-launch resume {name}` "
                    "continues from the last checkpoint")
            return JobStatus(state=JobState.PREEMPTED, exit_code=contract.PREEMPTED_EXIT_CODE,
                             message=message(text), reason=StopReason.PREEMPTED, **common)
        first = _first_failure(current) or _first_failure(workers)
        if first is not None:
            text += f"; first failure: {first.describe()}"
        reason = _failure_reason(first)
        if reason is StopReason.FAILED and \
                (conditions.get("Failed") or {}).get("reason") == _JOBSET_MAX_RESTARTS_REASON:
            reason = StopReason.RESTARTS_EXHAUSTED
        return JobStatus(state=JobState.FAILED, exit_code=_failed_exit_code(first),
                         message=message(text), reason=reason, **common)
    if spec.get("suspend") or "Suspended" in conditions:
        return JobStatus(state=JobState.SUSPENDED,
                         message=message(_suspended_message(jobset, conditions)), **common)
    progress = _progress(current, processes, slices)
    running = sum(w.phase in _RUNNING_PHASES for w in current)
    if running >= processes and not stale:
        state = JobState.RUNNING
    elif restarts > 0:
        state = JobState.RESTARTING
        if stale:
            progress += f"; {len(stale)} pods of the previous attempt still terminating"
    else:
        state = JobState.PENDING
    return JobStatus(state=state, message=message(progress), **common)


def _is_preemption(condition: Mapping, workers: list[Worker]) -> bool:
    """Whether a Job failed by its podFailurePolicy because of a preemption.

    The rendered policy fails the Job on a DisruptionTarget pod condition or on exit code 42
    (a worker that saved a checkpoint after SIGTERM); the Job controller's message names
    which rule matched ("Pod ns/x has condition DisruptionTarget matching FailJob rule at
    index 0", "Container worker for pod ns/x failed with exit code 42 matching ...").
    """
    if condition.get("reason") != "PodFailurePolicy":
        return False
    text = condition.get("message") or ""
    if "DisruptionTarget" in text or re.search(
            rf"exit code {contract.PREEMPTED_EXIT_CODE}\b", text):
        return True
    return any(_preempted(w) for w in workers)


def job_status(job: Mapping, pods: Iterable[Mapping]) -> JobStatus:
    """Maps an Indexed Job (workload: indexed-job) and its pods to a :class:`JobStatus`.

    Succeeded: condition Complete (or SuccessCriteriaMet). Preempted: condition Failed (or
    FailureTarget) with reason PodFailurePolicy from the DisruptionTarget rule or exit code 42
    — ``resume`` continues it. Failed: any other failure, with the first failed worker.
    Suspended: spec.suspend or condition Suspended. Else Running when every worker runs,
    Pending before. An indexed job never restarts by itself (restarts is 0).
    """
    meta = job.get("metadata") or {}
    spec = job.get("spec") or {}
    status = job.get("status") or {}
    name = meta.get("name", "?")
    hosts, slices, processes = _job_shape(job)
    conditions = _true_conditions(status)
    workers = [worker_from_pod(p, hosts) for p in pods]
    common = dict(name=name, processes=processes, restarts=0,
                  created=meta.get("creationTimestamp"))
    deleting = "; being deleted" if meta.get("deletionTimestamp") else ""
    if "Complete" in conditions or "SuccessCriteriaMet" in conditions:
        text = _condition_text(conditions.get("Complete") or conditions.get("SuccessCriteriaMet"))
        return JobStatus(state=JobState.SUCCEEDED, exit_code=0, message=text + deleting, **common)
    failed = conditions.get("Failed") or conditions.get("FailureTarget")
    if failed is not None:
        if _is_preemption(failed, workers):
            text = (f"preempted ({_condition_text(failed)}); `roxxel-launch resume {name}` "
                    "continues from the last checkpoint")
            return JobStatus(state=JobState.PREEMPTED, exit_code=contract.PREEMPTED_EXIT_CODE,
                             message=text + deleting, reason=StopReason.PREEMPTED, **common)
        first = _first_failure(workers)
        text = _condition_text(failed) or "failed"
        if first is not None:
            text += f"; first failure: {first.describe()}"
        return JobStatus(state=JobState.FAILED, exit_code=_failed_exit_code(first),
                         message=text + deleting, reason=_failure_reason(first), **common)
    if spec.get("suspend") or "Suspended" in conditions:
        return JobStatus(state=JobState.SUSPENDED,
                         message=_suspended_message(job, conditions) + deleting, **common)
    live = [w for w in workers if not w.terminating]
    running = sum(w.phase in _RUNNING_PHASES for w in live)
    state = JobState.RUNNING if running >= processes else JobState.PENDING
    return JobStatus(state=state, message=_progress(live, processes, slices) + deleting, **common)


# ----------------------------------------------------------------------------- errors


def _status_body(err: ApiException) -> dict:
    """The API server's Status object from an error response ({} when the body is not one)."""
    body = err.body
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if not body:
        return {}
    try:
        data = json.loads(body)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _server_message(err: ApiException) -> str:
    status = _status_body(err)
    message = status.get("message") or ""
    causes = (status.get("details") or {}).get("causes") or []
    if causes and not message:
        message = "; ".join(f"{c.get('field', '')}: {c.get('message', '')}".strip(": ")
                            for c in causes)
    if not message:
        text = err.body.decode("utf-8", "replace") if isinstance(err.body, bytes) else err.body
        message = (text or err.reason or "").strip()
    return message if len(message) <= 1000 else message[:1000] + "..."



def _resource_type_missing(err: ApiException) -> bool:
    """A 404 for the resource type itself (no such API), not for one named object."""
    if err.status != 404:
        return False
    details = _status_body(err).get("details") or {}
    # A missing object's Status names it; an unknown API answers "404 page not found" or a
    # Status without a name ("the server could not find the requested resource").
    return not details.get("name")


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

    Constructing reads nothing and sends nothing; the first API call loads the credentials.
    """

    def __init__(self, namespace: str | None = None, context: str | None = None, *,
                 config_file: str | None = None,
                 kubernetes_version: str = DEFAULT_KUBERNETES_VERSION,
                 poll_seconds: float = 2.0, delete_timeout: float | None = None):
        self._namespace = namespace
        self._context = context
        self._config_file = config_file
        self.kubernetes_version = kubernetes_version
        self.poll_seconds = poll_seconds
        self.delete_timeout = delete_timeout
        self._api_client: k8s_client.ApiClient | None = None
        self._resolved_namespace: str | None = None
        self._host = "?"

    # ------------------------------------------------------------------ connection

    def _load_config(self) -> tuple[k8s_client.Configuration, str | None, str]:
        """(client configuration, namespace from the config or None, where it came from)."""
        configuration = k8s_client.Configuration()
        in_cluster_error = None
        if os.environ.get("KUBERNETES_SERVICE_HOST") and self._context is None:
            try:
                k8s_config.load_incluster_config(client_configuration=configuration)
            except k8s_config.ConfigException as err:
                in_cluster_error = err
                logger.info("in-cluster credentials unusable (%s); trying the kubeconfig", err)
            else:
                namespace = None
                try:
                    with open(INCLUSTER_NAMESPACE_FILE, encoding="utf-8") as f:
                        namespace = f.read().strip() or None
                except FileNotFoundError:
                    logger.debug("no %s; namespace defaults to 'default'", INCLUSTER_NAMESPACE_FILE)
                return configuration, namespace, "the pod's service account"
        path = self._config_file or os.environ.get("KUBECONFIG") or DEFAULT_KUBECONFIG
        try:
            k8s_config.load_kube_config(config_file=path, context=self._context,
                                        client_configuration=configuration, persist_config=False)
            contexts, current = k8s_config.list_kube_config_contexts(config_file=path)
        except (k8s_config.ConfigException, OSError, ValueError, yaml.YAMLError) as err:
            context = f" (context {self._context!r})" if self._context else ""
            also = (f"; in-cluster credentials failed too: {in_cluster_error}"
                    if in_cluster_error else "")
            raise BackendError(
                f"cannot load Kubernetes credentials from {path}{context}: {err}{also}. "
                "Point KUBECONFIG at a kubeconfig (e.g. run `gcloud container clusters "
                "get-credentials CLUSTER`), or pick an existing context with --context "
                "(kubectl config get-contexts).") from err
        if self._context is not None:
            current = next((c for c in contexts if c.get("name") == self._context), current)
        namespace = ((current or {}).get("context") or {}).get("namespace")
        return configuration, namespace, f"{path}, context {(current or {}).get('name')!r}"

    @property
    def api_client(self) -> k8s_client.ApiClient:
        """The client, created (and the credentials loaded) on first use."""
        if self._api_client is None:
            configuration, namespace, source = self._load_config()
            self._resolved_namespace = self._namespace or namespace or "default"
            self._host = configuration.host
            self._api_client = k8s_client.ApiClient(configuration)
            logger.info("Kubernetes API %s (credentials from %s), namespace %s",
                        self._host, source, self._resolved_namespace)
        return self._api_client

    @property
    def namespace(self) -> str:
        """The namespace this backend works in (loads the config when not given)."""
        if self._namespace is not None:
            return self._namespace
        self.api_client  # noqa: B018 - resolves the namespace from the config
        if self._resolved_namespace is None:
            raise RuntimeError("loading the Kubernetes configuration resolved no namespace")
        return self._resolved_namespace

    def close(self) -> None:
        if self._api_client is not None:
            self._api_client.close()
            self._api_client = None

    def __enter__(self) -> KubernetesBackend:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # ------------------------------------------------------------------ raw API calls

    def _error(self, err: ApiException, action: str, kind: str, name: str | None,
               namespace: str) -> BackendError:
        what = f"{kind} {namespace}/{name}" if name else f"{kind}s in namespace {namespace}"
        server = _server_message(err)
        status = err.status
        if status == 404 and kind == "JobSet" and _resource_type_missing(err):
            return BackendError(
                f"cannot {action} {what}: the JobSet API ({JOBSET_GROUP}/{JOBSET_VERSION}) is "
                f"not installed in this cluster ({server}). {JOBSET_INSTALL_HINT} — or use "
                "workload: indexed-job, which needs no JobSet controller.")
        if status == 404 and (_status_body(err).get("details") or {}).get("kind") == "namespaces":
            return BackendError(
                f"cannot {action} {what}: namespace {namespace!r} does not exist ({server}). "
                f"Create it (kubectl create namespace {namespace}) or pick another (--namespace).")
        if status == 404:
            return JobNotFoundError(
                f"{what} not found ({server}). Check the name (roxxel-launch list) and the "
                "namespace (--namespace).")
        if status == 409:
            return JobExistsError(
                f"{what} already exists ({server}). Delete it (roxxel-launch delete {name}), "
                f"resume it (roxxel-launch resume {name}), or choose another name.")
        if status == 403:
            verb = _RBAC_VERB.get(action.removesuffix(" (dry run)"), action)
            resource = _RBAC_RESOURCE.get(kind, kind.lower() + "s")
            return BackendError(
                f"forbidden to {action} {what}: {server}. Your account needs RBAC permission "
                f"to {verb} {resource} in namespace {namespace} (check: kubectl auth can-i "
                f"{verb} {resource} -n {namespace}); ask a cluster admin for a Role, or use a "
                "namespace you may use (--namespace).")
        if status == 401:
            return BackendError(
                f"the API server at {self._host} rejected the credentials while trying to "
                f"{action} {what} ({server}). Refresh them (e.g. `gcloud container clusters "
                "get-credentials CLUSTER`) or pick another context (--context).")
        if status in (400, 422):
            return BackendError(
                f"the API server rejected {what} ({action}): {server}. Fix the field it names "
                "in the job spec (roxxel-launch validate checks a spec offline).")
        if not status:
            return BackendError(f"cannot {action} {what}: {as_clause(err.reason or server)}. Check the "
                                f"connection to the API server at {self._host}.")
        return BackendError(
            f"the API server failed to {action} {what}: HTTP {status} {err.reason or ''}: "
            f"{server}. Retry; if it persists, check the cluster's health "
            "(kubectl get --raw /readyz).")

    def _call(self, action: str, kind: str, name: str | None, namespace: str,
              fn: Callable, *args, **kwargs):
        """Calls an API method for its raw response (``_preload_content=False``)."""
        try:
            return fn(*args, _preload_content=False, **kwargs)
        except ApiException as err:
            raise self._error(err, action, kind, name, namespace) from err
        except urllib3.exceptions.HTTPError as err:
            raise BackendError(
                f"cannot reach the Kubernetes API server at {self._host} to {action} {kind} "
                f"{name or ''}: {as_clause(err)}. Check the network and the kubeconfig context "
                "(kubectl cluster-info).") from err
        except ValueError as err:
            # The client checks arguments and (kubernetes >= 35, pydantic) bodies itself.
            raise BackendError(f"the kubernetes client refused to {action} {kind} "
                               f"{name or ''}: {err}") from err

    def _json(self, action: str, kind: str, name: str | None, namespace: str,
              fn: Callable, *args, **kwargs) -> dict:
        response = self._call(action, kind, name, namespace, fn, *args, **kwargs)
        try:
            data = response.data
        except urllib3.exceptions.HTTPError as err:
            raise BackendError(f"the connection to {self._host} broke while reading the answer "
                               f"to {action} {kind} {name or ''}: {as_clause(err)}. Retry.") from err
        finally:
            response.release_conn()
        if not data:
            return {}
        try:
            return json.loads(data)
        except ValueError as err:
            raise BackendError(f"the API server answered {action} {kind} {name or ''} with "
                               f"something that is not JSON: {data[:200]!r}") from err

    def _custom(self) -> k8s_client.CustomObjectsApi:
        return k8s_client.CustomObjectsApi(self.api_client)

    def _batch(self) -> k8s_client.BatchV1Api:
        return k8s_client.BatchV1Api(self.api_client)

    def _core(self) -> k8s_client.CoreV1Api:
        return k8s_client.CoreV1Api(self.api_client)

    def _networking(self) -> k8s_client.NetworkingV1Api:
        return k8s_client.NetworkingV1Api(self.api_client)

    def _create(self, obj: Mapping, *, dry_run: bool) -> dict:
        kind = obj["kind"]
        name = obj["metadata"]["name"]
        namespace = obj["metadata"].get("namespace") or self.namespace
        options = {"field_manager": FIELD_MANAGER}
        if dry_run:
            options["dry_run"] = "All"
        action = "create (dry run)" if dry_run else "create"
        logger.debug("%s %s %s/%s", action, kind, namespace, name)
        body = dict(obj)
        if kind == "JobSet":
            return self._json(action, kind, name, namespace,
                              self._custom().create_namespaced_custom_object, JOBSET_GROUP,
                              JOBSET_VERSION, namespace, JOBSET_PLURAL, body, **options)
        if kind == "Job":
            return self._json(action, kind, name, namespace, self._batch().create_namespaced_job,
                              namespace, body, **options)
        if kind == "Service":
            return self._json(action, kind, name, namespace, self._core().create_namespaced_service,
                              namespace, body, **options)
        if kind == "NetworkPolicy":
            return self._json(action, kind, name, namespace,
                              self._networking().create_namespaced_network_policy,
                              namespace, body, **options)
        raise BackendError(f"roxxel-launch does not create {kind} objects")

    def _get(self, kind: str, name: str) -> dict | None:
        """The object, or None when there is none (or, for a JobSet, no JobSet API)."""
        namespace = self.namespace
        try:
            if kind == "JobSet":
                return self._json("read", kind, name, namespace,
                                  self._custom().get_namespaced_custom_object,
                                  JOBSET_GROUP, JOBSET_VERSION, namespace, JOBSET_PLURAL, name)
            if kind == "Job":
                return self._json("read", kind, name, namespace, self._batch().read_namespaced_job,
                                  name, namespace)
            if kind == "Service":
                return self._json("read", kind, name, namespace,
                                  self._core().read_namespaced_service, name, namespace)
            if kind == "NetworkPolicy":
                return self._json("read", kind, name, namespace,
                                  self._networking().read_namespaced_network_policy, name,
                                  namespace)
        except JobNotFoundError:
            return None
        except BackendError as err:
            cause = err.__cause__
            if (kind == "JobSet" and isinstance(cause, ApiException)
                    and _resource_type_missing(cause)):
                logger.debug("no JobSet API in this cluster; no JobSet %s", name)
                return None
            raise
        raise ValueError(f"unknown kind {kind}")

    def _list(self, kind: str, selector: str) -> list[dict]:
        namespace = self.namespace
        if kind == "JobSet":
            data = self._json("list", kind, None, namespace,
                              self._custom().list_namespaced_custom_object, JOBSET_GROUP,
                              JOBSET_VERSION, namespace, JOBSET_PLURAL, label_selector=selector)
        elif kind == "Job":
            data = self._json("list", kind, None, namespace, self._batch().list_namespaced_job,
                              namespace, label_selector=selector)
        elif kind == "Pod":
            data = self._json("list", kind, None, namespace, self._core().list_namespaced_pod,
                              namespace, label_selector=selector)
        else:
            raise ValueError(f"unknown kind {kind}")
        return list(data.get("items") or [])

    def _delete(self, kind: str, name: str, namespace: str | None = None) -> bool:
        """Deletes with foreground propagation; False when it was already gone."""
        namespace = namespace or self.namespace
        logger.info("deleting %s %s/%s (foreground)", kind, namespace, name)
        try:
            if kind == "JobSet":
                self._json("delete", kind, name, namespace,
                           self._custom().delete_namespaced_custom_object, JOBSET_GROUP,
                           JOBSET_VERSION, namespace, JOBSET_PLURAL, name,
                           propagation_policy=FOREGROUND)
            elif kind == "Job":
                self._json("delete", kind, name, namespace, self._batch().delete_namespaced_job,
                           name, namespace, propagation_policy=FOREGROUND)
            elif kind == "Service":
                self._json("delete", kind, name, namespace,
                           self._core().delete_namespaced_service, name, namespace,
                           propagation_policy=FOREGROUND)
            elif kind == "NetworkPolicy":
                self._json("delete", kind, name, namespace,
                           self._networking().delete_namespaced_network_policy, name, namespace,
                           propagation_policy=FOREGROUND)
            else:
                raise ValueError(f"unknown kind {kind}")
        except JobNotFoundError:
            logger.debug("%s %s/%s was already gone", kind, namespace, name)
            return False
        return True

    # ------------------------------------------------------------------ lookups

    def _find(self, name: str) -> tuple[str, dict] | None:
        """("JobSet" | "Job", object) of a roxxel-launch job, or None when there is none."""
        for kind in ("JobSet", "Job"):
            obj = self._get(kind, name)
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
                f"no job {name!r} (JobSet or Job) in namespace {self.namespace}. Check the name "
                "(roxxel-launch list) and the namespace (--namespace).")
        return found

    def _pods(self, kind: str, name: str) -> list[dict]:
        if kind == "JobSet":
            return self._list("Pod", f"{JOBSET_NAME_LABEL}={name}")
        return self._list("Pod", f"{JOB_NAME_LABEL}={name}")

    @staticmethod
    def _status_of(kind: str, obj: Mapping, pods: Iterable[Mapping]) -> JobStatus:
        return jobset_status(obj, pods) if kind == "JobSet" else job_status(obj, pods)

    @staticmethod
    def _shape(kind: str, obj: Mapping) -> tuple[int, int, int]:
        return _jobset_shape(obj) if kind == "JobSet" else _job_shape(obj)

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
                answers.append(self._create(obj, dry_run=False))
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
        created_at = next((a.get("metadata", {}).get("creationTimestamp") for a in answers
                           if a.get("kind") in ("JobSet", "Job")), None)
        return JobStatus(name=spec.name, state=JobState.PENDING, processes=spec.num_processes,
                         message=f"created {idents}", created=created_at)

    def _dry_run_create(self, spec: JobSpec, obj: Mapping) -> None:
        """A server-side dry run of one create. A companion (Service, NetworkPolicy) that
        exists already is either the job's, and the error names the job, or one of ours
        left behind by a job deleted with kubectl (no JobSet/Job of that name any more),
        which is deleted so that the job can be made again."""
        try:
            self._create(obj, dry_run=True)
            return
        except JobExistsError:
            if obj["kind"] not in ("Service", "NetworkPolicy"):
                raise
            workload = "JobSet" if spec.workload == "jobset" else "Job"
            if self._get(workload, spec.name) is not None:
                raise JobExistsError(
                    f"{workload} {self.namespace}/{spec.name} already exists. Delete it "
                    f"(roxxel-launch delete {spec.name}), resume it (roxxel-launch resume "
                    f"{spec.name}), or choose another name.") from None
            if obj["kind"] not in self._companions(workload, spec.name):
                raise  # not ours (or not ours to remove): the 409 stands
        logger.warning("%s %s/%s is left over from a deleted job of that name; replacing it",
                       obj["kind"], self.namespace, spec.name)
        self._delete(obj["kind"], spec.name)
        self._create(obj, dry_run=True)

    def _rollback(self, created: list[dict]) -> str:
        """Deletes objects a failed submit created; says what happened (for the error)."""
        if not created:
            return ""
        undone, left = [], []
        for obj in reversed(created):
            kind, name = obj["kind"], obj["metadata"]["name"]
            namespace = obj["metadata"].get("namespace") or self.namespace
            try:
                self._delete(kind, name, namespace)
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
        return self._status_of(kind, obj, self._pods(kind, name))

    def workers(self, name: str) -> list[Worker]:
        """The worker pods of the current attempt, by process (for a per-slice table)."""
        kind, obj = self._require(name)
        return self._current_workers(kind, obj, self._pods(kind, name))

    def _current_workers(self, kind: str, obj: Mapping, pods: Iterable[Mapping]) -> list[Worker]:
        hosts, _, _ = self._shape(kind, obj)
        restarts = _int(((obj.get("status") or {}).get("restarts")), 0)
        workers = [worker_from_pod(p, hosts) for p in pods]
        return sorted((w for w in workers if w.restart_attempt == restarts),
                      key=lambda w: w.process)

    def details(self, name: str) -> JobDetails:
        """Status, conditions and the current attempt's worker pods, from one read of each.

        Raises: JobNotFoundError.
        """
        kind, obj = self._require(name)
        pods = self._pods(kind, name)
        hosts, slices, _ = self._shape(kind, obj)
        conditions = tuple(
            {key: c.get(key) for key in _CONDITION_FIELDS if c.get(key) is not None}
            for c in (obj.get("status") or {}).get("conditions") or [])
        return JobDetails(status=self._status_of(kind, obj, pods), kind=kind,
                          namespace=(obj.get("metadata") or {}).get("namespace") or self.namespace,
                          slices=slices, hosts_per_slice=hosts, conditions=conditions,
                          workers=tuple(self._current_workers(kind, obj, pods)))

    def list(self) -> list[JobStatus]:
        selector = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
        found: list[tuple[str, dict]] = []
        try:
            found += [("JobSet", o) for o in self._list("JobSet", selector)]
        except BackendError as err:
            cause = err.__cause__
            if not (isinstance(cause, ApiException) and _resource_type_missing(cause)):
                raise
            logger.info("no JobSet API in this cluster; listing Jobs only")
        for job in self._list("Job", selector):
            meta = job.get("metadata") or {}
            if JOBSET_NAME_LABEL in (meta.get("labels") or {}) or any(
                    o.get("kind") == "JobSet" for o in meta.get("ownerReferences") or []):
                continue  # a JobSet's child Job carries the JobSet's labels
            found.append(("Job", job))
        by_owner: dict[tuple[str, str], list[dict]] = {}
        for pod in self._list("Pod", RUN_NAME_LABEL):
            labels = (pod.get("metadata") or {}).get("labels") or {}
            if JOBSET_NAME_LABEL in labels:
                by_owner.setdefault(("JobSet", labels[JOBSET_NAME_LABEL]), []).append(pod)
            elif JOB_NAME_LABEL in labels:
                by_owner.setdefault(("Job", labels[JOB_NAME_LABEL]), []).append(pod)
        statuses = [self._status_of(kind, obj, by_owner.get((kind, obj["metadata"]["name"]), []))
                    for kind, obj in found]
        return sorted(statuses, key=lambda s: s.name)

    def delete(self, name: str, *, wait: bool = False) -> None:
        """Deletes the job (foreground: its Jobs and pods go first) and an indexed job's Service.

        With ``wait``, returns only once the objects are gone.
        """
        kind, obj = self._require(name)
        self._delete(kind, name)
        companions = self._companions(kind, name)
        for companion in companions:
            self._delete(companion, name)
        if wait:
            self._wait_gone(kind, name, obj, companions)

    def _companions(self, kind: str, name: str) -> builtins.list[str]:  # `list` is a method here
        """Kinds of the objects created alongside the job that go with it: an indexed job's
        headless Service, and the NetworkPolicy of either kind (same name, our label)."""
        found = []
        for companion in (["Service"] if kind == "Job" else []) + ["NetworkPolicy"]:
            try:
                obj = self._get(companion, name)
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
            pending = [k for k in pending if self._get(k, name) is not None]
            if not pending:
                return
            if time.monotonic() >= deadline:
                raise BackendError(
                    f"{', '.join(pending)} {self.namespace}/{name} still exists {timeout:.0f} s "
                    f"after deletion (pods finishing a checkpoint, or a stuck finalizer). Wait "
                    f"and retry, and check: kubectl get pods -n {self.namespace} "
                    f"-l {self._pod_selector(kind, name)}")
            logger.info("waiting for %s %s/%s to be deleted", ", ".join(pending),
                        self.namespace, name)
            time.sleep(self.poll_seconds)

    @staticmethod
    def _pod_selector(kind: str, name: str) -> str:
        return f"{JOBSET_NAME_LABEL}={name}" if kind == "JobSet" else f"{JOB_NAME_LABEL}={name}"

    @staticmethod
    def _grace_period(kind: str, obj: Mapping) -> int:
        spec = obj.get("spec") or {}
        if kind == "JobSet":
            rjobs = spec.get("replicatedJobs") or [{}]
            spec = (rjobs[0].get("template") or {}).get("spec") or {}
        pod_spec = (spec.get("template") or {}).get("spec") or {}
        return _int(pod_spec.get("terminationGracePeriodSeconds"), 30)

    def resume(self, name: str, *, spec: JobSpec | None = None) -> JobStatus:
        """Re-creates a stopped job so that training continues from its last checkpoint.

        The spec comes from the ``roxxel.dev/spec`` annotation of the existing object (the
        effective spec it was submitted with: same run name and checkpoint_dir). The old
        object is deleted (foreground) and gone before the new one is created. A job that
        was deleted already can be resumed only with ``spec``.

        Resumes Failed, Preempted and Suspended jobs. A Suspended job (held or evicted by
        Kueue) is re-created, which puts it at the back of its queue.

        Raises:
            JobNotFoundError: no such job and no ``spec``.
            BackendError: the job is Pending, Running or Restarting (wait or delete it), it
                succeeded, or its annotation is missing or unreadable.
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
        current = self._status_of(kind, obj, self._pods(kind, name))
        deleting = bool(meta.get("deletionTimestamp"))
        if not deleting and current.state in (JobState.PENDING, JobState.RUNNING,
                                              JobState.RESTARTING):
            raise BackendError(
                f"{name} is {current.state.value} ({current.message}); resume only restarts a "
                f"stopped job. Wait for it to finish (roxxel-launch wait {name}) or delete it "
                f"first (roxxel-launch delete {name}).")
        if not deleting and current.state is JobState.SUCCEEDED:
            raise BackendError(
                f"{name} succeeded; there is nothing to resume. To run it again, delete it "
                f"(roxxel-launch delete {name}) and submit its spec.")
        stored = self._stored_spec(kind, obj)
        if stored.name != name:
            raise BackendError(f"{kind} {name}: its {SPEC_ANNOTATION} annotation describes "
                               f"{stored.name!r}; resubmit the spec file instead.")
        _, objects = self._prepare(stored)  # check offline before deleting anything
        logger.info("resuming %s (%s, run %s): replacing %s", name, current.state.value,
                    stored.run_name, ", ".join(o["kind"] for o in objects))
        companions = self._companions(kind, name)
        if not deleting:
            self._delete(kind, name)
        for companion in companions:
            self._delete(companion, name)
        self._wait_gone(kind, name, obj, companions)
        return self.submit(stored)

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

    def logs(self, name: str, *, process: int = 0, follow: bool = False) -> Iterator[str]:
        """Lines of one process's output, from its pod of the newest restart attempt.

        The pod is looked up now (errors raise here, not while iterating). With ``follow``
        the lines stream as they are written, and a pod that has not started yet is waited
        for; without it, a pod that has not started is an error.
        """
        kind, obj = self._require(name)
        hosts, _, processes = self._shape(kind, obj)
        if not 0 <= process < processes:
            raise BackendError(f"{name} has processes 0..{processes - 1}; there is no process "
                               f"{process}.")
        pod = self._pod_of(kind, obj, process, hosts, wait=follow)
        logger.info("logs of %s process %d: pod %s", name, process, pod)
        response = self._call("read logs of", "Pod log", pod, self.namespace,
                              self._core().read_namespaced_pod_log, pod, self.namespace,
                              container=contract.CONTAINER_NAME, follow=follow)
        return self._lines(response, pod)

    def _pod_of(self, kind: str, obj: Mapping, process: int, hosts: int, *, wait: bool) -> str:
        name = obj["metadata"]["name"]
        if kind == "JobSet":
            slice_index, index = divmod(process, hosts)
            selector = f"{JOBSET_NAME_LABEL}={name},{JOB_INDEX_LABEL}={slice_index}"
        else:
            index = process
            selector = f"{JOB_NAME_LABEL}={name}"
        announced = None
        while True:
            pods = [p for p in self._list("Pod", selector)
                    if _int(_pod_key(p, COMPLETION_INDEX_KEY), -1) == index]
            if pods:
                newest = max(pods, key=lambda p: (_int(_pod_key(p, RESTART_ATTEMPT_KEY), 0),
                                                  (p.get("metadata") or {}).get(
                                                      "creationTimestamp") or ""))
                worker = worker_from_pod(newest, hosts)
                states = [c.get("state") or {} for c in
                          (newest.get("status") or {}).get("containerStatuses") or []]
                started = worker.phase != "Pending" or any(
                    "running" in s or "terminated" in s for s in states)
                if started or not wait:
                    return worker.pod
                reason = worker.describe()
            else:
                newest = None
                if not wait:
                    raise BackendError(
                        f"process {process} of {name} has no pod yet (see roxxel-launch status "
                        f"{name}); follow the logs (-f) to wait for it.")
                reason = f"process {process} has no pod yet"
            current = self._get(kind, name)
            if current is None:
                raise JobNotFoundError(f"{kind} {self.namespace}/{name} was deleted while "
                                       "waiting for its pod.")
            state = self._status_of(kind, current, []).state
            if state.terminal:
                if newest is not None:
                    return newest["metadata"]["name"]  # it will not start any more: show what is
                raise BackendError(f"{name} is {state.value} and process {process} has no pod "
                                   "left to read logs from.")
            if reason != announced:
                logger.info("waiting for %s to start: %s", name, reason)
                announced = reason
            time.sleep(self.poll_seconds)

    @staticmethod
    def _lines(response, pod: str) -> Iterator[str]:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        buffer = ""
        finished = False
        try:
            for chunk in response.stream(amt=None, decode_content=True):
                buffer += decoder.decode(chunk)
                *lines, buffer = buffer.split("\n")
                for line in lines:
                    yield line.removesuffix("\r")
            buffer += decoder.decode(b"", final=True)
            if buffer:
                yield buffer.removesuffix("\r")
            finished = True
        except urllib3.exceptions.HTTPError as err:
            raise BackendError(f"the log stream of pod {pod} broke: {as_clause(err)}. Run logs again "
                               "(with -f to keep following).") from err
        finally:
            if finished:
                response.release_conn()
            else:
                response.close()  # stopped early: drop the connection, the server still streams
