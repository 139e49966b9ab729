"""The save path's pure dict (roxxel.train.checkpoint.saving.PureState): the module graph is
walked once and its structure reused between saves (#48), yet every save holds the arrays the
modules hold at that moment, whatever happened to them since the last walk."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import support.ckpt as common
from roxxel.train.checkpoint.saving import PureState
from roxxel.train.digest import ChecksumLayout, leaf_paths
from roxxel.train.state import ModelState


def _walked(ms: ModelState) -> dict:
    """What nnx itself gives: the pure dict of a fresh walk of the graph."""
    return nnx.to_pure_dict(ms.nnx_state())


def _same_arrays(got: dict, want: dict) -> None:
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        assert a is b  # the very arrays the modules hold, no copy


@pytest.fixture
def walks(monkeypatch):
    """Counts the walks of the module graph (ModelState.nnx_state calls)."""
    count = {"n": 0}
    walk = ModelState.nnx_state

    def counted(self):
        count["n"] += 1
        return walk(self)

    monkeypatch.setattr(ModelState, "nnx_state", counted)
    return count


def test_a_train_step_reuses_the_structure_and_the_save_holds_the_new_arrays(walks):
    ms = common.build(shard=False)
    pure = PureState(ms)
    first, plan = pure.take()
    _same_arrays(first, _walked(ms))
    common.train_step(ms.model, ms.optimizer, common.inputs())
    walks["n"] = 0
    second, plan = pure.take()
    assert walks["n"] == 0  # no walk: the structure is the first one's
    _same_arrays(second, _walked(ms))
    assert not np.array_equal(second["model"]["l1"]["kernel"], first["model"]["l1"]["kernel"])
    assert set(plan.dispatch().read()) == {path for path, _ in leaf_paths(second)}


def test_a_replaced_variable_is_saved_with_its_new_array():
    """The same structure, another Variable object: taken from where the old one was."""
    ms = common.build(shard=False)
    pure = PureState(ms)
    pure.take()
    ms.model.l1.kernel = nnx.Param(jnp.full((8, 16), 3.0))
    got, _ = pure.take()
    _same_arrays(got, _walked(ms))
    assert float(got["model"]["l1"]["kernel"][0, 0]) == 3.0


def test_an_added_or_removed_variable_is_walked_again(walks):
    ms = common.build(shard=False)
    pure = PureState(ms)
    pure.take()
    ms.model.extra = nnx.Param(jnp.arange(3.0))
    walks["n"] = 0
    got, plan = pure.take()
    assert walks["n"] == 1
    _same_arrays(got, _walked(ms))
    assert "model/extra" in plan.dispatch().read()
    del ms.model.extra
    got, plan = pure.take()
    _same_arrays(got, _walked(ms))
    assert "model/extra" not in plan.dispatch().read()


def test_two_variables_holding_one_array_are_walked_every_time(walks):
    """Linked by the array they hold, two variables would be indistinguishable; after they part
    (one updated, the structure the same) each must still be saved with its own array."""
    ms = common.build(shard=False)
    shared = jnp.zeros(16)
    ms.model.l1.bias.set_value(shared)
    ms.model.extra = nnx.Param(shared)  # the same object in two variables
    pure = PureState(ms)
    pure.take()
    ms.model.extra.set_value(jnp.ones(16))  # they part; the structure stays
    walks["n"] = 0
    got, _ = pure.take()
    assert walks["n"] == 1
    _same_arrays(got, _walked(ms))
    assert float(got["model"]["extra"][0]) == 1.0 and float(got["model"]["l1"]["bias"][0]) == 0.0


def test_the_checksum_layout_is_reused_only_for_the_same_structure_and_shardings():
    """The checksums' programs follow the arrays' shardings (one per set of devices): a state
    moved to another sharding, or with a Python scalar where an array was, gets a new layout."""
    tree = {"a": jnp.arange(4.0), "b": {"c": jnp.ones(3)}}
    leaves, treedef = jax.tree.flatten(tree)
    layout = ChecksumLayout(tree)
    assert layout.fits(treedef, leaves)
    assert layout.fits(treedef, [x + 1 for x in leaves])  # new arrays, same places
    mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:1]), ("d",))
    moved = [jax.device_put(x, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())) for x in leaves]
    assert not layout.fits(treedef, moved)
    assert not layout.fits(treedef, [leaves[0], 7])
    assert not layout.fits(jax.tree.structure({"a": 0, "b": {"d": 0}}), leaves)
