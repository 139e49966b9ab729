"""After a failed background save, every way out ends promptly, non-zero, with one readable message.

Each case is a real process (tests/support/workers/ckpt_fail_worker.py) with real Orbax writes and a real
failure (a directory replaced by a file, or a failing commit), under a bounded timeout.
Before the fix, the interpreter waited ~300 s for Orbax's threads and exited 0 when the
failure went unseen, after ~170 lines of Orbax tracebacks on the terminal.

The cases' processes run two at a time (each is single-threaded for most of its life, and the
machine has 2 cores), started by a module fixture when the first case asks; each case then
checks its own process.
"""

import os
import subprocess
import sys
import threading
import time

import pytest

from support.paths import TESTS, WORKERS

WORKER = str(WORKERS / "ckpt_fail_worker.py")
TIMEOUT_S = 20  # the worker's Checkpointer timeout: it bounds a whole save, also a healthy one on 2 busy cores
STARTUP_S = 40  # importing jax/orbax and the first save on 2 busy cores
AT_ONCE = 2  # processes running at the same time
CASES = [("file", "exit"), ("file", "wait"), ("file", "save"), ("file", "close"), ("file", "preempt"),
         ("rename", "exit"), ("rename", "close")]


class Case:
    """One worker process: when it printed INJECTED, when it ended, its exit code and output."""

    def __init__(self, directory, injection: str, path_out: str) -> None:
        self.argv = [sys.executable, WORKER, str(directory), injection, path_out]
        self.injected_at: float | None = None
        self.ended_at: float | None = None
        self.returncode: int | None = None
        self.out, self.err = "", ""
        self.done = threading.Event()

    def run(self) -> None:
        env = dict(os.environ, JAX_PLATFORMS="cpu",
                   PYTHONPATH=str(TESTS) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        proc = subprocess.Popen(self.argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        err_lines: list[str] = []
        reader = threading.Thread(target=lambda: err_lines.extend(proc.stderr), daemon=True)
        reader.start()
        killer = threading.Timer(STARTUP_S + 60 + TIMEOUT_S + 20, proc.kill)  # a process that hangs anywhere
        killer.start()
        try:
            for line in proc.stdout:
                self.out += line
                if "INJECTED" in line and self.injected_at is None:
                    self.injected_at = time.monotonic()
            proc.wait(timeout=TIMEOUT_S + 20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        finally:
            killer.cancel()
            self.ended_at = time.monotonic()
            reader.join(timeout=10)
            self.returncode, self.err = proc.returncode, "".join(err_lines)
            self.done.set()


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    """Start every case's process, AT_ONCE at a time, in the background."""
    made = {c: Case(tmp_path_factory.mktemp("-".join(c)) / "ckpt", *c) for c in CASES}
    slots = threading.Semaphore(AT_ONCE)

    def run(case: Case) -> None:
        with slots:
            case.run()

    for case in made.values():
        threading.Thread(target=run, args=(case,), daemon=True).start()
    return made


@pytest.mark.slow
@pytest.mark.parametrize("injection, path_out", CASES)
def test_a_failed_save_ends_the_process_promptly_with_one_message(cases, injection, path_out):
    case = cases[injection, path_out]
    assert case.done.wait(timeout=len(CASES) * (STARTUP_S + 60 + TIMEOUT_S + 20)), "the case never ran"
    err = case.err
    assert case.injected_at is not None, (case.returncode, case.out, err[-3000:])
    elapsed = case.ended_at - case.injected_at
    assert elapsed < TIMEOUT_S + 20, f"the process did not end within {TIMEOUT_S + 20} s of the failure:\n{err[-3000:]}"
    assert case.returncode == 1, (case.returncode, err[-3000:])
    assert err.count("CheckpointSaveError") in (1, 2), err  # the message (and its traceback's type line)
    assert "step 2" in err
    orbax_tracebacks = err.count("_SignalingThread.run() raised")
    assert orbax_tracebacks == 0, err[-3000:]
    # One readable error, not 40 lines per Orbax thread. Known residual, not counted: under load,
    # Orbax's asyncio callbacks racing interpreter shutdown sometimes print "Event loop is closed"
    # through Python's unraisable-exception hook (after our message; the exit code is unaffected).
    ours = err.split("Event loop is closed")[0] if "Event loop is closed" in err else err
    assert len(ours.splitlines()) < 60, err
