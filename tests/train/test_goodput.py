"""The goodput report (roxxel.train.callbacks.goodput): its arithmetic on given sections, and
real Trainer runs (real Orbax checkpoints, real metrics files and TensorBoard events) that are
preempted once, or crash after their last checkpoint, then resumed."""

from __future__ import annotations

import datetime
import json
import os

import pytest

from roxxel import Curriculum, Phase
from roxxel.train import Cadence, Logger, Trainer
from roxxel.train.callbacks import Callback, Goodput, Window
from roxxel.train.callbacks.goodput import BADPUT
from roxxel.train.log_outputs import tensorboard_tag
from roxxel.train.logger import read_metrics
from roxxel.train.sections import COMPILE, DATA_WAIT, RESTORE, SAVE, STEP, Section
from support.lm import loss_fn, make_dataset, make_model

WINDOW = Window(steps=1, tokens=1, seconds=1.0)


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _iso(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).isoformat(timespec="seconds")


def test_each_second_of_an_attempt_is_productive_or_one_kind_of_badput():
    clock = Clock(1000.0)
    report = Goodput(clock=clock)
    sections = [(RESTORE, 0, 2.0), (DATA_WAIT, 1, 0.5), (COMPILE, 1, 10.0), (DATA_WAIT, 2, 0.25), (STEP, 2, 1.0)]
    at = 1000.0
    for name, step, seconds in sections + [(STEP, 3, 1.0), (SAVE, 3, 3.0)]:
        report.on_section(Section(name, step, at, seconds))
        at += seconds
    report.on_restore(0, None)
    clock.now = at + 0.75  # logging and callbacks, in no section
    got = report.window_metrics(3, WINDOW)
    assert got["goodput_productive_s"] == 2.0 and got["goodput_steps"] == 2
    assert (got["badput_restore_s"], got["badput_compile_s"], got["badput_data_wait_s"]) == (2.0, 10.0, 0.75)
    assert (got["badput_save_s"], got["badput_other_s"], got["badput_restart_s"]) == (3.0, 0.75, 0.0)
    assert got["goodput_total_s"] == pytest.approx(clock.now - 1000.0)
    assert got["goodput"] == pytest.approx(2.0 / got["goodput_total_s"])
    assert got["goodput_attempts"] == 1 and got["badput_redone_steps"] == 0
    assert {f"badput_{kind}_s" for kind in BADPUT} <= set(got)
    assert {tensorboard_tag(key) for key in got} == {f"system/{key}" for key in got}
    # another run() in this process: a new attempt, from the totals it restores (none here)
    report.on_section(Section(RESTORE, 0, clock.now, 1.0))
    report.on_restore(0, None)
    again = report.totals()
    assert (again["goodput_productive_s"], again["badput_restore_s"], again["goodput_attempts"]) == (0.0, 1.0, 1)


def test_a_resume_continues_the_totals_and_charges_the_lost_steps_and_the_restart(tmp_path):
    """The earlier attempt logged steps 2..6 and saved step 4 (its totals: 4 steps of 1 s); it
    ended at an unknown time, and this attempt restores step 4 100 s after that save began:
    the 2 steps past step 4 are redone (2 s at the run's mean step time), the other 98 s restart."""
    with Logger(str(tmp_path), tensorboard=False, progress=False) as logger:
        for step in (2, 4, 6):
            logger.log_metrics_summary(step, {"loss": 1.0})
    saved = {"goodput_productive_s": 4.0, "goodput_steps": 4, "goodput_attempts": 1, "badput_compile_s": 5.0}
    run = {"step": 4, "saved_at": _iso(5000.0), "metrics": {"loss": 1.0, **saved}}
    clock = Clock(5100.0)
    report = Goodput(tmp_path, clock=clock)
    report.on_section(Section(RESTORE, 4, 5100.0, 1.5))
    report.on_restore(4, run)
    clock.now = 5101.5
    got = report.window_metrics(4, WINDOW)
    assert (got["badput_redone_steps"], got["badput_redone_s"], got["badput_restart_s"]) == (2, 2.0, 98.0)
    assert (got["goodput_attempts"], got["goodput_productive_s"], got["badput_compile_s"]) == (2, 4.0, 5.0)
    assert got["badput_restore_s"] == 1.5
    assert got["goodput_total_s"] == pytest.approx(4.0 + 5.0 + 100.0 + 1.5)
    # without the metrics file the lost steps are restart time
    bare = Goodput(clock=clock)
    bare.on_section(Section(RESTORE, 4, 5100.0, 1.5))
    bare.on_restore(4, run)
    assert (bare.totals()["badput_redone_steps"], bare.totals()["badput_restart_s"]) == (0, 100.0)


class Preempt(Callback):
    """Asks for a preemption (as SIGTERM would) after step ``at``."""

    def __init__(self, at: int) -> None:
        self.at, self.trainer = at, None

    def on_batch_end(self, step, loss):
        if step == self.at:
            self.trainer.checkpointer.request_preemption()


class Crash(Callback):
    def on_batch_end(self, step, loss):
        if step == 7:
            raise RuntimeError("the host went away")


def _trainer(run_dir, *callbacks, **kwargs):
    cur = Curriculum(
        make_dataset(str(run_dir.parent / "data")), [Phase(steps=10, global_batch_size=2, seq_len=16)], chunk_tokens=256
    )
    return Trainer(
        *make_model(), cur, loss_fn, save_path=str(run_dir), callbacks=[Goodput(run_dir), *callbacks], **kwargs
    )


def _record(run_dir, step):
    with open(run_dir / "checkpoints" / str(step) / "run" / "metadata") as f:
        return json.load(f)


def _rows(run_dir):
    metrics = read_metrics(run_dir)
    return {key: dict(series) for key, series in metrics.items() if key.startswith(("goodput", "badput_"))}


@pytest.mark.slow
def test_a_run_preempted_once_reports_its_restore_and_no_redone_steps(tmp_path):
    """Preempted after step 5 (logged at 4): the preemption checkpoint holds the totals of steps
    1..5, and the resumed attempt reports 2 attempts, its restore, the restart, no redone step
    (the preemption saved the step it reached), and goes on from step 5's totals."""
    run_dir = tmp_path / "run"
    preempt = Preempt(at=5)
    first = _trainer(run_dir, preempt, cadence=Cadence(log_every=4, save_interval_steps=100))
    preempt.trainer = first
    with pytest.raises(SystemExit) as stopped:
        first.run()
    assert stopped.value.code == 42
    saved = _record(run_dir, 5)["metrics"]
    assert (saved["goodput_attempts"], saved["goodput_steps"]) == (1, 4)  # step 1 compiled
    assert saved["badput_compile_s"] > 0 and saved["badput_restart_s"] == 0
    _trainer(run_dir, cadence=Cadence(log_every=4, save_interval_steps=100)).run()
    rows = _rows(run_dir)
    assert rows["goodput_attempts"] == {4: 1, 8: 2, 10: 2}
    assert rows["badput_redone_steps"][8] == 0
    assert rows["badput_restore_s"][8] > saved["badput_restore_s"]  # this attempt's restore, added
    assert rows["badput_restart_s"][8] > 0  # the preemption save, the exit, the new Trainer
    assert rows["badput_compile_s"][8] > saved["badput_compile_s"]  # compiled again
    assert rows["goodput_steps"][10] == 4 + 4  # steps 2-5, then 7-10 (6 compiled)
    assert rows["goodput_productive_s"][8] > saved["goodput_productive_s"]
    assert 0 < rows["goodput"][10] < 1
    assert rows["goodput_total_s"][10] == pytest.approx(
        rows["goodput_productive_s"][10] + sum(rows[f"badput_{kind}_s"][10] for kind in BADPUT)
    )
    tags = _tensorboard_tags(run_dir)
    assert {"system/goodput", "system/badput_restore_s", "system/badput_redone_steps"} <= tags, tags


@pytest.mark.slow
def test_an_attempt_that_crashed_after_its_checkpoint_has_its_lost_steps_redone(tmp_path):
    """Saved at 4, logged up to 6, crashed at 7: the resumed attempt redoes steps 5 and 6."""
    run_dir = tmp_path / "run"
    with pytest.raises(RuntimeError, match="the host went away"):
        _trainer(run_dir, Crash(), cadence=Cadence(log_every=2, save_interval_steps=4)).run()
    _trainer(run_dir, cadence=Cadence(log_every=2, save_interval_steps=4)).run()
    rows = _rows(run_dir)
    assert rows["badput_redone_steps"][6] == 2 and rows["goodput_attempts"][6] == 2
    assert rows["badput_redone_s"][6] > 0


def _tensorboard_tags(run_dir) -> set[str]:
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    (run,) = os.listdir(run_dir / "tensorboard")
    acc = accumulator.EventAccumulator(str(run_dir / "tensorboard" / run))
    acc.Reload()
    return set(acc.Tags()["scalars"])
