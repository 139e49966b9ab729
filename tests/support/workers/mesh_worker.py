"""One process of a multi-process mesh run (launched by tests/distributed/test_mesh.py, or
by ``roxxel-launch submit --local`` with ``--launched``).

argv: data_root out_dir [coordinator process_id num_processes | --launched]

Builds :func:`roxxel.sharding.default_mesh` from the environment (``ROXXEL_PARALLELISM``,
``ROXXEL_NUM_SLICES``), streams a small curriculum on the default batch sharding, and
writes ``out_dir/mesh-<process_id>.json``: the mesh's axes and sizes, the process index of
the device at each mesh position, the batch sharding's spec, the rows this process read
and, with one process per slice, whether the mesh equals
``mesh_utils.create_hybrid_device_mesh(..., process_is_granule=True)``; process 0 also
writes ``out_dir/batches.npy`` (every global batch, gathered).
"""

import json
import os
import sys

root, out = sys.argv[1], sys.argv[2]
if sys.argv[3:] == ["--launched"]:
    import roxxel.distributed as rd

    info = rd.initialize(initialization_timeout=60, heartbeat_timeout_seconds=30)
    pid, nproc = info.process_id, info.num_processes
else:
    import jax

    coordinator, pid, nproc = sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    jax.distributed.initialize(
        coordinator, num_processes=nproc, process_id=pid, initialization_timeout=60, heartbeat_timeout_seconds=30
    )

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental import mesh_utils, multihost_utils  # noqa: E402

from roxxel import Curriculum, Phase, Roxxel  # noqa: E402
from roxxel.sharding import default_batch_sharding, default_mesh  # noqa: E402

mesh = default_mesh()
sharding = default_batch_sharding()
assert sharding.mesh == mesh
result = {
    "axes": list(mesh.axis_names),
    "shape": [int(n) for n in mesh.devices.shape],
    "processes": np.vectorize(lambda d: d.process_index)(mesh.devices).tolist(),
    "spec": [list(p) if isinstance(p, tuple) else p for p in sharding.spec],
    "env": {k: os.environ.get(k) for k in ("ROXXEL_PARALLELISM", "ROXXEL_NUM_SLICES")},
}
slices = int(os.environ.get("ROXXEL_NUM_SLICES") or 1)
if slices > 1 and slices == jax.process_count():
    ici = (mesh.devices.shape[0] // slices, *mesh.devices.shape[1:])
    dcn = (slices,) + (1,) * (mesh.devices.ndim - 1)
    hybrid = mesh_utils.create_hybrid_device_mesh(ici, dcn, process_is_granule=True)
    result["equals_create_hybrid_device_mesh"] = bool((hybrid == mesh.devices).all())

data = Roxxel(f"{root}/a")
curriculum = Curriculum(
    {"primary": data}, [Phase(steps=3, global_batch_size=8, seq_len=16, weights={"primary": 1})], chunk_tokens=32
)
batches = []
with curriculum.stream(seed=5) as stream:
    assert stream.sharding == sharding, (stream.sharding, sharding)
    for batch in stream:
        batches.append(np.asarray(multihost_utils.process_allgather(batch, tiled=True)))
result["bytes_read"] = data.bytes_read
if pid == 0:
    np.save(f"{out}/batches.npy", np.stack(batches))
with open(f"{out}/mesh-{pid}.json", "w") as f:
    json.dump(result, f)
if sys.argv[3:] == ["--launched"]:
    rd.shutdown()
elif nproc > 1:
    jax.distributed.shutdown()
