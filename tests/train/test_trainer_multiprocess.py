"""Real multi-process training over loopback: only process 0 logs; 2 processes resume as 1, exactly,
also with another checkpoint cadence."""

import os
import sys
from pathlib import Path

import numpy as np
import pytest

from support import processes
from support.lm import make_dataset
from support.paths import WORKERS

WORKER = str(WORKERS / "train_worker.py")


def run(n, devices, data, run_dir, log_dir, stop, params_out="-", init_seed=0, save_interval_steps=100):
    """``n`` processes of the worker on ``devices`` CPU devices each: each one's (stdout, stderr)."""
    args = [data, run_dir, log_dir, str(stop), params_out, str(init_seed), str(save_interval_steps)]
    procs = processes.run(
        lambda i, coordinator: [sys.executable, WORKER, coordinator, str(i), str(n), *args],
        n,
        Path(run_dir + "-processes"),
        processes.cpu_env(devices),
    )
    return [(p.out, p.err) for p in procs]


@pytest.mark.slow
def test_two_processes_log_once_and_resume_as_one_with_another_checkpoint_cadence(tmp_path):
    """Issue 18: a resume may change the number of processes and the checkpoint cadence at
    once; both are allowed without allow_changed_run, logged, and the batches are exactly an
    uninterrupted run's."""
    data = str(tmp_path / "data")
    make_dataset(data)
    # Reference: one process with two devices, start to end.
    run(1, 2, data, str(tmp_path / "ref"), str(tmp_path / "ref-logs"), -1, str(tmp_path / "ref.npz"))
    # Two processes with one device each (the same 2-device mesh) stop inside phase 1...
    outs = run(2, 1, data, str(tmp_path / "job"), str(tmp_path / "logs"), 9, save_interval_steps=4)
    ours = lambda text: [line for line in text.splitlines() if not line.startswith("[Gloo]")]  # JAX's own
    assert "step 9/9" in outs[0][0] and ours(outs[1][0]) == []  # only process 0 printed
    # Issue 51: a progress line of a multi-process run fits 100 columns; the straggler report and the
    # per-device rates are in the metrics file, not on it.
    lines = [line for line in outs[0][0].splitlines() if line.startswith("step ") and "loss=" in line]
    assert lines and all(len(line) <= 100 for line in lines), lines
    assert sum("tok/s=" in line for line in lines) >= len(lines) - 2, lines  # a phase's first step is untimed
    assert "host_time_s_median" not in outs[0][0] and "slowest_process" not in outs[0][0]
    header = (tmp_path / "logs-0" / "roxxel_metrics.csv").read_text().splitlines()[0]
    assert "host_time_s_median" in header and "tokens_per_sec_per_device" in header
    assert sorted(os.listdir(tmp_path / "logs-0")) == ["roxxel_metrics.csv", "roxxel_system.log", "tensorboard"]
    assert not os.path.exists(tmp_path / "logs-1")  # process 1 created no log files
    assert {n for n in os.listdir(tmp_path / "job" / "checkpoints") if n.isdigit()} == {
        "4",
        "8",
        "9",
    }  # every 4, the stop
    # ... and one process resumes their checkpoint to the end, saving every 5 steps instead.
    resumed = run(
        1,
        2,
        data,
        str(tmp_path / "job"),
        str(tmp_path / "logs-resumed"),
        -1,
        str(tmp_path / "resumed.npz"),
        init_seed=9,  # another init: only the checkpoint can make it equal
        save_interval_steps=5,
    )
    # Both changes are allowed (no allow_changed_run) and logged (issue 18).
    system_log = (tmp_path / "logs-resumed-0" / "roxxel_system.log").read_text()
    said = system_log + resumed[0][0] + resumed[0][1]
    assert "saved by 2 processes; resuming on 1" in said, system_log[-3000:]
    assert "save_interval_steps: 4 -> 5" in said, system_log[-3000:]
    steps = {int(n) for n in os.listdir(tmp_path / "job" / "checkpoints") if n.isdigit()}
    assert 10 in steps and 12 in steps, steps  # every 5 now (10 is no multiple of 4), and at the end
    want, got = np.load(tmp_path / "ref.npz"), np.load(tmp_path / "resumed.npz")
    assert sorted(want.files) == sorted(got.files)
    for k in want.files:
        assert np.array_equal(want[k], got[k]), k
