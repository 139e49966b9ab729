"""Where model state lives: state born sharded on the mesh, and placing what is not placed yet.

Two ways in, as in the Flax NNX sharding guide and MaxText (``create_nnx_sharded_model``):

- :func:`sharded_state` builds the model and optimizer inside one ``jax.jit`` whose
  ``out_shardings`` come from the variables' annotations (``nnx.with_partitioning``), so each
  array is created directly in its sharding: no host ever holds a whole sharded weight.
- :func:`place_on_mesh` takes state however it was built and moves only what is not on the
  mesh yet. It never gathers an array that spans processes. Arrays each process holds whole
  (a model built eagerly, the same way on every host) are compared across processes with
  one all-gather of a 64-bit digest per array; only those that differ are broadcast from
  process 0, so replicas cannot start apart.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, TypeVar

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

# The defaults are shared with the streamer (roxxel.sharding); re-exported here.
from roxxel.sharding import DATA_AXIS, batch_sharding, default_mesh
from roxxel.train.axis_rules import AxisRules, check_rules, mesh_spec

__all__ = ["DATA_AXIS", "batch_sharding", "default_mesh", "place_on_mesh", "sharded_state", "state_shardings"]

log = logging.getLogger("roxxel.train")

T = TypeVar("T")


def _path(path: tuple) -> str:
    return "/".join(map(str, path))


def _is_key(x: Any) -> bool:
    return jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def _annotation(var: Any) -> Any:
    return var.get_metadata().get("out_sharding") if isinstance(var, nnx.Variable) else None


def _value(var: Any) -> Any:
    return var.get_value() if isinstance(var, nnx.Variable) else var


def state_shardings(state: nnx.State, mesh: Mesh, axis_rules: AxisRules | None = None) -> nnx.State:
    """``NamedSharding`` of each variable of ``state`` on ``mesh``, as a tree like ``state``.

    Annotated variables (``nnx.with_partitioning``; Adam moments copy their parameter's
    annotation) get their annotation's spec, through ``axis_rules``
    (:mod:`roxxel.train.axis_rules`); the rest, and PRNG keys, are replicated.

    Raises:
        ConfigValueError: an annotation the mesh cannot hold (see
            :func:`roxxel.train.axis_rules.mesh_spec`).
    """
    rules = check_rules(axis_rules)
    return nnx.from_flat_state(
        [(item[0], NamedSharding(mesh, _spec(item, _value(item[1]), mesh, rules))) for item in nnx.to_flat_state(state)]
    )


def sharded_state(fn: Callable[[], T], mesh: Mesh, *, axis_rules: AxisRules | None = None) -> T:
    """Call ``fn`` with every array it creates born in its sharding on ``mesh``.

    ``fn`` takes no arguments and builds NNX objects, typically the model and its optimizer::

        def make():
            model = Transformer(config, rngs=nnx.Rngs(0))
            return model, nnx.Optimizer(model, optax.adamw(3e-4), wrt=nnx.Param)

        model, optimizer = sharded_state(make, mesh, axis_rules=[("embed", "fsdp"), ("mlp", "tensor")])

    It runs once abstractly (``nnx.eval_shape``: shapes and annotations, no memory), then once
    under ``jax.jit`` with ``out_shardings`` from the annotations, so each process allocates
    only its devices' shards (the route of Flax's sharding guide and MaxText). Initial values
    are those ``fn`` computes from its seeds: every process of a job gets the same state.

    Args:
        fn: builds the objects; must be deterministic (seeded) and free of side effects,
            since it is traced twice.
        mesh: the device mesh (every process passes the same).
        axis_rules: logical axis names to mesh axes (:mod:`roxxel.train.axis_rules`).

    Returns:
        What ``fn`` returns, its variables holding global ``jax.Array`` s sharded on ``mesh``.

    Raises:
        ConfigValueError: an annotation the mesh cannot hold (an axis name neither on the
            mesh nor in ``axis_rules``; a dimension that does not divide over its axes).
    """
    with nnx.use_eager_sharding(False):  # the annotations are applied once, below, through the rules
        abstract = nnx.eval_shape(fn)
    graphdef, abstract_state = nnx.split(abstract)
    shardings = state_shardings(abstract_state, mesh, axis_rules)

    def init() -> nnx.State:
        with nnx.use_eager_sharding(False):
            return nnx.split(fn())[1]

    with jax.set_mesh(mesh):
        state = jax.jit(init, out_shardings=shardings)()
    return nnx.merge(graphdef, state)


def _on_mesh(x: Any, mesh: Mesh) -> bool:
    """Whether ``x`` is a global array already laid out on ``mesh`` (any spec)."""
    return isinstance(x, jax.Array) and isinstance(x.sharding, NamedSharding) and x.sharding.mesh == mesh


def _put_local(x: Any, sharding: NamedSharding) -> jax.Array:
    """A value this process holds whole (identical on every process) as a global array."""
    if _is_key(x):  # RNG keys: place their raw data, replicated
        data = _put_local(jax.random.key_data(x), NamedSharding(sharding.mesh, PartitionSpec()))
        return jax.random.wrap_key_data(data, impl=jax.random.key_impl(x))
    if jax.process_count() == 1:
        return jax.device_put(x, sharding)
    host = np.asarray(x)  # each process keeps only its devices' slices
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def _local_digests(values: list[Any]) -> np.ndarray:
    """``(len(values), 2)`` uint32: the sharding-independent checksum of each whole local value."""
    from roxxel.train.digest import array_checksums  # the checkpoints' per-array checksum

    sums = array_checksums({str(i): v for i, v in enumerate(values)})  # {index: 16 hex digits}
    hexes = [sums[str(i)] for i in range(len(values))]  # by index: the tree's leaf order sorts "10" before "2"
    return np.array([[int(h[:8], 16), int(h[8:], 16)] for h in hexes], np.uint32).reshape(-1, 2)


def _agree_with_process_0(paths: list[str], values: list[Any]) -> list[Any]:
    """``values`` (held whole by every process) with those that differ from process 0's replaced
    by process 0's: one all-gather of the digests, a broadcast of the differing arrays only."""
    from jax.experimental import multihost_utils

    digests = np.asarray(multihost_utils.process_allgather(_local_digests(values)))  # (processes, arrays, 2)
    differ = [i for i in range(len(values)) if not (digests[:, i] == digests[0, i]).all()]
    if not differ:
        return values
    log.warning(
        "%d of %d arrays differ across processes at the start (%s%s); using process 0's values everywhere "
        "(build the state from the same seed on every process, or with roxxel.train.sharded_state)",
        len(differ),
        len(values),
        ", ".join(paths[i] for i in differ[:3]),
        ", ..." if len(differ) > 3 else "",
    )
    host = [np.asarray(jax.random.key_data(values[i]) if _is_key(values[i]) else values[i]) for i in differ]
    host = multihost_utils.broadcast_one_to_all(host)
    out = list(values)
    for i, h in zip(differ, host):
        out[i] = jax.random.wrap_key_data(h, impl=jax.random.key_impl(values[i])) if _is_key(values[i]) else h
    return out


def place_on_mesh(mesh: Mesh, *modules: nnx.Pytree, axis_rules: AxisRules | None = None) -> int:
    """Move every variable of ``modules`` that is not on ``mesh`` yet onto it, in place.

    - An array already laid out on ``mesh`` (built by :func:`sharded_state`, restored, or
      created under ``jax.set_mesh(mesh)``) is left as it is.
    - An array on other devices that spans processes is resharded (a collective: no host
      gathers it).
    - A value each process holds whole goes to its annotation's sharding (replicated
      without one); in a job of several processes, values that differ across processes
      are replaced by process 0's (compared by digest; a warning names them).

    Every process must call it with the same tree of variables (the Trainer checks that
    first: :mod:`roxxel.train.agreement`).

    Args:
        mesh: the device mesh.
        modules: ``nnx`` objects (model, optimizer).
        axis_rules: logical axis names to mesh axes, for the arrays placed here.

    Returns:
        The number of arrays moved.

    Raises:
        ConfigValueError: an annotation the mesh cannot hold.
    """
    rules = check_rules(axis_rules)
    moved = 0
    for module in modules:
        flat = list(nnx.to_flat_state(nnx.state(module)))
        values = [_value(var) for _, var in flat]
        todo = [i for i, x in enumerate(values) if not _on_mesh(x, mesh)]
        targets = {i: NamedSharding(mesh, _spec(flat[i], values[i], mesh, rules)) for i in todo}
        local = [i for i in todo if not (isinstance(values[i], jax.Array) and not values[i].is_fully_addressable)]
        whole = set(local)
        if local and jax.process_count() > 1:
            agreed = _agree_with_process_0([_path(flat[i][0]) for i in local], [values[i] for i in local])
            values = _replaced(values, dict(zip(local, agreed)))
        for i in todo:  # spanning processes: resharded by a collective; whole here: this process's slices
            values[i] = _put_local(values[i], targets[i]) if i in whole else jax.device_put(values[i], targets[i])
        if todo:
            nnx.update(module, nnx.from_flat_state([(path, var.replace(v)) for (path, var), v in zip(flat, values)]))
        moved += len(todo)
    return moved


def _spec(item: tuple[tuple, Any], x: Any, mesh: Mesh, rules) -> PartitionSpec:
    path, var = item
    return PartitionSpec() if _is_key(x) else mesh_spec(_annotation(var), tuple(x.shape), mesh, rules, _path(path))


def _replaced(values: list[Any], new: dict[int, Any]) -> list[Any]:
    return [new.get(i, v) for i, v in enumerate(values)]
