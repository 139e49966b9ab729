"""Where model state and batches live: the default mesh, and placing NNX state on it.

Parameters are replicated unless the model annotates them (``nnx.with_partitioning``):
the annotations' partition specs are honoured on the mesh. In a multi-process job every
process builds the same initial model (same seed), and each places the slices its
devices own, so no process needs the others' data.
"""

from __future__ import annotations

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

# The defaults are shared with the streamer (roxxel.sharding); re-exported here.
from roxxel.sharding import DATA_AXIS, batch_sharding, default_mesh

__all__ = ["DATA_AXIS", "batch_sharding", "default_mesh", "place_on_mesh"]


def _place(x, sharding: NamedSharding):
    if isinstance(x, jax.Array) and x.sharding == sharding:
        return x
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):  # RNG keys: place their raw data, replicated
        data = _place(jax.random.key_data(x), NamedSharding(sharding.mesh, PartitionSpec()))
        return jax.random.wrap_key_data(data, impl=jax.random.key_impl(x))
    if jax.process_count() == 1:
        return jax.device_put(x, sharding)
    host = np.asarray(x)  # identical on every process: each keeps only its devices' slices
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def _host_values_of_process_0(state):
    """Every process's copy of ``state`` replaced by process 0's (so replicas cannot start apart)."""
    from jax.experimental import multihost_utils

    def to_host(x):
        return np.asarray(jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x)

    keys = jax.tree.map(lambda x: jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key), state)
    host = multihost_utils.broadcast_one_to_all(jax.tree.map(to_host, state))
    return jax.tree.map(
        lambda h, x, is_key: jax.random.wrap_key_data(h, impl=jax.random.key_impl(x)) if is_key else h,
        host,
        state,
        keys,
    )


def place_on_mesh(mesh: Mesh, *modules: nnx.Module | nnx.Optimizer) -> None:
    """Move every variable of ``modules`` onto ``mesh``, in place.

    Each variable goes to ``NamedSharding(mesh, spec)`` where ``spec`` comes from its
    ``nnx.with_partitioning`` annotation, or is replicated (``PartitionSpec()``) without one.
    With several processes, process 0's values are used everywhere (a model initialised
    with a different seed on another process would otherwise train diverged replicas).
    """
    for module in modules:
        state = nnx.state(module)
        shardings = nnx.get_named_sharding(state, mesh)
        values = _host_values_of_process_0(state) if jax.process_count() > 1 else state
        nnx.update(module, jax.tree.map(_place, values, shardings))
