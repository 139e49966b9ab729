"""Which arrays of a checkpoint fit a changed model: the plan of a restore across model changes.

A checkpoint's ``state`` item is the nested dict ``{"model": ..., "optimizer": ...}`` of
``nnx.to_pure_dict``. When the model definition changes (a layer added, removed or
resized), its pure dict no longer matches the saved tree. :func:`plan_restore` compares
the two, array by array (paths like ``"model/l1/kernel"``), and decides:

- **model arrays** present in both with the same shape and dtype are restored; those only
  in the live model are *new* and keep their initial values; those only in the checkpoint
  are *dropped* (reported, not read); a shape or dtype difference is an error.
- **optimizer state** is restored only as a whole, when its arrays (paths, shapes, dtypes)
  are exactly those of the checkpoint; otherwise it is *re-initialised* (keeps the live
  optimizer's initial values). Mixing restored moments and step counts with fresh ones for
  new parameters would give those parameters a bias correction they never had (Adam), so
  the optimizer is never restored piecemeal.

The arrays to restore are read by Orbax's own partial restore
(``ocp.args.PyTreeRestore(item=subset, partial_restore=True)``), which reads only them. It
runs through a separate ``ocp.Checkpointer`` on the step's ``state`` item: a checkpoint
manager keeps one handler per item, and restoring through it with another handler than the
one that saved (``StandardSave``, which has no partial restore) would break its next save.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np

from roxxel.train.digest import leaf_paths
from roxxel.wording import count

__all__ = ["Layout", "RestorePlan", "layout_of_metadata", "layout_of_state", "plan_restore", "subset"]

Layout = dict[str, tuple[tuple[int, ...], str]]
"""``{path: (shape, dtype name)}`` of every array of a state tree."""


def _spec(leaf: Any) -> tuple[tuple[int, ...], str] | None:
    """``(shape, dtype)`` of an array leaf as stored (PRNG keys as their ``uint32`` key data)."""
    if isinstance(leaf, (jax.Array, jax.ShapeDtypeStruct)) and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
        data = jax.eval_shape(jax.random.key_data, leaf)
        return tuple(data.shape), str(np.dtype(data.dtype))
    shape, dtype = getattr(leaf, "shape", None), getattr(leaf, "dtype", None)
    if shape is None or dtype is None:
        return None
    return tuple(int(d) for d in shape), str(np.dtype(dtype))


def layout_of_state(pure: Any) -> Layout:
    """The layout of a live state's pure dict (``nnx.to_pure_dict``); non-array leaves skipped."""
    out: Layout = {}
    for path, leaf in leaf_paths(pure):
        spec = _spec(leaf)
        if spec is not None:
            out[path] = spec
    return out


def layout_of_metadata(tree: Any) -> Layout:
    """The layout of a saved item from Orbax's metadata tree (``PyTreeCheckpointHandler.metadata``)."""
    return layout_of_state(tree)


@dataclasses.dataclass
class RestorePlan:
    """What a restore across model changes does, array by array (paths sorted).

    Attributes:
        restored: arrays read from the checkpoint.
        new: live arrays the checkpoint lacks; they keep their initial values.
        dropped: saved arrays the live model no longer has; not read.
        optimizer_restored: whether the optimizer state is restored (its arrays match
            exactly), else re-initialised; ``None`` when there is no optimizer.
        mismatched: ``(path, saved, current)`` of model arrays whose shape or dtype changed.
        saved: every array of the checkpoint (a live state without an optimizer skips the
            saved optimizer state without counting it as dropped).
    """

    restored: list[str]
    new: list[str]
    dropped: list[str]
    optimizer_restored: bool | None
    mismatched: list[tuple[str, tuple[tuple[int, ...], str], tuple[tuple[int, ...], str]]]
    saved: list[str] = dataclasses.field(default_factory=list)

    @property
    def unchanged(self) -> bool:
        """Whether the live state has exactly the checkpoint's arrays."""
        return not (self.new or self.dropped or self.mismatched)

    def summary(self) -> str:
        """One paragraph for the log: counts, then the paths of what is new and dropped."""
        opt = {
            None: "no optimizer",
            True: "optimizer state restored",
            False: "optimizer state re-initialised (its arrays differ from the checkpoint's)",
        }
        lines = [
            f"{count(len(self.restored), 'array')} restored, {len(self.new)} new (kept their initial values), "
            f"{len(self.dropped)} dropped (in the checkpoint, not in the model); {opt[self.optimizer_restored]}"
        ]
        lines += [f"  new: {p}" for p in self.new]
        lines += [f"  dropped: {p}" for p in self.dropped]
        return "\n".join(lines)


def _part(path: str) -> str:
    return path.split("/", 1)[0]


def plan_restore(saved: Layout, current: Layout) -> RestorePlan:
    """Compare a checkpoint's layout with the live state's (see the module docstring).

    Args:
        saved: layout of the checkpoint's ``state`` item.
        current: layout of the live ``{"model": ..., "optimizer": ...}`` pure dict.

    Returns:
        The plan; ``mismatched`` lists the model and optimizer arrays whose shape or dtype
        changed (the caller refuses to restore when it is not empty).
    """
    mismatched = [(p, saved[p], current[p]) for p in sorted(set(saved) & set(current)) if saved[p] != current[p]]
    # The optimizer is compared as a whole (never restored piecemeal); without a live one,
    # the saved optimizer state is simply not read (restoring a model alone for evaluation).
    model_saved = {p for p in saved if _part(p) == "model"}
    model_now = {p for p in current if _part(p) == "model"}
    opt_saved = {p: v for p, v in saved.items() if _part(p) != "model"}
    opt_now = {p: v for p, v in current.items() if _part(p) != "model"}
    optimizer_restored: bool | None = None
    if opt_now:
        optimizer_restored = opt_saved == opt_now
    restored = sorted(model_saved & model_now) + (sorted(opt_now) if optimizer_restored else [])
    restored.sort()
    new = sorted(model_now - model_saved)
    dropped = sorted(model_saved - model_now)
    if optimizer_restored is False:
        new += sorted(set(opt_now) - set(opt_saved))
        dropped += sorted(set(opt_saved) - set(opt_now))
    return RestorePlan(
        restored=restored,
        new=new,
        dropped=dropped,
        optimizer_restored=optimizer_restored,
        mismatched=[m for m in mismatched if _part(m[0]) == "model"],
        saved=sorted(saved),
    )


def _names(keys: Any) -> list[Any]:
    return [getattr(k, "key", getattr(k, "idx", k)) for k in keys]


def subset(tree: Any, paths: list[str]) -> dict[Any, Any]:
    """The nested dict of ``tree``'s leaves at ``paths`` (keys kept as they are in ``tree``)."""
    wanted = set(paths)
    out: dict[Any, Any] = {}
    for keys, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        names = _names(keys)
        if "/".join(str(n) for n in names) not in wanted:
            continue
        node = out
        for name in names[:-1]:
            node = node.setdefault(name, {})
        node[names[-1]] = leaf
    return out
