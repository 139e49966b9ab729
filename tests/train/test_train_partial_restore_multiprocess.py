"""A restore across model changes in a real multi-process job: 2 jax.distributed processes
(CPU, loopback, 2 devices each) save a model; 2 processes restore it into the model plus a
new layer with ``restore(partial=True)``, every array sharded over all 4 devices.

Runs tests/support/workers/ckpt_worker.py through the helpers of tests/train/test_checkpoint_multiprocess.py.
"""

from __future__ import annotations

import pytest

from test_checkpoint_multiprocess import _run

pytestmark = pytest.mark.slow


def test_two_processes_restore_a_grown_model_partially(tmp_path):
    ckpt, ref = str(tmp_path / "ckpt"), str(tmp_path / "ref.npz")
    _run("train", 2, "--dir", ckpt, "--steps", "2", "--ref", ref, logs=tmp_path / "logs")
    results = _run("restore-grown", 2, "--dir", ckpt, "--ref", ref, logs=tmp_path / "logs")
    assert len(results) == 2
    for r in results:
        assert r["step"] == 2
        assert r["compared"] == 4 and r["mismatched"] == [], r  # l1 and l2 bitwise as saved
        assert r["l3_changed"] == [], r  # the new layer kept its initial values
        assert r["new"][:2] == ["model/l3/bias", "model/l3/kernel"], r
        assert r["optimizer_restored"] is False  # adam's moments gained l3: re-initialised whole
        assert r["sharding"] == {"spec": "P('d',)", "devices": 4}
