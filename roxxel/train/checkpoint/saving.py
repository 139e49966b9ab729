"""The part of :meth:`~roxxel.train.checkpoint.Checkpointer.save` that blocks the training
thread, kept to what Orbax needs: the state as the pure nested dict Orbax saves, its
structure reused between saves (:class:`PureState`); whether the step is saved already
(:func:`already_saved`); and the step handed to Orbax with its run record, the arrays'
checksums launched only once Orbax holds the arrays (:func:`hand_to_orbax`).

``bench/checkpoint_save.py`` measures the whole against Orbax's own async save of the same
state (docs/checkpointing.md reports it).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from etils import epath
from flax import nnx

from roxxel.train.checkpoint.record import RUN_ITEM, STATE_ITEM, RunRecordSave, seal
from roxxel.train.digest import ChecksumLayout, ChecksumPlan, SumExchange
from roxxel.train.state import ModelState

log = logging.getLogger("roxxel.checkpoint")


@dataclasses.dataclass(frozen=True)
class _Links:
    """Where the pure dict's arrays sit among the modules' pytree leaves, for one structure."""

    modules: Any  # the modules' PyTreeDef these positions hold for
    pure: Any  # the pure dict's PyTreeDef
    positions: list[int]  # pure leaf i is modules leaf positions[i]


def _link(leaves: list[Any], modules: Any, arrays: list[Any], pure: Any) -> _Links | None:
    """The links of ``arrays`` (the pure dict's leaves) to ``leaves`` (the modules'), or None
    when one is ambiguous or missing: a leaf that is no array (a Python int is shared by
    unrelated places), or an array held by two leaves (a variable shared by two modules, or
    two variables holding the same array: they may part later under the same structure)."""
    where: dict[int, int] = {}
    for index, leaf in enumerate(leaves):
        where[id(leaf)] = -1 if id(leaf) in where else index
    positions = [where.get(id(a), -1) if isinstance(a, (jax.Array, np.ndarray)) else -1 for a in arrays]
    if -1 in positions or len(set(positions)) != len(positions):
        return None
    return _Links(modules, pure, positions)


class PureState:
    """The arrays of a :class:`~roxxel.train.state.ModelState` as Orbax saves them: the pure
    nested dict ``{"model": ..., "optimizer": ...}`` of ``nnx.to_pure_dict(nnx.state(...))``,
    and the plan of their checksums.

    ``nnx.state`` walks the module graph in Python on every call (for a 100-layer model with
    Adam, ~600 arrays: ~15 ms); ``jax.tree.flatten`` of the same modules (NNX objects are
    pytrees) takes a fifteenth of that. The first :meth:`take` does both and links each
    array of the pure dict to the pytree leaf that holds the same array object; a later call
    whose modules flatten to the same structure (the same attributes, variable types and
    static fields: a train step only replaces the arrays) takes the arrays from those leaves.
    Any other structure (a variable added or removed, a submodule replaced by another kind)
    is walked again and linked anew; a state whose links would be ambiguous (see
    :func:`_link`) is walked every time. Either way the dict holds the arrays the modules
    hold at the call.

    Args:
        state: the checkpointed model and optimizer.
    """

    def __init__(self, state: ModelState) -> None:
        self._state = state
        self._links: _Links | None = None
        self._layout: ChecksumLayout | None = None  # reused while the arrays' structure and shardings stay

    def take(self) -> tuple[dict[str, Any], ChecksumPlan]:
        """The pure dict of the state's current arrays, and the plan of their checksums."""
        leaves, modules = jax.tree.flatten(self._state.modules())
        links = self._links
        if links is not None and modules == links.modules:
            arrays, pure = [leaves[i] for i in links.positions], links.pure
        else:
            arrays, pure = jax.tree.flatten(nnx.to_pure_dict(self._state.nnx_state()))
            self._links = _link(leaves, modules, arrays, pure)
        tree = jax.tree.unflatten(pure, arrays)
        if self._layout is None or not self._layout.fits(pure, arrays):
            self._layout = ChecksumLayout(tree, host=True)
        return tree, self._layout.plan(arrays)


def already_saved(manager: ocp.CheckpointManager, directory: epath.Path, saved_steps: set[int], step: int) -> bool:
    """Whether ``step`` is saved already in ``directory`` (a step is never overwritten): by this
    checkpointer (``saved_steps``; logged at debug), or by an earlier run (a warning: this
    state is then not saved, and a restore takes that step)."""
    if step not in manager.all_steps():
        return False
    if step in saved_steps:
        log.debug("step %d is already saved; not saving it again", step)
    else:  # an earlier run's (after restore(step=N) of an older step): this state would be lost unsaid
        log.warning(
            "step %d is already saved in %s by an earlier run and is never overwritten: this state "
            "is not saved, and restore() will take that step; delete it first to keep this one",
            step,
            directory,
        )
    return True


def hand_to_orbax(
    manager: ocp.CheckpointManager,
    step: int,
    pure: dict[str, Any],
    run: dict[str, Any],
    plan: ChecksumPlan,
    metrics: dict[str, float] | None,
    exchange: SumExchange | None = None,
) -> bool:
    """Start Orbax's asynchronous save of ``step`` (the decision to save it is made): the
    ``state`` item ``pure`` and the ``run`` record, whose background commit waits for the
    checksums of ``plan`` (their processes' shares combined by ``exchange``, see
    :mod:`.checksum_exchange`); returns whether Orbax started it.

    The device programs of the checksums are dispatched only after Orbax's save has
    returned: by then Orbax has copied the arrays to the host, so the sums do not queue on
    the devices ahead of that copy, and they run while training goes on. Arrays on CPU
    devices were taken by ``plan`` as host views and are summed in the commit: on the CPU
    backend the sums would otherwise take the host's cores from Orbax's save (dispatched
    before it, 4x Orbax's blocking time) or, dispatched after it, wait for those cores
    behind Orbax's starting threads (up to 20 ms).

    Raises:
        Exception: whatever Orbax's save raises (the run record's commit then fails too).
    """
    checksums = seal(run, plan, exchange)
    try:
        saved = manager.save(
            step,
            args=ocp.args.Composite(
                **{STATE_ITEM: ocp.args.StandardSave(pure), RUN_ITEM: RunRecordSave(run, checksums)}
            ),
            metrics=metrics,
            force=True,
        )
    except BaseException as err:
        checksums.fail(err)
        raise
    checksums.dispatch()
    return bool(saved)
