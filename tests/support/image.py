"""The container tier's image names and podman's environment (tests/image)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from support.paths import REPO

PODMAN = shutil.which("podman")
BASE = "localhost/roxxel-base:bookworm"
IMAGE = "localhost/roxxel-test/worker:cpu"
BIN_DIR = Path(sys.executable).parent


def podman_env() -> dict[str, str]:
    """This environment, with podman's settings for a CI machine unless $CONTAINERS_CONF is set."""
    env = dict(os.environ)
    env.setdefault("CONTAINERS_CONF", str(REPO / "docker" / "containers.conf"))
    return env
