"""Models sharded across processes, trained through the Trainer (issue #48).

Real ``jax.distributed`` over loopback: 2 processes x 2 CPU devices, a model whose every
matrix is sharded (FSDP x tensor) and born sharded (:func:`roxxel.train.sharded_state`),
preempted by a SIGTERM and resumed bitwise; processes started with another seed end in 78.
"""

import json
import os
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from roxxel.exit_codes import ConfigValueError
from roxxel.train.agreement import digest, disagreements
from roxxel.train.axis_rules import check_rules, mesh_spec
from support.lm import make_dataset
from support import processes
from support.paths import WORKERS

WORKER = str(WORKERS / "sharded_train.py")
RULES = check_rules([("vocab", "tensor"), ("embed", "fsdp"), ("mlp", "tensor"), ("mlp", "fsdp")])


def fake_mesh(**axes):
    return SimpleNamespace(axis_names=tuple(axes), shape=axes)


def test_logical_axes_take_the_first_rule_that_fits_the_mesh():
    """One model definition, several layouts: ``mlp`` goes to ``tensor`` where the mesh has it,
    else to its next rule (``fsdp``), unless that axis is taken by another dimension."""
    both, fsdp_only = fake_mesh(fsdp=2, tensor=2), fake_mesh(fsdp=4)
    assert mesh_spec(("embed", "mlp"), (32, 128), both, RULES) == P("fsdp", "tensor")
    assert mesh_spec(("embed", "mlp"), (32, 128), fsdp_only, RULES) == P("fsdp")  # fsdp taken: mlp replicated
    assert mesh_spec((None, "mlp"), (32, 128), fsdp_only, RULES) == P(None, "fsdp")
    assert mesh_spec(("vocab", "embed"), (260, 32), fsdp_only, RULES) == P(None, "fsdp")
    assert mesh_spec(None, (3,), both, RULES) == P()


@pytest.mark.parametrize(
    "annotation, shape, message",
    [
        (("heads",), (8,), "neither an axis of the mesh"),
        (("embed",), (257,), "does not divide over mesh axes"),
        (("fsdp", "fsdp"), (4, 4), "named by two dimensions"),
        (("fsdp", None, None), (4, 4), "annotated with 3 axes"),
    ],
)
def test_annotations_the_mesh_cannot_hold_are_refused_naming_the_variable(annotation, shape, message):
    with pytest.raises(ConfigValueError, match=message) as e:
        mesh_spec(annotation, shape, fake_mesh(fsdp=2, tensor=2), RULES, where="model/w")
    assert "model/w" in str(e.value)


def test_a_field_that_differs_names_it_the_processes_and_the_local_value():
    fields = {"seed": 43, "mesh": [["data"], [4]]}
    mine = np.stack([digest(v) for v in fields.values()])
    other = np.stack([digest(42), digest([["data"], [4]])])
    everyone = np.stack([other, mine, other])  # process 1 differs on the seed
    lines = disagreements(fields, everyone)
    assert len(lines) == 1 and lines[0].startswith("seed: process 1 differs from process 0 (processes 0, 2 agree)")
    assert "it is 43" in lines[0]
    assert disagreements(fields, np.stack([mine, mine])) == []


def run(n, devices, tmp_path, expect=0, **args):
    """``n`` processes of the worker on ``devices`` CPU devices each: their RESULT lines and stderr."""
    base = {"nproc": n, "data": str(tmp_path / "data"), "init": "sharded", "seed": 0, **args}
    procs = processes.run(
        lambda i, coordinator: [sys.executable, WORKER, json.dumps({**base, "coordinator": coordinator, "pid": i})],
        n,
        tmp_path / "logs",
        processes.cpu_env(devices),
        expect=expect,
    )
    return [r for p in procs for r in p.results()], [p.err for p in procs]


def same_npz(a, b):
    want, got = np.load(a), np.load(b)
    assert sorted(want.files) == sorted(got.files)
    return [k for k in want.files if not np.array_equal(want[k], got[k])]


@pytest.mark.slow
@pytest.mark.parametrize(
    "mesh, hidden_spec, step",
    [
        ({"fsdp": 4}, "P('fsdp',)", {}),
        ({"fsdp": 2, "tensor": 2}, "P('fsdp', 'tensor')", {"dropout": 0.1, "grad_accum": 2}),
    ],
    ids=["fsdp", "fsdp-x-tensor-dropout-accumulation"],
)
def test_sharded_across_two_processes_trains_is_preempted_and_resumes_bitwise(tmp_path, mesh, hidden_spec, step):
    """Issue #48: the Trainer died in its constructor gathering arrays that span processes.
    Each process now holds half of every FSDP-sharded matrix (and its Adam moments), a
    SIGTERM on process 1 saves the agreed step, and the resumed run ends bitwise equal to an
    uninterrupted one (another init seed for the resume: only the checkpoint can make it so).
    On FSDP x tensor the model has dropout (its RNG state resumes too) and the step
    accumulates 2 micro-batches. The checkpoint restores bitwise on 4 processes x 1 device and on 1 process x 4 devices."""
    make_dataset(str(tmp_path / "data"))
    ref, _ = run(2, 2, tmp_path, run=str(tmp_path / "ref"), mesh=mesh, stop=-1, out=str(tmp_path / "ref.npz"), **step)
    assert ref[0]["specs"]["hidden/kernel"] == hidden_spec
    assert ref[0]["local_bytes"]["embed/embedding"] * 2 == 260 * 32 * 4  # half of the table on each host
    job = dict(run=str(tmp_path / "job"), mesh=mesh, save_interval_steps=100, **step)
    run(2, 2, tmp_path, expect=42, stop=-1, sigterm_at=3, sigterm_pid=1, **job)
    (saved,) = [int(n) for n in os.listdir(tmp_path / "job" / "checkpoints") if n.isdigit()]
    assert 3 <= saved < 10, saved  # the step the processes agreed on after the notice
    resumed, _ = run(2, 2, tmp_path, stop=-1, out=str(tmp_path / "resumed.npz"), **{**job, "seed": 5})
    assert resumed[0]["step"] == 10
    assert same_npz(tmp_path / "ref.npz", tmp_path / "resumed.npz") == []
    # The last checkpoint (step 10), on 4 processes x 1 device (each now holds a quarter), and
    # on one process of 4 devices: the resumed run's values, bitwise.
    elsewhere = {**job, "mesh": {"fsdp": 4}, "seed": 5, "stop": 10, "grad_accum": 1}
    quarter, _ = run(4, 1, tmp_path, out=str(tmp_path / "four.npz"), **elsewhere)
    assert quarter[0]["local_bytes"]["embed/embedding"] * 4 == 260 * 32 * 4
    one, _ = run(1, 4, tmp_path, out=str(tmp_path / "one.npz"), **elsewhere)
    assert quarter[0]["step"] == one[0]["step"] == 10
    assert same_npz(tmp_path / "resumed.npz", tmp_path / "four.npz") == []
    assert same_npz(tmp_path / "resumed.npz", tmp_path / "one.npz") == []


@pytest.mark.slow
def test_processes_with_another_seed_end_in_78_naming_the_seed(tmp_path):
    """Issue #48: two workers with different seeds trained to the end, every global batch
    mixed from two data plans. Now both stop before the first step with exit 78."""
    make_dataset(str(tmp_path / "data"))
    _, errs = run(2, 2, tmp_path, expect=78, run=str(tmp_path / "r"), mesh={"fsdp": 4}, stop=-1, data_seed=[42, 43])
    for pid, err in enumerate(errs):
        assert "disagree" in err and "seed: process 1 differs from process 0" in err, err[-3000:]
        assert f"here (process {pid}) it is {42 + pid}" in err
    assert not os.path.exists(tmp_path / "r" / "checkpoints" / "1")


@pytest.mark.slow
@pytest.mark.parametrize("field", ["dataset", "model"])
def test_processes_with_another_dataset_copy_or_model_shape_end_in_78_naming_it(tmp_path, field):
    """A process reading a stale copy of the dataset (one source file edited, then packed) or
    building another model width would train on another data plan or crash mid-run; both stop
    before the first step with exit 78 naming what differs."""
    make_dataset(str(tmp_path / "data"))
    if field == "dataset":
        import shutil
        import sysconfig

        from roxxel.pack import pack

        src = shutil.copytree(os.path.join(sysconfig.get_paths()["stdlib"], "json"), tmp_path / "json")
        with open(src / "decoder.py", "a") as f:
            f.write("# edited after the copy was made\n")
        pack([str(src)], str(tmp_path / "stale"), include=["*.py"])
        args, named = {"data": [str(tmp_path / "data"), str(tmp_path / "stale")]}, "datasets (fingerprints)"
    else:
        args, named = {"width": [32, 64]}, "model and optimizer (shapes, dtypes): "
    _, errs = run(2, 2, tmp_path, expect=78, run=str(tmp_path / "r"), mesh={"fsdp": 4}, stop=-1, **args)
    for err in errs:
        assert "disagree" in err and "process 1 differs from process 0; here" in err, err[-3000:]
        assert named in err, err[-3000:]
    assert not os.path.exists(tmp_path / "r" / "checkpoints" / "1")


@pytest.mark.slow
def test_eagerly_built_replicas_that_differ_start_from_process_0s_values(tmp_path):
    """A model built eagerly on every host (another seed on each) is compared by digest and
    only the differing arrays are broadcast; the run is identical to one where every host
    used process 0's seed."""
    make_dataset(str(tmp_path / "data"))
    common = dict(mesh={"fsdp": 2, "tensor": 2}, stop=4, init="eager")
    _, errs = run(2, 2, tmp_path, run=str(tmp_path / "a"), out=str(tmp_path / "a.npz"), **common)
    assert "arrays differ across processes at the start" in errs[0]
    _, errs = run(1, 4, tmp_path, run=str(tmp_path / "b"), out=str(tmp_path / "b.npz"), **common)
    assert same_npz(tmp_path / "a.npz", tmp_path / "b.npz") == []


def test_local_digests_follow_the_order_of_the_values():
    """Twelve arrays: a digest in another order than the values would name the wrong arrays
    as differing across processes (a tree's leaf order sorts "10" before "2")."""
    from roxxel.train.state_placement import _local_digests

    values = [np.full((3,), i, np.float32) for i in range(12)]
    digests = _local_digests(values)
    assert digests.shape == (12, 2) and digests.dtype == np.uint32
    for i in (2, 10, 11):
        assert (digests[i] == _local_digests([values[i]])[0]).all(), i
