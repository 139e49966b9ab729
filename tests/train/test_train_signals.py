"""Ctrl-C saves like SIGTERM, a second Ctrl-C stops at once, and an uncaught error is printed once.

Each case runs a real Trainer in a subprocess (real signals, real Orbax writes) with bounded timeouts.
"""

import os
import signal
import subprocess
import sys
import time

import pytest

from roxxel.exit_codes import PREEMPTED_EXIT_CODE

from support.lm import make_dataset
from support.paths import TESTS, WORKERS

WORKER = str(WORKERS / "train_signal_worker.py")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("data") / "json-py")
    make_dataset(path)
    return path


def _start(data, run_dir, mode):
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(TESTS) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen(
        [sys.executable, WORKER, data, str(run_dir), mode],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_steps(proc, n=3, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith("STEP") and int(line.split()[1]) >= 0:
            n -= 1
            if n == 0:
                return
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError(f"worker did not train: {proc.communicate()}")


@pytest.mark.slow
def test_ctrl_c_saves_then_exits_with_the_preemption_code(data, tmp_path):
    proc = _start(data, tmp_path, "long")
    _wait_for_steps(proc)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == PREEMPTED_EXIT_CODE, err[-3000:]
    steps = [int(n) for n in os.listdir(tmp_path / "checkpoints") if n.isdigit()]
    assert len(steps) == 1 and steps[0] >= 1, steps
    assert "Ctrl-C" in open(tmp_path / "roxxel_system.log").read() or "Ctrl-C" in err
    assert f"stop requested (Ctrl-C): saving step {steps[0]} and stopping" in err and "SIGTERM received" not in err, err


@pytest.mark.slow
def test_a_second_ctrl_c_stops_at_once(data, tmp_path):
    proc = _start(data, tmp_path, "long")
    _wait_for_steps(proc)
    proc.send_signal(signal.SIGINT)
    first = ""
    while "Ctrl-C again" not in first:  # Python runs one handler for signals that arrive together
        first = proc.stderr.readline()
        assert first or proc.poll() is None, "worker exited before handling the first Ctrl-C"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode not in (0, PREEMPTED_EXIT_CODE), err[-3000:]
    assert "KeyboardInterrupt" in err


@pytest.mark.slow
def test_an_uncaught_trainer_error_is_printed_once(data, tmp_path):
    proc = _start(data, tmp_path, "raise")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1
    assert err.count("RuntimeError: loss_fn exploded") == 1, err
    assert "loss_fn exploded" in open(tmp_path / "roxxel_system.log").read()  # and kept in the system log
