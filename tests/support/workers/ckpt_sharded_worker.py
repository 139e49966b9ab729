"""One process of a sharded-checkpoint run (spawned by tests/train/test_checkpoint_sharded_layouts.py).

    python tests/support/workers/ckpt_sharded_worker.py MODE --dir DIR --ref REF --mesh A,B
        [--coordinator HOST:PORT --nproc N --pid I]

A model whose weights are annotated with ``nnx.with_partitioning`` over the axes
``("fsdp", "tensor")`` and its Adam optimizer are built born-sharded (``jax.jit`` of the
constructor under ``jax.set_mesh``, design notes §1 route (a)) on a mesh of all devices
shaped ``A x B``; nothing goes through the Trainer, only ``roxxel.train.Checkpointer``.

- ``save``: one Adam step (moments and count not initial), save it as step 1; process 0
  writes every leaf, gathered (``process_allgather(tiled=True)``; PRNG keys as key data),
  to REF (.npz).
- ``restore``: build the model with another seed on this run's mesh, restore, gather
  every leaf and compare it bitwise with REF.

Each process prints ``RESULT <json>``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

import numpy as np


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["save", "restore"])
    p.add_argument("--dir", required=True)
    p.add_argument("--ref", required=True)
    p.add_argument("--mesh", required=True, help="the mesh shape over ('fsdp', 'tensor'), e.g. 2,2")
    p.add_argument("--coordinator")
    p.add_argument("--nproc", type=int, default=1)
    p.add_argument("--pid", type=int, default=0)
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    for name in ("absl",):
        logging.getLogger(name).setLevel(logging.ERROR)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/
    from support.processes import join_job

    join_job(args.coordinator, args.nproc, args.pid)
    import jax
    import jax.numpy as jnp
    import optax
    from flax import nnx
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    import support.ckpt as common
    from roxxel.train.checkpoint import Checkpointer
    from roxxel.train.state import ModelState

    shape = tuple(int(n) for n in args.mesh.split(","))
    mesh = Mesh(np.asarray(jax.devices()).reshape(shape), ("fsdp", "tensor"))

    class Model(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            init = nnx.initializers.lecun_normal()
            self.w1 = nnx.Param(nnx.with_partitioning(init, ("fsdp", "tensor"))(rngs.params(), (8, 16)))
            self.b1 = nnx.Param(nnx.with_partitioning(nnx.initializers.normal(), ("tensor",))(rngs.params(), (16,)))
            self.w2 = nnx.Param(nnx.with_partitioning(init, ("tensor", "fsdp"))(rngs.params(), (16, 4)))
            self.scale = nnx.Param(jnp.ones((4,)))  # not annotated: replicated
            self.rngs = nnx.Rngs(dropout=rngs.params())  # a typed PRNG key and its count

        def __call__(self, x):
            return jnp.tanh(x @ self.w1[...] + self.b1[...]) @ self.w2[...] * self.scale[...]

    def make_state(seed: int):
        model = Model(nnx.Rngs(seed))
        return model, nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)

    seed = 0 if args.mode == "save" else 1000
    with jax.set_mesh(mesh):
        model, opt = jax.jit(lambda: make_state(seed))()  # born sharded: no full value first
    ms = ModelState(model, opt)

    def sharding_of(x) -> dict:
        return {"spec": str(x.sharding.spec), "devices": len(x.sharding.device_set)}

    w1 = model.w1.get_value()
    if args.mode == "save":
        host_x = np.linspace(-1, 1, 4 * 8, dtype=np.float32).reshape(4, 8)
        x = jax.make_array_from_callback(host_x.shape, NamedSharding(mesh, P()), lambda idx: host_x[idx])

        @nnx.jit
        def train_step(model, opt, x):
            loss, grads = nnx.value_and_grad(lambda m: jnp.mean((m(x) - 0.5) ** 2))(model)
            opt.update(model, grads)
            return loss

        with jax.set_mesh(mesh):
            train_step(model, opt, x)
        with Checkpointer(args.dir, model, opt) as ckpt:
            ckpt.save(1)
        ref = common.flat_host(ms)
        if jax.process_index() == 0:
            np.savez(args.ref, **ref)
        print(
            "RESULT " + json.dumps({"pid": jax.process_index(), "w1": sharding_of(w1), "leaves": len(ref)}), flush=True
        )
        return 0

    before = sharding_of(w1)
    with Checkpointer(args.dir, model, opt) as ckpt:
        step = ckpt.restore()
        run = ckpt.restored_run or {}
    got = common.flat_host(ms)
    ref = dict(np.load(args.ref))
    print(
        "RESULT "
        + json.dumps(
            {
                "pid": jax.process_index(),
                "step": step,
                "saved_process_count": run.get("process_count"),
                "checksums": len(run.get("checksums") or {}),
                "compared": len(ref),
                "mismatched": common.mismatches(got, ref),
                "w1_before": before,
                "w1": sharding_of(model.w1.get_value()),
                "devices": jax.device_count(),
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
