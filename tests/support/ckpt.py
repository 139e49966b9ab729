"""Models and helpers shared by the checkpoint tests and their worker processes."""

from __future__ import annotations

import numpy as np
import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from roxxel.train.state import ModelState

MODEL_DIMS = (8, 16, 4)  # first axes divisible by 1, 2, 4 and 8 devices where it matters
BIG_DIMS = (1024, 1536)  # kill-loop: 1.5 M params, ~19 MiB with adam moments
FINGERPRINT = {
    "datasets": {"toy": {"fingerprint": "sha256:0", "tokens": 1000}},
    "phases": [{"steps": 100, "batch_size": 4, "seq_len": 8}, {"steps": 50, "batch_size": 16, "seq_len": 8}],
}


class MLP(nnx.Module):
    def __init__(self, dims, rngs: nnx.Rngs, dropout: float | None = None):
        self.l1 = nnx.Linear(dims[0], dims[1], rngs=rngs)
        self.l2 = nnx.Linear(dims[1], dims[-1], rngs=rngs)
        self.drop = nnx.Dropout(dropout, rngs=rngs) if dropout is not None else None

    def __call__(self, x):
        h = nnx.relu(self.l1(x))
        if self.drop is not None:
            h = self.drop(h)
        return self.l2(h)


def mesh() -> Mesh:
    return Mesh(np.asarray(jax.devices()), ("d",))


def to_global(x, m: Mesh):
    """A host-local value (identical on all processes) as one array over the whole mesh:
    split along the first axis when it divides evenly, else replicated."""
    if isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
        data = np.asarray(jax.random.key_data(x))
        data = jax.make_array_from_callback(data.shape, NamedSharding(m, P()), lambda idx: data[idx])
        return jax.random.wrap_key_data(data, impl=jax.random.key_impl(x))
    x = np.asarray(x)
    spec = P("d") if x.ndim >= 1 and x.shape[0] % m.size == 0 else P()
    return jax.make_array_from_callback(x.shape, NamedSharding(m, spec), lambda idx: x[idx])


def build(dims=MODEL_DIMS, seed: int = 0, *, dropout: float | None = None, shard: bool = True) -> ModelState:
    """An MLP and its adam optimizer; with ``shard``, every array spread over all devices."""
    model = MLP(dims, nnx.Rngs(seed), dropout)
    opt = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
    ms = ModelState(model, opt)
    if shard:
        m = mesh()
        state = ms.nnx_state()
        nnx.replace_by_pure_dict(state, jax.tree.map(lambda a: to_global(a, m), nnx.to_pure_dict(state)))
        ms.update(state)
    return ms


def inputs(dims=MODEL_DIMS, m: Mesh | None = None):
    x = np.linspace(-1.0, 1.0, 4 * dims[0], dtype=np.float32).reshape(4, dims[0])
    return to_global(x, m) if m is not None else jnp.asarray(x)


@nnx.jit
def train_step(model, opt, x):
    def loss_fn(mod):
        return jnp.mean((mod(x) - 0.5) ** 2)

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    opt.update(model, grads)
    return loss


def flat_host(ms: ModelState) -> dict[str, np.ndarray]:
    """Every leaf of the state, gathered to the host as numpy (key arrays as their raw data)."""
    from jax.experimental import multihost_utils

    out = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(nnx.to_pure_dict(ms.nnx_state())):
        key = "/".join(str(getattr(k, "key", k)) for k in path)
        if jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            leaf = jax.random.key_data(leaf)
        if leaf.is_fully_addressable:
            out[key] = np.asarray(leaf)
        else:
            out[key] = np.asarray(multihost_utils.process_allgather(leaf, tiled=True))
    return out


def mismatches(got: dict[str, np.ndarray], ref: dict[str, np.ndarray]) -> list[str]:
    """Keys whose arrays differ in key set, dtype, shape or any bit."""
    bad = sorted(set(got) ^ set(ref))
    for k in sorted(set(got) & set(ref)):
        a, b = got[k], ref[k]
        if a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != b.tobytes():
            bad.append(k)
    return bad
