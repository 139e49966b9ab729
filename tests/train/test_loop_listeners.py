"""Throughput and the straggler report as listeners of the loop's sections (issue #52): their
reading of given sections (roxxel.train.sections.TimedSteps, StragglerReport), and real
Trainer runs in which a user's own callback hears the same sections and computes the same
throughput as the built-in one, without touching the Trainer."""

from __future__ import annotations

import pytest

from roxxel import Curriculum, Phase
from roxxel.train import Cadence, Trainer
from roxxel.train.callbacks import Callback, Window
from roxxel.train.logger import read_metrics
from roxxel.train.sections import COMPILE, DATA_WAIT, EVAL, RESTORE, SAVE, STEP, Section, TimedSteps
from roxxel.train.stragglers import StragglerReport
from support.lm import loss_fn, make_dataset, make_model

BATCH, SEQ = 4, 32


def _feed(listener, sections):
    for name, step, seconds, waited in sections:
        listener(Section(name, step, 0.0, seconds, waited))


def test_timed_steps_count_batch_waits_and_steps_but_not_the_compiling_step():
    timed = TimedSteps()
    _feed(
        timed.observe,
        [
            (RESTORE, 0, 5.0, 0.0),
            (DATA_WAIT, 1, 3.0, 0.0),  # the stream's set-up: belongs to the compiling step
            (COMPILE, 1, 20.0, 19.0),
            (DATA_WAIT, 2, 0.5, 0.0),
            (STEP, 2, 1.0, 0.25),
            (SAVE, 2, 7.0, 0.0),  # saves and evaluations are not steps
            (EVAL, 2, 9.0, 0.0),
            (DATA_WAIT, 3, 0.25, 0.0),
            (STEP, 3, 2.0, 1.5),
        ],
    )
    assert (timed.steps, timed.seconds, timed.waited) == (2, 3.75, 1.75)
    assert timed.host_seconds == 2.0  # the batch waits and the dispatch, not the waits on results
    _feed(timed.observe, [(DATA_WAIT, 4, 0.5, 0.0)])
    timed.reset()  # a logged window ends between a step and the next batch wait ...
    _feed(timed.observe, [(STEP, 4, 1.0, 0.0)])
    assert (timed.steps, timed.seconds) == (1, 1.5)  # ... whose wait goes with its step
    _feed(timed.observe, [(RESTORE, 4, 1.0, 0.0)])  # another run(): from nothing
    assert (timed.steps, timed.seconds, timed.waited) == (0, 0.0, 0.0)


class Observed(StragglerReport):
    """The report with its all-gather recorded instead of run (one process has none)."""

    def __init__(self):
        super().__init__()
        self.observed = []

    def observe(self, step, host_time_s):
        self.observed.append((step, host_time_s))
        return {"host_time_s_max": host_time_s}


def test_the_straggler_report_gathers_host_time_per_step_at_logged_windows_only():
    report = Observed()
    _feed(report.on_section, [(DATA_WAIT, 1, 1.0, 0.0), (COMPILE, 1, 9.0, 9.0)])
    _feed(report.on_section, [(DATA_WAIT, 2, 0.5, 0.0), (STEP, 2, 1.0, 0.75), (STEP, 3, 1.0, 0.5)])
    # a checkpoint inside the window: no collective, and the window goes on
    assert report.window_metrics(3, Window(2, 256, 3.5, logged=False)) == {}
    _feed(report.on_section, [(DATA_WAIT, 4, 0.25, 0.0), (STEP, 4, 1.0, 1.0)])
    assert report.window_metrics(4, Window(3, 384, 4.75)) == {"host_time_s_max": 0.5}  # (3.75 - 2.25) / 3 steps
    assert report.window_metrics(5, Window(0, 0, 0.0)) == {"host_time_s_max": 0.0}  # a new window: no steps yet
    assert report.observed == [(4, 0.5), (5, 0.0)]


def test_in_one_process_the_straggler_report_adds_nothing():
    report = StragglerReport()
    _feed(report.on_section, [(STEP, 2, 1.0, 0.5)])
    assert report.window_metrics(2, Window(1, 128, 1.0)) == {}


class MyThroughput(Callback):
    """A user's report: tokens per second from the sections alone (it knows its batch)."""

    def __init__(self, tokens_per_step):
        self.tokens_per_step = tokens_per_step
        self.steps, self.seconds, self.batch_wait = 0, 0.0, 0.0
        self.sections = []

    def on_section(self, event):
        self.sections.append(event)
        if event.name == DATA_WAIT:
            self.batch_wait = event.duration
        elif event.name == COMPILE:
            self.batch_wait = 0.0
        elif event.name == STEP:
            self.steps, self.seconds = self.steps + 1, self.seconds + self.batch_wait + event.duration

    def window_metrics(self, step, window):
        if not window.logged or not self.steps:
            return {}
        rate = self.steps * self.tokens_per_step / self.seconds
        self.steps, self.seconds = 0, 0.0
        return {"my_tokens_per_sec": rate}


@pytest.fixture(scope="module")
def cur(tmp_path_factory):
    data = make_dataset(str(tmp_path_factory.mktemp("d") / "data"))
    return Curriculum(
        data,
        [Phase(steps=5, global_batch_size=BATCH, seq_len=SEQ), Phase(steps=4, global_batch_size=BATCH, seq_len=SEQ)],
        chunk_tokens=256,
    )


def test_a_users_callback_hears_the_same_sections_and_computes_the_same_throughput(cur, tmp_path):
    mine = MyThroughput(BATCH * SEQ)
    model, opt = make_model()
    cadence = Cadence(log_every=3, save_interval_steps=2)  # checkpoints inside windows: not logged there
    Trainer(model, opt, cur, loss_fn, save_path=str(tmp_path), cadence=cadence, callbacks=[mine]).run()
    m = {k: dict(v) for k, v in read_metrics(str(tmp_path)).items()}
    assert sorted(m["tokens_per_sec"]) == [3, 5, 9]  # multiples of 3 and phase ends (6: its compiling step only)
    assert m["my_tokens_per_sec"] == {s: pytest.approx(v, rel=1e-9) for s, v in m["tokens_per_sec"].items()}
    # the phase's first step compiles: steps 1 and 6 are compile sections, every other one a step section
    steps = [(e.name, e.step) for e in mine.sections if e.name in (COMPILE, STEP)]
    assert steps == [(COMPILE, 1)] + [(STEP, s) for s in range(2, 6)] + [(COMPILE, 6)] + [(STEP, s) for s in (7, 8, 9)]
    # a window's last step (a log or checkpoint step) waits for its own result in its section, so
    # the window's time runs to its last result; step 7 had room in the queue (depth 2)
    waited = {e.step: e.waited for e in mine.sections if e.name == STEP}
    assert waited[7] == 0.0 and all(waited[s] > 0 for s in (2, 3, 4, 5, 8, 9))
