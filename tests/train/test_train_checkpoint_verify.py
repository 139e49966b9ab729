"""Restores are verified: a damaged step fails loudly, naming the step, the array and the fix.

Real Orbax writes on a local disk; the damage is a flipped byte in a real data file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

import support.ckpt as common
from roxxel.train.checkpoint import CheckpointCorruptError, CheckpointRestoreError, Checkpointer


DIMS = (64, 128, 8)  # big enough that OCDBT stores values out of line, in the data files


def _save_two_steps(path: Path):
    ms = common.build(DIMS, seed=0)
    with Checkpointer(path, ms.model, ms.optimizer, fingerprint=common.FINGERPRINT) as ckpt:
        ckpt.save(1, {"loss": 1.0})
        common.train_step(ms.model, ms.optimizer, np.ones((4, DIMS[0]), np.float32))
        ckpt.save(2, {"loss": 0.5})
        ckpt.wait_until_finished()
    return common.flat_host(ms)


def _data_files(step_dir: Path) -> list[Path]:
    """The files holding array bytes: TensorStore's OCDBT data files (``d/``) of the state item."""
    return sorted(p for p in (step_dir / "state").rglob("*") if p.is_file() and p.parent.name == "d")


@pytest.mark.slow
def test_every_array_carries_a_checksum_and_a_clean_restore_verifies(tmp_path):
    want = _save_two_steps(tmp_path / "ckpt")
    run = json.loads((tmp_path / "ckpt" / "2" / "run" / "metadata").read_text())
    assert set(run["checksums"]) >= {"model/l1/kernel", "optimizer/opt_state/0/mu/l1/kernel"}
    assert all(len(v) == 16 for v in run["checksums"].values())
    assert run["saved_at"].endswith("+00:00")
    other = common.build(DIMS, seed=5)
    with Checkpointer(tmp_path / "ckpt", state=other, fingerprint=common.FINGERPRINT) as ckpt:
        assert ckpt.restore() == 2
    assert not common.mismatches(common.flat_host(other), want)


def test_a_flipped_byte_never_restores_altered_weights(tmp_path):
    """Flip one byte at several offsets of every data file of a step: each restore either
    fails naming the step, the array (for altered values) and the earlier step to use, or
    loads exactly the saved values (bytes TensorStore does not read, e.g. superseded nodes)."""
    want = _save_two_steps(tmp_path / "ckpt")
    step_dir = tmp_path / "ckpt" / "2"
    files = _data_files(step_dir)
    assert files, sorted(step_dir.rglob("*"))
    outcomes = []
    for f in files:
        original = f.read_bytes()
        for offset in sorted({len(original) // 3, len(original) // 2, 2 * len(original) // 3}):
            damaged = bytearray(original)
            damaged[offset] ^= 0x10
            f.write_bytes(bytes(damaged))
            other = common.build(DIMS, seed=5)
            before = common.flat_host(other)
            with Checkpointer(tmp_path / "ckpt", state=other, fingerprint=common.FINGERPRINT) as ckpt:
                try:
                    ckpt.restore()
                except CheckpointRestoreError as err:
                    msg = str(err)
                    assert "step 2" in msg and str(tmp_path / "ckpt") in msg and "N in [1]" in msg, msg
                    assert err.step == 2 and err.earlier_steps == [1]
                    if isinstance(err, CheckpointCorruptError):
                        assert f"array {err.array!r}" in msg and "checksum" in msg, msg
                    assert not common.mismatches(common.flat_host(other), before)  # nothing was loaded
                    outcomes.append(type(err).__name__)
                else:
                    assert not common.mismatches(common.flat_host(other), want), (f, offset)
                    outcomes.append("intact")
            f.write_bytes(original)
    assert "CheckpointCorruptError" in outcomes, outcomes  # some flips did reach array values
    with Checkpointer(tmp_path / "ckpt", state=common.build(DIMS, seed=5), fingerprint=common.FINGERPRINT) as ckpt:
        assert ckpt.restore() == 2  # undamaged again


@pytest.mark.parametrize("damage", ["bad_json", "missing_metadata"])
def test_unreadable_metadata_is_wrapped_with_directory_step_and_earlier_steps(tmp_path, damage):
    _save_two_steps(tmp_path / "ckpt")
    step_dir = tmp_path / "ckpt" / "2"
    if damage == "bad_json":
        (step_dir / "run" / "metadata").write_text('{"step": 2, "fing')
    else:
        os.remove(step_dir / "state" / "_METADATA")
    with Checkpointer(tmp_path / "ckpt", state=common.build(DIMS, seed=5), fingerprint=common.FINGERPRINT) as ckpt:
        with pytest.raises(CheckpointRestoreError, match=r"cannot restore step 2 from .*restore\(step=N\), N in \[1\]"):
            ckpt.restore()
        assert ckpt.restore(step=1) == 1


@pytest.mark.parametrize("step, damage", [(1, b""), (2, b"\xff\xfe{")])
def test_a_damaged_metrics_file_is_named_and_the_fix_works(tmp_path, step, damage):
    """Found by a new user's pass: one step's metrics file emptied (or a byte flipped) made the
    whole directory unopenable with a bare JSONDecodeError (UnicodeDecodeError) from inside
    Orbax, naming neither the step nor the file; even the good latest step could not be restored."""
    want = _save_two_steps(tmp_path / "ckpt")
    metrics = tmp_path / "ckpt" / str(step) / "metrics" / "metrics"
    metrics.write_bytes(damage)
    ms = common.build(DIMS, seed=5)
    with pytest.raises(
        CheckpointRestoreError,
        match=rf"{metrics}: the metrics of step {step} are damaged.*remove "
        rf"{metrics.parent} \(step {step} stays restorable\)",
    ) as caught:
        Checkpointer(tmp_path / "ckpt", ms.model, ms.optimizer, fingerprint=common.FINGERPRINT)
    assert caught.value.step == step
    for p in sorted(metrics.parent.iterdir()):  # the advice
        p.unlink()
    metrics.parent.rmdir()
    with Checkpointer(tmp_path / "ckpt", ms.model, ms.optimizer, fingerprint=common.FINGERPRINT) as ckpt:
        assert ckpt.restore() == 2
    got = common.flat_host(ms)
    assert all(np.array_equal(got[k], want[k]) for k in want)


def test_saving_over_an_earlier_runs_step_says_it_is_not_saved(tmp_path, caplog):
    """Found by a new user's pass: after restore(step=1) (as a CheckpointCorruptError advises),
    save(2) returned False with a DEBUG line only; the next process restored the old step 2."""
    _save_two_steps(tmp_path / "ckpt")
    ms = common.build(DIMS, seed=5)
    with Checkpointer(tmp_path / "ckpt", ms.model, ms.optimizer, fingerprint=common.FINGERPRINT) as ckpt:
        assert ckpt.restore(step=1) == 1
        with caplog.at_level("WARNING", logger="roxxel.checkpoint"):
            assert ckpt.save(2, {"loss": 0.25}, force=True) is False
            assert ckpt.save(3, {"loss": 0.2}, force=True) is True
            ckpt.wait_until_finished()
            assert ckpt.save(3, {"loss": 0.2}, force=True) is False  # its own step: nothing to say
    warned = [r.getMessage() for r in caplog.records if "never overwritten" in r.getMessage()]
    assert len(warned) == 1 and warned[0].startswith("step 2 is already saved") and "delete it first" in warned[0]


def test_a_failed_restore_leaves_no_read_running_on_a_closed_event_loop(tmp_path, monkeypatch):
    """A step whose files TensorStore cannot read fails one read while Orbax's other reads of
    that restore are still running; Orbax closed its event loop at once, and each read that
    finished later called into the closed loop: 'Event loop is closed' through Python's
    unraisable-exception hook (17 for this test's flips; in the test suite, warnings blamed on
    whichever test ran next), and asyncio's 'Future exception was never retrieved'."""
    import gc
    import sys
    import time

    _save_two_steps(tmp_path / "ckpt")
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: unraisable.append(f"{u.exc_type.__name__}: {u.exc_value}"))
    read_errors = 0
    for f in _data_files(tmp_path / "ckpt" / "2"):
        original = f.read_bytes()
        for offset in sorted({len(original) // 3, len(original) // 2, 2 * len(original) // 3}):
            damaged = bytearray(original)
            damaged[offset] ^= 0x10
            f.write_bytes(bytes(damaged))
            with Checkpointer(tmp_path / "ckpt", state=common.build(DIMS, seed=5), fingerprint=common.FINGERPRINT) as c:
                try:
                    c.restore()
                except CheckpointRestoreError as err:
                    read_errors += err.__cause__ is not None  # TensorStore's read failed (not our checksum)
            f.write_bytes(original)
    assert read_errors, "no flip made TensorStore fail a read"
    time.sleep(1.0)  # the reads a failed restore had left running have finished by now
    gc.collect()
    assert unraisable == []
