"""The container tier's image names, podman's environment and the runtimes it runs pods with (tests/image)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from support.paths import REPO

PODMAN = shutil.which("podman")
BASE = "localhost/roxxel-base:bookworm"
IMAGE = "localhost/roxxel-test/worker:cpu"
BIN_DIR = Path(sys.executable).parent
RUNTIMES = ("podman", "docker")
"""The container runtimes of ``submit --local --runtime``: the tier's launcher tests run on each
(podman always, where the image is built; docker where its daemon answers, with the image
moved from podman's store into docker's: :func:`docker_has`)."""


def podman_env() -> dict[str, str]:
    """This environment, with podman's settings for a CI machine unless $CONTAINERS_CONF is set."""
    env = dict(os.environ)
    env.setdefault("CONTAINERS_CONF", str(REPO / "docker" / "containers.conf"))
    return env


def engine(runtime: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """``runtime``'s command (podman with this tier's settings, or docker), output captured."""
    return subprocess.run([runtime, *args], capture_output=True, text=True, timeout=timeout, env=podman_env())


def _image_id(runtime: str, image: str) -> str:
    said = engine(runtime, "image", "inspect", "--format", "{{.Id}}", image).stdout.strip()
    return said.removeprefix("sha256:")


def docker_has(*images: str) -> None:
    """Puts podman's ``images`` into docker's store (``podman save | docker load``, ~40 s for the
    worker image) unless docker has them already, the same image id; fails in one line otherwise."""
    for image in images:
        want = _image_id("podman", image)
        assert want, f"{image} is not in podman's store"
        if _image_id("docker", image) == want:
            continue
        save = subprocess.Popen(["podman", "save", image], stdout=subprocess.PIPE, env=podman_env())
        try:
            load = subprocess.run(["docker", "load"], stdin=save.stdout, capture_output=True, text=True, timeout=600)
        finally:
            save.stdout.close()
            if save.poll() is None:
                save.kill()
            save.wait(timeout=60)
        assert load.returncode == 0, f"`podman save {image} | docker load` failed: {load.stderr[-2000:]}"
        assert _image_id("docker", image) == want, f"docker load gave {image} another id: {load.stdout}"
