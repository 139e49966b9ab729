"""One process of a multi-process streaming run (launched by test_stream_multiprocess.py).

argv: coordinator process_id num_processes data_root out_dir
Writes out_dir/batches.npy (process 0: every global batch, gathered) and
out_dir/bytes-<process_id>.json (token bytes this process read from each dataset).
"""

import json
import sys

import jax
import numpy as np
from jax.experimental import multihost_utils

coordinator, pid, nproc, root, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
if nproc > 1:
    jax.distributed.initialize(
        coordinator, num_processes=nproc, process_id=pid, initialization_timeout=60, heartbeat_timeout_seconds=30
    )

from roxxel import Curriculum, Phase, Roxxel  # noqa: E402

a, b = Roxxel(f"{root}/a"), Roxxel(f"{root}/b")
c = Curriculum(
    {"primary": a, "b": b},
    [
        Phase(steps=3, global_batch_size=8, seq_len=32, weights={"primary": 1, "b": 1}),
        Phase(steps=4, global_batch_size=16, seq_len=16, weights={"primary": 3, "b": 1}),
    ],
    chunk_tokens=64,
)
batches = []
with c.stream(seed=11) as stream:
    for batch in stream:
        assert batch.shape[0] in (8, 16)
        batches.append(np.asarray(multihost_utils.process_allgather(batch, tiled=True)))
if pid == 0:
    np.save(f"{out}/batches.npy", np.array([x.ravel() for x in batches], dtype=object), allow_pickle=True)
# The placement's direct path (roxxel.data.placement) was checked against the public one on
# each shape's first batch and kept: every plan is a plan, none fell back (None).
plans = list(stream._placer._plans.values())
direct = bool(plans) and all(plan is not None for plan in plans)
# ... and gives what make_array_from_process_local_data gives on a fresh batch of each shape.
for (local_shape, dtype, global_shape, first_row), plan in stream._placer._plans.items():
    rows = np.random.default_rng(pid).integers(0, 1000, local_shape).astype(dtype)
    got = stream._placer(rows, global_shape, first_row)
    want = jax.make_array_from_process_local_data(stream.sharding, rows, global_shape)
    assert got.sharding == want.sharding and got.shape == want.shape, (got.sharding, want.sharding)
    assert [(s.device, s.index) for s in got.addressable_shards] == [
        (s.device, s.index) for s in want.addressable_shards
    ]
    assert all(
        np.array_equal(np.asarray(x.data), np.asarray(y.data))
        for x, y in zip(got.addressable_shards, want.addressable_shards)
    )
with open(f"{out}/bytes-{pid}.json", "w") as f:
    json.dump(
        {"a": a.bytes_read, "b": b.bytes_read, "local_devices": jax.local_device_count(), "direct_placement": direct}, f
    )
if nproc > 1:
    jax.distributed.shutdown()
