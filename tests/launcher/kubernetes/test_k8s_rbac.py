"""The RBAC Role shipped in k8s/rbac/ is enough for every verb of roxxel-launch, and minimal.

No Kubernetes API server runs here: ``tests/support/k8s_fake_server.py`` (real HTTP through
the official client) checks every request against the Role's rules as the RBAC authorizer
does (API group, resource or subresource, verb, resource names). Every command of
``roxxel-launch`` runs through the CLI under exactly that Role (and the optional ClusterRole
for the JobSet CRD, Kueue's WorkloadPriorityClasses, PriorityClasses and the Nodes), and every rule of it must have been used.
"""

from __future__ import annotations

import socket
import sys
import threading
import time

import pytest
import yaml
from click.testing import CliRunner

from roxxel_launch.cli import EXIT_PREEMPTED, EXIT_SUCCEEDED, cli

from support.k8s_fake_server import FakeKubernetes, count_preemptions, use_cluster
from support.paths import REPO
from support.specs import spec_dict

pytestmark = pytest.mark.timeout(120)

NS = "team-a"
ROLE = REPO / "k8s" / "rbac" / "roxxel-launch-role.yaml"
SPEC = spec_dict(
    namespace=NS,
    accelerator={"cpu": {"hosts": 2}},
    num_slices=2,
    queue="team-a-queue",
    workload_priority_class="high",
    priority_class="training",
    checkpoint_dir="gs://ckpt/lm",
    run_name="lm-run-1",
    service_account="trainer",
)


def rules() -> tuple[list[dict], list[dict]]:
    docs = list(yaml.safe_load_all(ROLE.read_text()))
    (role,) = [d for d in docs if d["kind"] == "Role"]
    cluster = [rule for d in docs if d["kind"] == "ClusterRole" for rule in d["rules"]]
    return role["rules"], cluster


def run(*args: str, code: int = 0) -> str:
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert result.exit_code == code, (result.exit_code, result.output)
    assert "forbidden" not in result.output.lower()
    return result.output


def forward_once(name: str) -> None:
    """``port-forward``'s backend call in a thread: one connection through it (the pod serves
    nothing on the port, so the connection just closes: what matters is the RBAC used)."""
    from roxxel_launch.backends.kubernetes.backend import KubernetesBackend

    listening: list[str] = []
    threading.Thread(
        target=KubernetesBackend().port_forward,
        args=(name, 0, 6006),
        kwargs={"on_listen": listening.append},
        daemon=True,
    ).start()
    deadline = time.monotonic() + 30
    while not listening:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    host, port = listening[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        assert conn.recv(1024) == b""


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """The simulated cluster, with Kueue's ``team-a-queue`` and WorkloadPriorityClass ``high``,
    that the CLI talks to (fast retries); the test sets the Role it enforces."""
    with FakeKubernetes(namespace=NS) as fake:
        use_cluster(fake, tmp_path, monkeypatch)
        fake.kueue("team-a-queue", priority_classes=("high",))
        fake.add_priority_class("training")
        yield fake


def test_every_verb_runs_under_exactly_the_shipped_role(fake, tmp_path, monkeypatch):
    """``resume`` needs a stopped JobSet: a preemption ends one only under a rule that counts
    (``count_preemptions``; the rendered rule restarts it in place)."""
    count_preemptions(monkeypatch)
    role, cluster = rules()
    fake.set_role(role, cluster)
    jobset = tmp_path / "lm.yaml"
    jobset.write_text(yaml.safe_dump(SPEC))
    indexed = tmp_path / "ix.yaml"
    indexed.write_text(yaml.safe_dump({**SPEC, "name": "ix", "num_slices": 1, "workload": "indexed-job"}))
    fake.plan("lm", "preempt", "succeed", after=3)  # status reads the JobSet twice (its stored spec)
    run("submit", jobset)
    run("status", "lm")
    assert "lm" in run("list", "--state", "running") and "lm" not in run("list", "--state", "Failed")
    run("status", "lm", "--events")
    fake.log(fake.pods("lm")[0]["metadata"]["name"], "hello")
    run("logs", "lm")
    run("wait", "lm", "--poll", "0.1", code=EXIT_PREEMPTED)
    run("resume", "lm", "--until-done", "--poll", "0.1", code=EXIT_SUCCEEDED)
    run("logs", "lm", "-f", "--all")
    run("delete", "lm")
    fake.fail("POST", "jobs", 422, "injected", reason="Invalid", dry_run=False)
    run("submit", indexed, code=1)  # the Job is refused: the Service is rolled back
    fake.plan("ix", "succeed")
    run("submit", indexed)
    assert fake.get("services", "ix")["metadata"]["ownerReferences"]
    run("wait", "ix", "--poll", "0.1")
    run("delete", "ix")
    for workload in ("jobset", "indexed-job"):  # suspend / resume: jobs without a Kueue queue
        plain = tmp_path / f"{workload}.yaml"
        unqueued = {k: v for k, v in SPEC.items() if k not in ("queue", "workload_priority_class")}
        plain.write_text(yaml.safe_dump({**unqueued, "name": "plain", "num_slices": 1, "workload": workload}))
        run("submit", plain)
        if workload == "jobset":  # a running job: exec and port-forward reach its pods
            assert run("list", "-A").splitlines()[0].startswith("NAMESPACE")  # the optional ClusterRole
            run("exec", "plain", "--", sys.executable, "-c", "pass")
            forward_once("plain")
        assert "suspended plain: state Suspended" in run("suspend", "plain")
        assert "resumed plain: state Running" in run("resume", "plain")
        assert "`resume` cannot continue it" in run("delete", "plain")  # says what it removes
    # Everything is gone but the JobSet controller's restart events: Events outlive their
    # object (the API server's --event-ttl, 1 h by default), as on a cluster.
    assert {k[0] for k in fake.objects} <= {"events"}
    used = fake.rbac_used
    granted = {
        (g, r, v)
        for rule in role + cluster
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    assert used <= granted  # enough (and nothing was refused: see run())
    assert granted <= used, f"rules never used: {sorted(granted - used)}"  # minimal


def test_a_role_without_watch_is_refused_by_the_fake_and_wait_falls_back_to_polling(fake, tmp_path, caplog):
    """The double really enforces the Role: without `watch`, the watch is 403 and `wait`
    polls instead (one warning), still ending with the right exit code."""
    role, cluster = rules()
    for rule in role:
        rule["verbs"] = [v for v in rule["verbs"] if v != "watch"]
    fake.set_role(role, cluster)
    fake.plan("lm", "succeed")
    spec = tmp_path / "lm.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    run("submit", spec)
    result = CliRunner().invoke(cli, ["wait", "lm", "--poll", "0.1"])
    assert result.exit_code == EXIT_SUCCEEDED, result.output
    warnings = [r.getMessage() for r in caplog.records if "cannot watch lm" in r.getMessage()]
    assert len(warnings) == 1 and "polling every 0.1 s" in warnings[0]
    assert "kubectl auth can-i watch jobsets.jobset.x-k8s.io -n team-a" in warnings[0]
