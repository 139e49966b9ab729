"""Checksums of checkpointed arrays, independent of how the arrays are sharded.

A checkpoint records one checksum per array at save and the restore recomputes it on the
restored value, so a byte altered on storage (bit rot, a truncated copy, a bad sync) is
caught before the weights are used. The checksum is computed on the devices, over the
*global* array, as two position-weighted sums of its bytes read as unsigned words
(``sum(w_i * (2i + 1))`` and ``sum((w_i ^ i*0x9E3779B1) * 0x85EBCA6B)``, both mod 2**32):
any single altered word changes the first sum (an odd weight is invertible mod 2**32),
and the value does not depend on the sharding, the mesh or the number of processes, so a
checkpoint saved on 4 hosts verifies when restored on 2. It is an integrity check against
accidents, not a cryptographic hash against tampering.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["ChecksumLayout", "ChecksumPlan", "PendingChecksums", "array_checksums", "dispatch_checksums", "leaf_paths"]

_GOLDEN = np.uint32(0x9E3779B1)
_MIX = np.uint32(0x85EBCA6B)


def _words(x: jax.Array) -> jax.Array:
    """The bytes of ``x`` as a flat uint32 vector (1- and 2-byte items zero-extended)."""
    if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    if x.dtype == jnp.bool_:
        x = x.astype(jnp.uint8)
    size = x.dtype.itemsize
    if size == 1:
        x = jax.lax.bitcast_convert_type(x, jnp.uint8).astype(jnp.uint32)
    elif size == 2:
        x = jax.lax.bitcast_convert_type(x, jnp.uint16).astype(jnp.uint32)
    else:  # 4 bytes -> one word; 8 bytes -> two words (a trailing axis of 2)
        x = jax.lax.bitcast_convert_type(x, jnp.uint32)
    return x.reshape(-1)


def _sums(x: jax.Array) -> jax.Array:
    """Both sums of ``x``'s words: a ``(2,)`` uint32 array."""
    w = _words(x)
    i = jnp.arange(w.shape[0], dtype=jnp.uint32)
    first = jnp.sum(w * (2 * i + 1), dtype=jnp.uint32)
    second = jnp.sum((w ^ (i * _GOLDEN)) * _MIX, dtype=jnp.uint32)
    return jnp.stack([first, second])


@jax.jit
def _checksums(*xs: jax.Array) -> jax.Array:
    """The checksums of several arrays in one program (one dispatch): ``(len(xs), 2)`` uint32,
    one output array (one Python object to make while the caller waits)."""
    return jnp.stack([_sums(x) for x in xs])


_GROUP = 64
"""Arrays summed by one program at most. A save dispatches its sums while Orbax's background
threads run, and each dispatch releases the GIL, which the training thread may then wait
for: as few programs as that bound allows (a state of 64 arrays or fewer: one), compiled once
per state layout (the same every save). Arrays of several shardings are summed by one
program per sharding."""

_NOT_ARRAY = object()  # a leaf that is summed by no program (a Python scalar)


def _placement(leaf: Any) -> Any:
    """What decides a leaf's program: its sharding (one program per set of devices), ``None``
    for a host array (summed on the default device), :data:`_NOT_ARRAY` for the rest."""
    if isinstance(leaf, jax.Array):
        return leaf.sharding
    return None if isinstance(leaf, (np.ndarray, np.generic)) else _NOT_ARRAY


def leaf_paths(tree: Any) -> list[tuple[str, Any]]:
    """``(path, leaf)`` for every leaf of a nested dict, paths like ``"model/l1/kernel"``."""
    out = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        out.append(("/".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path), leaf))
    return out


class PendingChecksums:
    """The checksums of a tree's arrays, dispatched to the devices and not read yet.

    Made by :meth:`ChecksumPlan.dispatch`; :meth:`read` waits for the device results (on any
    thread: reading a dispatched result is no collective). Holds one ``(n, 2)`` uint32 device
    array per program, its rows the arrays named by ``paths`` in that order.
    """

    def __init__(self, sums: list[tuple[list[str], jax.Array]], order: list[str]) -> None:
        self._sums = sums
        self._order = order  # leaf order (the programs' rows are grouped by sharding)
        self._read: dict[str, str] | None = None

    def __len__(self) -> int:
        return len(self._order)

    def read(self) -> dict[str, str]:
        """``{path: "<16 hex digits>"}`` in leaf order; waits for the devices the first time."""
        if self._read is None:
            values: dict[str, str] = {}
            for (paths, _), rows in zip(self._sums, jax.device_get([sums for _, sums in self._sums])):
                values.update((path, f"{int(a):08x}{int(b):08x}") for path, (a, b) in zip(paths, np.asarray(rows)))
            self._read = {path: values[path] for path in self._order}
            self._sums = []
        return self._read


class ChecksumLayout:
    """Everything the checksums of a tree (a nested dict) need besides its arrays: which leaves
    are arrays, their paths, and the programs (one per sharding, of at most ``_GROUP`` arrays)
    that will sum them, as positions among the tree's leaves (``jax.tree.leaves`` order).

    A save builds it once and reuses it while its state keeps the same structure and
    shardings (:meth:`fits`), so the training thread does not walk the paths every save.
    """

    def __init__(self, tree: Any) -> None:
        groups: dict[Any, list[tuple[str, int]]] = {}  # by sharding: one program, one set of devices
        self.order: list[str] = []
        """The paths of the array leaves, in leaf order."""
        placements = []
        for index, (path, leaf) in enumerate(leaf_paths(tree)):
            placements.append(_placement(leaf))
            if placements[-1] is not _NOT_ARRAY:
                groups.setdefault(placements[-1], []).append((path, index))
                self.order.append(path)
        self._treedef = jax.tree.structure(tree)
        self._placements = tuple(placements)
        self._calls: list[tuple[list[str], list[int]]] = [
            ([path for path, _ in chunk], [index for _, index in chunk])
            for group in groups.values()
            for chunk in (group[start : start + _GROUP] for start in range(0, len(group), _GROUP))
        ]

    def __len__(self) -> int:
        return len(self.order)

    def fits(self, treedef: Any, leaves: list[Any]) -> bool:
        """Whether a tree of structure ``treedef`` and these leaves has this layout: the same
        structure, arrays at the same places, on the same shardings."""
        return treedef == self._treedef and tuple(map(_placement, leaves)) == self._placements

    def plan(self, leaves: list[Any]) -> ChecksumPlan:
        """The programs of this layout over ``leaves`` (of a tree it :meth:`fits`)."""
        return ChecksumPlan([(paths, [leaves[i] for i in indices]) for paths, indices in self._calls], self.order)


class ChecksumPlan:
    """The programs that sum one tree's arrays, with their arrays, not launched yet
    (:meth:`ChecksumLayout.plan`). :meth:`dispatch` only launches them: a save plans before
    Orbax's save starts its background threads, and dispatches right after Orbax has taken
    the arrays, so the training thread does as little Python as possible while those
    threads want the GIL.
    """

    def __init__(self, calls: list[tuple[list[str], list[Any]]], order: list[str]) -> None:
        self._calls = calls
        self._order = order

    def __len__(self) -> int:
        return len(self._order)

    def dispatch(self) -> PendingChecksums:
        """Launch the sums on the devices and return at once (a collective over global arrays:
        every process dispatches the same plan, in the same order as its other collectives)."""
        sums = [(paths, _checksums(*leaves)) for paths, leaves in self._calls]
        self._calls = []  # the plan holds the arrays until dispatched, not after
        return PendingChecksums(sums, self._order)


def dispatch_checksums(tree: Any) -> PendingChecksums:
    """Start computing the checksum of every array leaf of ``tree`` (a nested dict) and return
    at once, without waiting for the devices: the save dispatches them and its background
    commit reads them (:meth:`PendingChecksums.read`).

    Every process of a ``jax.distributed`` job calls it with the same tree, in the same order
    as its other collectives (the sums are collective over global arrays). Python scalars are
    skipped; numpy arrays are summed on the default device.
    """
    return ChecksumLayout(tree).plan(jax.tree.leaves(tree)).dispatch()


def array_checksums(tree: Any) -> dict[str, str]:
    """``{path: "<16 hex digits>"}`` for every array leaf of ``tree`` (a nested dict), waiting
    for the devices (:func:`dispatch_checksums`, then :meth:`PendingChecksums.read`).

    Every process of a ``jax.distributed`` job calls it with the same tree (the sums are
    collective over global arrays) and gets the same result. Python scalars are skipped.
    """
    return dispatch_checksums(tree).read()
