"""The cluster tier (``-m cluster``): the Kubernetes backend against a real control plane on
this machine (tests/support/control_plane: the API server, controller manager, scheduler,
JobSet and Kueue controllers built from their Go modules, kwok nodes shaped like GKE node
pools), one per test run, a namespace per test. Without Go and without a cached build, the
tier skips with the reason (``.ci/run`` builds it first)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from support.control_plane import ControlPlane, built
from support.control_plane.session import new_namespace, shared_control_plane


def pytest_collection_modifyitems(items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.cluster)
            item.add_marker(pytest.mark.timeout(300))


@pytest.fixture(scope="session")
def plane(tmp_path_factory) -> ControlPlane:
    if shutil.which("go") is None and built() is None:
        pytest.skip("no Go toolchain and no cached build of the control plane (k8s/cluster/go.mod; .ci/run builds it)")
    with shared_control_plane(tmp_path_factory) as plane:
        yield plane


@pytest.fixture
def kube(plane, tmp_path, monkeypatch) -> ControlPlane:
    """The official client and the CLI pointed at the control plane as its administrator, the
    kubeconfig context's namespace ``default`` (what `gcloud container clusters
    get-credentials` leaves)."""
    from roxxel_launch.backends.kubernetes import retry as kubernetes_retry
    from support.fake_clock import fast_retry

    monkeypatch.setenv("KUBECONFIG", str(plane.kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(kubernetes_retry, "DEFAULT_POLICY", fast_retry())
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "no-google-credentials.json"))
    return plane


@pytest.fixture
def namespace(kube) -> str:
    """A fresh namespace for the test's jobs (not the context's)."""
    return new_namespace(kube)
