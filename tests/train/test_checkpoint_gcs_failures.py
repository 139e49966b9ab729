"""Saves to an object store that answers HTTP errors end within the Checkpointer's timeout.

The store is gcp-storage-emulator (tests/support/gcs_emulator.py) injecting faults into
every write under the checkpoint's prefix: persistent 500s, or 503s to half the writes.
Each case is a real process (tests/support/workers/ckpt_gcs_fail_worker.py) saving through
TensorStore's GCS driver and gcsfs, under a bounded wall time. Before the fix, persistent
500s raised after ~20 s, then close() raised a raw HttpError and the process never
exited; with 503 at 50% a save with timeout=40 took 84 s. Later a save failed at 33.6 s with
timeout 15: gcsfs's own retries outlasted Orbax's timeout, which bounds only its barriers; the
Checkpointer now bounds the whole wait for a save by its timeout.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from support.paths import TESTS, WORKERS

pytestmark = pytest.mark.slow

WORKER = str(WORKERS / "ckpt_gcs_fail_worker.py")
BUCKET = "roxxel-test"
TIMEOUT_S = 8  # the worker's Checkpointer timeout (gcsfs alone retries ~30 s)
MARGIN_S = 10  # closing, the exit hook, a busy machine
SAVE_MARGIN_S = 2  # the save itself fails at its deadline (Orbax's own timeout fired ~4 s later)
STARTUP_S = 60  # importing jax/orbax/gcsfs on 2 busy cores


def _require_emulator() -> None:
    pytest.importorskip("gcp_storage_emulator", reason="gcp-storage-emulator is not installed")
    pytest.importorskip("gcsfs", reason="gcsfs (epath's gs:// backend without TensorFlow) is not installed")


def _emulator(tmp_path, fault: str):
    import support.gcs_emulator as wrapper

    proc, url = wrapper.start(tmp_path / "emulator.log", BUCKET, fault=fault)
    return wrapper, proc, url


def _save(tmp_path, fault: str) -> tuple[int, dict[str, float], str, str, float]:
    """Run the worker against a faulty emulator; return its exit code, the times it printed
    (seconds since its save started), its output, and the seconds from save start to exit."""
    wrapper, emulator, url = _emulator(tmp_path, fault)
    try:
        env = dict(
            os.environ,
            JAX_PLATFORMS="cpu",
            PYTHONUNBUFFERED="1",
            **wrapper.client_env(url),
            PYTHONPATH=str(TESTS) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        )
        with open(tmp_path / "worker.err", "w") as err_file:
            proc = subprocess.Popen(
                [sys.executable, WORKER, f"gs://{BUCKET}/faulty/run", str(TIMEOUT_S)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=err_file,
                text=True,
            )
            line, deadline = "", time.monotonic() + STARTUP_S
            while not line.startswith("SAVING") and time.monotonic() < deadline:
                line = proc.stdout.readline()
                if not line and proc.poll() is not None:
                    break
            started = time.monotonic()
            try:
                out, _ = proc.communicate(timeout=TIMEOUT_S + MARGIN_S + 20)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, _ = proc.communicate()
        err = (tmp_path / "worker.err").read_text()
        elapsed = time.monotonic() - started
    finally:
        wrapper.stop(emulator)
    times = {}
    for line in out.splitlines():
        word, _, rest = line.partition(" ")
        if word in ("SAVED", "SAVE_FAILED", "CLOSED", "CLOSE_FAILED"):
            times[word] = float(rest.split()[0])
    return proc.returncode, times, out, err, elapsed


# Each save below mostly waits (on the store's errors, then on its timeout), so the selected
# ones run at the same time, each in a thread with its own emulator, started when the first
# test asks; each test then checks its own.
FAULTS = {
    "test_persistent_500s_fail_the_save_within_its_timeout_and_the_process_exits": "500:1:faulty/",
    "test_503s_to_half_the_writes_end_the_save_within_its_timeout": "503:0.5:faulty/",
}


@pytest.fixture(scope="module")
def saves(request, tmp_path_factory) -> Iterator[dict[str, Future]]:
    """The selected tests' saves, by fault, started together: each one's result of _save."""
    faults = [
        FAULTS[item.originalname]
        for item in request.session.items
        if item.module is request.module and item.originalname in FAULTS
    ]
    _require_emulator()
    with ThreadPoolExecutor(max_workers=max(1, len(faults)), thread_name_prefix="save") as pool:
        yield {fault: pool.submit(_save, tmp_path_factory.mktemp("save"), fault) for fault in faults}


def test_persistent_500s_fail_the_save_within_its_timeout_and_the_process_exits(saves):
    code, times, out, err, elapsed = saves["500:1:faulty/"].result()
    report = f"exit {code} after {elapsed:.1f} s\n{out[-3000:]}\n{err[-3000:]}"
    print(f"exit {code} after {elapsed:.1f} s; {times}")  # the measured times, with pytest -rP
    assert code == 1, report
    assert "SAVE_FAILED" in times and times["SAVE_FAILED"] < TIMEOUT_S + SAVE_MARGIN_S, report
    assert "CLOSED" in times or "CLOSE_FAILED" in times, report  # never a raw HttpError
    assert "HttpError" not in err.split("roxxel:")[0] or "Traceback" not in err, report
    assert elapsed < TIMEOUT_S + MARGIN_S, report


def test_503s_to_half_the_writes_end_the_save_within_its_timeout(saves):
    code, times, out, err, elapsed = saves["503:0.5:faulty/"].result()
    report = f"exit {code} after {elapsed:.1f} s\n{out[-3000:]}\n{err[-3000:]}"
    print(f"exit {code} after {elapsed:.1f} s; {times}")  # the measured times, with pytest -rP
    assert ("SAVED" in times) != ("SAVE_FAILED" in times), report
    saved_or_failed = times.get("SAVED", times.get("SAVE_FAILED"))
    assert saved_or_failed < TIMEOUT_S + MARGIN_S, report
    assert code == (0 if "SAVED" in times else 1), report
    assert elapsed < TIMEOUT_S + MARGIN_S, report
