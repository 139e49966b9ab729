"""Events on failure: `status`, `status --events` and `wait` show the Kubernetes Events that
explain a pod that does not start, through the CLI and the official client against the
simulated cluster (``FakeKubernetes.event`` records them as the scheduler and the kubelet do,
``FakeKubernetes.hold`` keeps a pod Pending)."""

from __future__ import annotations

import json
import logging
import threading

import pytest
import yaml
from click.testing import CliRunner

from roxxel_launch.backends.kubernetes import events as E
from roxxel_launch.cli import EXIT_SUCCEEDED, cli

from support.k8s_fake_server import FakeKubernetes, use_cluster
from support.paths import REPO
from support.specs import spec_dict

pytestmark = pytest.mark.timeout(120)

NS = "team-a"
SPEC = spec_dict(namespace=NS, accelerator={"cpu": {"hosts": 2}}, checkpoint_dir="gs://ckpt/lm", run_name="lm-1")
# The scheduler's message for a pod no node pool fits (kube-scheduler's FailedScheduling).
UNSCHEDULABLE = (
    "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector. "
    "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
)
# The kubelet's FailedMount when the GCS FUSE CSI driver may not read the bucket (the pod's
# Kubernetes service account has no IAM role on it through Workload Identity; see the
# driver's docs/troubleshooting.md in GoogleCloudPlatform/gcs-fuse-csi-driver).
GCSFUSE_DENIED = (
    'MountVolume.SetUp failed for volume "data" : rpc error: code = PermissionDenied '
    'desc = failed to get GCS bucket "corpus": googleapi: Error 403: Caller does not '
    "have storage.objects.list access to the Google Cloud Storage bucket., forbidden"
)


def run(*args: str, code: int = 0) -> str:
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert result.exit_code == code, (result.exit_code, result.output)
    return result.output


@pytest.fixture
def fake(tmp_path, monkeypatch):
    with FakeKubernetes(namespace=NS) as fake:
        use_cluster(fake, tmp_path, monkeypatch)
        spec = tmp_path / "lm.yaml"
        spec.write_text(yaml.safe_dump(SPEC))
        run("submit", spec)
        yield fake


def test_a_pod_pending_with_failed_scheduling_shows_its_event_in_status(fake):
    unschedulable, running = fake.pods("lm")
    fake.hold(unschedulable["metadata"]["name"], unschedulable=UNSCHEDULABLE)
    fake.event(unschedulable, "FailedScheduling", UNSCHEDULABLE, component="default-scheduler")
    fake.event(running, "Pulled", "Successfully pulled image", type_="Normal")
    out = run("status", "lm")
    assert "Pending" in out
    (row,) = [line for line in out.splitlines() if "FailedScheduling" in line]
    assert row.startswith("Warning") and f"Pod/{unschedulable['metadata']['name']}" in row
    assert "0/3 nodes are available" in row
    assert "Pulled" not in out  # plain status: the Warnings of pods not started only

    described = run("status", "lm", "--events").splitlines()
    types = [line.split()[0] for line in described if line.startswith(("Warning", "Normal"))]
    assert types == ["Warning", "Normal"]  # every event, Warnings first
    data = json.loads(run("status", "lm", "--json"))
    assert [(e["type"], e["reason"], e["count"]) for e in data["events"]] == [("Warning", "FailedScheduling", 1)]


def test_a_running_job_reads_no_events_unless_asked(fake):
    pod = fake.pods("lm")[0]
    fake.event(pod, "BackOff", "Back-off restarting failed container")
    assert "BackOff" not in run("status", "lm")
    assert not fake.calls("GET", "events")
    assert "BackOff" in run("status", "lm", "--events")


def test_a_gcsfuse_failed_mount_is_shown(fake):
    pod = fake.pods("lm")[1]
    fake.hold(pod["metadata"]["name"], waiting="ContainerCreating")
    fake.event(pod, "FailedMount", GCSFUSE_DENIED)
    out = run("status", "lm")
    (row,) = [line for line in out.splitlines() if "FailedMount" in line]
    assert "storage.objects.list" in row and "PermissionDenied" in row


def test_the_same_event_on_several_pods_is_one_row_with_their_counts_added(fake):
    pods = fake.pods("lm")
    for pod in pods:
        fake.hold(pod["metadata"]["name"], unschedulable=UNSCHEDULABLE)
    fake.event(pods[0], "FailedScheduling", UNSCHEDULABLE, component="default-scheduler")
    fake.event(pods[0], "FailedScheduling", UNSCHEDULABLE, component="default-scheduler")
    # One written through events.k8s.io/v1: counted in series, not count/lastTimestamp.
    fake.event(pods[1], "FailedScheduling", UNSCHEDULABLE, component="default-scheduler", series=True)
    fake.event(pods[1], "FailedScheduling", UNSCHEDULABLE, component="default-scheduler", series=True)
    data = json.loads(run("status", "lm", "--json"))
    (event,) = data["events"]
    assert event["count"] == 4 and event["last_seen"]
    assert event["objects"] == [f"Pod/{p['metadata']['name']}" for p in pods]
    (row,) = [line for line in run("status", "lm").splitlines() if "FailedScheduling" in line]
    assert "(+1)" in row


def test_wait_prints_each_event_of_a_stuck_pod_once(fake, monkeypatch):
    monkeypatch.setattr(E, "STUCK_AFTER_SECONDS", 0.0)
    monkeypatch.setattr(E, "RECHECK_SECONDS", 1.0)
    first, second = fake.pods("lm")
    fake.hold(first["metadata"]["name"], unschedulable=UNSCHEDULABLE)
    fake.hold(second["metadata"]["name"], waiting="ContainerCreating")
    fake.event(first, "FailedScheduling", UNSCHEDULABLE, component="default-scheduler")

    def later() -> None:  # while wait watches: the same event again, and a new one
        fake.event(first, "FailedScheduling", UNSCHEDULABLE, component="default-scheduler")
        fake.event(second, "FailedMount", GCSFUSE_DENIED)

    timers = [threading.Timer(1.5, later), threading.Timer(4.0, fake.settle, ("jobsets", "lm", "succeed"))]
    for timer in timers:
        timer.start()
    try:
        out = run("wait", "lm", "--poll", "0.1", code=EXIT_SUCCEEDED)
    finally:
        for timer in timers:
            timer.cancel()
    assert out.count("FailedScheduling") == 1, out
    assert out.count("FailedMount") == 1, out
    assert "Warning FailedMount (Pod/" in out


def test_a_role_without_events_is_one_warning_line_not_a_crash(fake, caplog):
    role = [
        r for r in yaml.safe_load_all((REPO / "k8s/rbac/roxxel-launch-role.yaml").read_text()) if r["kind"] == "Role"
    ][0]["rules"]
    fake.set_role([r for r in role if "events" not in r["resources"]])
    pod = fake.pods("lm")[0]
    fake.hold(pod["metadata"]["name"], unschedulable=UNSCHEDULABLE)
    with caplog.at_level(logging.WARNING):
        out = run("status", "lm", "--events")
    assert "Pending" in out and "Traceback" not in out
    lines = [r.getMessage() for r in caplog.records if "events not shown" in r.getMessage()]
    assert len(lines) == 1 and "kubectl auth can-i list events -n team-a" in lines[0]
    assert "\n" not in lines[0]


def test_wait_under_a_role_without_events_warns_once(fake, monkeypatch, caplog):
    monkeypatch.setattr(E, "STUCK_AFTER_SECONDS", 0.0)
    monkeypatch.setattr(E, "RECHECK_SECONDS", 1.0)
    role = [
        r for r in yaml.safe_load_all((REPO / "k8s/rbac/roxxel-launch-role.yaml").read_text()) if r["kind"] == "Role"
    ][0]["rules"]
    fake.set_role([r for r in role if "events" not in r["resources"]])
    fake.hold(fake.pods("lm")[0]["metadata"]["name"], unschedulable=UNSCHEDULABLE)
    timer = threading.Timer(3.0, fake.settle, ("jobsets", "lm", "succeed"))
    timer.start()
    try:
        with caplog.at_level(logging.WARNING):
            run("wait", "lm", "--poll", "0.1", code=EXIT_SUCCEEDED)
    finally:
        timer.cancel()
    assert len(fake.calls("GET", "events")) == 1
    assert len([r for r in caplog.records if "events not shown" in r.getMessage()]) == 1


def test_merge_puts_warnings_first_then_the_newest():
    def event(type_: str, reason: str, when: str, **extra) -> dict:
        return {
            "type": type_,
            "reason": reason,
            "message": reason,
            "lastTimestamp": when,
            "involvedObject": {"kind": "Pod", "name": "p"},
            **extra,
        }

    merged = E.merge(
        [
            event("Normal", "Scheduled", "2025-01-01T00:00:09Z"),
            event("Warning", "FailedMount", "2025-01-01T00:00:01Z"),
            event("Warning", "FailedScheduling", "2025-01-01T00:00:05Z"),
            {
                **event("Warning", "BackOff", None),
                "series": {"count": 7, "lastObservedTime": "2025-01-01T00:00:07.000000Z"},
            },
        ]
    )
    assert [e.reason for e in merged] == ["BackOff", "FailedScheduling", "FailedMount", "Scheduled"]
    assert merged[0].count == 7
    assert [e.reason for e in E.merge([event("Normal", "Scheduled", "x")], warnings_only=True)] == []


def test_queue_state_names_the_admission_checks_not_ready():
    from roxxel_launch.backends.kubernetes.status import queue_state

    workload = {
        "status": {
            "conditions": [
                {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "ok"},
                {"type": "Admitted", "status": "False", "reason": "NoChecks", "message": "checks"},
            ],
            "admissionChecks": [
                {
                    "name": "dws-prov",
                    "state": "Pending",
                    "message": "Waiting for resources. Currently there are not enough resources",
                },
                {"name": "ready-check", "state": "Ready", "message": "done"},
            ],
        }
    }
    text = queue_state("q", True, [workload])
    assert text.endswith(
        "; admission check dws-prov: Pending (Waiting for resources. Currently there are not enough resources)"
    )
    assert "ready-check" not in text
