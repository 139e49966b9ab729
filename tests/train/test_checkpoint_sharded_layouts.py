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

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.net import free_port
from support.paths import WORKERS

pytestmark = pytest.mark.slow

WORKER = WORKERS / "ckpt_sharded_worker.py"
TIMEOUT = 150  # seconds for one run of all its processes


def _run(mode: str, nproc: int, devices: int, mesh: str, tmp_path: Path) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROXXEL_", "JAX_", "TPU_", "JOB"))}
    env.update(
        JAX_PLATFORMS="cpu",
        XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
        PYTHONUNBUFFERED="1",
        TF_CPP_MIN_LOG_LEVEL="3",
    )
    port = free_port()
    logs = tmp_path / "logs"
    logs.mkdir(exist_ok=True)
    procs = []
    for pid in range(nproc):
        cmd = [sys.executable, str(WORKER), mode, "--dir", str(tmp_path / "ckpt"), "--ref", str(tmp_path / "ref.npz")]
        cmd += ["--mesh", mesh, "--nproc", str(nproc), "--pid", str(pid)]
        if nproc > 1:
            cmd += ["--coordinator", f"127.0.0.1:{port}"]
        out_path, err_path = logs / f"{mode}-{nproc}-{pid}.out", logs / f"{mode}-{nproc}-{pid}.err"
        with open(out_path, "w") as out, open(err_path, "w") as err:  # files: a full pipe would block a worker
            procs.append((subprocess.Popen(cmd, env=env, stdout=out, stderr=err, text=True), out_path, err_path))
    deadline = time.monotonic() + TIMEOUT
    try:
        for proc, _, _ in procs:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        for proc, _, _ in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    results = []
    for pid, (proc, out_path, err_path) in enumerate(procs):
        out, err = out_path.read_text(), err_path.read_text()
        assert proc.returncode == 0, f"process {pid} exited with {proc.returncode}:\n{out[-2000:]}\n{err[-4000:]}"
        lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
        assert lines, f"process {pid} printed no result:\n{out[-2000:]}\n{err[-4000:]}"
        results.append(json.loads(lines[-1][len("RESULT ") :]))
    return results


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
