"""The default device mesh and batch sharding, defined once for the streamer and the Trainer.

The default is data parallelism: a 1-D mesh named ``"data"`` over every device of every
process (``jax.devices()`` order), and batches whose rows (axis 0) are split over the
mesh's first axis. JAX is imported on first call, so that importing :mod:`roxxel.data`
does not load it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from roxxel.exit_codes import ConfigurationError

if TYPE_CHECKING:
    from jax.sharding import Mesh, NamedSharding

DATA_AXIS = "data"
"""Name of the default mesh's only axis."""


def default_mesh() -> Mesh:
    """A 1-D mesh named ``"data"`` over every device of every process."""
    import jax
    import numpy as np
    from jax.sharding import Mesh

    return Mesh(np.array(jax.devices()), (DATA_AXIS,))


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Rows of a batch split over the mesh's first axis (data parallelism)."""
    from jax.sharding import NamedSharding, PartitionSpec

    return NamedSharding(mesh, PartitionSpec(mesh.axis_names[0]))


def default_batch_sharding() -> NamedSharding:
    """Rows sharded over every device of every process on one ``"data"`` mesh axis.

    Returns:
        ``NamedSharding(Mesh(jax.devices(), ("data",)), PartitionSpec("data"))``.
    """
    return batch_sharding(default_mesh())


class BatchShardingError(ConfigurationError, ValueError):
    """A global batch (or micro-batch) that does not split evenly over the data shards, or
    whose rows a process does not hold contiguously: the same on every attempt."""
