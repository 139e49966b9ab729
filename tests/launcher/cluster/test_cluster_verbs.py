"""Every verb of the Kubernetes backend against the real API server, run as a user bound only
to ``k8s/rbac/roxxel-launch-role.yaml``'s Role in the job's namespace (a client certificate
with no group: RBAC denies all else), the kubeconfig context on ``default``: a permission the
Role lacks fails the verb or shows as a warning, and the test fails on either. The controllers
act as on a cluster (the JobSet controller makes and replaces the child Jobs, the Job
controller the pods, the scheduler binds them, kwok runs them); a pod ends when the test
writes its status (:func:`support.control_plane.pods.fail_pod`). kwok writes no container
output: ``logs`` is checked for saying, in the API server's words, why the node did not answer."""

from __future__ import annotations

import json
import logging

import pytest

from support.control_plane.pods import attempt_pods, condition, fail_pod, get, pods_of, wait_running
from support.control_plane.session import user_kubeconfig
from support.launch_cli import launch, write_spec
from support.paths import REPO
from support.specs import spec_dict
from support.wait import wait_for

# Reads the namespaced Role cannot grant (cluster-scoped objects): each is skipped with a line.
CLUSTER_SCOPED_SKIPS = ("customresourcedefinitions", "nodes", "priorityclasses", "API discovery", "fit check")


@pytest.fixture
def launcher_user(kube, namespace, tmp_path, monkeypatch) -> str:
    """The CLI runs as user ``launcher``, bound to the shipped Role in ``namespace`` only."""
    kube.kubectl("apply", "-n", namespace, "-f", str(REPO / "k8s" / "rbac" / "roxxel-launch-role.yaml"))
    kube.kubectl("create", "rolebinding", "roxxel-launch", "-n", namespace, "--role=roxxel-launch", "--user=launcher")
    monkeypatch.setenv("KUBECONFIG", str(user_kubeconfig(kube, "launcher", tmp_path)))
    return namespace


def status(namespace: str) -> dict:
    return json.loads(launch("status", "lm", "-n", namespace, "--json").output)


def test_every_verb_under_exactly_the_shipped_role(kube, launcher_user, tmp_path, caplog):
    ns = launcher_user
    spec = spec_dict(namespace=ns, accelerator={"cpu": {"hosts": 2}}, max_restarts=2, checkpoint_dir="gs://ckpt/lm")
    with caplog.at_level(logging.INFO, "roxxel_launch"):
        launch("submit", write_spec(tmp_path, spec))
        wait_running(kube, ns, "lm", 2)
        listed = json.loads(launch("list", "-n", ns, "--json").output)
        assert [(j["name"], j["state"]) for j in listed] == [("lm", "Running")], listed
        assert status(ns)["state"] == "Running"

        launch("suspend", "lm", "-n", ns)
        wait_for(lambda: not pods_of(kube, ns, "lm"), 60, "the pods gone", interval=0.3)
        wait_for(lambda: status(ns)["state"] == "Suspended", 60, "status Suspended", interval=0.3)
        launch("resume", "lm", "-n", ns)
        wait_running(kube, ns, "lm", 2)

        fail_pod(kube, ns, attempt_pods(kube, ns, "lm", 0)[0]["metadata"]["name"], exit_code=42)
        wait_for(lambda: get(kube, "jobset", "lm", ns)["status"].get("restarts") == 1, 60, "the restart", interval=0.3)
        pods = attempt_pods(kube, ns, "lm", 1)
        assert status(ns)["restarts"] == 1

        # No kubelet answers for kwok's nodes: the API server's 500 says why (the kubelet's port
        # refused the connection, or kwok's node had no address yet), in one line after the retries.
        logs = launch("logs", "lm", "-n", ns, code=1)
        said = logs.output.strip().splitlines()[-1]  # the error line (retry lines may come before it)
        assert said.startswith("Error: ") and "HTTP 500" in said, logs.output
        assert any(p["metadata"]["name"] in said for p in pods), said
        assert "10250" in said or "address" in said, said

        for pod in pods:
            fail_pod(kube, ns, pod["metadata"]["name"], exit_code=0, phase="Succeeded")
        wait_for(
            lambda: condition(get(kube, "jobset", "lm", ns), "Completed"), 60, "the JobSet completed", interval=0.3
        )
        launch("wait", "lm", "-n", ns, "--timeout", "60")
        assert status(ns)["state"] == "Succeeded"

        launch("delete", "lm", "-n", ns)
        wait_for(
            lambda: (
                not json.loads(kube.kubectl("get", "jobsets", "-n", ns, "-o", "json"))["items"]
                and not pods_of(kube, ns, "lm")
            ),
            60,
            "the JobSet and its pods gone (foreground deletion through the garbage collector)",
            interval=0.3,
        )
    unexpected = [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING
        and ("forbidden" in r.getMessage().lower() or "may not" in r.getMessage())
        and not any(s in r.getMessage() for s in CLUSTER_SCOPED_SKIPS)
    ]
    assert not unexpected, unexpected
