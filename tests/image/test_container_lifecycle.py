"""What a killed supervisor leaves of a container run (``--runtime podman``, and ``docker``
where its daemon answers) and who removes
it: the container tier. No Kubernetes API server runs here: the local backend runs the
rendered JobSet's pods as containers (roxxel_launch.backends.local.containers)."""

from __future__ import annotations

import os
import signal

import pytest

from roxxel_launch.backends.local import containers
from support.wait import wait_for
from support.container_job import launch, log, podman, status, write_spec

pytestmark = [pytest.mark.slow, pytest.mark.container, pytest.mark.timeout(3600)]


def test_a_killed_supervisors_containers_are_removed_by_resume_and_delete(runtime, lm_data, tmp_path):
    """SIGKILL to the detached supervisor leaves its containers running (nothing signals
    them, as nothing signals a pod when a controller dies); `status` says the supervisor is
    gone, `resume` removes what it left before starting afresh in containers, and `delete`
    leaves nothing of the run in the engine."""
    job, _ = write_spec(tmp_path, "orphan", steps=("3", "2"))
    launch(tmp_path, "submit", job, "--local", "--runtime", runtime, "--detach", "--data-dir", str(lm_data))
    run_label = f"{containers.RUN_LABEL}={containers.run_id(tmp_path / 'local' / 'orphan')}"
    wait_for(lambda: "step 2/5" in log(tmp_path, "orphan"), 400, lambda: log(tmp_path, "orphan")[-3000:])
    os.kill(status(tmp_path, "orphan")["supervisor_pid"], signal.SIGKILL)
    left = podman("ps", "--quiet", "--no-trunc", "--filter", f"label={run_label}", runtime=runtime).split()
    assert len(left) == 2, left  # the pods run on without their supervisor
    out = launch(tmp_path, "status", "orphan", "--local", check=None)
    assert "ended without recording a final state" in out.stdout + out.stderr, out.stdout + out.stderr
    launch(tmp_path, "resume", "orphan", "--local")
    record = status(tmp_path, "orphan")
    assert record["state"] == "Succeeded", record
    assert "left by an earlier supervisor" in (tmp_path / "local" / "orphan" / "supervisor.log").read_text()
    assert not set(left) & set(
        podman("ps", "--all", "--quiet", "--no-trunc", "--filter", f"label={run_label}", runtime=runtime).split()
    )
    launch(tmp_path, "delete", "orphan", "--local")
    assert not podman("ps", "--all", "--quiet", "--filter", f"label={run_label}", runtime=runtime).split()
    assert not podman("network", "ls", "--quiet", "--filter", f"label={run_label}", runtime=runtime).split()
