"""Checkpointer in one process: round trips, keeping, fingerprints, errors, preemption, SIGKILL."""

from __future__ import annotations

import copy
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest
from flax import nnx

import support.ckpt as common
from roxxel.data.identity import RunIdentity
from roxxel.exit_codes import PREEMPTED_EXIT_CODE
from roxxel.train.checkpoint import (
    CheckpointSaveError,
    Checkpointer,
    Preempted,
    RunMismatchError,
    describe_changes,
)
from roxxel.train.state import ModelState
from support.paths import WORKERS
from support.wait import wait_for

WORKER = WORKERS / "ckpt_worker.py"
TMP_STEP = re.compile(r"^(\d+)\.orbax-checkpoint-tmp")


def _steps_on_disk(path: Path) -> list[int]:
    return sorted(int(n) for n in os.listdir(path) if n.isdigit())


def _trained(seed: int = 0, steps: int = 3, dropout: float | None = 0.1) -> ModelState:
    ms = common.build(seed=seed, dropout=dropout)
    x = common.inputs()
    for _ in range(steps):
        common.train_step(ms.model, ms.optimizer, x)
    return ms


@pytest.mark.slow
def test_round_trip_is_bitwise_and_keeps_the_run_record(tmp_path):
    ms = _trained(seed=0)
    ms.model.train()  # dropout consumes its rng stream: the key and count must round trip too
    common.train_step(ms.model, ms.optimizer, common.inputs())
    ref = common.flat_host(ms)
    assert any("rngs" in k for k in ref) and any("opt_state" in k for k in ref)
    with Checkpointer(tmp_path / "ckpt", ms.model, ms.optimizer, fingerprint=common.FINGERPRINT) as ckpt:
        assert ckpt.save(4, {"loss": np.float32(0.25), "lr": 1e-3}, tokens_consumed=4 * 32)
        ckpt.wait_until_finished()

    other = common.build(seed=123, dropout=0.1)
    assert common.mismatches(common.flat_host(other), ref)  # really different before restoring
    live_sharding = other.model.l1.kernel.get_value().sharding
    with Checkpointer(str(tmp_path / "ckpt"), state=other, fingerprint=common.FINGERPRINT) as ckpt:
        assert ckpt.restore() == 4
        run = ckpt.restored_run
    assert common.mismatches(common.flat_host(other), ref) == []
    assert other.step == 4
    assert run["step"] == 4 and run["tokens_consumed"] == 128
    assert run["metrics"] == {"loss": 0.25, "lr": 1e-3}
    assert run["fingerprint"] == common.FINGERPRINT
    assert run["process_count"] == 1 and run["roxxel_version"]
    # The restored arrays land with the sharding the live state had before the restore.
    kernel = other.model.l1.kernel.get_value()
    assert isinstance(kernel, jax.Array) and kernel.sharding == live_sharding


@pytest.mark.slow
def test_restore_into_an_abstract_model_and_an_object_with_attributes(tmp_path):
    ms = _trained(seed=0, dropout=None)
    ref = common.flat_host(ms)
    with Checkpointer(tmp_path, ms.model, ms.optimizer) as ckpt:
        ckpt.save(3, {"loss": 1.0})

    class Holder:  # what a trainer might pass: attributes, not a ModelState
        def __init__(self):
            import optax

            self.model = nnx.eval_shape(lambda: common.MLP(common.MODEL_DIMS, nnx.Rngs(7)))
            self.optimizer = nnx.eval_shape(
                lambda: nnx.Optimizer(common.MLP(common.MODEL_DIMS, nnx.Rngs(7)), optax.adam(1e-2), wrt=nnx.Param)
            )
            self.step = 0

    holder = Holder()
    assert isinstance(holder.model.l1.kernel.get_value(), jax.ShapeDtypeStruct)
    with Checkpointer(tmp_path, state=holder) as ckpt:
        assert ckpt.restore() == 3
    assert holder.step == 3
    got = common.flat_host(ModelState(holder.model, holder.optimizer))
    assert common.mismatches(got, ref) == []


def test_restore_of_an_empty_directory_returns_0_and_creates_it(tmp_path):
    ms = common.build()
    before = common.flat_host(ms)
    path = tmp_path / "a" / "b"
    with Checkpointer(path, ms.model, ms.optimizer) as ckpt:
        assert ckpt.restore() == 0
        assert ckpt.restored_run is None
        assert ckpt.latest_step() is None and ckpt.best_step() is None
    assert path.is_dir()
    assert common.mismatches(common.flat_host(ms), before) == []


def test_keeps_the_latest_n_plus_the_best_by_loss_across_restarts(tmp_path):
    ms = common.build()
    losses = {1: 5.0, 2: 1.0, 3: 4.0, 4: 3.0, 5: 2.0}
    with Checkpointer(tmp_path, ms.model, ms.optimizer, max_to_keep=2) as ckpt:
        for step, loss in losses.items():
            ckpt.save(step, {"loss": loss})
        ckpt.wait_until_finished()
        assert ckpt.best_step() == 2
    assert _steps_on_disk(tmp_path) == [2, 4, 5]
    # A new run (restart) still knows step 2 is the best: Orbax reads the metrics back.
    with Checkpointer(tmp_path, ms.model, ms.optimizer, max_to_keep=2) as ckpt:
        assert ckpt.best_step() == 2
        ckpt.save(6, {"loss": 3.0})
        ckpt.save(7, {"loss": float("nan")})  # never the best; still one of the latest
        ckpt.save(8, {"other": 1.0})  # no loss: never the best
    assert _steps_on_disk(tmp_path) == [2, 7, 8]
    # A better loss replaces the best one.
    with Checkpointer(tmp_path, ms.model, ms.optimizer, max_to_keep=2) as ckpt:
        ckpt.save(9, {"loss": 0.5})
        ckpt.save(10, {"loss": 0.7})
        ckpt.save(11, {"loss": 0.9})
    assert _steps_on_disk(tmp_path) == [9, 10, 11]


def test_a_changed_best_metric_ranks_old_steps_worst(tmp_path):
    ms = common.build(dropout=None)
    with Checkpointer(tmp_path, ms.model, ms.optimizer, max_to_keep=1) as ckpt:
        ckpt.save(1, {"loss": 0.1})
        ckpt.save(2, {"loss": 0.2})
    assert _steps_on_disk(tmp_path) == [1, 2]
    with Checkpointer(tmp_path, ms.model, ms.optimizer, max_to_keep=1, best_metric="acc", best_mode="max") as ckpt:
        ckpt.save(3, {"acc": 0.5})  # steps 1 and 2 have no "acc": never the best
        ckpt.save(4, {"acc": 0.4})
        assert ckpt.best_step() == 3
    assert _steps_on_disk(tmp_path) == [3, 4]


def test_keep_best_off_and_max_to_keep_none(tmp_path):
    ms = common.build()
    with Checkpointer(tmp_path / "latest", ms.model, ms.optimizer, max_to_keep=1, keep_best=False) as ckpt:
        for step, loss in [(1, 0.1), (2, 9.0), (3, 9.0)]:
            ckpt.save(step, {"loss": loss})
    assert _steps_on_disk(tmp_path / "latest") == [3]
    with Checkpointer(tmp_path / "all", ms.model, ms.optimizer, max_to_keep=None) as ckpt:
        for step in range(1, 6):
            ckpt.save(step, {"loss": float(step)})
    assert _steps_on_disk(tmp_path / "all") == [1, 2, 3, 4, 5]


def test_save_interval_force_and_no_overwrite(tmp_path):
    ms = common.build(dropout=None)
    with Checkpointer(tmp_path, ms.model, ms.optimizer, save_interval_steps=5, max_to_keep=None) as ckpt:
        assert ckpt.save(3) is False
        assert ckpt.save(5) is True
        assert ckpt.save(5, force=True) is False  # a step is never written twice
        assert ckpt.save(7, force=True) is True
        assert ckpt.save(6) is False  # older than the latest
        assert ckpt.save(10) is True
    assert _steps_on_disk(tmp_path) == [5, 7, 10]


def test_model_without_optimizer(tmp_path):
    ms = _trained(dropout=None)
    with Checkpointer(tmp_path, ms.model) as ckpt:
        ckpt.save(1)
    fresh = common.build(seed=9, dropout=None)
    with Checkpointer(tmp_path, fresh.model) as ckpt:
        assert ckpt.restore() == 1
    ref = {k: v for k, v in common.flat_host(ms).items() if k.startswith("model/")}
    got = {k: v for k, v in common.flat_host(fresh).items() if k.startswith("model/")}
    assert common.mismatches(got, ref) == []


def test_changed_fingerprint_is_refused_with_a_readable_diff(tmp_path, caplog):
    ms = _trained(dropout=None)
    with Checkpointer(tmp_path, ms.model, ms.optimizer, fingerprint=common.FINGERPRINT) as ckpt:
        ckpt.save(3, {"loss": 1.0}, tokens_consumed=96)

    changed = copy.deepcopy(common.FINGERPRINT)
    changed["phases"][0]["batch_size"] = 32  # phase 0 holds step 3: its batches were taken
    changed["datasets"]["toy"]["fingerprint"] = "sha256:1"
    changed["datasets"]["web"] = {"fingerprint": "sha256:2", "tokens": 5}
    other = common.build(seed=5, dropout=None)
    before = common.flat_host(other)
    with Checkpointer(tmp_path, other.model, other.optimizer, fingerprint=changed) as ckpt:
        with pytest.raises(RunMismatchError) as info:
            ckpt.restore()
    err = info.value
    assert isinstance(err, ValueError)
    message = str(err)
    assert "phases[0].batch_size: 4 -> 32" in message
    assert 'datasets.toy.fingerprint: "sha256:0" -> "sha256:1"' in message
    assert "datasets.web: added" in message
    assert "allow_changed_run=True" in message and "step 3" in message
    assert err.step == 3 and len(err.changes) == 3
    assert common.mismatches(common.flat_host(other), before) == []  # nothing was loaded

    caplog.set_level(logging.WARNING, logger="roxxel.checkpoint")
    with Checkpointer(tmp_path, other.model, other.optimizer, fingerprint=changed, allow_changed_run=True) as ckpt:
        assert ckpt.restore() == 3
        assert ckpt.restored_run["fingerprint"] == common.FINGERPRINT
    assert "phases[0].batch_size: 4 -> 32" in caplog.text
    assert common.mismatches(common.flat_host(other), common.flat_host(ms)) == []

    # No fingerprint given: nothing to compare, the restore goes ahead.
    with Checkpointer(tmp_path, other.model, other.optimizer) as ckpt:
        assert ckpt.restore() == 3


def test_a_run_saved_before_batch_rows_existed_is_told_how_to_resume(tmp_path):
    """Checkpoints saved before batch_rows existed hold none (they took consecutive rows): resuming
    one with independent rows is refused, and the message gives the option that resumes it."""
    ms = _trained(dropout=None)
    with Checkpointer(tmp_path, ms.model, ms.optimizer, fingerprint=common.FINGERPRINT) as ckpt:
        ckpt.save(3, {"loss": 1.0}, tokens_consumed=96)
    # a curriculum's description carries the data's judge (Curriculum.describe() returns a RunIdentity)
    now = RunIdentity({**copy.deepcopy(common.FINGERPRINT), "batch_rows": "independent"})
    with Checkpointer(tmp_path, ms.model, ms.optimizer, fingerprint=now) as ckpt:
        with pytest.raises(
            RunMismatchError,
            match=r'batch_rows: "consecutive" -> "independent"(.|\n)*'
            r"pass Curriculum\(\.\.\., batch_rows='consecutive'\) to resume it",
        ):
            ckpt.restore()


def test_a_run_saved_under_another_data_order_version_is_told_what_to_do(tmp_path):
    """Independent rows of data order version 1 dealt a phase's last block of lanes by its length:
    version 2 cannot give its batches, and the refusal says to resume with the version that saved it."""
    ms = _trained(dropout=None)
    saved = {**copy.deepcopy(common.FINGERPRINT), "batch_rows": "independent", "data_order_version": 1}
    with Checkpointer(tmp_path, ms.model, ms.optimizer, fingerprint=saved) as ckpt:
        ckpt.save(3, {"loss": 1.0}, tokens_consumed=96)
    with Checkpointer(
        tmp_path, ms.model, ms.optimizer, fingerprint=RunIdentity({**saved, "data_order_version": 2})
    ) as ckpt:
        with pytest.raises(
            RunMismatchError,
            match=r"data_order_version: 1 -> 2(.|\n)*this version of roxxel puts the "
            r"data in another order than the one that saved it: resume with "
            r"that version, or start a new run",
        ):
            ckpt.restore()


def test_describe_changes():
    saved = {"phases": [{"batch_size": 16, "seq_len": 8}], "seed": 1, "flag": True, "name": "a", "odd key": 1}
    current = {"phases": [{"batch_size": 16, "seq_len": 16}, {"batch_size": 4}], "seed": 1, "flag": 1, "odd key": 2}
    assert describe_changes(saved, current) == [
        "flag: true -> 1",
        'name: removed (was "a")',
        '["odd key"]: 1 -> 2',
        "phases[0].seq_len: 8 -> 16",
        'phases[1]: added {"batch_size": 4}',
    ]
    assert describe_changes({"a": (1, 2)}, {"a": [1, 2]}) == []
    assert describe_changes({"a": 1}, {"a": 1.0}) == []
    assert describe_changes(1, 2) == ["<fingerprint>: 1 -> 2"]
    with pytest.raises(TypeError):
        describe_changes({"a": object()}, {})


def test_an_async_save_error_surfaces_at_the_next_save_and_at_close(tmp_path, monkeypatch):
    from orbax.checkpoint._src.checkpointers import async_checkpointer

    ms = common.build(dropout=None)
    ckpt = Checkpointer(tmp_path, ms.model, ms.optimizer, max_to_keep=1)
    assert ckpt.save(1, {"loss": 1.0})
    ckpt.wait_until_finished()

    def broken_commit(*args, **kwargs):
        raise OSError("injected: no space left on device")

    monkeypatch.setattr(async_checkpointer, "_on_commit_callback", broken_commit)
    assert ckpt.save(2, {"loss": 0.5})  # returns before the background write fails
    with pytest.raises(CheckpointSaveError, match="step 2.*injected: no space left") as info:
        ckpt.save(3, {"loss": 0.4})
    assert info.value.step == 2
    assert isinstance(info.value.__cause__, OSError)
    assert _steps_on_disk(tmp_path) == [1]  # the complete step was not deleted for the failed one

    assert ckpt.save(3, {"loss": 0.4})  # the caller may go on: the next failure is raised by close()
    with pytest.raises(CheckpointSaveError, match="step 3"):
        ckpt.close()
    ckpt.close()  # idempotent
    monkeypatch.undo()
    # close() waited for the failed save's writers and removed what they left (before: they
    # went on writing *.orbax-checkpoint-tmp for a while, and a new checkpointer's first good
    # save failed with "Directory not empty").
    assert [p.name for p in tmp_path.iterdir() if "orbax-checkpoint-tmp" in p.name] == []

    with Checkpointer(tmp_path, ms.model, ms.optimizer) as again:
        assert again.restore() == 1  # half-written steps are never restored
        assert again.save(2, {"loss": 0.5})
        again.wait_until_finished()
    assert _steps_on_disk(tmp_path) == [1, 2]


def test_an_async_error_surfaces_at_a_skipped_save_once_the_write_has_ended(tmp_path, monkeypatch):
    from orbax.checkpoint._src.checkpointers import async_checkpointer

    def broken_commit(*args, **kwargs):
        raise OSError("injected")

    monkeypatch.setattr(async_checkpointer, "_on_commit_callback", broken_commit)
    ms = common.build(dropout=None)
    ckpt = Checkpointer(tmp_path, ms.model, ms.optimizer, save_interval_steps=100)
    try:
        assert ckpt.save(100)
        wait_for(lambda: not ckpt.manager.is_saving_in_progress(), 30, "the failing save to end", interval=0.01)
        with pytest.raises(CheckpointSaveError, match="step 100"):
            ckpt.save(101)  # not a step to save, but the failure is known by now
        assert ckpt.save(102) is False  # raised once, then the checkpointer goes on
    finally:
        ckpt.close()


def test_single_process_sigterm_saves_the_next_step_and_exits_42(tmp_path):
    ms = common.build(dropout=None)
    x = common.inputs()
    previous = signal.getsignal(signal.SIGTERM)
    ckpt = Checkpointer(tmp_path, ms.model, ms.optimizer, save_interval_steps=1000)
    try:
        with pytest.raises(Preempted) as info:
            for step in range(100):
                ckpt.save_and_exit_if_preempted(step, tokens_consumed=step * 10)
                if step == 3:
                    os.kill(os.getpid(), signal.SIGTERM)  # the handler only records it
                common.train_step(ms.model, ms.optimizer, x)
                ckpt.save(step + 1)
        assert signal.getsignal(signal.SIGTERM) != previous  # ours, while open
    finally:
        ckpt.close()
    assert signal.getsignal(signal.SIGTERM) == previous  # restored by close()
    stop = info.value
    assert isinstance(stop, SystemExit) and stop.code == PREEMPTED_EXIT_CODE
    assert stop.step == 4  # the first step checked after the signal
    assert _steps_on_disk(tmp_path) == [4]
    ref = common.flat_host(ms)
    fresh = common.build(seed=2, dropout=None)
    with Checkpointer(tmp_path, fresh.model, fresh.optimizer) as again:
        assert again.restore() == 4
        assert again.restored_run["tokens_consumed"] == 40
    assert common.mismatches(common.flat_host(fresh), ref) == []


@pytest.mark.slow
def test_preempted_exits_the_interpreter_with_code_42():
    proc = subprocess.run(
        [sys.executable, "-c", "from roxxel.train.checkpoint import Preempted\nraise Preempted(7)"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == PREEMPTED_EXIT_CODE, proc.stderr


def test_bad_arguments(tmp_path):
    ms = common.build(dropout=None)
    with pytest.raises(ValueError, match="gs://bucket/prefix"):
        Checkpointer("s3://bucket/x", ms.model, ms.optimizer)
    with pytest.raises(TypeError):
        Checkpointer(tmp_path, ms.model, ms.optimizer, state=ms)
    with pytest.raises(TypeError):
        Checkpointer(tmp_path)
    with pytest.raises(ValueError):
        Checkpointer(tmp_path, ms.model, max_to_keep=0)
    with pytest.raises(ValueError):
        Checkpointer(tmp_path, ms.model, best_mode="lowest")
    with pytest.raises(TypeError, match="fingerprint"):
        Checkpointer(tmp_path, ms.model, fingerprint={"x": object()})
    with Checkpointer(tmp_path, ms.model) as ckpt:
        with pytest.raises(TypeError, match="metric 'loss'"):
            ckpt.save(1, {"loss": "a b".split()})
        with pytest.raises(ValueError):
            ckpt.save(-1)
        with pytest.raises(FileNotFoundError):
            ckpt.restore(5)
    with pytest.raises(RuntimeError, match="closed"):
        ckpt.save(2)


def _worker_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROXXEL_", "JAX_", "TPU_", "JOB"))}
    env.update(
        JAX_PLATFORMS="cpu",
        XLA_FLAGS="--xla_force_host_platform_device_count=2",
        PYTHONUNBUFFERED="1",
        TF_CPP_MIN_LOG_LEVEL="3",
    )
    return env


def _kill_mid_save(ckpt_dir: Path) -> int | None:
    """Run the save loop and SIGKILL it while a step is half written; that step, or None."""
    log_path = ckpt_dir.parent / f"{ckpt_dir.name}.log"
    with open(log_path, "w") as log_file:  # a file, not a pipe that nobody reads while it runs
        proc = subprocess.Popen(
            [sys.executable, str(WORKER), "kill-loop", "--dir", str(ckpt_dir)],
            env=_worker_env(),
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    victim = None
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and proc.poll() is None:
            names = os.listdir(ckpt_dir) if ckpt_dir.is_dir() else []
            done = [int(n) for n in names if n.isdigit()]
            partial = [int(m.group(1)) for n in names if (m := TMP_STEP.match(n))]
            if done and partial and max(partial) > max(done):
                proc.send_signal(signal.SIGKILL)
                victim = max(partial)
                break
            time.sleep(0.002)
    finally:
        if proc.poll() is None and victim is None:
            proc.kill()
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL, (
        f"the save loop ended by itself ({proc.returncode}):\n{log_path.read_text()[-3000:]}"
    )
    if str(victim) in os.listdir(ckpt_dir):
        return None  # it committed between the listing and the kill: try again
    return victim


@pytest.mark.slow
def test_sigkill_during_a_save_restores_the_previous_complete_step(tmp_path):
    for attempt in range(4):
        ckpt_dir = tmp_path / f"attempt{attempt}"
        victim = _kill_mid_save(ckpt_dir)
        if victim is not None:
            break
    else:
        pytest.fail("could not kill the process while a step was half written")
    names = os.listdir(ckpt_dir)
    assert any(TMP_STEP.match(n) and int(TMP_STEP.match(n).group(1)) == victim for n in names), names
    assert max(_steps_on_disk(ckpt_dir)) == victim - 1  # a save starts after the previous one committed

    ms = common.build(common.BIG_DIMS, seed=0)
    expected = common.flat_host(ms)
    for _ in range(victim - 1):  # the worker adds 1 to every array per step
        expected = {k: v + np.ones((), v.dtype) for k, v in expected.items()}
    with Checkpointer(ckpt_dir, state=ms, max_to_keep=2, keep_best=False) as ckpt:
        assert ckpt.restore() == victim - 1
        ckpt.save(victim)  # the same step again, now complete (the partial one was cleaned up)
    assert common.mismatches(common.flat_host(ms), expected) == []
    assert not any(TMP_STEP.match(n) for n in os.listdir(ckpt_dir))
    assert max(_steps_on_disk(ckpt_dir)) == victim
