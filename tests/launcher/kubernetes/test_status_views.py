"""The typed views of a JobSet's, an Indexed Job's and a pod's status fields
(roxxel_launch.backends.kubernetes.status_views): what each field reads, what an older
controller that leaves a field out gives, and the status decided over them."""

from __future__ import annotations

from roxxel_launch.backends.base import JobState, StopReason
from roxxel_launch.backends.kubernetes.status import jobset_status, status_of, worker_from_pod
from roxxel_launch.backends.kubernetes.status_views import (
    Condition,
    Conditions,
    ContainerStateView,
    JobSetStatusView,
    JobSetView,
    JobStatusView,
    JobView,
    ObjectMetaView,
    PodView,
)


def _jobset(status=None, *, replicas=2, completions=4, policy=None, suspend=False, meta=None):
    spec = {
        "replicatedJobs": [
            {"name": "workers", "replicas": replicas, "template": {"spec": {"completions": completions}}}
        ],
        "suspend": suspend,
    }
    if policy is not None:
        spec["failurePolicy"] = policy
    return {"metadata": {"name": "lm", **(meta or {})}, "spec": spec, "status": status or {}}


def _pod(slice_, index, *, phase="Running", attempt=0, exit_code=None):
    state = {"terminated": {"exitCode": exit_code, "reason": "Error"}} if exit_code is not None else {"running": {}}
    return {
        "metadata": {
            "name": f"lm-{slice_}-{index}",
            "labels": {
                "jobset.sigs.k8s.io/job-index": str(slice_),
                "batch.kubernetes.io/job-completion-index": str(index),
                "jobset.sigs.k8s.io/restart-attempt": str(attempt),
            },
        },
        "status": {"phase": phase, "containerStatuses": [{"name": "worker", "state": state}]},
    }


def test_a_jobset_status_is_read_field_by_field():
    view = JobSetView.parse(
        _jobset(
            {
                "restarts": 3,
                "restartsCountTowardsMax": 1,
                "terminalState": "Failed",
                "conditions": [
                    {"type": "Failed", "status": "True", "reason": "ReachedMaxRestarts", "message": "too many"},
                    {"type": "Suspended", "status": "False", "reason": "ResumeJobs"},
                ],
                "replicatedJobsStatus": [{"name": "workers", "ready": 1, "failed": 1, "active": 1}],
            },
            policy={"maxRestarts": 2, "rules": [{"action": "RestartJobSetAndIgnoreMaxRestarts"}]},
        )
    )
    status = view.status
    assert (status.restarts, status.restarts_count_towards_max, status.terminal_state) == (3, 1, "Failed")
    assert status.failed == Condition("Failed", "True", "ReachedMaxRestarts", "too many")
    assert status.failed.text == "ReachedMaxRestarts: too many"
    assert status.completed is None and status.conditions.true("Suspended") is None
    assert [(r.name, r.ready, r.failed, r.active, r.succeeded) for r in status.replicated_jobs] == [
        ("workers", 1, 1, 1, 0)
    ]
    assert (view.max_restarts, view.has_failure_rules, view.counted_restarts) == (2, True, 1)
    assert view.shape == (4, 2, 8)


def test_an_older_jobset_controller_without_terminal_state_or_counts_reads_as_none():
    """Before JobSet v0.6 there is no terminalState; before failure-policy rules no
    restartsCountTowardsMax: the conditions decide, and no restart split is claimed."""
    view = JobSetView.parse(
        _jobset(
            {"restarts": 2, "conditions": [{"type": "Completed", "status": "True", "reason": "AllJobsCompleted"}]},
            policy={"maxRestarts": 3},
        )
    )
    assert view.status.terminal_state is None and view.status.restarts_count_towards_max is None
    assert view.status.completed.reason == "AllJobsCompleted"
    assert view.counted_restarts is None  # no rules: the controller may not count at all
    assert "counted toward" not in jobset_status(_jobset({"restarts": 2}, policy={"maxRestarts": 3}), []).message
    # with rules, an omitted (omitempty) count means 0
    ruled = JobSetView.parse(_jobset({"restarts": 2}, policy={"maxRestarts": 3, "rules": [{"action": "FailJobSet"}]}))
    assert ruled.counted_restarts == 0


def test_a_terminal_state_without_its_condition_still_ends_the_jobset():
    """A controller may set terminalState before (or without) the matching condition."""
    done = JobSetStatusView.parse({"terminalState": "Completed"})
    assert done.completed == Condition("Completed", "True") and done.completed.text == ""
    got = jobset_status(_jobset({"terminalState": "Completed"}), [])
    assert (got.state, got.exit_code, got.message) == (JobState.SUCCEEDED, 0, "")
    failed = jobset_status(_jobset({"terminalState": "Failed"}), [_pod(0, 0, exit_code=3)])
    assert (failed.state, failed.exit_code, failed.reason) == (JobState.FAILED, 3, StopReason.FAILED)
    assert failed.message.startswith("failed; first failure: process 0 (pod lm-0-0) exited with code 3")


def test_missing_or_malformed_fields_read_as_unset_never_raise():
    for raw in ({}, {"status": None, "spec": None, "metadata": None}, {"status": "x", "spec": []}):
        view = JobSetView.parse(raw)
        assert view.status == JobSetStatusView() and view.shape == (1, 0, 0) and view.meta.name == "?"
        job = JobView.parse(raw)
        assert job.status == JobStatusView() and job.shape == (1, 1, 1)
    odd = JobSetStatusView.parse(
        {"restarts": "two", "conditions": [None, {"type": "Failed"}, "x"], "replicatedJobsStatus": [{"ready": None}]}
    )
    assert odd.restarts == 0 and odd.failed is None  # a condition without status "True" is not True
    assert odd.replicated_jobs[0].ready == 0
    assert Conditions.parse({"conditions": {"type": "Failed"}}).all == ()


def test_the_last_true_entry_of_a_condition_type_counts():
    conditions = Conditions.parse(
        {
            "conditions": [
                {"type": "Suspended", "status": "True", "reason": "First"},
                {"type": "Suspended", "status": "True", "reason": "Second"},
                {"type": "FailureTarget", "status": "True", "reason": "PodFailurePolicy"},
            ]
        }
    )
    assert conditions.true("Suspended").reason == "Second"
    assert conditions.true("Failed", "FailureTarget").reason == "PodFailurePolicy"
    assert conditions.text("Complete") == ""


def test_object_metadata_view():
    meta = ObjectMetaView.parse(
        {
            "metadata": {
                "name": "lm",
                "namespace": "ml",
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "deletionTimestamp": "2026-01-01T00:01:00Z",
                "labels": {"kueue.x-k8s.io/queue-name": "tpu-queue"},
            }
        }
    )
    assert meta == ObjectMetaView("lm", "ml", "2026-01-01T00:00:00Z", True, "tpu-queue")
    got = jobset_status(_jobset({"terminalState": "Completed"}, meta={"deletionTimestamp": "now"}), [])
    assert got.message == "being deleted"


def test_an_indexed_job_status_is_read_field_by_field():
    job = {
        "metadata": {"name": "lm"},
        "spec": {"completions": 4, "parallelism": 4},
        "status": {
            "active": 3,
            "failed": 1,
            "ready": 3,
            "terminating": 1,
            "startTime": "2026-01-01T00:00:00Z",
            "failedIndexes": "2",
            "conditions": [
                {"type": "FailureTarget", "status": "True", "reason": "PodFailurePolicy", "message": "exit code 42 x"}
            ],
        },
    }
    view = JobView.parse(job)
    status = view.status
    assert (status.active, status.succeeded, status.failed, status.ready, status.terminating) == (3, 0, 1, 3, 1)
    assert (status.start_time, status.completion_time, status.failed_indexes) == ("2026-01-01T00:00:00Z", None, "2")
    assert status.failed_condition.reason == "PodFailurePolicy" and status.completed is None
    assert view.shape == (4, 1, 4)
    got = status_of("Job", job, [])
    assert (got.state, got.exit_code, got.reason) == (JobState.PREEMPTED, 42, StopReason.PREEMPTED)
    # an older Kubernetes (no ready, no terminating) reads them as unknown, not 0
    old = JobStatusView.parse({"active": 4})
    assert (old.ready, old.terminating, old.active) == (None, None, 4)


def test_a_restarting_jobset_over_views_counts_stale_pods():
    pods = [_pod(0, 0, attempt=1), _pod(0, 1, attempt=0, phase="Running")]
    got = jobset_status(
        _jobset({"restarts": 1, "restartsCountTowardsMax": 1}, replicas=1, completions=2, policy={"maxRestarts": 4}),
        pods,
    )
    assert got.state is JobState.RESTARTING and got.restarts == 1
    assert "1 pods of the previous attempt still terminating" in got.message
    assert "1 restarts, 1 counted toward max_restarts=4, 0 free" in got.message


def test_a_pod_is_read_field_by_field():
    pod = {
        "metadata": {
            "name": "lm-1-2",
            "labels": {"jobset.sigs.k8s.io/job-index": "1", "jobset.sigs.k8s.io/restart-attempt": "3"},
            # before Kubernetes 1.28 the completion index is an annotation only
            "annotations": {"batch.kubernetes.io/job-completion-index": "2"},
            "deletionTimestamp": "2026-01-01T00:00:00Z",
        },
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {"name": "gke-gcsfuse-sidecar", "state": {"running": {}}},
                {
                    "name": "worker",
                    "state": {
                        "terminated": {"exitCode": 137, "reason": "OOMKilled", "finishedAt": "2026-01-01T00:00:01Z"}
                    },
                },
            ],
        },
    }
    view = PodView.parse(pod, "worker")
    assert (view.name, view.phase, view.deleting) == ("lm-1-2", "Failed", True)
    assert (view.number("batch.kubernetes.io/job-completion-index", -1), view.number("missing", 7)) == (2, 7)
    assert view.container == ContainerStateView(
        terminated=True, exit_code=137, finished_at="2026-01-01T00:00:01Z", reason="OOMKilled"
    )
    worker = worker_from_pod(pod, hosts_per_slice=4)
    assert (worker.process, worker.slice, worker.index, worker.restart_attempt) == (6, 1, 2, 3)
    assert (worker.exit_code, worker.reason, worker.terminating) == (137, "OOMKilled", True)


def test_a_pod_the_kubelet_has_not_reported_reads_as_pending():
    view = PodView.parse({"metadata": {"labels": {"jobset.sigs.k8s.io/job-index": "x"}}}, "worker")
    assert (view.name, view.phase, view.container, view.number("jobset.sigs.k8s.io/job-index", 0)) == (
        "?",
        "Pending",
        None,
        0,
    )
    unscheduled = {
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3"}],
        }
    }
    worker = worker_from_pod(unscheduled, 1)
    assert (worker.phase, worker.reason, worker.message, worker.index) == ("Pending", "Unschedulable", "0/3", -1)


def test_a_disruption_explains_more_than_the_containers_error():
    pod = {
        "status": {
            "phase": "Failed",
            "containerStatuses": [{"name": "worker", "state": {"terminated": {"exitCode": 143, "reason": "Error"}}}],
            "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}],
        }
    }
    worker = worker_from_pod(pod, 1)
    assert (worker.exit_code, worker.reason) == (143, "PreemptionByScheduler")
    waiting = {"status": {"containerStatuses": [{"name": "x", "state": {"waiting": {"reason": "ImagePullBackOff"}}}]}}
    assert worker_from_pod(waiting, 1).reason == "ImagePullBackOff"  # the first container when none is "worker"
