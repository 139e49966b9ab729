"""One control plane per test run, shared by its pytest-xdist workers, and a namespace per test.

The first worker that needs the cluster starts it (building first when the build is not
cached) under the run's lock (:func:`support.shared.made_once`); each worker that uses it
leaves a file named after its process id in ``control-plane.users/``; the last worker to finish
stops it. A worker that died leaves a file whose process is gone, which does not count.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import yaml

from support.shared import made_once

from . import pki
from .build import build
from .cluster import ControlPlane


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@contextlib.contextmanager
def shared_control_plane(tmp_path_factory) -> Iterator[ControlPlane]:
    """The run's control plane, started on first use; stopped when its last user leaves."""
    with made_once(tmp_path_factory, "control-plane") as state:
        plane = ControlPlane.load(state)
        if plane is None or not plane.running():
            if plane is not None:
                plane.stop()
            shutil.rmtree(state, ignore_errors=True)
            plane = ControlPlane(state, build())
            plane.start()
        users = state.parent / "control-plane.users"
        users.mkdir(exist_ok=True)
        me = users / str(os.getpid())
        me.touch()
    try:
        yield plane
    finally:
        with made_once(tmp_path_factory, "control-plane"):
            me.unlink(missing_ok=True)
            if not any(_alive(int(p.name)) for p in users.iterdir() if p.name.isdigit()):
                plane.stop()


def new_namespace(plane: ControlPlane, *, labels: dict[str, str] | None = None) -> str:
    """A fresh namespace (``t-`` and 8 hex digits), with these labels, and its ``default``
    ServiceAccount made (the ServiceAccount admission plugin refuses pods before it exists)."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    plane.apply(
        [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}], name=name
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if plane.kubectl_ok("get", "serviceaccount", "default", "-n", name):
            return name
        time.sleep(0.2)
    raise TimeoutError(f"namespace {name}: the service-account controller made no default ServiceAccount")


def user_kubeconfig(plane: ControlPlane, user: str, directory: Path, *, namespace: str = "default") -> Path:
    """A kubeconfig for ``user`` (a client certificate with that CN and no group), its context
    in ``namespace``: a user with no permission but those bound to it."""
    certs = plane.state / "pki"
    if not (certs / f"user-{user}.crt").exists():
        pki.make_leaf(certs, f"user-{user}", common_name=user)
    config = yaml.safe_load(plane.kubeconfig.read_text())
    config["users"] = [
        {
            "name": user,
            "user": {
                "client-certificate": str(certs / f"user-{user}.crt"),
                "client-key": str(certs / f"user-{user}.key"),
            },
        }
    ]
    config["contexts"][0]["context"].update(user=user, namespace=namespace)
    path = directory / f"kubeconfig-{user}"
    path.write_text(yaml.safe_dump(config))
    return path
