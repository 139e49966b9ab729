"""The scripted Job and JobSet controllers: :meth:`Workloads.plan` says how each submission
ends, :meth:`Workloads.exit_worker` ends a worker now, and the stored object's own policies
decide what follows — the Job's ``podFailurePolicy`` and ``backoffLimit``
(https://kubernetes.io/docs/concepts/workloads/controllers/job/#pod-failure-policy), the
JobSet's ``failurePolicy`` rules and ``maxRestarts``
(https://jobset.sigs.k8s.io/docs/concepts/#failure-policy) — through
``roxxel_launch.backends.local.policy``, the engine the local backend runs the same manifest
with. Suspending and resuming (``spec.suspend``) follows
https://kubernetes.io/docs/concepts/workloads/controllers/job/#suspending-a-job and the
JobSet controller (kubernetes-sigs/jobset@08dfbdfd682714a9ab929633eca8dc95315187e7).
"""

from __future__ import annotations

import time

from roxxel_launch.backends.local import policy

from support.k8s_sim.api import COMPLETION_INDEX, JOB_INDEX, JOBSET_NAME, OUTCOMES
from support.k8s_sim.jobs import pod_exit_of
from support.k8s_sim.pods import end_pod


class Workloads:
    """Outcomes, worker exits and suspension of Jobs and JobSets (a mixin of ``FakeKubernetes``)."""

    def plan(self, name: str, *outcomes: str, after: int = 2) -> None:
        """How the next submissions of job ``name`` end, one outcome per submission.

        Each outcome applies when the object has been read ``after`` times since it was
        created; submissions beyond the plan keep running. ``fail`` and ``preempt`` are
        worker exits decided by the stored object's own policies, as :meth:`exit_worker`'s
        are (see :meth:`_exit_until_failed`). ``succeed`` and ``evict`` need no failure
        policy. An outcome that does not end the object applies the next one to its new
        pods: a Kueue re-admission after ``evict``, and a JobSet's gang restart after
        ``preempt`` (the launcher's rule ``preemption``, ``RestartJobSetAndIgnoreMaxRestarts``,
        restarts it in place without counting, so ``plan(name, "preempt", "succeed")`` is
        one submission that restarts once and completes). A preempted JobSet ends only
        under a rule that counts the preemption (:func:`count_preemptions`), once its
        ``maxRestarts`` are used up.
        """
        for outcome in outcomes:
            if outcome not in OUTCOMES:
                raise ValueError(f"unknown outcome {outcome!r}; use one of {OUTCOMES}")
        with self._lock:
            self._plans.setdefault(name, []).extend((o, after) for o in outcomes)

    def settle(self, resource: str, name: str, outcome: str, *, namespace: str | None = None) -> None:
        """End job ``name`` (a ``jobsets`` or ``jobs`` object, in ``namespace`` or this fake's)
        with ``outcome`` now, as its controller would (see :meth:`plan` for the outcomes);
        watchers and followed logs see the change."""
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r}; use one of {OUTCOMES}")
        namespace = namespace or self.namespace
        with self._lock:
            key = (resource, namespace, name)
            if key not in self.objects:
                raise KeyError(f"no {resource} {name} in {namespace}")
            self._scripts.pop(key, None)
            self._apply(key, outcome)

    def submissions(self, name: str) -> int:
        """How many times a job of this name was created (not dry runs)."""
        with self._lock:
            return self._submissions.get(name, 0)

    def _arm(self, key: tuple[str, str, str]) -> None:
        """The plan's next outcome (:meth:`plan`) for the pods that start now: a new
        submission's, a re-admitted workload's, a JobSet's next attempt after a free gang
        restart; without one they keep running."""
        plan = self._plans.get(key[2]) or []
        outcome, after = plan.pop(0) if plan else ("run", 0)
        self._scripts[key] = [outcome, after]

    def _apply(self, key: tuple[str, str, str], outcome: str) -> None:
        resource, ns, name = key
        obj = self.objects[key]
        owner_label = JOBSET_NAME if resource == "jobsets" else "job-name"
        pods = sorted(
            (
                o
                for k, o in self.objects.items()
                if k[0] == "pods" and k[1] == ns and o["metadata"]["labels"].get(owner_label) == name
            ),
            key=lambda p: (
                int(p["metadata"]["labels"].get(JOB_INDEX, "0")),
                int(p["metadata"]["labels"][COMPLETION_INDEX]),
            ),
        )
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

        def condition(type_: str, reason: str, message: str) -> dict:
            return {"type": type_, "status": "True", "reason": reason, "message": message, "lastTransitionTime": now}

        if outcome == "run":
            return
        if outcome in ("fail", "preempt"):
            self._exit_until_failed(key, outcome)
            return
        if outcome == "succeed":
            for pod in pods:
                end_pod(pod, 0, now)
            if resource == "jobsets":  # the restarts so far stay (setJobSetCompletedCondition)
                kept = {
                    k: v for k, v in (obj.get("status") or {}).items() if k in ("restarts", "restartsCountTowardsMax")
                }
                obj["status"] = {
                    "restarts": 0,
                    **kept,
                    "terminalState": "Completed",
                    "conditions": [condition("Completed", "AllJobsCompleted", "jobset completed successfully")],
                }
            else:
                obj["status"] = {
                    "succeeded": len(pods),
                    "conditions": [
                        condition(
                            "SuccessCriteriaMet", "CompletionsReached", "Reached expected number of succeeded pods"
                        ),
                        condition("Complete", "CompletionsReached", "Reached expected number of succeeded pods"),
                    ],
                }
        elif outcome == "evict":
            # Kueue evicts the workload (reason and message: ``_real.eviction``, Preempted
            # unless set) and suspends the job, whose restarts so far stay; see
            # support.k8s_sim.kueue.
            self._real.evictions.setdefault(obj["metadata"]["uid"], []).append(self._real.eviction)
            obj["spec"]["suspend"] = True
            kept = {k: v for k, v in (obj.get("status") or {}).items() if k in ("restarts", "restartsCountTowardsMax")}
            obj["status"] = {
                **kept,
                "conditions": [
                    condition(
                        "Suspended",
                        "SuspendedJobs" if resource == "jobsets" else "JobSuspended",
                        "evicted by Kueue: preempted to admit a higher-priority workload",
                    )
                ],
            }
            for pod in pods:
                del self.objects[("pods", ns, pod["metadata"]["name"])]
        for pod in pods:
            self._log_ended.add(pod["metadata"]["name"])
        self._touch(obj, *pods)
        self._lock.notify_all()

    def exit_worker(self, name: str, code: int, *, process: int = 0, disrupted: bool = False) -> policy.Decision:
        """Worker ``process`` of job ``name`` (a JobSet, else a Job) ends now with exit
        ``code``; the simulated Job and JobSet controllers then do what the stored object's
        own policies say, decided by the engine the local backend uses
        (:mod:`roxxel_launch.backends.local.policy`: the Job's ``podFailurePolicy`` and
        ``backoffLimit``, https://kubernetes.io/docs/concepts/workloads/controllers/job/
        #pod-failure-policy; the JobSet's ``failurePolicy`` rules and ``maxRestarts``,
        https://jobset.sigs.k8s.io/docs/concepts/#failure-policy):

        * ``RecreatePod``: the failed pod is replaced by a new one (the Job's
          ``status.failed`` grows);
        * ``Restart``: a gang restart (:meth:`_gang_restart`), counted toward
          ``maxRestarts`` or not;
        * ``Fail``: every other pod is stopped (exit 143) and the workload fails with the
          controller's condition: a Job with ``FailureTarget`` + ``Failed`` (reason
          ``PodFailurePolicy`` or ``BackoffLimitExceeded``), a JobSet with ``Failed`` and
          ``terminalState: Failed`` (reason ``FailJobSetFailurePolicyAction``,
          ``ReachedMaxRestarts`` or ``FailedJobs``, the JobSet controller's constants).

        ``disrupted`` gives the pod the ``DisruptionTarget`` condition first (a preemption).
        Returns the decision (all of them are in ``_real.decisions``)."""
        with self._lock:
            key = next(
                (k for k in (("jobsets", self.namespace, name), ("jobs", self.namespace, name)) if k in self.objects),
                None,
            )
            if key is None:
                raise KeyError(f"no JobSet or Job {name} in {self.namespace}")
            decision = self._pod_exit(key, code, process, disrupted)
            self._real.decisions.append(decision)
            self._bump_versions()
            self._lock.notify_all()
            return decision

    def _pod_exit(
        self, key: tuple[str, str, str], code: int, process: int, disrupted: bool, message: str = ""
    ) -> policy.Decision:
        resource, ns, name = key
        obj = self.objects[key]
        pods = self._ordered_pods(key)
        if not 0 <= process < len(pods):
            raise IndexError(f"{name} has processes 0..{len(pods) - 1}, not {process}")
        pod = pods[process]
        labels = pod["metadata"]["labels"]
        exit = pod_exit_of(pod, code, disrupted)
        status = obj.setdefault("status", {})
        failures = (key, exit.job)
        decision = policy.policy_of([obj]).decide(
            exit,
            failed_before=self._real.job_failures.get(failures, 0),
            counted_restarts=int(status.get("restartsCountTowardsMax") or 0),
        )
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        if disrupted:
            pod["status"]["conditions"].append(
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "PreemptionByScheduler",
                    "message": "Preempted in order to admit critical pod",
                    "lastTransitionTime": now,
                }
            )
        end_pod(pod, code, now, message)
        self._log_ended.add(pod["metadata"]["name"])
        if decision.action is policy.Action.RECREATE_POD:
            if decision.counted:
                self._real.job_failures[failures] = self._real.job_failures.get(failures, 0) + 1
            if resource == "jobs":
                status["failed"] = int(status.get("failed") or 0) + 1
            base = pod["metadata"]["name"].rsplit("-", 1)[0]
            template = (
                obj["spec"]["template"]
                if resource == "jobs"
                else next(
                    r["template"]["spec"]["template"]
                    for r in obj["spec"]["replicatedJobs"]
                    if r["name"] == exit.replicated_job
                )
            )
            self._put_pod(f"{base}-{next(self._ids):05d}", ns, dict(labels), now, template=template)
        elif decision.action is policy.Action.RESTART:
            self._gang_restart(key, counted=decision.counted, decision=decision, failed_job=exit.job)
        else:
            self._fail_workload(key, pods, pod, decision, now)
        self._touch(obj)
        return decision

    @staticmethod
    def _job_verdict(obj: dict, pod: dict, code: int, *, disrupted: bool) -> policy.Decision:
        """What the Job controller alone (the podFailurePolicy of ``pod``'s Job in ``obj``)
        decides when ``pod`` exits with ``code``, none of its failures counted before."""
        exit = pod_exit_of(pod, code, disrupted)
        return policy.policy_of([obj]).jobs[exit.replicated_job or exit.job].decide(exit, 0)

    def _exit_until_failed(self, key: tuple[str, str, str], outcome: str) -> None:
        """The ``fail`` and ``preempt`` outcomes of :meth:`plan`, as worker exits that the
        policy engine decides on (:meth:`_pod_exit`, as for :meth:`exit_worker`):

        * ``fail``: worker 1 (0 when alone) exits 1 with ``ValueError: the loss is NaN``, in
          every attempt, until the controllers fail the workload (a launcher's Job at once,
          ``backoffLimit: 0``; its JobSet after ``maxRestarts`` counted gang restarts, with
          ``ReachedMaxRestarts``);
        * ``preempt``: worker 0 gets the ``DisruptionTarget`` condition and exits 42 after
          its checkpoint, in every attempt, until the controllers fail the workload (a
          launcher's Job fails by its podFailurePolicy) or restart the gang without
          counting it (a launcher's JobSet: its rule ``preemption``,
          ``RestartJobSetAndIgnoreMaxRestarts``). A JobSet restarted so goes on in place,
          and the plan's next outcome applies to its new attempt (:meth:`_arm`).

        Raises RuntimeError when the object's policies never fail it."""
        for _ in range(10_002):  # maxRestarts is at most 10000 (the spec's bound)
            pods = self._ordered_pods(key)
            if outcome == "preempt":
                decision = self._pod_exit(key, 42, 0, True, "checkpoint saved after SIGTERM")
            else:
                decision = self._pod_exit(key, 1, min(1, len(pods) - 1), False, "ValueError: the loss is NaN")
            self._real.decisions.append(decision)
            if decision.action is policy.Action.RESTART and not decision.counted:
                self._arm(key)
                self._lock.notify_all()
                return
            if decision.action is policy.Action.FAIL:
                self._lock.notify_all()
                return
        raise RuntimeError(f"{key[2]}: its policies never fail it; plan another outcome")

    def _fail_workload(
        self, key: tuple[str, str, str], pods: list[dict], failed: dict, decision: policy.Decision, now: str
    ) -> None:
        """The workload failed: the controllers stop the other pods (SIGTERM: exit 143) and
        set the failure conditions (see :meth:`exit_worker`). A failed JobSet's controller
        deletes its active child Jobs, foreground (kubernetes-sigs/jobset@08dfbdf
        pkg/controllers/jobset_controller.go ``reconcile``: ``jobSetFinished`` ->
        ``deleteJobs(ownedJobs.active)``), so only the failed Job's pods stay. When a
        preemption failed it, those peers were stopped by SIGTERM while training, saved a
        checkpoint and exited 42 (what the trainer does on SIGTERM, and why the Job's
        podFailurePolicy has its exit-42 rule)."""
        obj = self.objects[key]
        later = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 1))
        failed_job = failed["metadata"]["labels"].get("job-name")
        preempted = failed["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 42
        for pod in pods:  # stopped after the failure: they end later than the failed pod
            if key[0] == "jobsets" and pod["metadata"]["labels"].get("job-name") != failed_job:
                del self.objects[("pods", key[1], pod["metadata"]["name"])]
            elif pod is not failed and pod["status"]["phase"] not in ("Succeeded", "Failed"):
                if preempted:
                    end_pod(pod, 42, later, "checkpoint saved after SIGTERM")
                else:
                    end_pod(pod, 143, later)
            self._log_ended.add(pod["metadata"]["name"])
        status = obj.setdefault("status", {})

        def condition(type_: str, reason: str, message: str) -> dict:
            return {"type": type_, "status": "True", "reason": reason, "message": message, "lastTransitionTime": now}

        if key[0] == "jobs":
            message = (
                decision.message
                if decision.reason == policy.POD_FAILURE_POLICY
                else "Job has reached the specified backoff limit"
            )  # the Job controller's words
            status["failed"] = int(status.get("failed") or 0) + 1
            status["conditions"] = [
                condition("FailureTarget", decision.reason, message),
                condition("Failed", decision.reason, message),
            ]
            return
        if decision.reason == policy.REACHED_MAX_RESTARTS:
            reason, message = decision.reason, "jobset failed due to reaching max number of restarts"
        elif decision.reason == policy.FAILED_JOBS:
            reason, message = decision.reason, "jobset failed due to one or more job failures"
        else:  # a FailJobSet rule
            reason, message = "FailJobSetFailurePolicyAction", "applying FailJobSet failure policy action"
        status["terminalState"] = "Failed"
        status["conditions"] = [condition("Failed", reason, message)]

    def _suspension(self, key: tuple[str, str, str], suspended: bool) -> None:
        """A change of ``spec.suspend``, as the controllers follow it. The JobSet controller
        suspends (or resumes) every child Job ("Suspend suspends all running child Jobs when
        set to true", jobset.x-k8s.io/v1alpha2 JobSetSpec; its condition type ``Suspended``,
        reasons ``SuspendedJobs`` / ``ResumeJobs``, the JobSet controller's
        constants), and the Job controller deletes a
        suspended Job's active pods without counting them as failures, and creates them again
        on resume (https://kubernetes.io/docs/concepts/workloads/controllers/job/#suspending-a-job;
        condition ``Suspended``, reasons ``JobSuspended`` / ``JobResumed``). A JobSet's new
        pods keep its restart attempt."""
        resource, ns, name = key
        obj = self.objects[key]
        reasons = {
            ("jobsets", True): ("SuspendedJobs", "jobset is suspended"),
            ("jobsets", False): ("ResumeJobs", "jobset is resumed"),
            ("jobs", True): ("JobSuspended", "Job suspended"),
            ("jobs", False): ("JobResumed", "Job resumed"),
        }
        reason, message = reasons[(resource, suspended)]
        status = obj.setdefault("status", {})
        status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != "Suspended"] + [
            {
                "type": "Suspended",
                "status": str(suspended),
                "reason": reason,
                "message": message,
                "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
        ]
        self._scripts.pop(key, None)  # a planned outcome applies to running pods
        owner_label = JOBSET_NAME if resource == "jobsets" else "job-name"
        for pod_key in [
            k
            for k, o in self.objects.items()
            if k[0] == "pods" and k[1] == ns and o["metadata"]["labels"].get(owner_label) == name
        ]:
            del self.objects[pod_key]
            self._log_ended.add(pod_key[2])
        if suspended:
            return
        self._start_pods(resource, obj)  # a JobSet's keep its restart attempt
