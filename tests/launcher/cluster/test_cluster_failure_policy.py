"""How the real Job and JobSet controllers apply the failure policy roxxel-launch renders,
observed rather than asserted: a worker pod is failed by patching its status as a kubelet
reports it (kwok runs no container, so the exit code is written, not produced), and the tests
read what the Job controller (kube-controller-manager's ``podFailurePolicy``) and the JobSet
controller (``failurePolicy.rules``, ``maxRestarts``) decided.

- exit 42 (the worker's "preempted, checkpoint saved") and a ``DisruptionTarget`` condition
  (a node drain or Spot reclaim) restart the gang without counting against ``max_restarts``;
- exit 78 (a configuration error) fails the JobSet at once;
- any other failure counts, and the JobSet fails after ``max_restarts`` restarts.
"""

from __future__ import annotations

import json

from support.control_plane.pods import attempt_pods, condition, fail_pod, get, wait_running
from support.launch_cli import launch, write_spec
from support.specs import spec_dict
from support.wait import wait_for


def jobset(plane, namespace: str, name: str) -> dict:
    return get(plane, "jobset", name, namespace)


def submit(tmp_path, namespace: str, max_restarts: int = 1) -> None:
    spec = spec_dict(
        namespace=namespace, accelerator={"cpu": {"hosts": 2}}, max_restarts=max_restarts, checkpoint_dir="gs://ckpt/lm"
    )
    launch("submit", write_spec(tmp_path, spec))


def failed(obj: dict) -> dict | None:
    return condition(obj, "Failed")


def test_preemptions_restart_the_gang_without_counting(kube, namespace, tmp_path):
    submit(tmp_path, namespace, max_restarts=1)
    wait_running(kube, namespace, "lm", 2)
    for attempt, (code, disruption) in enumerate([(42, False), (143, True), (42, False)]):
        pod = attempt_pods(kube, namespace, "lm", attempt)[0]["metadata"]["name"]
        fail_pod(kube, namespace, pod, exit_code=code, disruption=disruption)
        status = wait_for(
            lambda: (s := jobset(kube, namespace, "lm")["status"]).get("restarts") == attempt + 1 and s,
            60,
            f"restart {attempt + 1}",
            interval=0.3,
        )
        assert status.get("restartsCountTowardsMax", 0) == 0, status
    attempt_pods(kube, namespace, "lm", 3)
    assert failed(jobset(kube, namespace, "lm")) is None


def test_a_configuration_error_fails_the_jobset_at_once(kube, namespace, tmp_path):
    submit(tmp_path, namespace, max_restarts=5)
    pod = attempt_pods(kube, namespace, "lm", 0)[0]["metadata"]["name"]
    fail_pod(kube, namespace, pod, exit_code=78)
    condition = wait_for(
        lambda: failed(jobset(kube, namespace, "lm")), 60, "the JobSet's Failed condition", interval=0.3
    )
    assert jobset(kube, namespace, "lm")["status"].get("restarts", 0) == 0
    assert condition["reason"] == "FailJobSetFailurePolicyAction", condition
    status = json.loads(launch("status", "lm", "-n", namespace, "--json").output)
    assert status["state"] == "Failed", status
    assert "78" in status.get("message", "") or "configuration" in status.get("message", "").lower(), status


def test_other_failures_count_until_max_restarts(kube, namespace, tmp_path):
    submit(tmp_path, namespace, max_restarts=1)
    pod = attempt_pods(kube, namespace, "lm", 0)[0]["metadata"]["name"]
    fail_pod(kube, namespace, pod, exit_code=1)
    status = wait_for(
        lambda: (s := jobset(kube, namespace, "lm")["status"]).get("restarts") == 1 and s, 60, "restart 1", interval=0.3
    )
    assert status.get("restartsCountTowardsMax") == 1, status
    pod = attempt_pods(kube, namespace, "lm", 1)[0]["metadata"]["name"]
    fail_pod(kube, namespace, pod, exit_code=1)
    condition = wait_for(
        lambda: failed(jobset(kube, namespace, "lm")), 60, "the JobSet's Failed condition", interval=0.3
    )
    assert condition["reason"] == "ReachedMaxRestarts", condition
    assert jobset(kube, namespace, "lm")["status"].get("restarts") == 1
