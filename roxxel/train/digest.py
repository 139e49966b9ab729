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

__all__ = ["ChecksumPlan", "PendingChecksums", "array_checksums", "dispatch_checksums", "leaf_paths"]

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
def _checksums(*xs: jax.Array) -> list[jax.Array]:
    """The checksums of several arrays in one program (one dispatch)."""
    return [_sums(x) for x in xs]


_GROUP = 64
"""Arrays summed by one program at most. A save dispatches its sums while Orbax's background
threads start, and each dispatch releases the GIL, which the training thread may then wait
for: as few programs as that bound allows (a state of 64 arrays or fewer: one), compiled once
per state layout (the same every save). Arrays of several shardings are summed by one
program per sharding."""


def leaf_paths(tree: Any) -> list[tuple[str, Any]]:
    """``(path, leaf)`` for every leaf of a nested dict, paths like ``"model/l1/kernel"``."""
    out = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        out.append(("/".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path), leaf))
    return out


class PendingChecksums:
    """The checksums of a tree's arrays, dispatched to the devices and not read yet.

    Made by :func:`dispatch_checksums` (:meth:`ChecksumPlan.dispatch`); :meth:`read` waits for the device results (on any
    thread: reading a dispatched result is no collective). Holds one ``(2,)`` uint32 device
    array per array leaf.
    """

    def __init__(self, sums: dict[str, jax.Array], order: list[str] | None = None) -> None:
        self._sums = sums
        self._order = list(sums) if order is None else order  # leaf order (sums may be in dispatch order)
        self._read: dict[str, str] | None = None

    def __len__(self) -> int:
        return len(self._sums)

    def read(self) -> dict[str, str]:
        """``{path: "<16 hex digits>"}`` in leaf order; waits for the devices the first time."""
        if self._read is None:
            values = dict(zip(self._sums, jax.device_get(list(self._sums.values()))))
            self._read = {path: "".join(f"{int(v):08x}" for v in np.asarray(values[path])) for path in self._order}
            self._sums = {}
        return self._read


class ChecksumPlan:
    """Everything :func:`dispatch_checksums` does before it calls the devices: which leaves of
    ``tree`` (a nested dict) are arrays, their paths, and the programs (one per sharding,
    of at most ``_GROUP`` arrays) that will sum them. :meth:`dispatch` then only
    launches those programs: a save prepares its plan before Orbax's save starts its
    background threads, and dispatches right after Orbax has taken the arrays, so the
    training thread does as little Python as possible while those threads want the GIL.
    """

    def __init__(self, tree: Any) -> None:
        groups: dict[Any, list[tuple[str, Any]]] = {}  # by sharding: one program, one set of devices
        self._order: list[str] = []
        for path, leaf in leaf_paths(tree):
            if isinstance(leaf, (jax.Array, np.ndarray, np.generic)):
                groups.setdefault(leaf.sharding if isinstance(leaf, jax.Array) else None, []).append((path, leaf))
                self._order.append(path)
        self._calls: list[tuple[list[str], list[Any]]] = [
            ([path for path, _ in chunk], [leaf for _, leaf in chunk])
            for group in groups.values()
            for chunk in (group[start : start + _GROUP] for start in range(0, len(group), _GROUP))
        ]

    def __len__(self) -> int:
        return len(self._order)

    def dispatch(self) -> PendingChecksums:
        """Launch the sums on the devices and return at once (a collective over global arrays:
        every process dispatches the same plan, in the same order as its other collectives)."""
        sums: dict[str, jax.Array] = {}
        for paths, leaves in self._calls:
            sums.update(zip(paths, _checksums(*leaves)))
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
    return ChecksumPlan(tree).dispatch()


def array_checksums(tree: Any) -> dict[str, str]:
    """``{path: "<16 hex digits>"}`` for every array leaf of ``tree`` (a nested dict), waiting
    for the devices (:func:`dispatch_checksums`, then :meth:`PendingChecksums.read`).

    Every process of a ``jax.distributed`` job calls it with the same tree (the sums are
    collective over global arrays) and gets the same result. Python scalars are skipped.
    """
    return dispatch_checksums(tree).read()
