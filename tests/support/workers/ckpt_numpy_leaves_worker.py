"""One process of a save whose state holds numpy leaves besides a sharded array (spawned by
tests/train/test_checkpoint_numpy_leaves.py).

    python tests/support/workers/ckpt_numpy_leaves_worker.py --dir DIR
        [--coordinator HOST:PORT --nproc N --pid I]

Every process holds the numpy leaves whole (a float32 matrix and a float64 vector, which
JAX converts to float32 without x64); the sharded array spans every process's devices.
Saves step 1 with ``roxxel.train.Checkpointer``, restores it into a state of other values
(every checksum verified) and prints ``RESULT <json>``: the restored step, whether every
leaf came back equal, and process 0's recorded checksums next to the devices' sums.
"""

from __future__ import annotations

import argparse
import json
import logging
import os


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--coordinator")
    p.add_argument("--nproc", type=int, default=1)
    p.add_argument("--pid", type=int, default=0)
    args = p.parse_args()
    logging.getLogger("absl").setLevel(logging.ERROR)
    from support.processes import join_job

    join_job(args.coordinator, args.nproc, args.pid)
    import jax
    import numpy as np
    from flax import nnx
    from jax.experimental import multihost_utils
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from roxxel.train import digest
    from roxxel.train.checkpoint import Checkpointer
    from roxxel.train.state import ModelState

    mesh = Mesh(np.asarray(jax.devices()), ("d",))

    class Holder(nnx.Module):
        def __init__(self, seed: int) -> None:
            rng = np.random.default_rng(seed)
            rows = rng.standard_normal((8, 6)).astype(np.float32)
            self.sharded = nnx.Param(
                jax.make_array_from_callback(rows.shape, NamedSharding(mesh, P("d")), lambda i: rows[i])
            )
            self.np32 = nnx.Variable(rng.standard_normal((3, 4)).astype(np.float32))
            self.np64 = nnx.Variable(rng.standard_normal(5))  # float64: JAX sees float32 without x64

    def values(module: nnx.Module) -> dict:
        pure = nnx.to_pure_dict(nnx.state(module))
        return {
            k: np.asarray(multihost_utils.process_allgather(v, tiled=True))
            if isinstance(v, jax.Array)
            else np.asarray(v)
            for k, v in pure.items()
        }

    saved = Holder(0)
    want = values(saved)
    device_sums = digest.array_checksums({"model": nnx.to_pure_dict(nnx.state(saved))})
    with Checkpointer(args.dir, state=ModelState(saved)) as ckpt:
        assert ckpt.save(1)
        ckpt.wait_until_finished()
    recorded = None
    if jax.process_index() == 0:
        with open(os.path.join(args.dir, "1", "run", "metadata")) as f:
            recorded = json.load(f)["checksums"]
    fresh = Holder(1)
    with Checkpointer(args.dir, state=ModelState(fresh)) as ckpt:
        step = ckpt.restore()
    got = values(fresh)
    equal = sorted(k for k in want if np.array_equal(np.asarray(got[k], np.float32), np.asarray(want[k], np.float32)))
    print(
        "RESULT " + json.dumps({"step": step, "equal": equal, "recorded": recorded, "device_sums": device_sums}),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
