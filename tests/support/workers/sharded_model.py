"""Train a model whose kernels carry nnx.with_partitioning annotations on a 2-device mesh.

Prints one JSON line: the sharding spec of each parameter after the Trainer placed it,
and the losses.
"""

import json
import os
import sys

import jax
import optax
from flax import nnx

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/
from support.lm import VOCAB, loss_fn, make_dataset  # noqa: E402

from roxxel import Curriculum, Phase  # noqa: E402
from roxxel.train import Cadence, Trainer  # noqa: E402
from roxxel.train.state_placement import default_mesh  # noqa: E402


class ShardedLM(nnx.Module):
    def __init__(self, rngs):
        init = nnx.initializers.lecun_normal()
        self.embed = nnx.Embed(VOCAB, 32, rngs=rngs)
        # Column-parallel hidden layer: its kernel's output axis split over "data".
        self.hidden = nnx.Linear(32, 64, kernel_init=nnx.with_partitioning(init, (None, "data")), rngs=rngs)
        self.out = nnx.Linear(64, VOCAB, rngs=rngs)

    def __call__(self, x):
        return self.out(nnx.relu(self.hidden(self.embed(x))))


mesh = default_mesh()
with jax.set_mesh(mesh):  # Flax creates annotated variables sharded on the current mesh
    model = ShardedLM(nnx.Rngs(0))
    opt = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
cur = Curriculum(make_dataset(sys.argv[1]), [Phase(steps=20, global_batch_size=8, seq_len=32)], chunk_tokens=256)
out = Trainer(model, opt, cur, loss_fn, mesh=mesh, cadence=Cadence(log_every=5, save_interval_steps=1000)).run()
specs = {"/".join(map(str, k)): str(v.sharding.spec) for k, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}
moment = nnx.state(opt)["opt_state"][0].mu["hidden"]["kernel"]
print(
    json.dumps(
        {
            "specs": specs,
            "devices": jax.device_count(),
            "loss": out["loss"],
            "adam_mu_spec": str(getattr(moment, "value", moment).sharding.spec),
        }
    )
)
