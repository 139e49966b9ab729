"""A preemption on the simulated cluster, through the chain the JobSet controller runs.

No Kubernetes API server or controller runs here. ``tests/support/k8s_fake_server.py`` is
a test double whose scripted controllers follow kubernetes-sigs/jobset
@08dfbdfd682714a9ab929633eca8dc95315187e7 (pkg/controllers/failure_policy.go,
jobset_controller.go) for the manifest the launcher renders:

a worker pod gets ``DisruptionTarget`` -> its Job fails with reason ``PodFailurePolicy``
(the podFailurePolicy's rule 1, https://kubernetes.io/docs/concepts/workloads/controllers/job/#pod-failure-policy)
-> the JobSet's rule ``preemption`` (``RestartJobSetAndIgnoreMaxRestarts``) restarts every
child Job in place: ``status.restarts`` + 1, ``restartsCountTowardsMax`` untouched, new
pods with the next ``jobset.sigs.k8s.io/restart-attempt`` -> the workers restore from their
checkpoint -> the JobSet completes.

The workers are real ``roxxel-worker`` processes (the image's entrypoint) given the
environment that the stored pod's env would resolve to (its downward-API
``restart-attempt`` annotation included), running a command that restores a step counter
from a checkpoint directory and saves it again; their output becomes the pod's log.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from roxxel_launch import contract
from roxxel_launch import spec as S
from roxxel_launch.backends.kubernetes import backend as K
from roxxel_launch.backends.local import policy
from roxxel_launch.backends.base import JobState, StopReason
from roxxel_launch.cli import EXIT_SUCCEEDED, cli

from support.fake_clock import FakeClock, fast_retry
from support.k8s_fake_server import RESTART_ATTEMPT, FakeKubernetes, count_preemptions, use_cluster
from support.specs import spec_dict

pytestmark = pytest.mark.timeout(120)

NS = "team-a"
PREEMPTED, CONFIG_ERROR = contract.PREEMPTED_EXIT_CODE, contract.CONFIG_ERROR_EXIT_CODE
# The training command: restore the step from the checkpoint, train two steps, save.
TRAIN = """
import pathlib, sys
ckpt = pathlib.Path(sys.argv[1]) / "step"
step = int(ckpt.read_text()) if ckpt.exists() else 0
print(f"restored step {step}" if step else "fresh start at step 0")
step += 2
ckpt.parent.mkdir(parents=True, exist_ok=True)
ckpt.write_text(str(step))
print(f"saved step {step}")
"""


def make_spec(**changes) -> S.JobSpec:
    data = spec_dict(
        namespace=NS,
        accelerator={"cpu": {"hosts": 2}},
        num_slices=2,
        checkpoint_dir="gs://ckpt/lm",
        max_restarts=1,
        max_preemptions=3,
    )
    data.update(changes)
    return S.spec_from_dict(data)


@pytest.fixture
def fake(tmp_path, monkeypatch):
    with FakeKubernetes(namespace=NS) as server:
        yield use_cluster(server, tmp_path, monkeypatch, fast_retry(FakeClock()))


@pytest.fixture
def backend(fake) -> K.KubernetesBackend:
    return K.KubernetesBackend(poll_seconds=0.05, delete_timeout=10)


def rank0(fake) -> dict:
    """The pod of process 0 of the current attempt."""
    (pod,) = [
        p
        for p in fake.pods("lm")
        if p["metadata"]["labels"]["jobset.sigs.k8s.io/job-index"] == "0"
        and p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == "0"
    ]
    return pod


def pod_env(pod: dict) -> dict[str, str]:
    """The ROXXEL_* variables of ``pod``'s worker container as the kubelet resolves them:
    literal values, and ``fieldRef`` to ``metadata.annotations['...']`` (the downward API)."""
    env = {}
    for var in pod["spec"]["containers"][0].get("env") or []:
        if not var["name"].startswith("ROXXEL_"):
            continue
        if "value" in var:
            env[var["name"]] = var["value"]
        path = ((var.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath", "")
        if path.startswith("metadata.annotations['"):
            env[var["name"]] = pod["metadata"]["annotations"].get(path[len("metadata.annotations['") : -2], "")
    return env


def run_worker(fake, ckpt: Path) -> int:
    """Run rank 0 of the current attempt: roxxel-worker with the pod's environment; its
    output goes to the pod's log. Returns its exit code."""
    pod = rank0(fake)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROXXEL_")}
    env.update({k: v for k, v in pod_env(pod).items() if k in ("ROXXEL_RESTART_ATTEMPT", "ROXXEL_MAX_RESTART_ATTEMPT")})
    out = subprocess.run(
        [sys.executable, "-m", "roxxel.worker", "--", sys.executable, "-c", TRAIN, str(ckpt)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = out.stdout.splitlines() or [line.split(": ", 1)[-1] for line in out.stderr.splitlines() if "beyond" in line]
    fake.log(pod["metadata"]["name"], *lines)
    return out.returncode


def test_a_preemption_restarts_the_jobset_in_place_and_it_finishes(fake, backend, tmp_path):
    ckpt = tmp_path / "ckpt"
    backend.submit(make_spec())
    uid = fake.get("jobsets", "lm")["metadata"]["uid"]
    assert run_worker(fake, ckpt) == 0 and "saved step 2" in fake._logs[rank0(fake)["metadata"]["name"]]
    old = {p["metadata"]["name"] for p in fake.pods("lm")}

    decision = fake.exit_worker("lm", PREEMPTED, process=1, disrupted=True)
    # The Job controller: FailJob by the DisruptionTarget rule (index 1), reason PodFailurePolicy.
    assert (decision.reason, decision.job_action) == ("PodFailurePolicy", "FailJob")
    assert "has condition DisruptionTarget matching FailJob rule at index 1" in decision.message
    # The JobSet controller: the rule that matched, and a restart that does not count.
    assert (decision.action, decision.counted, decision.rule) == (policy.Action.RESTART, False, "preemption")
    jobset = fake.get("jobsets", "lm")
    status = jobset["status"]
    assert status["restarts"] == 1 and "restartsCountTowardsMax" not in status  # omitempty
    assert "terminalState" not in status and jobset["metadata"]["uid"] == uid
    (restarting,) = [c for c in status["conditions"] if c["type"] == "RestartingJobSet"]
    assert (restarting["status"], restarting["reason"]) == ("True", "FailurePolicy_preemption")
    assert restarting["message"] == (
        "applying RestartJobSetAndIgnoreMaxRestarts failure policy action (first failed job: lm-slice-0)"
    )
    (event,) = [o for (r, _, _), o in fake.objects.items() if r == "events"]
    assert event["reason"] == "RestartJobSetAndIgnoreMaxRestartsFailurePolicyAction"
    # Every pod recreated from the template, with the new attempt on label and annotation.
    pods = fake.pods("lm")
    assert len(pods) == 4 and not old & {p["metadata"]["name"] for p in pods}
    assert {
        (p["metadata"]["labels"][RESTART_ATTEMPT], p["metadata"]["annotations"][RESTART_ATTEMPT]) for p in pods
    } == {("1", "1")}
    assert pod_env(pods[0])["ROXXEL_RESTART_ATTEMPT"] == "1"
    assert fake.submissions("lm") == 1  # in place: not deleted and re-created

    assert run_worker(fake, ckpt) == 0  # the new attempt restores from the checkpoint
    assert fake._logs[rank0(fake)["metadata"]["name"]] == ["restored step 2", "saved step 4"]
    now = backend.status("lm")
    assert (now.state, now.restarts) == (JobState.RUNNING, 1)
    assert "1 restarts, 0 counted toward max_restarts=1, 1 free (preemption or eviction)" in now.message
    (restarting,) = [c for c in fake.get("jobsets", "lm")["status"]["conditions"] if c["type"] == "RestartingJobSet"]
    assert (restarting["status"], restarting["reason"]) == ("False", "JobsReady")

    fake.settle("jobsets", "lm", "succeed")
    done = backend.status("lm")
    assert (done.state, done.exit_code, done.restarts) == (JobState.SUCCEEDED, 0, 1)


def test_preemptions_beyond_max_restarts_are_free_until_the_workers_budget(fake, backend, tmp_path):
    """``max_restarts: 0``: no failure may restart the gang, yet preemptions do, as the
    rule's ``RestartJobSetAndIgnoreMaxRestarts`` ignores ``maxRestarts``. The bound on them
    is the pods' own: ``ROXXEL_MAX_RESTART_ATTEMPT = max_restarts + max_preemptions`` (2);
    in attempt 3 roxxel-worker exits 78 without training, and the JobSet's ``configError``
    rule (``FailJobSet``) ends it Failed at once."""
    ckpt = tmp_path / "ckpt"
    backend.submit(make_spec(max_restarts=0, max_preemptions=2))
    assert pod_env(rank0(fake))["ROXXEL_MAX_RESTART_ATTEMPT"] == "2"
    for attempt in (1, 2, 3):
        assert run_worker(fake, ckpt) == 0
        decision = fake.exit_worker("lm", PREEMPTED, process=0, disrupted=True)
        assert (decision.action, decision.counted) == (policy.Action.RESTART, False)
        assert backend.status("lm").state is JobState.RUNNING
        assert fake.get("jobsets", "lm")["status"]["restarts"] == attempt
    assert (ckpt / "step").read_text() == "6"
    code = run_worker(fake, ckpt)
    assert code == CONFIG_ERROR and (ckpt / "step").read_text() == "6"  # refused: no training
    decision = fake.exit_worker("lm", code, process=0)
    assert (decision.action, decision.rule) == (policy.Action.FAIL, "configError")
    status = backend.status("lm")
    assert (status.state, status.exit_code, status.reason, status.restarts) == (
        JobState.FAILED,
        CONFIG_ERROR,
        StopReason.CONFIG_ERROR,
        3,
    )
    assert "FailJobSetFailurePolicyAction" in status.message
    assert "3 restarts, 0 counted toward max_restarts=0, 3 free" in status.message


def test_a_preemption_rule_that_counts_ends_the_jobset_at_max_restarts(fake, backend, monkeypatch):
    """The same chain under a rule whose action is ``RestartJobSet`` (the manifest edited
    after rendering): each preemption counts, and the one after ``maxRestarts`` ends the
    JobSet Failed with ``ReachedMaxRestarts``. The other child Job is deleted, and the
    preempted pod's peers saved after SIGTERM (exit 42): every failed worker of the last
    attempt was preempted, so the launcher reports it Preempted and ``resume`` continues it."""
    count_preemptions(monkeypatch)
    backend.submit(make_spec(max_restarts=1))
    first = fake.exit_worker("lm", PREEMPTED, process=0, disrupted=True)
    assert (first.action, first.counted) == (policy.Action.RESTART, True)
    (restarting,) = [c for c in fake.get("jobsets", "lm")["status"]["conditions"] if c["type"] == "RestartingJobSet"]
    assert restarting["message"].startswith("applying RestartJobSet failure policy action")
    second = fake.exit_worker("lm", PREEMPTED, process=0, disrupted=True)
    assert (second.action, second.reason) == (policy.Action.FAIL, policy.REACHED_MAX_RESTARTS)
    status = backend.status("lm")
    assert (status.state, status.exit_code, status.restarts) == (JobState.PREEMPTED, PREEMPTED, 1)
    assert "ReachedMaxRestarts" in status.message and "roxxel-launch resume lm" in status.message
    assert fake.get("jobsets", "lm")["status"]["restartsCountTowardsMax"] == 1
    assert {p["metadata"]["labels"]["job-name"] for p in fake.pods("lm")} == {"lm-slice-0"}


def test_wait_and_status_follow_planned_preemptions_to_the_end(fake, backend):
    """``plan``'s ``preempt`` of a JobSet restarts it in place (the next outcome applies to
    the new attempt): ``wait`` goes on through two preemptions and exits 0."""
    fake.plan("lm", "preempt", "preempt", "succeed", after=2)
    backend.submit(make_spec())
    result = CliRunner().invoke(cli, ["wait", "lm", "--poll", "0.1"])
    assert result.exit_code == EXIT_SUCCEEDED, result.output
    assert "job lm succeeded" in result.stderr
    assert [(d.action, d.counted, d.rule) for d in fake._real.decisions] == [
        (policy.Action.RESTART, False, "preemption")
    ] * 2
    status = CliRunner().invoke(cli, ["status", "lm"]).output
    assert "restarts:   2" in status.splitlines()
    assert "2 restarts, 0 counted toward max_restarts=1, 2 free" in status
    assert fake.submissions("lm") == 1


def test_logs_follow_across_a_preemption(fake, backend, tmp_path):
    """``roxxel-launch logs -f``: attempt 1's lines, the preemption, the marker of attempt
    2 and its restored lines, until the JobSet completes."""
    ckpt = tmp_path / "ckpt"
    backend.submit(make_spec())
    run_worker(fake, ckpt)
    first = rank0(fake)["metadata"]["name"]

    def cluster():
        def following(pod: str) -> bool:
            return any(r.name == pod and r.query.get("follow") == "true" for r in fake.calls("GET", "log"))

        deadline = time.monotonic() + 30
        while not following(first) and time.monotonic() < deadline:
            time.sleep(0.02)
        fake.exit_worker("lm", PREEMPTED, process=1, disrupted=True)
        run_worker(fake, ckpt)
        second = rank0(fake)["metadata"]["name"]
        while not following(second) and time.monotonic() < deadline:
            time.sleep(0.02)
        fake.settle("jobsets", "lm", "succeed")

    thread = threading.Thread(target=cluster, daemon=True)
    thread.start()
    result = CliRunner().invoke(cli, ["logs", "lm", "-f"])
    thread.join(timeout=30)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "fresh start at step 0",
        "saved step 2",
        "── attempt 2 (restart 1) ──",
        "restored step 2",
        "saved step 4",
    ]
