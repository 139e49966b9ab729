"""The submit's checks against the real API server and its admission chain, with the
kubeconfig context on ``default`` and the job's spec naming another namespace (as a GKE user's
`get-credentials` context and the docs' ``namespace: ml``): each refusal names the spec's
namespace and its fix, and nothing is created. Before the fix of the namespace bug the
ServiceAccount and the LocalQueue were looked up in ``default``."""

from __future__ import annotations

import json

import pytest

from support.control_plane import objects
from support.launch_cli import launch, write_spec
from support.specs import spec_dict

V5E_4X4 = {"tpu": {"type": "v5e", "topology": "4x4"}}


def nothing_created(plane, namespace: str) -> None:
    for kind in ("jobsets", "jobs", "pods", "services"):
        assert json.loads(plane.kubectl("get", kind, "-n", namespace, "-o", "json"))["items"] == [], kind


def refused(tmp_path, spec: dict) -> str:
    result = launch("submit", write_spec(tmp_path, spec), code=1)
    return result.output


def test_a_missing_service_account_is_named_in_the_specs_namespace(kube, namespace, tmp_path):
    output = refused(
        tmp_path, spec_dict(namespace=namespace, service_account="roxxel-trainer", checkpoint_dir="gs://ckpt/lm")
    )
    assert f"kubectl create serviceaccount roxxel-trainer -n {namespace}" in output, output
    assert "-n default" not in output
    nothing_created(kube, namespace)
    objects.service_account(kube, namespace, "roxxel-trainer")
    launch(
        "submit",
        write_spec(
            tmp_path, spec_dict(namespace=namespace, service_account="roxxel-trainer", checkpoint_dir="gs://ckpt/lm")
        ),
    )


def test_a_namespace_whose_pod_security_forbids_the_tpu_pods_refuses_them(kube, namespace, tmp_path):
    """A multislice TPU job on the host network in a namespace that enforces ``baseline``: the
    real PodSecurity admission plugin refuses the dry-run pod (host namespaces)."""
    kube.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=baseline")
    spec = spec_dict(
        namespace=namespace,
        accelerator={"tpu": {"type": "v5p", "topology": "2x2x4"}},
        num_slices=2,
        host_network=True,
        checkpoint_dir="gs://ckpt/lm",
    )
    output = refused(tmp_path, spec)
    assert "PodSecurity" in output or "pod-security" in output, output
    assert f"kubectl get namespace {namespace}" in output, output
    nothing_created(kube, namespace)


def test_a_local_queue_is_looked_up_in_the_specs_namespace(kube, namespace, tmp_path):
    """``team-a`` exists in ``default`` (the context's namespace) but not in the job's: refused,
    naming the job's namespace (before the fix it passed, and the job waited suspended for ever)."""
    objects.kueue_queue(kube, "default", "team-a")
    output = refused(tmp_path, spec_dict(namespace=namespace, queue="team-a", checkpoint_dir="gs://ckpt/lm"))
    assert f"no LocalQueue 'team-a' in namespace {namespace}" in output, output
    nothing_created(kube, namespace)


@pytest.mark.parametrize("chips,fits", [(8, False), (16, True)])
def test_a_gang_over_its_quota_is_refused_before_anything_is_created(kube, namespace, tmp_path, chips, fits):
    """A v5e 4x4 slice is 4 pods of 4 chips. With ``requests.google.com/tpu: 8`` each pod alone
    passes admission (the dry run of one pod), so without the gang check two pods would start
    and hold their chips while the other two are refused by quota."""
    objects.resource_quota(kube, namespace, {"requests.google.com/tpu": str(chips)})
    spec = spec_dict(namespace=namespace, accelerator=V5E_4X4, checkpoint_dir="gs://ckpt/lm")
    if fits:
        launch("submit", write_spec(tmp_path, spec))
        return
    output = refused(tmp_path, spec)
    assert "need 16 of requests.google.com/tpu" in output and "has 8 left" in output, output
    assert f"kubectl describe resourcequota quota -n {namespace}" in output, output
    nothing_created(kube, namespace)
