"""After a failed save, wait_until_finished() then close() leave no Orbax writer running.

Before the fix, wait_until_finished() released Orbax's threads waiting for the failed step's
directory by sending the signals they wait for, so they ran their writes; close() did not
wait for them (the error had been raised already), and a directory re-created after the
close received ``2.orbax-checkpoint-tmp/...`` from them (3 of 7 runs; every run with the
writer slowed as here). Now the threads are cancelled before they are released, and close()
returns once they have ended. One process runs 20 rounds (tests/support/workers/ckpt_close_worker.py).
"""

import json
import os
import subprocess
import sys

import pytest

from support.paths import TESTS, WORKERS

pytestmark = pytest.mark.slow

WORKER = str(WORKERS / "ckpt_close_worker.py")
ROUNDS = 20
SLOW_S = 0.3  # the sharding-file writer's delay before it writes


def test_no_writer_outlives_close_after_a_failed_save(tmp_path):
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(TESTS) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(
        [sys.executable, WORKER, str(tmp_path), str(ROUNDS), str(SLOW_S)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode in (0, 1), proc.stderr[-3000:]  # 1: the exit hook reports the failed saves
    rounds = [json.loads(line.split(" ", 2)[2]) for line in proc.stdout.splitlines() if line.startswith("ROUND ")]
    assert len(rounds) == ROUNDS and "DONE" in proc.stdout, proc.stderr[-3000:]
    for i, r in enumerate(rounds):
        assert r["raised"] and r["raised"][0].startswith("wait_until_finished"), (i, r)
    written = [(i, r["written"]) for i, r in enumerate(rounds) if r["written"]]
    assert not written, f"{len(written)} of {ROUNDS} rounds: written after close: {written[:3]}"
    alive = [(i, r["threads"]) for i, r in enumerate(rounds) if r["threads"]]
    assert not alive, f"Orbax threads alive after close: {alive[:3]}"
