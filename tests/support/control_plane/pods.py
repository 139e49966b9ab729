"""Reading and driving the worker pods of a job on the control plane: kwok runs no container,
so a test ends a pod by writing its status as the kubelet would report it."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

from support.wait import wait_for

from .cluster import ControlPlane


def get(plane: ControlPlane, kind: str, name: str, namespace: str) -> dict:
    return json.loads(plane.kubectl("get", kind, name, "-n", namespace, "-o", "json"))


def pods_of(plane: ControlPlane, namespace: str, job: str) -> list[dict]:
    """The pods of JobSet ``job`` (label ``jobset.sigs.k8s.io/jobset-name``)."""
    out = plane.kubectl("get", "pods", "-n", namespace, "-l", f"jobset.sigs.k8s.io/jobset-name={job}", "-o", "json")
    return json.loads(out)["items"]


def wait_running(plane: ControlPlane, namespace: str, job: str, count: int, timeout: float = 90) -> list[dict]:
    """The job's ``count`` pods once all are Running (AssertionError with their phases and the
    namespace's events after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        pods = pods_of(plane, namespace, job)
        if len(pods) == count and all(p["status"].get("phase") == "Running" for p in pods):
            return pods
        if time.monotonic() > deadline:
            phases = {p["metadata"]["name"]: p["status"].get("phase") for p in pods}
            events = plane.kubectl("get", "events", "-n", namespace, "--sort-by=.lastTimestamp")
            raise AssertionError(f"{job}: {len(pods)}/{count} pods, not all Running: {phases}\n{events}")
        time.sleep(0.5)


def attempt_pods(plane: ControlPlane, namespace: str, job: str, attempt: int, timeout: float = 60) -> list[dict]:
    """The Running pods of the JobSet's restart attempt ``attempt`` (label
    ``jobset.sigs.k8s.io/restart-attempt``), once there is one."""
    return wait_for(
        lambda: (
            [
                p
                for p in pods_of(plane, namespace, job)
                if p["metadata"]["labels"].get("jobset.sigs.k8s.io/restart-attempt") == str(attempt)
                and p["status"].get("phase") == "Running"
            ]
            or None
        ),
        timeout,
        f"the pods of attempt {attempt} of {job}",
        interval=0.3,
    )


def node_labels(plane: ControlPlane) -> dict[str, dict[str, str]]:
    """Every node's labels, by node name."""
    items = json.loads(plane.kubectl("get", "nodes", "-o", "json"))["items"]
    return {n["metadata"]["name"]: n["metadata"]["labels"] for n in items}


def fail_pod(
    plane: ControlPlane, namespace: str, pod: str, *, exit_code: int, disruption: bool = False, phase: str = "Failed"
) -> None:
    """Writes the pod's status as the kubelet reports a worker container that exited with
    ``exit_code`` (phase ``phase``: Failed, or Succeeded for an exit 0), and with ``disruption``
    the ``DisruptionTarget`` condition the control plane adds to a pod it evicts or preempts."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    terminated = {
        "exitCode": exit_code,
        "reason": "Completed" if exit_code == 0 else "Error",
        "startedAt": now,
        "finishedAt": now,
    }
    status: dict = {
        "phase": phase,
        "containerStatuses": [
            {
                "name": "worker",
                "image": "img",
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {"terminated": terminated},
            }
        ],
    }
    if disruption:
        status["conditions"] = [
            {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet", "lastTransitionTime": now}
        ]
    patch = json.dumps({"status": status})
    plane.kubectl("patch", "pod", pod, "-n", namespace, "--subresource=status", "--type=merge", "-p", patch)


def condition(obj: dict, kind: str) -> dict | None:
    """``obj``'s condition of type ``kind`` when its status is True, else None."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == kind and c.get("status") == "True"), None)
