"""Weighted gradient accumulation on a 2-device mesh (run with
``XLA_FLAGS=--xla_force_host_platform_device_count=2``): the batch's rows over ``data``, one
kernel's output axis over ``data``. Prints one JSON line: how far grad_accum_steps=4 is from the
whole batch (loss and update), the unweighted form's distance, the kernel's spec after the
update, and whether the compiled step constrains its accumulators.
"""

import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from roxxel.train.step import make_train_step, param_shardings

VOCAB = 31


class ShardedLM(nnx.Module):
    def __init__(self, rngs):
        init = nnx.initializers.lecun_normal()
        self.embed = nnx.Embed(VOCAB, 16, rngs=rngs)
        self.hidden = nnx.Linear(16, 32, kernel_init=nnx.with_partitioning(init, (None, "data")), rngs=rngs)
        self.out = nnx.Linear(32, VOCAB, rngs=rngs)

    def __call__(self, tokens):
        return self.out(nnx.relu(self.hidden(self.embed(tokens))))


def masked_loss(model, batch, weighted=True):
    logits = model(batch["tokens"][:, :-1])
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, batch["tokens"][:, 1:])
    mask = batch["loss_mask"][:, 1:].astype(jnp.float32)
    loss = (losses * mask).sum() / jnp.maximum(mask.sum(), 1.0)
    return {"loss": loss, "weight": mask.sum()} if weighted else loss


mesh = Mesh(np.array(jax.devices()), ("data",), axis_types=(AxisType.Auto,))
rng = np.random.default_rng(0)
tokens = rng.integers(0, VOCAB, (8, 17), dtype=np.int32)
mask = (np.arange(17)[None, :] <= rng.integers(1, 17, 8)[:, None]).astype(np.int32)
rows = NamedSharding(mesh, PartitionSpec("data"))
batch = {"tokens": jax.device_put(tokens, rows), "loss_mask": jax.device_put(mask, rows)}


def step(loss, accum):
    with jax.set_mesh(mesh):
        model = ShardedLM(nnx.Rngs(0))
    opt = nnx.Optimizer(model, optax.sgd(1.0), wrt=nnx.Param)
    start = {k: np.asarray(v) for k, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}
    fn = make_train_step(loss, accum, param_shardings=param_shardings(model, opt))
    hlo = fn.lower(model, opt, batch).as_text() if accum > 1 else ""
    out = float(fn(model, opt, batch)[0])
    params = {k: np.asarray(v) for k, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}
    return {k: params[k] - start[k] for k in params}, out, model, hlo


whole, whole_loss, _, _ = step(masked_loss, 1)
acc, acc_loss, model, hlo = step(masked_loss, 4)
plain, _, _, _ = step(lambda m, b: masked_loss(m, b, weighted=False), 4)
print(
    json.dumps(
        {
            "devices": jax.device_count(),
            "loss_diff": abs(acc_loss - whole_loss),
            "update_diff": max(float(np.abs(acc[k] - whole[k]).max()) for k in whole),
            "unweighted_update_diff": max(float(np.abs(plain[k] - whole[k]).max()) for k in whole),
            "kernel_spec": repr(model.hidden.kernel[...].sharding.spec),
            "pinned_in_hlo": "sharding_constraint" in hlo or "@Sharding" in hlo,
        }
    )
)
