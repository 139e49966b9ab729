"""A pod's resources applied to its local container (``submit --local --runtime podman``, and
``docker`` where its daemon answers; the container tier): a worker that goes over its memory limit is killed by the kernel and the job
reports it as a cluster does: exit 137, ``OOMKilled``, counted as the failure policy says.

Before, the container had no limit (an out-of-memory that the cluster would kill passed
locally), and conmon's ``oom`` file landed in the submitting shell's directory.
"""

from __future__ import annotations

import pytest
import yaml

from support.container_job import launch, status
from support.image import IMAGE
from support.paths import REPO

pytestmark = [pytest.mark.slow, pytest.mark.container, pytest.mark.timeout(1200)]

GREEDY = "import time; time.sleep(1); b = bytearray(512 * 2**20); print('not killed', flush=True)"


def _spec(tmp_path, name: str, limit: str) -> str:
    data = {
        "apiVersion": "roxxel.dev/v1alpha1",
        "kind": "RoxxelJob",
        "name": name,
        "image": IMAGE,
        "command": ["python", "-c", GREEDY],
        "accelerator": {"cpu": {"hosts": 1}},
        "resources": {"limits": {"memory": limit, "cpu": "1"}},
        "checkpoint_dir": str(tmp_path / name / "checkpoints"),
        "max_restarts": 0,
        "termination_grace_period": 5,
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_a_container_over_its_memory_limit_ends_oomkilled(runtime, tmp_path):
    out = launch(tmp_path, "submit", _spec(tmp_path, "oom", "128Mi"), "--local", "--runtime", runtime, check=None)
    record = status(tmp_path, "oom")
    assert out.returncode != 0 and record["state"] == "Failed", f"{out.stdout[-2000:]}\n{out.stderr[-2000:]}"
    assert record["exit_code"] == 137 and record["attempts"][-1]["reasons"] == {"0": "OOMKilled"}, record
    assert "exited with 137 (OOMKilled: the container went over its memory limit (128Mi)" in record["message"]
    shown = launch(tmp_path, "status", "oom", "--local", check=None)
    assert "OOMKilled" in shown.stdout, shown.stdout
    assert not (REPO / "oom").exists()  # conmon's file stays in the run's directory, not the submitter's

    # The same program under a limit it fits in: no kill, no reason.
    out = launch(tmp_path, "submit", _spec(tmp_path, "fits", "1Gi"), "--local", "--runtime", runtime, check=None)
    record = status(tmp_path, "fits")
    assert record["state"] == "Succeeded" and "reasons" not in record["attempts"][-1], (record, out.stderr[-2000:])
