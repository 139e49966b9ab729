"""The grace period against the last measured preemption save: a real Checkpointer preempted
(SIGTERM to this single process, real Orbax save on local disk) records how long its save
took in roxxel_preemption.json; rendering a spec whose termination_grace_period is shorter
than that (with its margin) warns, naming both."""

from __future__ import annotations

import json
import logging
import os
import signal

import pytest

from roxxel.train.checkpoint import Checkpointer, Preempted
from roxxel_launch import render as R
from roxxel_launch import spec as S
from support.ckpt import MODEL_DIMS, build
from support.specs import spec_dict


def _preempted_run(path) -> dict:
    with Checkpointer(path, state=build(MODEL_DIMS, 0)) as ckpt:
        with pytest.raises(Preempted):
            for step in range(ckpt.restore(), 100):
                ckpt.save_and_exit_if_preempted(step)
                if step == 2:
                    os.kill(os.getpid(), signal.SIGTERM)  # the notice: the next check is the agreed step
    return json.loads((path / "roxxel_preemption.json").read_text())


def test_a_preemption_records_its_save_time_and_a_short_grace_period_is_warned_about(tmp_path, caplog):
    record = _preempted_run(tmp_path / "ckpt")
    assert record["step"] == 3 and record["process_count"] == 1
    assert 0 < record["save_s"] < 120 and record["state_bytes"] > 0
    record["save_s"] = 50.0  # as a large state's save would take: the margin makes it 85 s
    (tmp_path / "ckpt" / "roxxel_preemption.json").write_text(json.dumps(record))
    for grace, warned in ((30, True), (85, False), (600, False)):
        spec = S.spec_from_dict(spec_dict(checkpoint_dir=str(tmp_path / "ckpt"), termination_grace_period=grace))
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="roxxel_launch.render"):
            R.render(spec, cluster=False)  # as submit --local and validate --local render it
        said = "the last preemption save of this run took 50.0 s (step 3" in caplog.text
        assert said == warned, (grace, caplog.text)
        if warned:
            assert "termination_grace_period is 30 s: raise it to at least 85 s" in caplog.text


@pytest.mark.parametrize(
    "text",
    [
        '{"save_s": NaN}',
        '{"save_s": Infinity}',
        '{"save_s": 1e400}',
        '{"save_s": 5, "state_bytes": "big"}',
        "[1, 2]",
        "not json",
    ],
)
def test_a_damaged_record_is_ignored_not_a_traceback(tmp_path, text):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "roxxel_preemption.json").write_text(text)
    R.render(
        S.spec_from_dict(spec_dict(checkpoint_dir=str(tmp_path / "ckpt"), termination_grace_period=1)), cluster=False
    )


def test_the_margin_rounds_up(tmp_path, caplog):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "roxxel_preemption.json").write_text('{"save_s": 13.5, "step": 1}')
    with caplog.at_level(logging.WARNING, logger="roxxel_launch.render"):
        R.render(
            S.spec_from_dict(spec_dict(checkpoint_dir=str(tmp_path / "ckpt"), termination_grace_period=30)),
            cluster=False,
        )
    assert "raise it to at least 31 s" in caplog.text
