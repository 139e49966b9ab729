"""A real jax.distributed program for the local backend's tests (tests/launcher/local/test_local_backend.py).

Run by ``roxxel-launch submit --local`` as ``roxxel-worker -- python local_allreduce.py``:
it finds its place through roxxel.distributed.initialize() (the ROXXEL_* variables the
local backend sets), all-reduces ``process_id + 1`` across the processes, checks the sum
and prints it on process 0.

With ``LOCAL_TEST_HANG_FIRST_ATTEMPT=1`` every process keeps a per-process attempt counter
in ``$ROXXEL_CHECKPOINT_DIR`` (standing in for a checkpoint that survives restarts): on its
first attempt it writes ``ready-<id>`` (holding its pid) after the all-reduce and waits
to be killed, so that a test can kill a worker mid-run; on later attempts it completes.
"""

from __future__ import annotations

import os
import pathlib
import sys
import time

import numpy as np

import roxxel.distributed as rd

info = rd.initialize(initialization_timeout=60, heartbeat_timeout_seconds=30)

import jax  # noqa: E402  (after initialize, as a training program would)
import jax.numpy as jnp  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec  # noqa: E402

n, pid = info.num_processes, info.process_id
# Each local device holds pid + 1; the sum over every device, replicated. Blocking on the whole
# result (not only the shard that int() reads) lets every local device finish its part of the
# collective before this process leaves (a peer left waiting for it hangs in its exit).
mesh = jax.make_mesh((jax.device_count(),), ("d",))
local = np.full((jax.local_device_count(),), pid + 1, dtype=np.int32)
spread = jax.make_array_from_process_local_data(NamedSharding(mesh, PartitionSpec("d")), local)
summed = jax.block_until_ready(jax.jit(jnp.sum, out_shardings=NamedSharding(mesh, PartitionSpec()))(spread))
total = int(summed) // jax.local_device_count()
assert total == n * (n + 1) // 2, (total, n)
if pid == 0:
    print(f"allreduce sum={total} processes={n} local_devices={jax.local_device_count()}", flush=True)

if os.environ.get("LOCAL_TEST_HANG_FIRST_ATTEMPT") == "1":
    state = pathlib.Path(os.environ["ROXXEL_CHECKPOINT_DIR"])
    state.mkdir(parents=True, exist_ok=True)
    counter = state / f"attempts-{pid}"
    attempt = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(attempt))
    if attempt == 1:
        (state / f"ready-{pid}").write_text(str(os.getpid()))
        print(f"process {pid}: first attempt, waiting to be killed", flush=True)
        time.sleep(120)
        sys.exit(3)  # nobody killed us: make the test fail loudly
    print(f"process {pid}: attempt {attempt}, completing", flush=True)

rd.shutdown()
