"""roxxel.sharding: the meshes users ask for (data / fsdp / tensor / sequence, hybrid over
slices), the job's mesh from ROXXEL_PARALLELISM / ROXXEL_NUM_SLICES, and batch sharding.

Layouts are checked on stand-in devices (the mesh arithmetic needs only their ids, process
and slice); real JAX runs 2 processes x 2 CPU devices over loopback (tests/support/workers/
mesh_worker.py) and streams batches on the job's mesh.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys

import jax
import numpy as np
import pytest
from jax.sharding import AxisType, PartitionSpec

from roxxel import Roxxel, contract, exit_codes, sharding
from roxxel.exit_codes import ConfigValueError
from roxxel.sharding import (
    MESH_AXES,
    axis_sizes,
    batch_sharding,
    default_mesh,
    format_parallelism,
    make_mesh,
    parse_parallelism,
)

from support.net import free_port
from support.paths import WORKERS

WORKER = str(WORKERS / "mesh_worker.py")


# ----------------------------------------------------------------------------- sizes


@pytest.mark.parametrize(
    ("given", "devices", "slices", "want"),
    [
        (None, 8, 1, (8, 1, 1, 1)),
        ({}, 8, 2, (8, 1, 1, 1)),
        ({"fsdp": 4, "tensor": 2}, 8, 1, (1, 4, 2, 1)),
        ({"fsdp": 4}, 16, 1, (4, 4, 1, 1)),  # data fills
        ({"fsdp": -1, "tensor": 2}, 16, 1, (1, 8, 2, 1)),  # fsdp fills, data is 1
        ({"data": 2, "fsdp": -1}, 8, 2, (2, 4, 1, 1)),
        ({"fsdp": 2}, 4, 2, (2, 2, 1, 1)),  # 2 slices x 2 devices: data across, fsdp inside
        ({"sequence": 2, "data": -1}, 8, 1, (4, 1, 1, 2)),
        ({"data": 4, "fsdp": 2}, 8, 1, (4, 2, 1, 1)),
    ],
)
def test_axis_sizes(given, devices, slices, want):
    assert tuple(axis_sizes(given, devices, slices).values()) == want
    assert list(axis_sizes(given, devices, slices)) == list(MESH_AXES)


@pytest.mark.parametrize(
    ("given", "devices", "slices", "message"),
    [
        ({"fsdp": 3}, 8, 1, "fsdp=3 (3 devices) does not divide the 8 devices"),
        ({"data": 2, "fsdp": 2}, 8, 1, "has 4 devices but there are 8; make the sizes multiply"),
        ({"fsdp": -1, "tensor": -1}, 8, 1, "fsdp and tensor are both -1"),
        ({"model": 2}, 8, 1, "unknown mesh axis 'model'; the axes are data, fsdp, tensor, sequence"),
        ({"fsdp": 0}, 8, 1, "axis 'fsdp' has size 0; give a positive integer, or -1"),
        ({"fsdp": -2}, 8, 1, "axis 'fsdp' has size -2"),
        ({"fsdp": 8}, 8, 2, "data=1 does not span the 2 slices evenly"),
        ({"data": 3, "fsdp": -1}, 12, 2, "data=3 does not span the 2 slices"),
        ({}, 8, 3, "3 slices cannot split 8 devices evenly"),
    ],
)
def test_axis_sizes_refuses_bad_layouts_in_one_line(given, devices, slices, message):
    with pytest.raises(ConfigValueError) as err:
        axis_sizes(given, devices, slices)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_parse_and_format_round_trip():
    assert parse_parallelism("fsdp=4,tensor=2") == {"fsdp": 4, "tensor": 2}
    assert parse_parallelism(" tensor = 2 , data=-1, ") == {"tensor": 2, "data": -1}
    assert parse_parallelism("") == {}
    assert format_parallelism({"tensor": 2, "fsdp": 4, "data": -1}) == "data=-1,fsdp=4,tensor=2"
    assert parse_parallelism(format_parallelism({"sequence": 2, "fsdp": 2})) == {"fsdp": 2, "sequence": 2}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("fsdp:4", "ROXXEL_PARALLELISM='fsdp:4': 'fsdp:4' is not AXIS=SIZE; write e.g. fsdp=4,tensor=2"),
        ("fsdp=four", "'fsdp=four' is not AXIS=SIZE"),
        ("=4", "'=4' is not AXIS=SIZE"),
        ("fsdp=2,fsdp=4", "axis 'fsdp' is given twice"),
        ("mdl=2", "ROXXEL_PARALLELISM='mdl=2': unknown mesh axis 'mdl'"),
        ("fsdp=-1,data=-1", "both -1"),
    ],
)
def test_parse_refuses_malformed_text_naming_the_variable(text, message):
    with pytest.raises(ConfigValueError) as err:
        parse_parallelism(text)
    assert message in str(err.value)


# ----------------------------------------------------------------------------- layouts


@dataclasses.dataclass(frozen=True)
class FakeDevice:
    """What the layout reads of a device: id, process, slice, platform."""

    id: int
    process_index: int
    slice_index: int = 0
    platform: str = "cpu"
    device_kind: str = "cpu"


def _devices(processes: int, per_process: int, slices: int = 1) -> list[FakeDevice]:
    per_slice = processes // slices
    return [
        FakeDevice(p * per_process + i, p, slice_index=p // per_slice if slices > 1 else 0)
        for p in range(processes)
        for i in range(per_process)
    ]


def _layout(parallelism, num_slices, devices) -> np.ndarray:
    sizes = axis_sizes(parallelism, len(devices), num_slices)
    array = sharding._device_array(sizes, num_slices, devices)
    return np.vectorize(lambda d: d.process_index)(array)


def _row_runs(processes: np.ndarray) -> dict[int, list[int]]:
    """Batch shards (data x fsdp positions) each process holds."""
    held: dict[int, set[int]] = {}
    fsdp = processes.shape[1]
    for (d, f, *_), p in np.ndenumerate(processes):
        held.setdefault(int(p), set()).add(d * fsdp + f)
    return {p: sorted(s) for p, s in held.items()}


@pytest.mark.parametrize(
    ("parallelism", "slices", "want"),
    [
        # 2 processes x 2 devices, one slice: every layout keeps each process's rows one run.
        ({"fsdp": 4}, 1, {0: [0, 1], 1: [2, 3]}),
        ({"data": 2, "fsdp": 2}, 1, {0: [0, 1], 1: [2, 3]}),
        ({"fsdp": 2, "tensor": 2}, 1, {0: [0], 1: [1]}),
        ({"tensor": 2}, 1, {0: [0], 1: [1]}),
        ({"tensor": 4}, 1, {0: [0], 1: [0]}),  # tensor spans processes: both read the whole batch
        # two slices of one process each: data across the slices, fsdp inside one.
        ({"fsdp": 2}, 2, {0: [0, 1], 1: [2, 3]}),
    ],
)
def test_each_process_holds_one_run_of_rows(parallelism, slices, want):
    processes = _layout(parallelism, slices, _devices(2, 2))
    assert _row_runs(processes) == want


def test_hybrid_layout_puts_slices_along_data_and_slices_of_several_processes_stay_whole():
    # 2 slices x 2 processes x 2 devices, fsdp inside a slice (4 devices: 2 processes).
    processes = _layout({"fsdp": 4}, 2, _devices(4, 2))
    assert processes.shape == (2, 4, 1, 1)
    assert processes[:, :, 0, 0].tolist() == [[0, 0, 1, 1], [2, 2, 3, 3]]
    # the same by slice_index (TPU multislice: devices know their slice)
    tpu_like = [dataclasses.replace(d, slice_index=1 - d.slice_index) for d in _devices(4, 2, slices=2)]
    processes = _layout({"fsdp": 4}, 2, tpu_like)
    assert processes[:, :, 0, 0].tolist() == [[2, 2, 3, 3], [0, 0, 1, 1]]  # slice 0 first
    # one process standing for two slices (a single-process test): runs of its devices
    ids = np.vectorize(lambda d: d.id)(sharding._device_array(axis_sizes({"fsdp": 2}, 4, 2), 2, _devices(1, 4)))
    assert ids[:, :, 0, 0].tolist() == [[0, 1], [2, 3]]


def test_slice_counts_that_do_not_match_the_devices_are_refused():
    with pytest.raises(ConfigValueError, match="num_slices=2 does not divide the 3 processes"):
        sharding._device_array(axis_sizes({}, 6, 2), 2, _devices(3, 2))
    with pytest.raises(ConfigValueError, match=r"num_slices=3 but the devices are in 2 slices \(their slice_index\)"):
        sharding._device_array(axis_sizes({}, 6, 3), 3, _devices(2, 3, slices=2))


def test_a_device_order_that_interleaves_processes_falls_back_to_process_order(caplog):
    interleaved = [FakeDevice(0, 0), FakeDevice(2, 1), FakeDevice(1, 0), FakeDevice(3, 1)]
    with caplog.at_level(logging.WARNING, logger="roxxel.sharding"):
        processes = _layout({"fsdp": 4}, 1, interleaved)
    assert processes[0, :, 0, 0].tolist() == [0, 0, 1, 1]
    assert "not contiguous" in caplog.text


# ----------------------------------------------------------------------------- this process


def test_make_mesh_is_auto_typed_and_batches_split_over_data_and_fsdp():
    mesh = make_mesh({"fsdp": -1})
    assert mesh.axis_names == MESH_AXES and mesh.axis_types == (AxisType.Auto,) * 4
    assert dict(mesh.shape) == {"data": 1, "fsdp": jax.device_count(), "tensor": 1, "sequence": 1}
    assert batch_sharding(mesh).spec == PartitionSpec(("data", "fsdp"))
    with pytest.raises(ConfigValueError, match="unknown mesh axis 'model'"):
        make_mesh({"model": 1})


def test_batch_sharding_of_other_meshes():
    devices = np.array(jax.devices()[:1])
    assert batch_sharding(jax.sharding.Mesh(devices, ("data",))).spec == PartitionSpec("data")
    assert batch_sharding(jax.sharding.Mesh(devices, ("rows",))).spec == PartitionSpec("rows")  # first axis
    assert batch_sharding(jax.sharding.Mesh(devices.reshape(1, 1), ("fsdp", "tensor"))).spec == PartitionSpec("fsdp")


def test_default_mesh_follows_the_environment():
    # No layout: every device on data, and the other axes there at size 1, so that a model
    # annotated with mesh axes ("fsdp") runs unsharded rather than failing (found running the
    # large-models example replicated).
    for env in ({}, {contract.ENV_NUM_SLICES: "1"}, {contract.ENV_PARALLELISM: " "}):
        mesh = default_mesh(env)
        assert mesh.axis_names == MESH_AXES and dict(mesh.shape) == {
            "data": jax.device_count(),
            "fsdp": 1,
            "tensor": 1,
            "sequence": 1,
        }
        assert batch_sharding(mesh).spec == PartitionSpec(("data", "fsdp"))
    mesh = default_mesh({contract.ENV_PARALLELISM: "fsdp=-1", contract.ENV_NUM_SLICES: "1"})
    assert mesh.axis_names == MESH_AXES and mesh.shape["fsdp"] == jax.device_count()
    with pytest.raises(ConfigValueError, match=r"ROXXEL_PARALLELISM='fsdp=3', ROXXEL_NUM_SLICES=1: fsdp=3"):
        default_mesh({contract.ENV_PARALLELISM: "fsdp=3", contract.ENV_NUM_SLICES: "1"})
    with pytest.raises(ConfigValueError, match="ROXXEL_NUM_SLICES='0' is not a positive number of slices"):
        default_mesh({contract.ENV_PARALLELISM: "fsdp=1", contract.ENV_NUM_SLICES: "0"})


def test_a_bad_layout_in_the_environment_exits_78_under_roxxel_worker(tmp_path):
    env = dict(os.environ, JAX_PLATFORMS="cpu", **{contract.ENV_PARALLELISM: "fsdp:2"})
    code = "import roxxel, roxxel.sharding as s; s.default_mesh()"
    proc = subprocess.run(
        [sys.executable, "-m", "roxxel.worker", "--", sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == exit_codes.CONFIG_ERROR_EXIT_CODE, proc.stderr[-2000:]
    assert "ROXXEL_PARALLELISM='fsdp:2'" in proc.stderr


# ----------------------------------------------------------------------------- 2 real processes


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("mesh")
    ids = np.arange(20_000) % 30_000
    Roxxel(str(root / "a")).write([ids[i : i + 100] for i in range(0, 20_000, 100)], vocab_size=65536, dtype="uint16")
    return root


def _run_pair(root, out, **env_vars: str) -> list[dict]:
    os.makedirs(out, exist_ok=True)
    coordinator = f"127.0.0.1:{free_port()}"
    env = {k: v for k, v in os.environ.items() if k not in (contract.ENV_PARALLELISM, contract.ENV_NUM_SLICES)}
    env.update(JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=2", **env_vars)
    procs = [
        subprocess.Popen(
            [sys.executable, WORKER, str(root), str(out), coordinator, str(i), "2"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    outputs = [p.communicate(timeout=240)[0] for p in procs]
    for i, p in enumerate(procs):
        assert p.returncode == 0, f"process {i} failed:\n{outputs[i][-3000:]}"
    return [json.loads((out / f"mesh-{i}.json").read_text()) for i in range(2)]


@pytest.mark.slow
def test_two_processes_get_the_jobs_mesh_and_read_only_their_rows(data_root, tmp_path):
    base = _run_pair(data_root, tmp_path / "base")
    assert base[0]["axes"] == list(MESH_AXES) and base[0]["shape"] == [4, 1, 1, 1]
    assert base[0]["spec"] == [["data", "fsdp"]]
    want = np.load(tmp_path / "base" / "batches.npy")
    total = base[0]["bytes_read"] + base[1]["bytes_read"]
    assert base[0]["bytes_read"] == base[1]["bytes_read"]  # each read its half

    # Two slices of one process each: data across the slices (DCN), fsdp inside one (ICI).
    hybrid = _run_pair(data_root, tmp_path / "hybrid", ROXXEL_NUM_SLICES="2", ROXXEL_PARALLELISM="fsdp=2")
    for r in hybrid:
        assert r["axes"] == list(MESH_AXES) and r["shape"] == [2, 2, 1, 1]
        assert np.array(r["processes"])[:, :, 0, 0].tolist() == [[0, 0], [1, 1]]
        assert r["equals_create_hybrid_device_mesh"] is True
        assert r["spec"] == [["data", "fsdp"]]
        assert r["bytes_read"] == total // 2
    assert np.array_equal(np.load(tmp_path / "hybrid" / "batches.npy"), want)

    # One slice, fsdp x tensor: each process one fsdp position, rows halved, tensor replicated.
    mixed = _run_pair(data_root, tmp_path / "mixed", ROXXEL_NUM_SLICES="1", ROXXEL_PARALLELISM="fsdp=2,tensor=2")
    for r in mixed:
        assert r["shape"] == [1, 2, 2, 1] and r["bytes_read"] == total // 2
        assert np.array(r["processes"])[0, :, :, 0].tolist() == [[0, 0], [1, 1]]
    assert np.array_equal(np.load(tmp_path / "mixed" / "batches.npy"), want)
