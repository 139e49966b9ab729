"""Every ``k8s/examples/`` spec submitted to the real control plane as its comment says (the
namespace's ServiceAccount, PriorityClass, Kueue queue, claim and Pod Security level made as
docs/run-on-gke.md describes), with the kubeconfig context on ``default`` and the job in a
namespace of its own: the JobSet controller makes its child Jobs, Kueue admits the gang, the
scheduler binds every worker pod to a node of the matching GKE-shaped pool, and kwok runs them
(Running; no container runs, so nothing is said of the workers' output)."""

from __future__ import annotations

import json
from collections import defaultdict

from support.control_plane import objects
from support.control_plane.pods import node_labels, wait_running
from support.launch_cli import launch
from support.paths import REPO

EXAMPLES = REPO / "k8s" / "examples"


def test_the_tpu_multislice_example_runs_each_slice_on_a_v5p_pool_of_its_own(kube, namespace):
    kube.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=privileged")
    objects.priority_class(kube, "training")
    objects.service_account(kube, namespace, "roxxel-trainer")
    objects.kueue_queue(kube, namespace, "team-a")
    launch("submit", EXAMPLES / "tpu-v5p-multislice.yaml", "--set", f"namespace={namespace}")
    pods = wait_running(kube, namespace, "lm-v5p", 8)
    labels = node_labels(kube)
    pools_by_slice = defaultdict(set)
    for pod in pods:
        node = labels[pod["spec"]["nodeName"]]
        assert node["cloud.google.com/gke-tpu-accelerator"] == "tpu-v5p-slice"
        assert node["cloud.google.com/gke-tpu-topology"] == "2x2x4"
        job_index = pod["metadata"]["labels"]["jobset.sigs.k8s.io/job-index"]
        pools_by_slice[job_index].add(node["cloud.google.com/gke-nodepool"])
    # JobSet's exclusive placement: each slice (child Job) fills one node pool, a pool per slice.
    assert all(len(p) == 1 for p in pools_by_slice.values()), pools_by_slice
    assert len(set.union(*pools_by_slice.values())) == 2, pools_by_slice
    status = json.loads(launch("status", "lm-v5p", "--json").output)
    assert status["state"] == "Running", status


def test_the_gpu_example_runs_on_the_a3_high_nodes(kube, namespace):
    kube.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=privileged")
    objects.service_account(kube, namespace, "roxxel-trainer")
    objects.nfs_claim(kube, namespace, "datasets")
    launch("submit", EXAMPLES / "gpu-h100-nfs.yaml", "--set", f"namespace={namespace}")
    pods = wait_running(kube, namespace, "lm-h100", 2)
    labels = node_labels(kube)
    assert {labels[p["spec"]["nodeName"]]["node.kubernetes.io/instance-type"] for p in pods} == {"a3-highgpu-8g"}
    assert len({p["spec"]["nodeName"] for p in pods}) == 2  # one host each


def test_the_cpu_example_runs_on_the_cpu_pool(kube, namespace):
    launch("submit", EXAMPLES / "cpu-smoke.yaml", "--set", f"namespace={namespace}")
    pods = wait_running(kube, namespace, "roxxel-smoke", 2)
    labels = node_labels(kube)
    assert {labels[p["spec"]["nodeName"]]["cloud.google.com/gke-nodepool"] for p in pods} == {
        "cpu"
    }  # the only pool without a taint
