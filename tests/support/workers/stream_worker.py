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
    jax.distributed.initialize(coordinator, num_processes=nproc, process_id=pid,
                               initialization_timeout=60, heartbeat_timeout_seconds=30)

from roxxel import Curriculum, Phase, Roxxel  # noqa: E402

a, b = Roxxel(f"{root}/a"), Roxxel(f"{root}/b")
c = Curriculum({"primary": a, "b": b}, [Phase(steps=3, global_batch_size=8, seq_len=32, weights={"primary": 1, "b": 1}),
                   Phase(steps=4, global_batch_size=16, seq_len=16, weights={"primary": 3, "b": 1})], chunk_tokens=64)
batches = []
with c.stream(seed=11) as stream:
    for batch in stream:
        assert batch.shape[0] in (8, 16)
        batches.append(np.asarray(multihost_utils.process_allgather(batch, tiled=True)))
if pid == 0:
    np.save(f"{out}/batches.npy", np.array([x.ravel() for x in batches], dtype=object), allow_pickle=True)
with open(f"{out}/bytes-{pid}.json", "w") as f:
    json.dump({"a": a.bytes_read, "b": b.bytes_read, "local_devices": jax.local_device_count()}, f)
if nproc > 1:
    jax.distributed.shutdown()
