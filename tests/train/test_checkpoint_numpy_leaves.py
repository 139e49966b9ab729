"""A state with numpy leaves (held whole by every process) saves and restores, its checksums
verified, on one process and on 2 processes x 2 CPU devices (real ``jax.distributed`` over
loopback, tests/support/workers/ckpt_numpy_leaves_worker.py).

Found by trying to break the host-summed checksums of the CPU backend: summed on the host,
a numpy float64 leaf was summed as 8-byte words while the restore sums it as JAX converts it
(float32 without x64), and in a 2-process job every process added its whole copy (the
recorded sums were twice the devices'): both restores failed with CheckpointCorruptError.
Numpy leaves are summed by the device programs, as the restore sums them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from support import processes
from support.paths import WORKERS

WORKER = WORKERS / "ckpt_numpy_leaves_worker.py"


def _run(nproc: int, tmp_path: Path) -> list[dict]:
    def argv(pid: int, coordinator: str) -> list[str]:
        cmd = [sys.executable, str(WORKER), "--dir", str(tmp_path / "ckpt"), "--nproc", str(nproc), "--pid", str(pid)]
        return cmd + (["--coordinator", coordinator] if nproc > 1 else [])

    procs = processes.run(argv, nproc, tmp_path / "logs", processes.cpu_env(2), name="numpy-leaves", timeout=150)
    return [p.result() for p in procs]


@pytest.mark.parametrize("nproc", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_numpy_leaves_save_and_restore_with_their_checksums_verified(tmp_path, nproc):
    results = _run(nproc, tmp_path)
    for r in results:
        assert r["step"] == 1 and r["equal"] == ["np32", "np64", "sharded"], r
    recorded = results[0]["recorded"]
    assert recorded == results[0]["device_sums"] and len(recorded) == 3, results[0]
