"""How a JobSet or an Indexed Job, and its pods, map to a :class:`JobStatus` (no API calls).

Pure functions over the API's JSON (plain dicts with the API's field names): the Kubernetes
backend reads the objects (:mod:`.api`) and this module interprets them, so the
interpretation is tested on objects alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from roxxel_launch import contract
from roxxel_launch.backends.base import JobState, JobStatus, StopReason, Worker
from roxxel_launch.backends.kubernetes.status_views import (
    Condition,
    Conditions,
    ContainerStateView,
    JobSetView,
    JobView,
    ObjectMetaView,
    PodView,
)
from roxxel_launch.render import QUEUE_LABEL

# Labels the JobSet and Job controllers put on pods (and child Jobs).
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
RESTART_ATTEMPT_KEY = "jobset.sigs.k8s.io/restart-attempt"  # a label and an annotation
COMPLETION_INDEX_KEY = "batch.kubernetes.io/job-completion-index"  # label (1.28+) and annotation
JOB_NAME_LABEL = "job-name"  # set by the Job controller on every pod it creates
_RUNNING_PHASES = ("Running", "Succeeded")
_CONDITION_FIELDS = ("type", "status", "reason", "message", "lastTransitionTime")


# ----------------------------------------------------------------------------- worker view


def _int(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _pod_key(pod: Mapping, key: str) -> str | None:
    """A pod's label ``key``, else its annotation (for :mod:`.logs`, which reads one key)."""
    return PodView.parse(pod, contract.CONTAINER_NAME).keys.get(key)


def worker_from_pod(pod: Mapping, hosts_per_slice: int) -> Worker:
    """A :class:`Worker` from a pod's JSON (labels, annotations, status; see
    :class:`.status_views.PodView`)."""
    view = PodView.parse(pod, contract.CONTAINER_NAME)
    slice_index = view.number(JOB_INDEX_LABEL, 0)
    index = view.number(COMPLETION_INDEX_KEY, -1)
    state = view.container or ContainerStateView()
    reason, message = _why(view)
    return Worker(
        process=slice_index * hosts_per_slice + max(index, 0),
        slice=slice_index,
        index=index,
        pod=view.name,
        phase=view.phase,
        restart_attempt=view.number(RESTART_ATTEMPT_KEY, 0),
        exit_code=state.exit_code,
        reason=reason,
        message=message,
        finished_at=state.finished_at,
        terminating=view.deleting,
    )


def _why(view: PodView) -> tuple[str, str]:
    """(reason, message) of a pod: its worker container's terminated or waiting state over the
    pod's own, then a disruption (which explains more than "Error"), or why it is unscheduled."""
    reason, message = view.reason, view.message
    state = view.container
    if state is not None and (state.terminated or state.waiting):
        reason, message = state.reason or reason, state.message or message
    for condition in view.conditions.all:
        if condition.type == "DisruptionTarget" and condition.status == "True":
            reason, message = condition.reason or "DisruptionTarget", condition.message or message
        elif condition.type == "PodScheduled" and condition.status == "False" and not reason:
            reason, message = condition.reason or "Unschedulable", condition.message or message
    return reason, message


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
_DISRUPTION_REASONS = (
    "DisruptionTarget",
    "PreemptionByScheduler",
    "PreemptionByKubeScheduler",
    "TerminationByKubelet",
    "EvictionByEvictionAPI",
    "DeletionByTaintManager",
    "DeletionByPodGC",
)


def _failed(worker: Worker) -> bool:
    return worker.exit_code not in (None, 0) or worker.phase == "Failed"


def _was_preempted(worker: Worker) -> bool:
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
    waiting = next(
        (w for w in sorted(workers, key=lambda w: w.process) if w.phase not in _RUNNING_PHASES and w.reason), None
    )
    if waiting is not None:
        parts.append(f"waiting: {waiting.describe()}")
    return "; ".join(parts)


def shape(kind: str, obj: Mapping) -> tuple[int, int, int]:
    """(hosts per slice, slices, processes) of a JobSet or Job (``kind``), from its spec."""
    return (JobSetView.parse(obj) if kind == "JobSet" else JobView.parse(obj)).shape


def pod_selector(kind: str, name: str) -> str:
    """The label selector of the pods of the JobSet or Job ``name``."""
    return f"{JOBSET_NAME_LABEL}={name}" if kind == "JobSet" else f"{JOB_NAME_LABEL}={name}"


def kueue_holds(obj: Mapping) -> bool:
    """Whether Kueue manages the job (it carries a queue label): Kueue suspends it while
    it waits for quota and after an eviction, and un-suspends it when it re-admits it."""
    return bool(((obj.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL))


def _suspended_message(meta: ObjectMetaView, conditions: Conditions) -> str:
    text = conditions.text("Suspended") or "suspended"
    if meta.queue:
        return f"{text}; waiting for Kueue to admit it (queue {meta.queue})"
    return f"{text}; un-suspend it or resume it (roxxel-launch resume)"


class _Verdict(NamedTuple):
    """A job's state as its object and pods tell it, before the notes every state gets."""

    state: JobState
    message: str
    exit_code: int | None = None
    reason: StopReason | None = None


def _job_status(meta: ObjectMetaView, processes: int, restarts: int, verdict: _Verdict, message: str) -> JobStatus:
    return JobStatus(
        name=meta.name,
        state=verdict.state,
        processes=processes,
        restarts=restarts,
        exit_code=verdict.exit_code,
        message=message,
        reason=verdict.reason,
        created=meta.created,
        queue=meta.queue,
    )


def _preempted(name: str, detail: str) -> _Verdict:
    text = f"preempted ({detail}); `roxxel-launch resume {name}` continues from the last checkpoint"
    return _Verdict(JobState.PREEMPTED, text, contract.PREEMPTED_EXIT_CODE, StopReason.PREEMPTED)


def _restart_note(view: JobSetView) -> str:
    """'3 restarts, 1 counted toward max_restarts=2, 2 free (...)' when the controller counts."""
    restarts, counted = view.status.restarts, view.counted_restarts
    if not restarts or counted is None:
        return ""
    # The rest were free: child Jobs failed by their podFailurePolicy (a DisruptionTarget pod
    # condition: preemption, API, taint or node-pressure eviction; or exit 42).
    free = max(restarts - counted, 0)
    return (
        f"{restarts} restarts, {counted} counted toward max_restarts={view.max_restarts}, "
        f"{free} free (preemption or eviction)"
    )


def jobset_status(jobset: Mapping, pods: Iterable[Mapping]) -> JobStatus:
    """Maps a JobSet and its pods to a :class:`JobStatus`.

    Succeeded: terminalState Completed (or condition Completed). Failed: terminalState Failed
    (or condition Failed), with the condition and the first failed worker's exit code and
    reason — or Preempted (exit code 42) when every failed worker of the last attempt was
    preempted or exited 42 after saving a checkpoint. Suspended: spec.suspend or condition
    Suspended (Kueue holds or evicted it).
    Otherwise the pods of the current attempt (restart-attempt == status.restarts) decide:
    Running when every worker runs (and no pod of an older attempt remains), else Restarting
    after a gang restart (status.restarts > 0), else Pending. The fields read are those of
    :class:`.status_views.JobSetView`.
    """
    view = JobSetView.parse(jobset)
    hosts, slices, processes = view.shape
    workers = [worker_from_pod(p, hosts) for p in pods]
    verdict = _jobset_verdict(view, workers, slices, processes)
    notes = (verdict.message, _restart_note(view), "being deleted" if view.meta.deleting else "")
    return _job_status(view.meta, processes, view.status.restarts, verdict, "; ".join(p for p in notes if p))


def _jobset_verdict(view: JobSetView, workers: list[Worker], slices: int, processes: int) -> _Verdict:
    status = view.status
    if status.completed is not None:
        return _Verdict(JobState.SUCCEEDED, status.completed.text, 0)
    current = [w for w in workers if w.restart_attempt == status.restarts and not w.terminating]
    if status.failed is not None:
        return _jobset_failure(view.meta.name, status.failed, current, workers)
    if view.suspend or status.conditions.true("Suspended"):
        return _Verdict(JobState.SUSPENDED, _suspended_message(view.meta, status.conditions))
    stale = [w for w in workers if w.restart_attempt < status.restarts]
    progress = _progress(current, processes, slices)
    if sum(w.phase in _RUNNING_PHASES for w in current) >= processes and not stale:
        return _Verdict(JobState.RUNNING, progress)
    if status.restarts > 0:
        if stale:
            progress += f"; {len(stale)} pods of the previous attempt still terminating"
        return _Verdict(JobState.RESTARTING, progress)
    return _Verdict(JobState.PENDING, progress)


def _jobset_failure(name: str, failed: Condition, current: list[Worker], workers: list[Worker]) -> _Verdict:
    """A Failed JobSet: Preempted when its failed workers were all preempted, else Failed."""
    text = failed.text or "failed"
    # The JobSet's failure policy restarts the gang on a preemption without counting it, so a
    # JobSet that ends Failed normally ran out of max_restarts on real errors. When every
    # failed worker of its last attempt was preempted instead (a JobSet controller without
    # failure-policy rules, or a policy edited by hand), it is Preempted: resume continues it
    # from its checkpoint.
    failed_now = [w for w in current if _failed(w)] or [w for w in workers if _failed(w)]
    if failed_now and all(_was_preempted(w) for w in failed_now):
        preempted = min(failed_now, key=lambda w: (w.finished_at or "~", w.process))
        return _preempted(name, f"{text}; {preempted.describe()}")
    first = _first_failure(current) or _first_failure(workers)
    if first is not None:
        text += f"; first failure: {first.describe()}"
    reason = _failure_reason(first)
    if reason is StopReason.FAILED and failed.reason == _JOBSET_MAX_RESTARTS_REASON:
        reason = StopReason.RESTARTS_EXHAUSTED
    return _Verdict(JobState.FAILED, text, _failed_exit_code(first), reason)


def _is_preemption(condition: Condition, workers: list[Worker]) -> bool:
    """Whether a Job failed by its podFailurePolicy because of a preemption.

    The rendered policy fails the Job on a DisruptionTarget pod condition or on exit code 42
    (a worker that saved a checkpoint after SIGTERM); the Job controller's message names
    which rule matched ("Pod ns/x has condition DisruptionTarget matching FailJob rule at
    index 0", "Container worker for pod ns/x failed with exit code 42 matching ...").
    """
    if condition.reason != "PodFailurePolicy":
        return False
    text = condition.message
    if "DisruptionTarget" in text or re.search(rf"exit code {contract.PREEMPTED_EXIT_CODE}\b", text):
        return True
    return any(_was_preempted(w) for w in workers)


def job_status(job: Mapping, pods: Iterable[Mapping]) -> JobStatus:
    """Maps an Indexed Job (workload: indexed-job) and its pods to a :class:`JobStatus`.

    Succeeded: condition Complete (or SuccessCriteriaMet). Preempted: condition Failed (or
    FailureTarget) with reason PodFailurePolicy from the DisruptionTarget rule or exit code 42
    — ``resume`` continues it. Failed: any other failure, with the first failed worker.
    Suspended: spec.suspend or condition Suspended. Else Running when every worker runs,
    Pending before. An indexed job never restarts by itself (restarts is 0). The fields read
    are those of :class:`.status_views.JobView`.
    """
    view = JobView.parse(job)
    hosts, slices, processes = view.shape
    workers = [worker_from_pod(p, hosts) for p in pods]
    verdict = _job_verdict(view, workers, slices, processes)
    deleting = "; being deleted" if view.meta.deleting else ""
    return _job_status(view.meta, processes, 0, verdict, verdict.message + deleting)


def _job_verdict(view: JobView, workers: list[Worker], slices: int, processes: int) -> _Verdict:
    status = view.status
    if status.completed is not None:
        return _Verdict(JobState.SUCCEEDED, status.completed.text, 0)
    failed = status.failed_condition
    if failed is not None:
        if _is_preemption(failed, workers):
            return _preempted(view.meta.name, failed.text)
        first = _first_failure(workers)
        text = failed.text or "failed"
        if first is not None:
            text += f"; first failure: {first.describe()}"
        return _Verdict(JobState.FAILED, text, _failed_exit_code(first), _failure_reason(first))
    if view.suspend or status.conditions.true("Suspended"):
        return _Verdict(JobState.SUSPENDED, _suspended_message(view.meta, status.conditions))
    live = [w for w in workers if not w.terminating]
    running = sum(w.phase in _RUNNING_PHASES for w in live)
    state = JobState.RUNNING if running >= processes else JobState.PENDING
    return _Verdict(state, _progress(live, processes, slices))


def status_of(kind: str, obj: Mapping, pods: Iterable[Mapping]) -> JobStatus:
    """:func:`jobset_status` or :func:`job_status`, by ``kind`` ("JobSet" | "Job")."""
    return jobset_status(obj, pods) if kind == "JobSet" else job_status(obj, pods)


def kueue_evictions(workloads: Iterable[Mapping] | None) -> tuple[int, str]:
    """(how many times Kueue evicted the job, the last eviction's 'Reason: message').

    Each eviction ends an attempt, and the readmission that follows starts a new one (new pods
    in the same JobSet restart attempt). Read from the job's Workload, as Kueue writes it
    (kubernetes-sigs/kueue@ff69552e79ad21652c36caa97038382e55625cf7):
    ``status.schedulingStats.evictions`` counts the evictions by ``{reason, underlyingCause,
    count}`` (``pkg/workload/evict/evict.go``; Kueue 0.12 and newer). The ``Evicted``
    condition is True with the reason (``Preempted``, ``Deactivated``, ``PodsReadyTimeout``,
    ...) until the workload is admitted again, then False with reason ``QuotaReserved`` and
    the message ``Previously: <message>`` (``SetQuotaReservation``, ``pkg/workload/
    workload.go``). An older Kueue keeps no count: its ``Evicted`` condition counts one (at
    least one eviction happened). (0, "") when it was never evicted or its Workload cannot be
    read (``workloads`` None).
    """
    workload = next(iter(workloads or ()), None)
    if workload is None:
        return 0, ""
    status = workload.get("status") or {}
    evicted = next((c for c in status.get("conditions") or [] if c.get("type") == "Evicted"), None)
    stats = (status.get("schedulingStats") or {}).get("evictions") or []
    count = sum(_int(e.get("count"), 0) for e in stats) or (1 if evicted else 0)
    if not count:
        return 0, ""
    if evicted is None:
        return count, (stats[-1].get("reason") or "") if stats else ""
    if evicted.get("status") == "True":
        return count, _condition_text(evicted)
    message = (evicted.get("message") or "").removeprefix("Previously: ")
    # A readmitted workload's condition keeps the last eviction's message, not its reason:
    # the reason comes from the counts when they hold one reason only.
    reasons = {e.get("reason") for e in stats if e.get("reason")}
    reason = reasons.pop() if len(reasons) == 1 else ""
    return count, ": ".join(p for p in (reason, message) if p)


def queue_state(queue: str, suspended: bool, workloads: Iterable[Mapping] | None, restarts: int = 0) -> str:
    """'queue Q: admitted' / 'queue Q: waiting (reason: message)' / 'queue Q: evicted (...)'.

    From Kueue's Workload of the job (conditions QuotaReserved, Admitted, Evicted,
    https://kueue.sigs.k8s.io/docs/concepts/workload/); ``workloads`` None when they could
    not be read, and then from the job's ``suspend`` alone. Each readmission after an
    eviction is a new attempt, as each gang restart is (``restarts``: the JobSet's
    ``status.restarts``, which a suspension leaves alone): 'queue Q: admitted; attempt 2,
    re-admitted after eviction 1 (Preempted: ...)'. See :func:`kueue_evictions`.
    """
    head = f"queue {queue}: "
    workload = next(iter(workloads or ()), None)
    if workload is None:
        state = "suspended (waiting for Kueue to admit it)" if suspended else "admitted"
        return head + state + ("" if workloads is not None else "; its Workload is not readable")
    conditions = {c.get("type"): c for c in (workload.get("status") or {}).get("conditions") or []}
    evicted = conditions.get("Evicted") or {}
    admitted = conditions.get("Admitted") or {}
    evictions, last = kueue_evictions([workload])
    if evicted.get("status") == "True" and admitted.get("status") != "True":
        return head + (
            f"evicted ({_condition_text(evicted)}); Kueue requeues it: eviction {evictions} ended "
            f"attempt {restarts + evictions}, attempt {restarts + evictions + 1} starts when it is re-admitted"
        )
    if admitted.get("status") == "True":
        if evictions:
            return head + (
                f"admitted; attempt {restarts + evictions + 1}, re-admitted after eviction {evictions}"
                + (f" ({last})" if last else "")
            )
        return head + "admitted"
    waiting = conditions.get("QuotaReserved") or admitted
    return head + f"waiting ({_condition_text(waiting) or 'not admitted yet'})" + _admission_checks(workload)


def _admission_checks(workload: Mapping) -> str:
    """'; admission check dws-prov: Pending (Waiting for resources...)' for each check of the
    Workload not Ready (``status.admissionChecks``: name, state Pending | Ready | Retry |
    Rejected, message; https://kueue.sigs.k8s.io/docs/concepts/admission_check/)."""
    checks = (workload.get("status") or {}).get("admissionChecks") or []
    return "".join(
        f"; admission check {c.get('name', '?')}: {c.get('state', '?')}"
        + (f" ({c['message']})" if c.get("message") else "")
        for c in checks
        if c.get("state") != "Ready"
    )
