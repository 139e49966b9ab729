"""A small training-program stand-in (no JAX) for the local backend's tests.

Behaviour by ``LOCAL_TEST_MODE`` (``ROXXEL_CHECKPOINT_DIR`` holds its state and pid files,
standing in for checkpoints that survive restarts and resumes):

``wait``
    write ``pid-<id>`` and wait (up to 60 s) to be stopped; the process whose id is in
    ``LOCAL_TEST_IGNORE_TERM`` ignores SIGTERM (only SIGKILL stops it).
``preempt``
    first run: process 1 exits 42 (preempted after a checkpoint) once the others are
    ready; they handle SIGTERM by "saving a checkpoint" and exiting 42. Later runs: complete (exit 0).
``fail``
    process 1 prints a few lines and exits 3; the others wait to be stopped.
``ok``
    print a line and exit 0.
"""

from __future__ import annotations

import os
import pathlib
import signal
import sys
import time

from roxxel import distributed

# The process identity as a pod's environment gives it (the rendered JobSet's or Job's).
identity = distributed.detect(os.environ)
pid, count = identity.process_id, identity.num_processes
mode = os.environ.get("LOCAL_TEST_MODE", "ok")
state = pathlib.Path(os.environ["ROXXEL_CHECKPOINT_DIR"])
state.mkdir(parents=True, exist_ok=True)


def write_pid_file() -> None:
    """``pid-<id>`` holding this process's pid, written atomically (temp + rename): the tests poll
    these files and must never read a half-written one."""
    tmp = state / f".pid-{pid}.tmp"
    tmp.write_text(str(os.getpid()))
    os.replace(tmp, state / f"pid-{pid}")


def wait_forever(seconds: float = 60.0) -> None:
    time.sleep(seconds)
    print(f"process {pid}: nobody stopped me", flush=True)
    sys.exit(5)


if mode == "ok":
    print(f"process {pid} of {count}: ok run={os.environ['ROXXEL_RUN_NAME']}", flush=True)
elif mode == "wait":
    if os.environ.get("LOCAL_TEST_IGNORE_TERM") == str(pid):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    write_pid_file()
    print(f"process {pid}: waiting", flush=True)
    wait_forever()
elif mode == "preempt":
    done = state / f"checkpoint-{pid}"
    if done.exists():
        print(f"process {pid}: restored checkpoint {done.read_text()}, finishing", flush=True)
        sys.exit(0)

    def save_and_exit(signo, _frame):
        done.write_text("step-7")
        print(f"process {pid}: SIGTERM, checkpoint saved", flush=True)
        sys.exit(42)

    signal.signal(signal.SIGTERM, save_and_exit)
    if pid == 1:
        # Wait until the others handle SIGTERM, so that they too can save a checkpoint.
        deadline = time.monotonic() + 30
        while not all((state / f"pid-{i}").exists() for i in range(count) if i != 1):
            if time.monotonic() > deadline:
                sys.exit("process 1: the other processes never became ready")
            time.sleep(0.05)
        done.write_text("step-7")
        print("process 1: preempted after a checkpoint", flush=True)
        sys.exit(42)
    write_pid_file()
    wait_forever()
elif mode == "fail":
    if pid == 1:
        for i in range(30):
            print(f"process 1: line {i}", flush=True)
        print("process 1: fatal: the loss is NaN", flush=True)
        sys.exit(3)
    wait_forever()
else:
    sys.exit(f"unknown LOCAL_TEST_MODE {mode!r}")
