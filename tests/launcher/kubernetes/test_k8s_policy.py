"""The simulated cluster's Job and JobSet controllers decide from the rendered manifest.

No Kubernetes API server or JobSet controller runs here. ``tests/support/k8s_fake_server.py``
is a test double (real HTTP through the official client) whose scripted worker exits
(``FakeKubernetes.exit_worker``) are decided by ``roxxel_launch.backends.local.policy`` from the
object the launcher created — the engine the local backend runs the same manifest with — so
the launcher's status is checked against what the manifest's own policies make a cluster do.
"""

from __future__ import annotations

import pytest

from roxxel_launch import contract
from roxxel_launch import spec as S
from roxxel_launch.backends.kubernetes import backend as K
from roxxel_launch.backends.local import policy
from roxxel_launch.backends.base import JobState, StopReason

from support.fake_clock import FakeClock, fast_retry
from support.k8s_fake_server import RESTART_ATTEMPT, FakeKubernetes, use_cluster
from support.specs import spec_dict

pytestmark = pytest.mark.timeout(60)

NS = "team-a"
PREEMPTED, CONFIG_ERROR = contract.PREEMPTED_EXIT_CODE, contract.CONFIG_ERROR_EXIT_CODE


def make_spec(**changes) -> S.JobSpec:
    data = spec_dict(namespace=NS, accelerator={"cpu": {"hosts": 2}}, num_slices=2, checkpoint_dir="gs://ckpt/lm")
    data.update(changes)
    return S.spec_from_dict(data)


@pytest.fixture
def fake(tmp_path, monkeypatch):
    with FakeKubernetes(namespace=NS) as server:
        yield use_cluster(server, tmp_path, monkeypatch, fast_retry(FakeClock()))


@pytest.fixture
def backend(fake) -> K.KubernetesBackend:
    return K.KubernetesBackend(poll_seconds=0.05, delete_timeout=10)


def attempts(fake) -> set[str]:
    return {p["metadata"]["labels"][RESTART_ATTEMPT] for p in fake.pods("lm")}


def test_a_preemption_restarts_the_gang_in_place_without_counting(fake, backend):
    """``restartsCountTowardsMax`` stays absent: the JobSet API field is ``omitempty`` and
    only counted restarts grow it (as the controller writes it, not 0)."""
    backend.submit(make_spec(max_restarts=0))
    for _ in range(3):  # more preemptions than max_restarts allows failures
        decision = fake.exit_worker("lm", PREEMPTED, process=1, disrupted=True)
        assert (decision.action, decision.counted, decision.rule) == (policy.Action.RESTART, False, "preemption")
    status = fake.get("jobsets", "lm")["status"]
    assert status["restarts"] == 3 and "restartsCountTowardsMax" not in status
    assert "terminalState" not in status and attempts(fake) == {"3"} and len(fake.pods("lm")) == 4
    assert fake.submissions("lm") == 1  # restarted in place, not re-created
    assert backend.status("lm").state is JobState.RUNNING


@pytest.mark.parametrize("max_restarts", [1, 2])
def test_failures_count_until_the_manifests_max_restarts(fake, backend, max_restarts):
    """The rendered ``maxRestarts`` alone decides when the second failure ends the JobSet."""
    backend.submit(make_spec(max_restarts=max_restarts))
    first = fake.exit_worker("lm", 1, process=2)
    assert (first.action, first.counted) == (policy.Action.RESTART, True)
    second = fake.exit_worker("lm", 1, process=3)
    status = backend.status("lm")
    if max_restarts == 1:
        assert (second.action, second.reason) == (policy.Action.FAIL, policy.REACHED_MAX_RESTARTS)
        assert (status.state, status.exit_code, status.reason) == (JobState.FAILED, 1, StopReason.RESTARTS_EXHAUSTED)
        assert "ReachedMaxRestarts" in status.message and "process 3" in status.message
        assert fake.get("jobsets", "lm")["status"]["restartsCountTowardsMax"] == 1
    else:
        assert (second.action, second.counted) == (policy.Action.RESTART, True)
        assert status.state is JobState.RUNNING and status.restarts == 2
        assert fake.get("jobsets", "lm")["status"]["restartsCountTowardsMax"] == 2


def test_a_configuration_error_fails_the_jobset_at_once(fake, backend):
    backend.submit(make_spec())
    decision = fake.exit_worker("lm", CONFIG_ERROR, process=1)
    assert (decision.action, decision.rule, decision.job_action) == (policy.Action.FAIL, "configError", "FailJob")
    status = backend.status("lm")
    assert (status.state, status.exit_code, status.reason, status.restarts) == (
        JobState.FAILED,
        CONFIG_ERROR,
        StopReason.CONFIG_ERROR,
        0,
    )
    assert "FailJobSetFailurePolicyAction" in status.message


@pytest.mark.parametrize("release", ["v0.8.0", "v0.9.1"])
def test_a_configuration_error_counts_as_a_restart_under_an_older_jobset(fake, backend, release):
    """JobSet < v0.10.0 cannot match failure messages: the JobSet sent there fails a child Job
    on exit 78 by its backoffLimit (the exit-78 rule is Count), which no rule matches, so the
    JobSet restarts it and counts it; with ``max_restarts: 1`` the second one ends it. Not a
    free restart for ever, as the preemption rule would make it."""
    fake.serve_jobset_crd(release=release)
    backend.submit(make_spec(max_restarts=1))
    first = fake.exit_worker("lm", CONFIG_ERROR, process=1)
    assert (first.action, first.counted, first.rule) == (policy.Action.RESTART, True, None)
    second = fake.exit_worker("lm", CONFIG_ERROR, process=0)
    assert (second.action, second.reason) == (policy.Action.FAIL, policy.REACHED_MAX_RESTARTS)
    status = backend.status("lm")
    assert (status.state, status.exit_code) == (JobState.FAILED, CONFIG_ERROR)


def test_an_indexed_job_fails_by_its_pod_failure_policy(fake, backend):
    backend.submit(make_spec(name="lm", num_slices=1, workload="indexed-job"))
    decision = fake.exit_worker("lm", PREEMPTED, process=1, disrupted=True)
    assert (decision.action, decision.reason) == (policy.Action.FAIL, policy.POD_FAILURE_POLICY)
    assert backend.status("lm").state is JobState.PREEMPTED
    conditions = fake.get("jobs", "lm")["status"]["conditions"]
    assert [c["type"] for c in conditions] == ["FailureTarget", "Failed"]
    assert (
        conditions[0]["message"].startswith(f"Pod {NS}/lm-1-")
        and "matching FailJob rule at index 1" in conditions[0]["message"]
    )


def test_a_failure_within_the_backoff_limit_recreates_the_pod(fake, backend, monkeypatch):
    """A manifest with ``backoffLimit: 1`` (edited after rendering): one failure re-creates
    the pod, the second fails the Job (BackoffLimitExceeded)."""
    real = K.render

    def with_backoff(spec):
        rendered = real(spec)
        for obj in rendered.objects:
            if obj["kind"] == "Job":
                obj["spec"]["backoffLimit"] = 1
        return rendered

    monkeypatch.setattr(K, "render", with_backoff)
    backend.submit(make_spec(num_slices=1, workload="indexed-job"))
    old = {p["metadata"]["name"] for p in fake.pods("lm")}
    first = fake.exit_worker("lm", 1, process=0)
    assert (first.action, first.counted) == (policy.Action.RECREATE_POD, True)
    new = {p["metadata"]["name"] for p in fake.pods("lm") if p["status"]["phase"] == "Running"}
    assert len(new) == 2 and len(new - old) == 1
    second = fake.exit_worker("lm", 1, process=0)
    assert (second.action, second.reason) == (policy.Action.FAIL, policy.BACKOFF_LIMIT_EXCEEDED)
    status = backend.status("lm")
    assert (status.state, status.exit_code) == (JobState.FAILED, 1)
    assert "BackoffLimitExceeded" in status.message


def test_planned_outcomes_are_what_the_manifests_policies_decide(fake, backend):
    """``plan``'s ``fail`` and a Job's ``preempt`` go through the policy engine: a worker that
    fails in every attempt ends a JobSet after ``max_restarts`` counted gang restarts
    (``ReachedMaxRestarts``), and a preempted Job names the podFailurePolicy rule that the
    launcher's manifest really has at that index (1: the DisruptionTarget rule)."""
    fake.plan("lm", "fail", after=1)
    backend.submit(make_spec(max_restarts=2))
    status = backend.status("lm")
    assert (status.state, status.exit_code, status.reason, status.restarts) == (
        JobState.FAILED,
        1,
        StopReason.RESTARTS_EXHAUSTED,
        2,
    )
    assert "ValueError: the loss is NaN" in status.message
    assert [(d.action, d.counted) for d in fake._real.decisions] == [
        (policy.Action.RESTART, True),
        (policy.Action.RESTART, True),
        (policy.Action.FAIL, True),
    ]
    conditions = fake.get("jobsets", "lm")["status"]["conditions"]
    assert [(c["type"], c["reason"]) for c in conditions] == [("Failed", "ReachedMaxRestarts")]

    fake.plan("ix", "preempt", after=1)
    backend.submit(make_spec(name="ix", num_slices=1, workload="indexed-job"))
    assert backend.status("ix").state is JobState.PREEMPTED
    (failed,) = [c for c in fake.get("jobs", "ix")["status"]["conditions"] if c["type"] == "Failed"]
    assert failed["reason"] == "PodFailurePolicy"
    assert failed["message"].startswith(f"Pod {NS}/ix-0-") and failed["message"].endswith(
        "has condition DisruptionTarget matching FailJob rule at index 1"
    )
