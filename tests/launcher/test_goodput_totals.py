"""The goodput totals status shows (roxxel_launch.goodput_totals): read from a window's metrics
under the names the Trainer's Goodput callback logs, and worded in two lines."""

from __future__ import annotations

import pytest

from roxxel.train.callbacks import Goodput
from roxxel.train.callbacks.goodput import BADPUT
from roxxel.train.sections import COMPILE, RESTORE, STEP, Section
from roxxel_launch.goodput_totals import GoodputTotals, duration


def _metrics(**changes):
    metrics = {
        "loss": 2.5,
        "goodput": 0.6,
        "goodput_total_s": 100.0,
        "goodput_productive_s": 60.0,
        "goodput_steps": 40.0,
        "goodput_attempts": 3.0,
        "badput_redone_steps": 4.0,
        "badput_restart_s": 20.0,
        "badput_compile_s": 10.0,
        "badput_restore_s": 5.0,
        "badput_save_s": 3.0,
        "badput_other_s": 2.0,
        "badput_eval_s": 0.0,
    }
    metrics.update(changes)
    return metrics


def test_the_callbacks_metrics_are_read_under_their_names():
    """What Goodput.totals() logs, every kind of badput included, is what status reads."""
    now = [1000.0]
    report = Goodput(clock=lambda: now[0])
    for name, seconds in ((RESTORE, 2.0), (COMPILE, 10.0), (STEP, 1.0), (STEP, 1.0)):
        report.on_section(Section(name, 1, now[0], seconds))
        now[0] += seconds
    report.on_restore(0, None)
    now[0] += 0.5
    logged = report.totals()
    totals = GoodputTotals.from_metrics(logged, 2, "metrics")
    assert totals is not None
    assert (totals.share, totals.total_s, totals.productive_s) == (logged["goodput"], logged["goodput_total_s"], 2.0)
    assert dict(totals.badput_s).keys() == set(BADPUT)
    assert (totals.attempts, totals.redone_steps) == (1, 0)
    assert totals.total_s == pytest.approx(totals.productive_s + sum(s for _, s in totals.badput_s))


def test_totals_rank_the_badput_and_say_it_in_two_lines():
    totals = GoodputTotals.from_metrics(_metrics(), 1200, "/run/roxxel_metrics.csv", "2026-01-01T00:00:00+00:00")
    assert totals is not None
    assert [kind for kind, _ in totals.badput_s][:5] == ["restart", "compile", "restore", "save", "other"]
    assert totals.lines() == [
        "60.0% of 1m 40s (productive 1m 00s), at step 1200, 3 attempts, 4 steps redone",
        "restart 20s, compile 10s, restore 5s, 2 other kinds 5s",
    ]
    as_json = totals.as_json()
    assert as_json["badput_s"]["restart"] == 20.0 and as_json["redone_steps"] == 4 and as_json["attempts"] == 3
    assert (as_json["source"], as_json["as_of"]) == ("/run/roxxel_metrics.csv", "2026-01-01T00:00:00+00:00")


def test_one_attempt_without_badput_or_redone_steps():
    metrics = {"goodput_total_s": 10.0, "goodput_productive_s": 10.0, "goodput_attempts": 1, "badput_other_s": 0.0}
    totals = GoodputTotals.from_metrics(metrics, 7, "record")
    assert totals is not None and totals.share == 1.0  # computed when "goodput" itself is missing
    assert totals.lines() == ["100.0% of 10s (productive 10s), at step 7, 1 attempt", "none"]


def test_metrics_without_goodput_or_with_a_non_number_give_no_totals():
    assert GoodputTotals.from_metrics({"loss": 1.0}, 3, "record") is None
    assert GoodputTotals.from_metrics(_metrics(goodput_total_s="soon"), 3, "record") is None
    assert GoodputTotals.from_metrics(_metrics(badput_compile_s=None), 3, "record") is None


def test_durations():
    assert [duration(s) for s in (0.0, 0.0249, 1.5, 40.5, 59.4, 312.0, 7500.0)] == [
        "0ms",
        "25ms",
        "1.5s",
        "40.5s",
        "59.4s",
        "5m 12s",
        "2h 05m",
    ]
