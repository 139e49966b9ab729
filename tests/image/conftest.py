"""The worker image of the container tier: built once per test run from this tree on the
local Debian base (docker/make-base.sh: cached, skipped when the base exists) with
`roxxel-launch image build`. Every pytest-xdist worker that needs it runs the build under one
lock: the first builds, the others find podman's layer cache warm (seconds)."""

from __future__ import annotations

import subprocess

import pytest

from roxxel_launch.backends.local import containers
from support.image import BASE, BIN_DIR, IMAGE, PODMAN, RUNTIMES, docker_has, podman_env
from support.paths import REPO
from support.shared import made_once


@pytest.fixture(scope="session")
def worker_image(tmp_path_factory) -> str:
    """The cpu worker image built from this tree (tagged :data:`IMAGE`); its build output."""
    if PODMAN is None:
        pytest.skip("podman is not installed (apt-get install podman iptables runc mmdebstrap); .ci/run installs it")
    with made_once(tmp_path_factory, "worker-image"):
        make_base = subprocess.run(
            [str(REPO / "docker" / "make-base.sh"), BASE],
            capture_output=True,
            text=True,
            timeout=1200,
            env=podman_env(),
        )
        assert make_base.returncode == 0, f"docker/make-base.sh failed:\n{make_base.stdout}\n{make_base.stderr}"
        build = subprocess.run(
            [str(BIN_DIR / "roxxel-launch"), "image", "build", "--engine", "podman", "--base", BASE, "--tag", IMAGE],
            capture_output=True,
            text=True,
            timeout=2400,
            env=podman_env(),
            cwd=REPO,
        )
    assert build.returncode == 0, f"roxxel-launch image build failed:\n{build.stdout[-5000:]}\n{build.stderr[-5000:]}"
    return build.stdout


@pytest.fixture(scope="session", params=RUNTIMES)
def runtime(request, worker_image, tmp_path_factory) -> str:
    """Each container runtime of ``submit --local --runtime`` in turn, with the worker image
    (and the base, which lacks the pods' entrypoint) in its store: podman, where the image is
    built; docker where its daemon answers (.ci/run installs docker.io and starts dockerd),
    otherwise skipped with the reason."""
    if request.param == "docker":
        reason = containers.unavailable_reason("docker")
        if reason is not None:
            pytest.skip(f"--runtime docker: {reason}")
        with made_once(tmp_path_factory, "docker-images"):
            docker_has(IMAGE, BASE)
    return request.param
