"""The job spec's ``parallelism``: checked against the devices the spec implies, rendered into
every pod as ROXXEL_PARALLELISM, and, through ``roxxel-launch submit --local``, the mesh a
multislice CPU job's workers build (roxxel.sharding.default_mesh)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import yaml

from roxxel import Roxxel, contract
from roxxel.sharding import MESH_AXES
from roxxel_launch.backends.local import backend as L
from roxxel_launch.backends.local.pods import worker_processes
from roxxel_launch.render import render
from roxxel_launch.spec import SpecError, load_spec, spec_from_dict
from roxxel_launch.spec.schema import spec_schema
from roxxel_launch.spec.loading import spec_to_dict

from support.paths import WORKERS
from support.specs import job_spec, spec_dict

TPU_V5P_2x2x2 = {"tpu": {"type": "v5p", "topology": "2x2x2"}}  # 8 chips, 2 hosts of 4


def _spec(**extra):
    return job_spec(**extra)


def _pod_env(spec) -> dict[str, str]:
    for obj in render(spec).objects:
        if obj["kind"] == "JobSet":
            pod = obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        elif obj["kind"] == "Job":
            pod = obj["spec"]["template"]["spec"]
        else:
            continue
        return {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    raise AssertionError("no pod template")


@pytest.mark.parametrize(
    ("extra", "value"),
    [
        ({"accelerator": TPU_V5P_2x2x2, "num_slices": 2, "parallelism": {"tensor": 2, "fsdp": 4}}, "fsdp=4,tensor=2"),
        ({"accelerator": TPU_V5P_2x2x2, "parallelism": {"data": -1, "fsdp": 2}}, "data=-1,fsdp=2"),
        (
            {"accelerator": {"gpu": {"type": "nvidia-h100-80gb", "count": 8, "hosts": 2}}, "parallelism": {"fsdp": 16}},
            "fsdp=16",
        ),
        ({"accelerator": {"cpu": {"hosts": 2}}, "workload": "indexed-job", "parallelism": {"fsdp": 2}}, "fsdp=2"),
        ({"accelerator": {"tpu": {"type": "tpu7x", "topology": "2x2x1"}}, "parallelism": {"tensor": 8}}, "tensor=8"),
    ],
)
def test_parallelism_is_rendered_into_every_pod(extra, value):
    spec = _spec(**extra)
    assert _pod_env(spec)[contract.ENV_PARALLELISM] == value
    assert spec_from_dict(spec_to_dict(spec)).parallelism == spec.parallelism  # round trip (the spec annotation)


def test_without_parallelism_no_variable_is_rendered():
    env = _pod_env(_spec(accelerator=TPU_V5P_2x2x2, num_slices=2))
    assert contract.ENV_PARALLELISM not in env and env[contract.ENV_NUM_SLICES] == "2"


@pytest.mark.parametrize(
    ("extra", "field", "message"),
    [
        ({"parallelism": {"model": 2}}, "parallelism.model", "unknown mesh axis 'model'"),
        ({"parallelism": {"fsdp": 0}}, "parallelism.fsdp", "axis 'fsdp' has size 0"),
        ({"parallelism": {"fsdp": -1, "tensor": -1}}, "parallelism", "fsdp and tensor are both -1"),
        # v5p 2x2x2, 2 slices: 16 devices, 8 in a slice
        ({"num_slices": 2, "parallelism": {"fsdp": 3}}, "parallelism", "does not divide the 16 devices"),
        ({"num_slices": 2, "parallelism": {"fsdp": 16}}, "parallelism", "data=1 does not span the 2 slices"),
        ({"num_slices": 2, "parallelism": {"data": 4, "fsdp": 2}}, "parallelism", "has 8 devices but there are 16"),
    ],
)
def test_parallelism_the_devices_cannot_hold_is_refused(extra, field, message):
    with pytest.raises(SpecError) as err:
        _spec(accelerator=TPU_V5P_2x2x2, **extra)
    assert err.value.field == field and message in err.value.problem, str(err.value)
    if field == "parallelism" and "-1" not in message:
        assert "the job: " in err.value.problem and "v5p 2x2x2" in err.value.problem


def test_cpu_specs_are_checked_where_the_spec_can_tell():
    cpu = {"cpu": {"hosts": 1}}
    # the per-worker device count is the workers' own: any fill, any inner size may fit
    assert _spec(accelerator=cpu, num_slices=2, parallelism={"fsdp": 3}).parallelism == {"fsdp": 3}
    with pytest.raises(SpecError, match=r"parallelism.data: 3 is not a multiple of num_slices 2"):
        _spec(accelerator=cpu, num_slices=2, parallelism={"data": 3, "fsdp": -1})
    with pytest.raises(SpecError, match=r"multiply to 3 devices, which 2 workers with equal device counts cannot hold"):
        _spec(accelerator={"cpu": {"hosts": 2}}, parallelism={"data": 1, "fsdp": 3})


def test_the_variable_is_reserved_and_the_schema_names_the_axes():
    with pytest.raises(SpecError, match=r"env.ROXXEL_PARALLELISM: is set by roxxel-launch"):
        _spec(env={contract.ENV_PARALLELISM: "fsdp=2"})
    prop = spec_schema()["properties"]["parallelism"]
    assert prop["propertyNames"] == {"enum": list(MESH_AXES)}
    assert prop["additionalProperties"]["minimum"] == -1


def test_set_overrides_one_axis(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec_dict(accelerator=TPU_V5P_2x2x2, parallelism={"fsdp": 4})))
    spec = load_spec(path, ["parallelism.tensor=2", "num_slices=2"])
    assert _pod_env(spec)[contract.ENV_PARALLELISM] == "fsdp=4,tensor=2"
    with pytest.raises(SpecError, match=r"from --set parallelism.fsdp=16"):
        load_spec(path, ["parallelism.fsdp=16"])


def test_local_workers_get_the_variable(tmp_path):
    spec = _spec(accelerator={"cpu": {"hosts": 1}}, num_slices=2, parallelism={"fsdp": 2})
    workers = worker_processes(spec, tmp_path, base_env={"PATH": os.environ["PATH"], contract.ENV_PARALLELISM: "x"})
    assert [env[contract.ENV_PARALLELISM] for _, env in workers] == ["fsdp=2", "fsdp=2"]
    assert [env[contract.ENV_NUM_SLICES] for _, env in workers] == ["2", "2"]


@pytest.mark.slow
def test_a_multislice_cpu_job_gets_the_hybrid_mesh_through_submit_local(tmp_path, monkeypatch):
    root = tmp_path / "runs"
    data = tmp_path / "data"
    ids = np.arange(20_000) % 30_000
    Roxxel(str(data / "a")).write([ids[i : i + 100] for i in range(0, 20_000, 100)], vocab_size=65536, dtype="uint16")
    out = tmp_path / "out"
    out.mkdir()
    spec = spec_dict(
        name="meshjob",
        image="local",
        command=[sys.executable, str(WORKERS / "mesh_worker.py"), str(data), str(out), "--launched"],
        accelerator={"cpu": {"hosts": 1}},
        num_slices=2,
        parallelism={"fsdp": 2},
        termination_grace_period=2,
        env={"ROXXEL_INIT_TIMEOUT": "60"},
    )
    path = tmp_path / "meshjob.yaml"
    path.write_text(yaml.safe_dump(spec))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROXXEL_", "JOB", "TPU_"))}
    env.update({L.ROOT_ENV: str(root), "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1"})
    result = subprocess.run(
        [sys.executable, "-m", "roxxel_launch.cli", "submit", "--local", "--devices-per-worker", "2", str(path)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    logs = "\n".join(p.read_text(errors="replace")[-2000:] for p in sorted(root.glob("meshjob/worker-*.log")))
    assert result.returncode == 0, result.stdout + result.stderr + logs
    for pid in (0, 1):
        mesh = json.loads((out / f"mesh-{pid}.json").read_text())
        assert mesh["env"] == {"ROXXEL_PARALLELISM": "fsdp=2", "ROXXEL_NUM_SLICES": "2"}
        assert mesh["axes"] == list(MESH_AXES) and mesh["shape"] == [2, 2, 1, 1]
        # data spans the two slices (one worker each), fsdp the two devices of one worker
        assert np.array(mesh["processes"])[:, :, 0, 0].tolist() == [[0, 0], [1, 1]]
        assert mesh["equals_create_hybrid_device_mesh"] is True
        assert mesh["spec"] == [["data", "fsdp"]]
