"""Real multi-process JAX (CPU devices over loopback): the same global batches for 1, 2 and 4 processes."""

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from roxxel import Roxxel

from support import processes
from support.paths import WORKERS

WORKER = str(WORKERS / "stream_worker.py")
TOKENS_PER_PROCESS_RUN = 3 * 8 * 32 + 4 * 16 * 16  # all steps of the worker's curriculum


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("mp")
    ids = np.arange(40_000) % 60000
    Roxxel(str(root / "a")).write([ids[i : i + 100] for i in range(0, 20_000, 100)], vocab_size=65536, dtype="uint16")
    Roxxel(str(root / "b")).write(
        [ids[i : i + 100] + 20_000 for i in range(0, 8_000, 100)], vocab_size=65536, dtype="uint16"
    )
    return root


def run_cluster(n: int, root, out) -> None:
    os.makedirs(out, exist_ok=True)
    processes.run(
        lambda i, coordinator: [sys.executable, WORKER, coordinator, str(i), str(n), str(root), str(out)],
        n,
        Path(out) / "logs",
        processes.cpu_env(2),
    )


@pytest.mark.slow
def test_global_batches_identical_and_rows_read_once(data_root, tmp_path):
    results = {}
    for n in (1, 2, 4):
        run_cluster(n, data_root, tmp_path / f"p{n}")
        results[n] = np.load(tmp_path / f"p{n}" / "batches.npy", allow_pickle=True)
        read = [json.load(open(tmp_path / f"p{n}" / f"bytes-{i}.json")) for i in range(n)]
        per_process = [r["a"] + r["b"] for r in read]
        # Each process read exactly its share of every global batch: global bytes / processes.
        assert per_process == [TOKENS_PER_PROCESS_RUN * 2 // n] * n, per_process
        # The direct placement (one batched transfer of per-device slices) was kept on every
        # process and equals jax.make_array_from_process_local_data (checked in the worker).
        assert all(r["direct_placement"] for r in read), read
    for n in (2, 4):
        assert len(results[n]) == len(results[1]) == 7
        for got, want in zip(results[n], results[1]):
            assert np.array_equal(got, want)
