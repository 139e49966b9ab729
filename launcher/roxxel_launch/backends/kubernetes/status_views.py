"""Typed views of the JobSet and Indexed Job fields that ``status`` reads, parsed once.

Each view is a frozen dataclass built from the API object's JSON (plain dicts with the API's
field names) by its ``parse``. Parsing is defensive: a field an older controller does not set
(``terminalState`` before JobSet v0.6, ``restartsCountTowardsMax`` before failure-policy rules,
``ready`` / ``terminating`` of a Job before Kubernetes 1.24 / 1.28) is None or empty, never a
KeyError, and a value of the wrong type reads as missing. :mod:`.status` decides on the views
alone.

Sources:

- JobSet: ``jobset.x-k8s.io/v1alpha2`` ``JobSetSpec`` / ``JobSetStatus``
  (kubernetes-sigs/jobset ``api/jobset/v1alpha2/jobset_types.go``).
- Indexed Job: Kubernetes ``batch/v1`` ``JobSpec`` / ``JobStatus``
  (https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/job-v1/).
- Conditions: ``metav1.Condition`` (JobSet) and ``batch/v1`` ``JobCondition`` (Job), which
  share the fields read here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from roxxel_launch.render import QUEUE_LABEL


def as_int(value: Any, default: int | None = None) -> int | None:
    """``value`` as an int (the API's int32 fields; label values are strings), else ``default``."""
    if isinstance(value, bool):
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _mapping(value: Any) -> Mapping:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


@dataclasses.dataclass(frozen=True)
class Condition:
    """One entry of an object's ``status.conditions``.

    Attributes:
        type: ``Completed`` / ``Failed`` / ``Suspended`` / ``StartupPolicyCompleted`` (JobSet);
            ``Complete`` / ``Failed`` / ``FailureTarget`` / ``SuccessCriteriaMet`` /
            ``Suspended`` (Job).
        status: ``"True"``, ``"False"`` or ``"Unknown"`` (a string, as the API has it).
        reason: the controller's CamelCase reason (``ReachedMaxRestarts``,
            ``PodFailurePolicy``, ``BackoffLimitExceeded``, ...); "" when unset.
        message: its human-readable detail; "" when unset.
        last_transition: ``lastTransitionTime`` (RFC 3339), or None.
    """

    type: str
    status: str
    reason: str = ""
    message: str = ""
    last_transition: str | None = None

    @classmethod
    def parse(cls, raw: Any) -> Condition:
        raw = _mapping(raw)
        return cls(
            type=_text(raw.get("type")),
            status=_text(raw.get("status")),
            reason=_text(raw.get("reason")),
            message=_text(raw.get("message")),
            last_transition=raw.get("lastTransitionTime") or None,
        )

    @property
    def text(self) -> str:
        """'Reason: message', or whichever of the two is set."""
        return ": ".join(p for p in (self.reason, self.message) if p)


@dataclasses.dataclass(frozen=True)
class Conditions:
    """An object's ``status.conditions`` (empty when the controller has set none yet)."""

    all: tuple[Condition, ...] = ()

    @classmethod
    def parse(cls, status: Mapping) -> Conditions:
        return cls(tuple(Condition.parse(c) for c in _list(status.get("conditions"))))

    def true(self, *types: str) -> Condition | None:
        """The condition of the first of ``types`` whose status is "True" (the last entry of a
        type listed twice); None when none is."""
        for kind in types:
            found = [c for c in self.all if c.type == kind and c.status == "True"]
            if found:
                return found[-1]
        return None

    def text(self, *types: str) -> str:
        """:attr:`Condition.text` of :meth:`true`; "" when none is True."""
        condition = self.true(*types)
        return condition.text if condition is not None else ""


@dataclasses.dataclass(frozen=True)
class ObjectMetaView:
    """What status reads of an object's ``metadata`` (``meta/v1 ObjectMeta``).

    Attributes:
        name: ``metadata.name`` ("?" when missing).
        namespace: ``metadata.namespace``, or None.
        created: ``metadata.creationTimestamp`` (RFC 3339), or None.
        deleting: ``metadata.deletionTimestamp`` is set (the object is being deleted).
        queue: the Kueue LocalQueue of its ``kueue.x-k8s.io/queue-name`` label, or None.
    """

    name: str
    namespace: str | None = None
    created: str | None = None
    deleting: bool = False
    queue: str | None = None

    @classmethod
    def parse(cls, obj: Mapping) -> ObjectMetaView:
        meta = _mapping(obj.get("metadata"))
        return cls(
            name=_text(meta.get("name")) or "?",
            namespace=meta.get("namespace") or None,
            created=meta.get("creationTimestamp") or None,
            deleting=bool(meta.get("deletionTimestamp")),
            queue=_mapping(meta.get("labels")).get(QUEUE_LABEL) or None,
        )


@dataclasses.dataclass(frozen=True)
class ReplicatedJobStatusView:
    """One entry of a JobSet's ``status.replicatedJobsStatus``: how many of the replicated
    job's child Jobs are in each state (``ReplicatedJobStatus``; 0 when unset).

    Attributes:
        name: the replicated job's name.
        ready, succeeded, failed, active, suspended: child Jobs (counts, not pods).
    """

    name: str
    ready: int = 0
    succeeded: int = 0
    failed: int = 0
    active: int = 0
    suspended: int = 0

    @classmethod
    def parse(cls, raw: Any) -> ReplicatedJobStatusView:
        raw = _mapping(raw)
        counts = {k: as_int(raw.get(k), 0) or 0 for k in ("ready", "succeeded", "failed", "active", "suspended")}
        return cls(name=_text(raw.get("name")), **counts)


@dataclasses.dataclass(frozen=True)
class JobSetStatusView:
    """A JobSet's ``status`` (``JobSetStatus``).

    Attributes:
        conditions: ``status.conditions``.
        restarts: ``status.restarts``: gang restarts so far (the child Jobs recreated; a
            Kueue suspension leaves it alone); 0 when unset.
        restarts_count_towards_max: ``status.restartsCountTowardsMax``: the restarts that
            count toward ``failurePolicy.maxRestarts`` (those not made free by a failure-policy
            rule). ``omitempty``, so a controller that has the field omits it while 0; None
            when absent (then :class:`JobSetView` says whether 0 is meant).
        terminal_state: ``status.terminalState``: ``"Completed"`` or ``"Failed"`` once the
            JobSet has finished; None while it runs, and always on a controller older than
            JobSet v0.6 (which has only the conditions).
        replicated_jobs: ``status.replicatedJobsStatus``, in the API's order.
    """

    conditions: Conditions = Conditions()
    restarts: int = 0
    restarts_count_towards_max: int | None = None
    terminal_state: str | None = None
    replicated_jobs: tuple[ReplicatedJobStatusView, ...] = ()

    @classmethod
    def parse(cls, status: Any) -> JobSetStatusView:
        status = _mapping(status)
        return cls(
            conditions=Conditions.parse(status),
            restarts=as_int(status.get("restarts"), 0) or 0,
            restarts_count_towards_max=as_int(status.get("restartsCountTowardsMax")),
            terminal_state=_text(status.get("terminalState")) or None,
            replicated_jobs=tuple(ReplicatedJobStatusView.parse(r) for r in _list(status.get("replicatedJobsStatus"))),
        )

    @property
    def completed(self) -> Condition | None:
        """Why it completed: ``terminalState: Completed`` or the True ``Completed`` condition
        (an empty condition when only the terminal state says so); None while not completed."""
        found = self.conditions.true("Completed")
        return found or (Condition("Completed", "True") if self.terminal_state == "Completed" else None)

    @property
    def failed(self) -> Condition | None:
        """As :attr:`completed`, for ``Failed``."""
        found = self.conditions.true("Failed")
        return found or (Condition("Failed", "True") if self.terminal_state == "Failed" else None)


@dataclasses.dataclass(frozen=True)
class ReplicatedJobSpecView:
    """One entry of a JobSet's ``spec.replicatedJobs``: ``replicas`` child Jobs of
    ``template.spec.parallelism`` pods each, ``completions`` indexes (None when unset or 0)."""

    name: str
    replicas: int | None = None
    parallelism: int | None = None
    completions: int | None = None

    @classmethod
    def parse(cls, raw: Any) -> ReplicatedJobSpecView:
        raw = _mapping(raw)
        job_spec = _mapping(_mapping(raw.get("template")).get("spec"))
        return cls(
            name=_text(raw.get("name")),
            replicas=as_int(raw.get("replicas")) or None,
            parallelism=as_int(job_spec.get("parallelism")) or None,
            completions=as_int(job_spec.get("completions")) or None,
        )

    @property
    def processes(self) -> int:
        """Worker pods of all its child Jobs (an unset count is 1, as the API defaults it)."""
        return (self.replicas or 1) * (self.parallelism or self.completions or 1)


@dataclasses.dataclass(frozen=True)
class JobSetView:
    """A JobSet as status reads it: metadata, the spec fields that shape and bound it, status.

    Attributes:
        meta: see :class:`ObjectMetaView`.
        suspend: ``spec.suspend`` (set by ``roxxel-launch suspend``, kubectl or Kueue).
        replicated_jobs: ``spec.replicatedJobs``; roxxel renders one (the slices).
        max_restarts: ``spec.failurePolicy.maxRestarts``, or None without a failure policy.
        has_failure_rules: ``spec.failurePolicy.rules`` is non-empty: the controller knows
            rules, hence ``status.restartsCountTowardsMax`` (came with them, kubernetes-sigs/jobset
            f038a330), and its absence means 0.
        status: see :class:`JobSetStatusView`.
    """

    meta: ObjectMetaView
    suspend: bool = False
    replicated_jobs: tuple[ReplicatedJobSpecView, ...] = ()
    max_restarts: int | None = None
    has_failure_rules: bool = False
    status: JobSetStatusView = JobSetStatusView()

    @classmethod
    def parse(cls, jobset: Mapping) -> JobSetView:
        spec = _mapping(jobset.get("spec"))
        policy = _mapping(spec.get("failurePolicy"))
        return cls(
            meta=ObjectMetaView.parse(jobset),
            suspend=bool(spec.get("suspend")),
            replicated_jobs=tuple(ReplicatedJobSpecView.parse(r) for r in _list(spec.get("replicatedJobs"))),
            max_restarts=as_int(policy.get("maxRestarts")),
            has_failure_rules=bool(_list(policy.get("rules"))),
            status=JobSetStatusView.parse(jobset.get("status")),
        )

    @property
    def shape(self) -> tuple[int, int, int]:
        """(hosts per slice, slices, processes): the first replicated job's completions and
        replicas, and the pods of them all; (1, 0, 0) without replicated jobs."""
        if not self.replicated_jobs:
            return 1, 0, 0
        first = self.replicated_jobs[0]
        processes = sum(r.processes for r in self.replicated_jobs)
        return first.completions or first.parallelism or 1, first.replicas or 1, processes

    @property
    def counted_restarts(self) -> int | None:
        """The restarts counted toward ``max_restarts``: ``restartsCountTowardsMax``, 0 when a
        controller with failure-policy rules omits it, None when the controller cannot say."""
        counted = self.status.restarts_count_towards_max
        return 0 if counted is None and self.has_failure_rules else counted


@dataclasses.dataclass(frozen=True)
class JobStatusView:
    """An Indexed Job's ``status`` (Kubernetes ``batch/v1`` ``JobStatus``).

    Attributes:
        conditions: ``status.conditions``.
        active, succeeded, failed: pods running / succeeded / failed (0 when unset).
        ready: pods Ready (``status.ready``, Kubernetes 1.24+), else None.
        terminating: pods being deleted (``status.terminating``, 1.28+), else None.
        start_time, completion_time: ``status.startTime`` / ``status.completionTime``
            (RFC 3339), or None.
        completed_indexes, failed_indexes: ``status.completedIndexes`` /
            ``status.failedIndexes`` (interval lists such as ``"0-3,5"``; the latter 1.28+),
            "" when unset.
    """

    conditions: Conditions = Conditions()
    active: int = 0
    succeeded: int = 0
    failed: int = 0
    ready: int | None = None
    terminating: int | None = None
    start_time: str | None = None
    completion_time: str | None = None
    completed_indexes: str = ""
    failed_indexes: str = ""

    @classmethod
    def parse(cls, status: Any) -> JobStatusView:
        status = _mapping(status)
        return cls(
            conditions=Conditions.parse(status),
            active=as_int(status.get("active"), 0) or 0,
            succeeded=as_int(status.get("succeeded"), 0) or 0,
            failed=as_int(status.get("failed"), 0) or 0,
            ready=as_int(status.get("ready")),
            terminating=as_int(status.get("terminating")),
            start_time=status.get("startTime") or None,
            completion_time=status.get("completionTime") or None,
            completed_indexes=_text(status.get("completedIndexes")),
            failed_indexes=_text(status.get("failedIndexes")),
        )

    @property
    def completed(self) -> Condition | None:
        """The True ``Complete`` condition, else ``SuccessCriteriaMet`` (a success policy met,
        1.31+, set before Complete); None while neither is."""
        return self.conditions.true("Complete", "SuccessCriteriaMet")

    @property
    def failed_condition(self) -> Condition | None:
        """The True ``Failed`` condition, else ``FailureTarget`` (1.31+: the controller has
        decided to fail the Job and is still removing its pods); None while neither is."""
        return self.conditions.true("Failed", "FailureTarget")


@dataclasses.dataclass(frozen=True)
class JobView:
    """An Indexed Job (``workload: indexed-job``) as status reads it.

    Attributes:
        meta: see :class:`ObjectMetaView`.
        suspend: ``spec.suspend``.
        completions, parallelism: ``spec.completions`` / ``spec.parallelism`` (None when unset or 0).
        status: see :class:`JobStatusView`.
    """

    meta: ObjectMetaView
    suspend: bool = False
    completions: int | None = None
    parallelism: int | None = None
    status: JobStatusView = JobStatusView()

    @classmethod
    def parse(cls, job: Mapping) -> JobView:
        spec = _mapping(job.get("spec"))
        return cls(
            meta=ObjectMetaView.parse(job),
            suspend=bool(spec.get("suspend")),
            completions=as_int(spec.get("completions")) or None,
            parallelism=as_int(spec.get("parallelism")) or None,
            status=JobStatusView.parse(job.get("status")),
        )

    @property
    def shape(self) -> tuple[int, int, int]:
        """(hosts per slice, slices, processes): one slice of ``completions`` hosts."""
        hosts = self.completions or self.parallelism or 1
        return hosts, 1, hosts


@dataclasses.dataclass(frozen=True)
class ContainerStateView:
    """One container's ``state`` (core/v1 ``ContainerState``): at most one of ``terminated``
    and ``waiting``; a running container has neither.

    Attributes:
        terminated: ``state.terminated`` is set (the container has exited).
        waiting: ``state.waiting`` is set (and not ``terminated``).
        exit_code: ``terminated.exitCode``, or None.
        finished_at: ``terminated.finishedAt`` (RFC 3339), or None.
        reason, message: the ``terminated`` or ``waiting`` state's (``OOMKilled``, ``Error``,
            ``ImagePullBackOff``, ``CrashLoopBackOff``, ...); "" when unset.
    """

    terminated: bool = False
    waiting: bool = False
    exit_code: int | None = None
    finished_at: str | None = None
    reason: str = ""
    message: str = ""

    @classmethod
    def parse(cls, raw: Any) -> ContainerStateView:
        state = _mapping(raw)
        if "terminated" in state:
            done = _mapping(state["terminated"])
            return cls(
                terminated=True,
                exit_code=as_int(done.get("exitCode")),
                finished_at=done.get("finishedAt") or None,
                reason=_text(done.get("reason")),
                message=_text(done.get("message")),
            )
        if "waiting" in state:
            waiting = _mapping(state["waiting"])
            return cls(waiting=True, reason=_text(waiting.get("reason")), message=_text(waiting.get("message")))
        return cls()


@dataclasses.dataclass(frozen=True)
class PodView:
    """A worker pod as status reads it (core/v1 ``Pod``).

    Attributes:
        name: ``metadata.name`` ("?" when missing).
        keys: the pod's labels over its annotations (a key in both: the label's value), for
            the keys the JobSet and Job controllers set in one or the other.
        deleting: ``metadata.deletionTimestamp`` is set.
        phase: ``status.phase`` (Pending, Running, Succeeded, Failed, Unknown); "Pending" when
            the kubelet has not reported one yet.
        reason, message: ``status.reason`` / ``status.message`` (``Evicted``, ...); "" when unset.
        container: the state of the container named ``container`` at parse time (the first
            container's when none has that name), or None before the kubelet reports any.
        conditions: ``status.conditions`` (``PodScheduled``, ``DisruptionTarget``, ...).
    """

    name: str
    keys: Mapping[str, str] = dataclasses.field(default_factory=dict)
    deleting: bool = False
    phase: str = "Pending"
    reason: str = ""
    message: str = ""
    container: ContainerStateView | None = None
    conditions: Conditions = Conditions()

    @classmethod
    def parse(cls, pod: Mapping, container: str) -> PodView:
        meta, status = _mapping(pod.get("metadata")), _mapping(pod.get("status"))
        containers = [_mapping(c) for c in _list(status.get("containerStatuses"))]
        chosen = next((c for c in containers if c.get("name") == container), containers[0] if containers else None)
        return cls(
            name=_text(meta.get("name")) or "?",
            keys={**_mapping(meta.get("annotations")), **_mapping(meta.get("labels"))},
            deleting=bool(meta.get("deletionTimestamp")),
            phase=_text(status.get("phase")) or "Pending",
            reason=_text(status.get("reason")),
            message=_text(status.get("message")),
            container=None if chosen is None else ContainerStateView.parse(chosen.get("state")),
            conditions=Conditions.parse(status),
        )

    def number(self, key: str, default: int) -> int:
        """The label (or annotation) ``key`` as an int; ``default`` when absent or not a number."""
        value = as_int(self.keys.get(key))
        return default if value is None else value
