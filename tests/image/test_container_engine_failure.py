"""A container the engine cannot start (``submit --local --runtime podman``, and ``docker``
where its daemon answers; the container tier): the engine's own failure (exit 125-127 before the program ran, here an image without the
pods' entrypoint ``roxxel-worker``: the base image) fails the job once, as a configuration error, with podman's words and the fix;
it is not restarted. And the launcher gives podman the project's settings itself where this
machine needs them (before: without ``CONTAINERS_CONF=docker/containers.conf`` every attempt
failed at runc, "error setting rlimit type 7", and was restarted 3 times to the same error).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from support.container_job import launch, status
from support.image import BASE, IMAGE, podman_env
from support.paths import REPO

pytestmark = [pytest.mark.slow, pytest.mark.container, pytest.mark.timeout(1200)]


def _spec(tmp_path, name: str, command: list[str], image: str = IMAGE) -> str:
    data = {
        "apiVersion": "roxxel.dev/v1alpha1",
        "kind": "RoxxelJob",
        "name": name,
        "image": image,
        "command": command,
        "accelerator": {"cpu": {"hosts": 1}},
        "checkpoint_dir": str(tmp_path / name / "checkpoints"),
        "max_restarts": 2,
        "termination_grace_period": 5,
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_an_image_without_the_entrypoint_fails_once_in_the_engines_words(runtime, tmp_path):
    """(A command the worker image lacks is the worker's own configuration error, exit 78:
    roxxel-worker ran and said so; the engine fails where the entrypoint itself is missing.
    Both engines end 127, command not found, as `podman run` and `docker run` give it; their
    `start --attach` said 125 (podman) and 1 (docker, which ran it as the program's exit):
    found by this test.)"""
    spec = _spec(tmp_path, "nocmd", ["python", "-c", "print('never')"], image=BASE)
    out = launch(tmp_path, "submit", spec, "--local", "--runtime", runtime, check=None)
    record = status(tmp_path, "nocmd")
    assert out.returncode != 0 and record["state"] == "Failed", f"{out.stdout[-2000:]}\n{out.stderr[-2000:]}"
    assert record["reason"] == "config_error" and record["restarts"] == 0 and len(record["attempts"]) == 1, record
    assert record["attempts"][0]["reasons"] == {"0": "EngineError"}, record
    message = record["message"]
    assert "\n" not in message and f"{runtime} could not start the container (exit 127" in message, message
    assert record["exit_code"] == 127, record
    assert "roxxel-worker" in message and "the image lacks the command named" in message, message


def test_podman_runs_without_exported_settings(worker_image, tmp_path):
    """No CONTAINERS_CONF in the environment: the launcher gives podman docker/containers.conf
    where this machine needs it (root without systemd or CAP_SYS_RESOURCE), else podman's
    defaults work; either way the container runs."""
    env = {k: v for k, v in podman_env().items() if k != "CONTAINERS_CONF" and not k.startswith(("JOB", "TPU_"))}
    spec = _spec(tmp_path, "plain", ["python", "-c", "print('ran in the container')"])
    out = subprocess.run(
        [sys.executable, "-m", "roxxel_launch.cli", "submit", spec, "--local", "--runtime", "podman"],
        cwd=REPO,
        env=dict(env, ROXXEL_LOCAL_ROOT=str(tmp_path / "local")),
        capture_output=True,
        text=True,
        timeout=600,
    )
    record = status(tmp_path, "plain")
    assert record.get("state") == "Succeeded", f"{record}\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"
    assert "ran in the container" in (tmp_path / "local" / "plain" / "worker-0.log").read_text()
