"""What the Job and JobSet controllers decide when pods end: restart, fail or succeed.

A pure function of a rendered manifest and exit codes, with no process, file or API code,
so that the local supervisor and a simulated cluster take the same decisions from the same
manifest. It follows, in this order:

1. **The Job's** ``podFailurePolicy`` (Kubernetes "Handling retriable and non-retriable pod
   failures with Pod failure policy", batch/v1): a pod that failed (a container exited
   with a code other than 0) is matched against the rules in order; the first rule whose
   ``onExitCodes`` (``containerName`` optional, ``operator`` ``In``/``NotIn``, ``values``)
   or ``onPodConditions`` matches decides: ``FailJob`` fails the Job with reason
   ``PodFailurePolicy`` and the controller's message ``Container <c> for pod <ns>/<pod>
   failed with exit code <n> matching FailJob rule at index <i>``; ``Ignore`` re-creates
   the pod without counting it; ``Count`` (and no matching rule) counts it against
   ``backoffLimit``: more failed pods than ``backoffLimit`` fail the Job with reason
   ``BackoffLimitExceeded``, else the pod is re-created.
2. **The JobSet's** ``failurePolicy`` (JobSet API ``jobset.x-k8s.io/v1alpha2``, "Failure
   Policy"), when a child Job failed: the first rule whose ``onJobFailureReasons``,
   ``onJobFailureMessagePatterns`` (regular expressions) and ``targetReplicatedJobs`` all
   match (an empty list matches anything) gives the action: ``FailJobSet``;
   ``RestartJobSet`` (counts against ``maxRestarts``); ``RestartJobSetAndIgnoreMaxRestarts``
   (does not count). Without a matching rule the action is ``RestartJobSet``. A counted
   restart when ``maxRestarts`` restarts have already been counted fails the JobSet
   (reason ``ReachedMaxRestarts``). A JobSet without ``failurePolicy`` fails on the first
   failed Job. Every restart recreates every Job; with ``restartStrategy:
   BlockingRecreate`` the new pods start only once all old ones are gone.
3. **A bare Job** (an Indexed Job): a failed Job is final.

The unit of input is :class:`PodExit` (which pod, which container, which exit code, whether
the pod had a ``DisruptionTarget`` condition); the output is a :class:`Decision`.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["Action", "Decision", "JobPolicy", "PodExit", "WorkloadPolicy", "policy_of"]

POD_FAILURE_POLICY = "PodFailurePolicy"
BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
REACHED_MAX_RESTARTS = "ReachedMaxRestarts"
FAILED_JOBS = "FailedJobs"


class Action(enum.Enum):
    """What happens next to the workload."""

    RECREATE_POD = "RecreatePod"  # the Job re-creates the failed pod (backoffLimit not used up, or Ignore)
    RESTART = "Restart"  # the JobSet restarts every child Job (a gang restart)
    FAIL = "Fail"  # the workload failed; nothing is restarted


@dataclasses.dataclass(frozen=True)
class PodExit:
    """A pod that ended with a failure.

    Attributes:
        pod: the pod's name (``<jobset>-<rjob>-<job index>-<completion index>`` or
            ``<job>-<completion index>``), used in the Job's failure message.
        job: the name of the pod's Job.
        replicated_job: the replicated job of a JobSet's pod; None for a bare Job.
        exit_code: the container's exit code (``128 + N`` for a signal ``N``), not 0.
        container: the container that exited.
        disrupted: the pod had the ``DisruptionTarget`` condition (preemption, eviction).
    """

    pod: str
    job: str
    exit_code: int
    container: str
    replicated_job: str | None = None
    disrupted: bool = False


@dataclasses.dataclass(frozen=True)
class Decision:
    """What the controllers decide about one failed pod.

    Attributes:
        action: see :class:`Action`.
        counted: the restart counts against ``maxRestarts`` (JobSet ``RestartJobSet``), or
            the re-created pod against ``backoffLimit``.
        reason: the Job's failure reason (``PodFailurePolicy``, ``BackoffLimitExceeded``),
            or the JobSet's (``ReachedMaxRestarts``, ``FailedJobs``); "" to re-create a pod.
        message: one line saying which rule decided.
        rule: the JobSet failure-policy rule's name, or the pod failure-policy rule's
            index as ``podFailurePolicy[i]``; None when no rule matched.
        job_action: the matching pod failure-policy rule's action (``FailJob``,
            ``Ignore``, ``Count``, ``FailIndex``); None when no rule matched.
    """

    action: Action
    counted: bool
    reason: str
    message: str
    rule: str | None = None
    job_action: str | None = None


def _exit_codes_match(rule: Mapping[str, Any], exit: PodExit) -> bool:
    codes = rule.get("onExitCodes")
    if not codes:
        return False
    if codes.get("containerName") not in (None, exit.container):
        return False
    values = set(int(v) for v in codes.get("values") or ())
    operator = codes.get("operator", "In")
    if operator == "In":
        return exit.exit_code in values
    if operator == "NotIn":
        return exit.exit_code not in values
    raise ValueError(f"podFailurePolicy: unknown operator {operator!r} (In or NotIn)")


def _conditions_match(rule: Mapping[str, Any], exit: PodExit) -> bool:
    for condition in rule.get("onPodConditions") or ():
        if condition.get("type") == "DisruptionTarget" and str(condition.get("status", "True")) == "True":
            if exit.disrupted:
                return True
    return False


@dataclasses.dataclass(frozen=True)
class JobPolicy:
    """A Job's ``backoffLimit`` and ``podFailurePolicy`` rules (batch/v1 defaults: 6, none)."""

    backoff_limit: int = 6
    pod_failure_rules: tuple[Mapping[str, Any], ...] = ()

    @classmethod
    def from_job_spec(cls, spec: Mapping[str, Any]) -> JobPolicy:
        rules = ((spec.get("podFailurePolicy") or {}).get("rules")) or ()
        return cls(int(spec.get("backoffLimit", 6)), tuple(rules))

    def decide(self, exit: PodExit, failed_before: int) -> Decision:
        """The Job controller's verdict on ``exit``, ``failed_before`` counted failures of
        this Job earlier (in its current incarnation)."""
        for index, rule in enumerate(self.pod_failure_rules):
            by_code = _exit_codes_match(rule, exit)
            if not (by_code or _conditions_match(rule, exit)):
                continue
            action, where = rule.get("action"), f"podFailurePolicy[{index}]"
            if action == "FailJob":
                what = (
                    (
                        f"Container {exit.container} for pod {exit.pod} failed with exit code "
                        f"{exit.exit_code} matching FailJob rule at index {index}"
                    )
                    if by_code
                    else (f"Pod {exit.pod} has condition DisruptionTarget matching FailJob rule at index {index}")
                )
                return Decision(Action.FAIL, False, POD_FAILURE_POLICY, what, where, action)
            if action == "Ignore":
                return Decision(
                    Action.RECREATE_POD, False, "", f"pod {exit.pod}: failure ignored by {where}", where, action
                )
            return self._count(exit, failed_before, where, action)  # Count, FailIndex
        return self._count(exit, failed_before, None, None)

    def _count(self, exit: PodExit, failed_before: int, where: str | None, action: str | None) -> Decision:
        if failed_before + 1 > self.backoff_limit:
            return Decision(
                Action.FAIL,
                True,
                BACKOFF_LIMIT_EXCEEDED,
                f"Job has reached the specified backoff limit ({self.backoff_limit}): pod "
                f"{exit.pod} exited with {exit.exit_code}",
                where,
                action,
            )
        return Decision(
            Action.RECREATE_POD,
            True,
            "",
            f"pod {exit.pod} exited with {exit.exit_code}; "
            f"failure {failed_before + 1} of backoffLimit {self.backoff_limit}",
            where,
            action,
        )


@dataclasses.dataclass(frozen=True)
class WorkloadPolicy:
    """The failure handling of a rendered workload: a JobSet's child Jobs under its
    ``failurePolicy``, or one bare Job (``jobset`` None).

    Attributes:
        jobs: replicated job name (or the bare Job's name) -> its :class:`JobPolicy`.
        jobset: the JobSet's ``spec.failurePolicy`` ({} when it has none); None for a bare Job.
    """

    jobs: Mapping[str, JobPolicy]
    jobset: Mapping[str, Any] | None = None

    @property
    def max_restarts(self) -> int:
        return int((self.jobset or {}).get("maxRestarts", 0))

    @property
    def blocking_recreate(self) -> bool:
        """``restartStrategy: BlockingRecreate``: old pods gone before new ones start."""
        return (self.jobset or {}).get("restartStrategy") == "BlockingRecreate"

    def decide(self, exit: PodExit, *, failed_before: int = 0, counted_restarts: int = 0) -> Decision:
        """The verdict on one failed pod.

        Args:
            exit: the pod that failed.
            failed_before: failures of its Job counted against ``backoffLimit`` so far.
            counted_restarts: the JobSet's restarts counted against ``maxRestarts`` so far
                (``status.restartsCountTowardsMax``).

        Raises:
            KeyError: the pod's job is not in :attr:`jobs`.
            ValueError: a rule the controllers would reject (unknown operator or action).
        """
        key = exit.replicated_job if exit.replicated_job is not None else exit.job
        job = self.jobs[key].decide(exit, failed_before)
        if job.action is not Action.FAIL or self.jobset is None:
            return job
        return self._jobset_decides(exit, job, counted_restarts)

    def _jobset_decides(self, exit: PodExit, job: Decision, counted: int) -> Decision:
        policy = self.jobset or {}
        if not policy:
            return Decision(
                Action.FAIL,
                False,
                FAILED_JOBS,
                f"job {exit.job} failed: {job.message} (the JobSet has no failurePolicy)",
                None,
                job.job_action,
            )
        for rule in policy.get("rules") or ():
            if not _jobset_rule_matches(rule, job, exit):
                continue
            action, name = rule.get("action"), rule.get("name")
            if action == "FailJobSet":
                return Decision(
                    Action.FAIL,
                    False,
                    job.reason,
                    f"{job.message}; JobSet rule {name}: FailJobSet",
                    name,
                    job.job_action,
                )
            if action == "RestartJobSetAndIgnoreMaxRestarts":
                return Decision(
                    Action.RESTART,
                    False,
                    job.reason,
                    f"{job.message}; JobSet rule {name}: restart, not counted against maxRestarts",
                    name,
                    job.job_action,
                )
            if action == "RestartJobSet":
                return self._counted_restart(job, counted, name)
            raise ValueError(f"JobSet failurePolicy rule {name!r}: unknown action {action!r}")
        return self._counted_restart(job, counted, None)

    def _counted_restart(self, job: Decision, counted: int, name: str | None) -> Decision:
        by = f"JobSet rule {name}" if name else "no JobSet rule matched"
        if counted >= self.max_restarts:
            return Decision(
                Action.FAIL,
                True,
                REACHED_MAX_RESTARTS,
                f"{job.message}; {by}: maxRestarts ({self.max_restarts}) reached; counted restarts: {counted}",
                name,
                job.job_action,
            )
        return Decision(
            Action.RESTART,
            True,
            job.reason,
            f"{job.message}; {by}: restart {counted + 1} of at most {self.max_restarts}",
            name,
            job.job_action,
        )


def _jobset_rule_matches(rule: Mapping[str, Any], job: Decision, exit: PodExit) -> bool:
    reasons = rule.get("onJobFailureReasons") or ()
    patterns = rule.get("onJobFailureMessagePatterns") or ()
    targets = rule.get("targetReplicatedJobs") or ()
    return (
        (not reasons or job.reason in reasons)
        and (not patterns or any(re.search(p, job.message) for p in patterns))
        and (not targets or exit.replicated_job in targets)
    )


def policy_of(objects: Sequence[Mapping[str, Any]]) -> WorkloadPolicy:
    """The :class:`WorkloadPolicy` of rendered manifests (the JobSet, else the Job, in them).

    Raises:
        ValueError: the manifests hold neither a JobSet nor a Job.
    """
    for obj in objects:
        if obj.get("kind") == "JobSet":
            spec = obj["spec"]
            jobs = {r["name"]: JobPolicy.from_job_spec(r["template"]["spec"]) for r in spec["replicatedJobs"]}
            return WorkloadPolicy(jobs, dict(spec.get("failurePolicy") or {}))
    for obj in objects:
        if obj.get("kind") == "Job":
            return WorkloadPolicy({obj["metadata"]["name"]: JobPolicy.from_job_spec(obj["spec"])})
    raise ValueError("the manifests hold no JobSet and no Job")
