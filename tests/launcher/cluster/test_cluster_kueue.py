"""Kueue's decisions as the real controller makes them, read by ``status``: a queued JobSet is
created suspended (Kueue's JobSet webhook), admitted as a whole when its ClusterQueue has the
quota (then unsuspended: the pods start), evicted by suspending it (here by deactivating its
Workload, ``spec.active: false``, as ``kubectl patch`` or Kueue's own waitForPodsReady would),
and re-admitted when it may run again: a new attempt, counted from the Workload's
``status.schedulingStats.evictions``."""

from __future__ import annotations

import json

from support.control_plane import objects
from support.control_plane.pods import pods_of, wait_running
from support.launch_cli import launch, write_spec
from support.specs import spec_dict
from support.wait import wait_for

QUEUE = "team-a"


def status(namespace: str) -> dict:
    return json.loads(launch("status", "lm", "-n", namespace, "--json").output)


def workload(plane, namespace: str) -> str:
    items = json.loads(plane.kubectl("get", "workloads.kueue.x-k8s.io", "-n", namespace, "-o", "json"))["items"]
    (only,) = items
    return only["metadata"]["name"]


def test_admission_eviction_and_readmission_are_attempts(kube, namespace, tmp_path):
    objects.kueue_queue(kube, namespace, QUEUE)
    spec = spec_dict(namespace=namespace, queue=QUEUE, accelerator={"cpu": {"hosts": 2}}, checkpoint_dir="gs://ckpt/lm")
    launch("submit", write_spec(tmp_path, spec))
    wait_running(kube, namespace, "lm", 2)
    admitted = status(namespace)
    assert admitted["state"] == "Running" and admitted["message"].endswith(f"queue {QUEUE}: admitted"), admitted

    name = workload(kube, namespace)
    kube.kubectl(
        "patch", "workloads.kueue.x-k8s.io", name, "-n", namespace, "--type=merge", "-p", '{"spec":{"active":false}}'
    )
    wait_for(lambda: not pods_of(kube, namespace, "lm"), 60, "the pods deleted by the eviction", interval=0.3)
    evicted = wait_for(
        lambda: (s := status(namespace))["state"] == "Suspended" and s, 60, "status Suspended", interval=0.3
    )
    assert f"queue {QUEUE}: evicted" in evicted["message"] and "eviction 1 ended attempt 1" in evicted["message"], (
        evicted
    )

    kube.kubectl(
        "patch", "workloads.kueue.x-k8s.io", name, "-n", namespace, "--type=merge", "-p", '{"spec":{"active":true}}'
    )
    wait_running(kube, namespace, "lm", 2)
    again = wait_for(lambda: (s := status(namespace))["state"] == "Running" and s, 60, "status Running", interval=0.3)
    assert "attempt 2, re-admitted after eviction 1" in again["message"], again
    assert again["restarts"] == 0  # the JobSet's own count: Kueue's suspend is not a restart


def test_a_job_over_its_cluster_queue_quota_waits_suspended(kube, namespace, tmp_path):
    """Kueue admits the gang as a whole or not at all: with quota for 1 of the 2 hosts' cpu,
    no pod is created and status says the job is queued."""
    objects.kueue_queue(kube, namespace, QUEUE, quota={"cpu": "1", "memory": "100Gi"})
    spec = spec_dict(
        namespace=namespace,
        queue=QUEUE,
        accelerator={"cpu": {"hosts": 2}},
        resources={"requests": {"cpu": "1", "memory": "1Gi"}},
        checkpoint_dir="gs://ckpt/lm",
    )
    launch("submit", write_spec(tmp_path, spec))
    queued = wait_for(
        lambda: (s := status(namespace))["state"] == "Suspended" and s, 60, "status Suspended", interval=0.3
    )
    assert f"queue {QUEUE}" in queued["message"], queued
    assert not pods_of(kube, namespace, "lm")
