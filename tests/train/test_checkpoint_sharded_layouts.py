"""Sharded state saved on one layout restores bitwise onto others, through the Checkpointer.

A model with ``nnx.with_partitioning`` weights and its Adam state, built born-sharded on a
2 processes x 2 CPU devices mesh ``("fsdp", "tensor")`` = (2, 2), is saved by
``roxxel.train.Checkpointer``, then restored on 4 processes x 1 device (mesh (4, 1)) and on
1 process x 4 devices (mesh (1, 4)) into a model built on that mesh: every leaf (PRNG keys
as key data) is bitwise equal, the arrays keep the new mesh's shardings, and the checksums
recorded at save verify. Real ``jax.distributed`` over loopback
(tests/support/workers/ckpt_sharded_worker.py).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from support import processes
from support.paths import WORKERS

pytestmark = pytest.mark.slow

WORKER = WORKERS / "ckpt_sharded_worker.py"
TIMEOUT = 150  # seconds for one run of all its processes


def _run(mode: str, nproc: int, devices: int, mesh: str, tmp_path: Path) -> list[dict]:
    def argv(pid: int, coordinator: str) -> list[str]:
        cmd = [sys.executable, str(WORKER), mode, "--dir", str(tmp_path / "ckpt"), "--ref", str(tmp_path / "ref.npz")]
        cmd += ["--mesh", mesh, "--nproc", str(nproc), "--pid", str(pid)]
        return cmd + (["--coordinator", coordinator] if nproc > 1 else [])

    procs = processes.run(argv, nproc, tmp_path / "logs", processes.cpu_env(devices), name=mode, timeout=TIMEOUT)
    return [p.result() for p in procs]


def test_sharded_adam_state_restores_bitwise_on_other_process_and_device_layouts(tmp_path):
    saved = _run("save", 2, 2, "2,2", tmp_path)
    assert [r["w1"] for r in saved] == [{"spec": "P('fsdp', 'tensor')", "devices": 4}] * 2
    leaves = saved[0]["leaves"]
    assert leaves >= 14  # weights, Adam's two moments of each, its count, the key and its count
    state = tmp_path / "ckpt" / "1" / "state"
    assert {"ocdbt.process_0", "ocdbt.process_1"} <= set(os.listdir(state))  # both processes wrote shards

    for nproc, devices, mesh, w1_spec in ((4, 1, "4,1", "P('fsdp',)"), (1, 4, "1,4", "P(None, 'tensor')")):
        results = _run("restore", nproc, devices, mesh, tmp_path)
        assert len(results) == nproc
        for r in results:
            assert r["step"] == 1 and r["saved_process_count"] == 2, r
            assert r["compared"] == leaves and r["mismatched"] == [], r
            assert r["checksums"] == leaves, r  # every array's checksum recorded and verified
            # restored into the new mesh's shardings, not the saving run's
            assert r["w1"] == r["w1_before"] == {"spec": w1_spec, "devices": 4}, r
