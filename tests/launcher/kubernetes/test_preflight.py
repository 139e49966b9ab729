"""The submit-time hint for TPU multislice jobs that mount GCS FUSE (backends/kubernetes/preflight.py).

A render cannot see the cluster, so such a job stays on the pod network by default; at submit
the API server's ``/version`` tells whether GKE's GCS FUSE driver serves host-network pods
(GKE 1.33.3-gke.1226000+, the driver's docs/releases.md), and one warning names
``host_network: true``. The API is a stand-in answering the ``json`` read as the official
client's ``VersionApi.get_code`` would (a ``gitVersion`` as GKE's API servers report it).
"""

import logging

import pytest

from roxxel_launch.backends.base import BackendError
from roxxel_launch.backends.kubernetes.preflight import (
    check_gcsfuse_host_network,
    check_multislice_network,
    cluster_version,
    gke_version,
)
from support.specs import TPU_V5P, job_spec

GCSFUSE = {"gcsfuse": {"bucket": "my-data"}}


class VersionOnly:
    api_client = None

    def __init__(self, answer):
        self.answer = answer

    def json(self, action, kind, name, namespace, fn, *args, **kwargs):
        assert (action, kind) == ("read", "Version") and fn.__name__ == "get_code"
        if isinstance(self.answer, Exception):
            raise self.answer
        return {"gitVersion": self.answer}


def test_gke_versions_are_read_with_their_build():
    assert gke_version("v1.33.5-gke.1080000") == (1, 33, 5, 1080000)
    assert gke_version("v1.31.2") == (1, 31, 2, 0)
    assert gke_version("garbage") is None


@pytest.mark.parametrize(
    "version,warned",
    [
        ("v1.33.3-gke.1226000", True),
        ("v1.34.1-gke.100", True),
        ("v1.33.3-gke.1225999", False),
        ("v1.32.9-gke.9999999", False),
        ("unparsable", False),
        (BackendError("403 Forbidden"), False),
    ],
)
def test_a_multislice_gcsfuse_job_is_told_when_the_cluster_serves_host_network_mounts(caplog, version, warned):
    spec = job_spec(accelerator=TPU_V5P, num_slices=2, data=GCSFUSE)
    assert not spec.uses_host_network  # the render's default
    with caplog.at_level(logging.INFO, "roxxel_launch"):
        check_multislice_network(spec, cluster_version(VersionOnly(version)))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert bool(warnings) == warned, warnings
    if warned:
        (line,) = warnings
        assert "set host_network: true" in line and "pod network" in line and str(version) in line


@pytest.mark.parametrize(
    "fields",
    [
        {"num_slices": 1, "data": GCSFUSE},
        {"num_slices": 2},
        {"num_slices": 2, "data": GCSFUSE, "host_network": False},
        {"num_slices": 2, "data": GCSFUSE, "host_network": True},
    ],
)
def test_nothing_is_said_where_the_network_is_settled(caplog, fields):
    spec = job_spec(accelerator=TPU_V5P, **fields)
    with caplog.at_level(logging.INFO, "roxxel_launch"):
        check_multislice_network(spec, "v1.34.1-gke.100")
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


@pytest.mark.parametrize("git_version,warned", [("v1.33.5-gke.1080000", True), ("v1.32.4-gke.1000", False)])
def test_submit_to_a_simulated_gke_cluster_says_it_once(tmp_path, monkeypatch, caplog, git_version, warned):
    """Through the simulated API server (tests/support/k8s_sim), whose /version answers as a GKE
    cluster's: the submit goes through, with the line or without it."""
    from roxxel_launch.backends.kubernetes import backend as K
    from support.fake_clock import FakeClock, fast_retry
    from support.k8s_fake_server import FakeKubernetes, use_cluster

    with FakeKubernetes(namespace="ml") as server:
        use_cluster(server, tmp_path, monkeypatch, fast_retry(FakeClock()))
        server._real.git_version = git_version
        spec = job_spec(namespace="ml", accelerator=TPU_V5P, num_slices=2, data=GCSFUSE, checkpoint_dir="gs://ckpt/lm")
        with caplog.at_level(logging.INFO, "roxxel_launch"), K.KubernetesBackend(retry=fast_retry(FakeClock())) as b:
            b.submit(spec)
        assert server.get("jobsets", "lm") is not None
    lines = [r.getMessage() for r in caplog.records if "set host_network: true" in r.getMessage()]
    assert len(lines) == (1 if warned else 0), lines


def test_every_check_of_a_submit_asks_the_spec_namespace_not_the_contexts(tmp_path, monkeypatch, caplog):
    """With a kubeconfig context on ``default`` (what `gcloud container clusters get-credentials`
    leaves) and a spec for ``ml`` (the docs' examples), every namespaced request of the submit,
    the LocalQueue lookup and the pod-admission dry run among them, goes to ``ml``: before the
    fix the dry run asked ``default`` for the ServiceAccount and the queue was read there."""
    from roxxel_launch.backends.kubernetes import backend as K
    from support.fake_clock import FakeClock, fast_retry
    from support.k8s_fake_server import FakeKubernetes, use_cluster

    with FakeKubernetes(namespace="default") as server:
        use_cluster(server, tmp_path, monkeypatch, fast_retry(FakeClock()))
        server.kueue("team-a")
        server.set_service_accounts("trainer")
        spec = job_spec(namespace="ml", queue="team-a", service_account="trainer", checkpoint_dir="gs://ckpt/lm")
        with caplog.at_level(logging.INFO, "roxxel_launch"), K.KubernetesBackend(retry=fast_retry(FakeClock())) as b:
            b.submit(spec)
        namespaced = [r.path for r in server.calls() if "/namespaces/" in r.path]
    assert any("/localqueues/team-a" in p for p in namespaced)
    assert any(r.query.get("dryRun") == "All" and r.path.endswith("/pods") for r in server.calls("POST"))
    assert namespaced and all("/namespaces/ml/" in p for p in namespaced), namespaced
    assert any("checking the cluster in namespace ml" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    "version,refused",
    [
        ("v1.33.3-gke.1225999", True),
        ("v1.32.9-gke.1000", True),
        ("v1.33.3-gke.1226000", False),
        ("v1.34.0-gke.100", False),
        ("v1.30.0", False),  # not GKE: not judged
        (None, False),  # unreadable
    ],
)
def test_host_network_gcsfuse_needs_the_gke_version_whose_driver_serves_it(version, refused):
    """GCS FUSE serves host-network pods from GKE 1.33.3-gke.1226000 (the driver's releases);
    before it the flagship TPU example's pods (host network + data.gcsfuse) would stay in
    ContainerCreating with FailedMount, so submit refuses, naming both fixes."""
    spec = job_spec(accelerator=TPU_V5P, num_slices=2, data=GCSFUSE, host_network=True, checkpoint_dir="gs://ckpt/lm")
    if not refused:
        check_gcsfuse_host_network(spec, version)
        return
    with pytest.raises(BackendError) as info:
        check_gcsfuse_host_network(spec, version)
    text = str(info.value)
    assert "1.33.3-gke.1226000" in text and version in text and "set host_network: false" in text.lower(), text
    assert "Nothing was created" in text and "\n" not in text


def test_pod_network_gcsfuse_is_not_gated():
    spec = job_spec(accelerator=TPU_V5P, num_slices=2, data=GCSFUSE, host_network=False, checkpoint_dir="gs://ckpt/lm")
    check_gcsfuse_host_network(spec, "v1.30.1-gke.1")
