"""Checkpointer across real jax.distributed processes (CPU, loopback), local disk and gs://.

Each run spawns tests/support/workers/ckpt_worker.py once per process; each process has 2 CPU devices.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from roxxel.exit_codes import PREEMPTED_EXIT_CODE

from support import processes
from support.paths import WORKERS
from support.processes import Process
from support.wait import wait_for

pytestmark = pytest.mark.slow

WORKER = WORKERS / "ckpt_worker.py"
TIMEOUT = 150  # seconds for one run of all its processes; JAX's own timeouts are lower
BUCKET = "roxxel-test"  # the gcs_emulator fixture's (tests/conftest.py)


def _start(mode: str, nproc: int, *args: str, logs: Path, env: dict[str, str] | None = None) -> list[Process]:
    def argv(pid: int, coordinator: str) -> list[str]:
        cmd = [sys.executable, str(WORKER), mode, *args, "--nproc", str(nproc), "--pid", str(pid)]
        return cmd + (["--coordinator", coordinator] if nproc > 1 else [])

    return processes.start(argv, nproc, logs, processes.cpu_env(2, env), name=mode)


def _finish(procs: list[Process], expect: int = 0) -> list[dict]:
    return [p.result() for p in processes.finish(procs, expect, TIMEOUT)]


def _run(
    mode: str, nproc: int, *args: str, logs: Path, env: dict[str, str] | None = None, expect: int = 0
) -> list[dict]:
    return _finish(_start(mode, nproc, *args, logs=logs, env=env), expect)


def _check_restored(results: list[dict], step: int, nproc: int) -> None:
    assert len(results) == nproc
    for r in results:
        assert r["step"] == step and r["model_state_step"] == step
        assert r["compared"] == 14 and r["mismatched"] == [], r
        assert r["devices"] == 2 * nproc
        # Arrays land sharded over this run's devices, not the saving run's.
        assert r["sharding"] == {"spec": "P('d',)", "devices": 2 * nproc}


def test_two_processes_save_and_one_and_four_processes_restore_bitwise(tmp_path):
    ckpt, ref = str(tmp_path / "ckpt"), str(tmp_path / "ref.npz")
    saved = _run("train", 2, "--dir", ckpt, "--steps", "3", "--ref", ref, logs=tmp_path / "logs")
    for r in saved:
        assert r["steps"] == [2, 3] and r["sharding"] == {"spec": "P('d',)", "devices": 4}
    assert sorted(os.listdir(Path(ckpt) / "3" / "state")).count("ocdbt.process_1") == 1  # both wrote shards

    one = _run("restore", 1, "--dir", ckpt, "--ref", ref, logs=tmp_path / "logs")
    _check_restored(one, step=3, nproc=1)
    assert one[0]["saved_process_count"] == 2 and one[0]["tokens"] == 96
    _check_restored(_run("restore", 4, "--dir", ckpt, "--ref", ref, logs=tmp_path / "logs"), step=3, nproc=4)


def test_sigterm_to_one_of_two_processes_saves_the_same_step_and_exits_42(tmp_path):
    ckpt, ref, ready = tmp_path / "ckpt", str(tmp_path / "ref.npz"), str(tmp_path / "ready")
    procs = _start("preempt", 2, "--dir", str(ckpt), "--ref", ref, "--ready", ready, logs=tmp_path / "logs")
    try:

        def both_ready():
            assert all(p.popen.poll() is None for p in procs), "a worker died before training"
            return all(os.path.exists(f"{ready}.{i}") for i in range(2))

        wait_for(both_ready, TIMEOUT, "the workers to become ready")
        time.sleep(0.5)  # let a few steps pass
        procs[1].popen.send_signal(signal.SIGTERM)
    finally:
        results = _finish(procs, expect=PREEMPTED_EXIT_CODE)
    steps = {r["preempted_at"] for r in results}
    assert len(steps) == 1 and None not in steps, results
    (step,) = steps
    assert step > 0
    assert all(r["code"] == PREEMPTED_EXIT_CODE and r["steps"] == [step] for r in results)
    assert sorted(n for n in os.listdir(ckpt) if n.isdigit()) == [str(step)]  # the interval never saved

    restored = _run("restore", 1, "--dir", str(ckpt), "--ref", ref, logs=tmp_path / "logs")
    _check_restored(restored, step=step, nproc=1)
    assert restored[0]["tokens"] == step * 32


@pytest.mark.parametrize(
    ("signalled", "window", "restored"),
    [
        (0, "initialized", True),
        (1, "restored", True),
        (1, "initialized", False),
        (0, "restored", False),
    ],
    ids=[
        "worker0-initialized-restored",
        "worker1-restored-restored",
        "worker1-initialized-fresh",
        "worker0-restored-fresh",
    ],
)
def test_a_sigterm_before_the_first_check_is_never_lost(tmp_path, restored, window, signalled):
    """A notice that arrives after jax.distributed.initialize but before the attempt's first
    preemption check (the restore, the stream set-up, the first compilation) ends in one
    agreed step, saved, and exit 42. JAX agrees on the largest step id seen + 1, and every
    process that has not checked yet counts as 0: with training steps as ids a run restored
    at step 3 agreed on step 1, never reached it, trained to its end and exited 0."""
    ckpt, ref = str(tmp_path / "ckpt"), str(tmp_path / "ref.npz")
    start = 0
    if restored:
        _run("train", 2, "--dir", ckpt, "--steps", "3", logs=tmp_path / "logs")
        start = 3
    results = _run(
        "preempt",
        2,
        "--dir",
        ckpt,
        "--ref",
        ref,
        "--max-steps",
        str(start + 60),
        "--sigterm-at",
        window,
        "--sigterm-pid",
        str(signalled),
        logs=tmp_path / "logs",
        expect=PREEMPTED_EXIT_CODE,
    )
    steps = {r["preempted_at"] for r in results}
    assert len(steps) == 1, results
    (step,) = steps
    assert step is not None and start <= step <= start + 1, (
        results
    )  # the first step checked (or Orbax's save of the next)
    assert all(step in r["steps"] for r in results), results
    restored_state = _run("restore", 1, "--dir", ckpt, "--ref", ref, logs=tmp_path / "logs")
    _check_restored(restored_state, step=step, nproc=1)


def test_gcs_round_trip_one_process(tmp_path, gcs_emulator):
    path, ref = f"gs://{BUCKET}/one", str(tmp_path / "ref.npz")
    saved = _run("train", 1, "--dir", path, "--steps", "3", "--ref", ref, env=gcs_emulator, logs=tmp_path / "logs")
    assert saved[0]["steps"] == [2, 3]
    _check_restored(
        _run("restore", 1, "--dir", path, "--ref", ref, env=gcs_emulator, logs=tmp_path / "logs"), step=3, nproc=1
    )


def test_gcs_two_processes_save_one_restores(tmp_path, gcs_emulator):
    path, ref = f"gs://{BUCKET}/two", str(tmp_path / "ref.npz")
    saved = _run("train", 2, "--dir", path, "--steps", "3", "--ref", ref, env=gcs_emulator, logs=tmp_path / "logs")
    assert all(r["steps"] == [2, 3] for r in saved)
    _check_restored(
        _run("restore", 1, "--dir", path, "--ref", ref, env=gcs_emulator, logs=tmp_path / "logs"), step=3, nproc=1
    )
