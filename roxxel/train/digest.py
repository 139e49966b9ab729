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

Where the arrays live decides where a save sums them. On GPU and TPU the sums run on the
devices (programs dispatched by the training thread, read later). On JAX's CPU backend the
devices are the host's own cores: there a save takes zero-copy numpy views of the blocks
each process holds of the arrays of whole-word dtypes (a held view also keeps a later
donation from reusing the buffer) and the background commit sums them with numpy
(:func:`block_sums`; one core, no dispatch on the training thread), each process its own
blocks; the parts add up to the global sums (both sums are sums of per-word terms mod
2**32), which a caller-given exchange combines across processes. Both ways give the same
values (tests/train/test_digest.py).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "ChecksumLayout",
    "ChecksumPlan",
    "PendingChecksums",
    "SumExchange",
    "add_shares",
    "array_checksums",
    "block_sums",
    "dispatch_checksums",
    "leaf_paths",
]

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
_ON_HOST = object()  # a leaf a save sums with numpy (host mode: its memory is the host's)

_MASK = 0xFFFFFFFF
_HOST_CHUNK_WORDS = 1 << 18
"""Words summed per numpy pass (1 MiB temporaries): the host sums stay in the cache-sized
chunks whatever the array's size."""
_HOST_ROW_WORDS = 1 << 16
"""Rows longer than this (in words) are summed row by row, each cut into sub-rows."""


def _placement(leaf: Any, host: bool = False) -> Any:
    """What decides a leaf's program: its sharding (one program per set of devices), ``None``
    for a host array (summed on the default device), :data:`_NOT_ARRAY` for the rest; with
    ``host``, :data:`_ON_HOST` for a jax.Array all of whose devices are CPUs and whose words
    the host sums alike (:func:`_host_summable`)."""
    if isinstance(leaf, jax.Array):
        if host and _host_summable(leaf.dtype, leaf.sharding):
            return _ON_HOST
        return leaf.sharding
    return None if isinstance(leaf, (np.ndarray, np.generic)) else _NOT_ARRAY


@functools.lru_cache(maxsize=256)
def _host_summable(dtype: Any, sharding: jax.sharding.Sharding) -> bool:
    """Whether the host's sums of an array of ``dtype`` placed by ``sharding`` are the
    devices' by construction (cached: a save asks for every leaf, and a state has few
    distinct dtypes and shardings): on CPU devices,
    of a dtype whose items are whole words of 1, 2, 4 or 8 bytes, in the devices' default
    memory (not ``pinned_host``, which the device program refuses). Not PRNG keys (their words
    exist on the device side), complex or sub-byte dtypes (int4, float4: the device program
    refuses them, so a save fails as before instead of recording sums no restore can
    check), nor numpy leaves (the device program sums them after JAX's dtype conversion: a
    float64 leaf as float32 without x64; every process holds them whole)."""
    if jnp.issubdtype(dtype, jax.dtypes.extended) or jnp.issubdtype(dtype, jnp.complexfloating):
        return False
    if jax.dtypes.itemsize_bits(dtype) not in (8, 16, 32, 64):
        return False
    if sharding.memory_kind not in (None, "device"):  # pinned_host: the device program refuses it
        return False
    return all(getattr(d, "platform", None) == "cpu" for d in sharding.device_set)


def _host_words(block: np.ndarray) -> tuple[np.ndarray, int]:
    """``block``'s words as unsigned integers of its item size (uint8/16/32, C order), and
    how many words one item makes (2 for 8-byte items, else 1)."""
    a = np.ascontiguousarray(block)  # (ndim >= 1: a 0-d block is one item)
    if a.dtype == np.bool_:
        a = a.view(np.uint8)
    unit = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint32}[a.dtype.itemsize]
    return a.view(unit), (2 if a.dtype.itemsize == 8 else 1)


def _grid_terms(words: np.ndarray, starts: np.ndarray) -> tuple[int, int, int]:
    """``(sum w, sum i*w, sum w ^ (i*GOLDEN))`` mod 2**32 over a 2-D grid of words whose row r
    starts at global word position ``starts[r]`` (uint32): ``i = starts[r] + c``. The first
    two come from row and column sums alone (``sum i*w = sum_r starts[r]*rowsum[r] +
    sum_c c*colsum[c]``); the third needs each word's key, made a chunk of rows at a time."""
    rows, width = words.shape
    column = np.arange(width, dtype=np.uint32)
    column_key = column * _GOLDEN
    total = weighted = mixed = 0
    step = max(1, _HOST_CHUNK_WORDS // max(width, 1))
    for top in range(0, rows, step):
        chunk = words[top : top + step].astype(np.uint32, copy=False)
        first = starts[top : top + step]
        row_sums = chunk.sum(axis=1, dtype=np.uint32)
        total += int(row_sums.sum(dtype=np.uint32))
        weighted += int((first * row_sums).sum(dtype=np.uint32))
        weighted += int((column * chunk.sum(axis=0, dtype=np.uint32)).sum(dtype=np.uint32))
        keys = (first * _GOLDEN)[:, None] + column_key[None, :]
        np.bitwise_xor(keys, chunk, out=keys)
        mixed += int(keys.sum(dtype=np.uint32))
    return total & _MASK, weighted & _MASK, mixed & _MASK


def block_sums(block: np.ndarray, global_shape: tuple[int, ...], index: tuple[slice, ...]) -> tuple[int, int]:
    """Both sums' share of one block of an array: the terms of the words of ``block``, which
    is the part ``index`` (a tuple of slices, as ``jax.Shard.index``) of an array of shape
    ``global_shape``, each term weighted by its word's position in the *global* array.

    The shares of blocks that tile an array add up (mod 2**32) to the array's sums as
    :func:`array_checksums` computes them on the devices. Runs in numpy on the calling
    thread (one core; ~0.4 ms per MB). Returns two ints in ``[0, 2**32)``.
    """
    words, per_item = _host_words(block)
    shape = tuple(block.shape) or (1,)
    global_shape = tuple(global_shape) or (1,)
    starts = [(s.start or 0) for s in index] or [0]
    strides = [int(np.prod(global_shape[d + 1 :], dtype=np.int64)) for d in range(len(global_shape))]
    if words.size == 0:
        return 0, 0
    row_items = np.zeros((), dtype=np.uint64)  # global item position of each row's first item
    for axis in range(len(shape) - 1):
        offsets = (np.arange(shape[axis], dtype=np.uint64) + np.uint64(starts[axis])) * np.uint64(strides[axis])
        row_items = row_items[..., None] + offsets
    row_items = row_items.reshape(-1) + np.uint64(starts[-1])
    row_starts = ((row_items * np.uint64(per_item)) & np.uint64(_MASK)).astype(np.uint32)
    width = shape[-1] * per_item
    grid = words.reshape(-1, width)
    if width <= _HOST_ROW_WORDS:
        terms = [_grid_terms(grid, row_starts)]
    else:  # long rows: each row (contiguous) as a grid of sub-rows, and its tail
        terms = []
        full = width - width % _HOST_ROW_WORDS
        sub = np.arange(0, full, _HOST_ROW_WORDS, dtype=np.uint32)
        for row, start in zip(grid, row_starts):
            terms.append(_grid_terms(row[:full].reshape(-1, _HOST_ROW_WORDS), start + sub))
            if full < width:
                terms.append(_grid_terms(row[None, full:], np.array([start + np.uint32(full)], np.uint32)))
    total, weighted, mixed = (sum(parts) & _MASK for parts in zip(*terms))
    return (2 * weighted + total) & _MASK, (mixed * int(_MIX)) & _MASK


def _whole_here(sharding: jax.sharding.Sharding) -> bool:
    """Whether an array placed by ``sharding`` is one block on one device of this process."""
    return len(sharding.device_set) == 1 and sharding.is_fully_addressable


def _blocks(leaf: jax.Array, whole: bool) -> tuple[tuple[int, ...], list[tuple[tuple[slice, ...], np.ndarray]]]:
    """A host-summed leaf's global shape and the blocks this process sums: zero-copy views of
    its addressable shards of replica 0 (each block of the array is summed by exactly one
    process); with ``whole`` (:func:`_whole_here` of its sharding), the one view of it all."""
    if whole:
        return leaf.shape, [(tuple(slice(0, n) for n in leaf.shape), np.asarray(leaf.addressable_data(0)))]
    return leaf.shape, [(s.index, np.asarray(s.data)) for s in leaf.addressable_shards if s.replica_id == 0]


def add_shares(shares: Iterable[tuple[int, int]]) -> tuple[int, int]:
    """The sums of several blocks' (or processes') shares of both sums, mod 2**32: two ints
    in ``[0, 2**32)``."""
    first = second = 0
    for a, b in shares:
        first, second = (first + a) & _MASK, (second + b) & _MASK
    return first, second


class SumExchange:
    """What combines the processes' shares of host-summed checksums (see
    :meth:`PendingChecksums.read`); a multi-process save provides one (the checkpointer's
    goes through JAX's coordination service)."""

    def total(self, shares: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]] | None:
        """This process's shares in; the sums of every process's shares out on the process
        that needs them, ``None`` on the others."""
        raise NotImplementedError

    def fail(self, err: BaseException) -> None:
        """This process could not compute its shares (tell the process waiting for them)."""


def leaf_paths(tree: Any) -> list[tuple[str, Any]]:
    """``(path, leaf)`` for every leaf of a nested dict, paths like ``"model/l1/kernel"``."""
    out = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        out.append(("/".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path), leaf))
    return out


class PendingChecksums:
    """The checksums of a tree's arrays, dispatched to the devices and not read yet.

    Made by :meth:`ChecksumPlan.dispatch`; :meth:`read` waits for the device results (on any
    thread: reading a dispatched result is no collective) and sums the host blocks. Holds one
    ``(n, 2)`` uint32 device array per program, its rows the arrays named by ``paths`` in that
    order, and the host-summed arrays' blocks (:func:`block_sums`).
    """

    def __init__(
        self,
        sums: list[tuple[list[str], jax.Array]],
        order: list[str],
        host: list[tuple[str, tuple[int, ...], list[tuple[tuple[slice, ...], np.ndarray]]]] | None = None,
    ) -> None:
        self._sums = sums
        self._host = host or []
        self._order = order  # leaf order (the programs' rows are grouped by sharding)
        self._read: dict[str, str] | None = None

    def __len__(self) -> int:
        return len(self._order)

    def read(self, exchange: SumExchange | None = None) -> dict[str, str] | None:
        """``{path: "<16 hex digits>"}`` in leaf order; waits for the devices and sums the host
        blocks the first time. With host blocks in a multi-process job, ``exchange`` combines
        the processes' shares: ``None`` on the processes it gives no total.

        Raises:
            RuntimeError: host blocks in a multi-process job and no ``exchange``.
        """
        if self._read is None:
            host = self._host_sums(exchange)
            if host is None:
                return None
            values = {path: f"{a:08x}{b:08x}" for path, (a, b) in host.items()}
            for (paths, _), rows in zip(self._sums, jax.device_get([sums for _, sums in self._sums])):
                values.update((path, f"{int(a):08x}{int(b):08x}") for path, (a, b) in zip(paths, np.asarray(rows)))
            self._read = {path: values[path] for path in self._order}
            self._sums, self._host = [], []
        return self._read

    def _host_sums(self, exchange: SumExchange | None) -> dict[str, tuple[int, int]] | None:
        """The host-summed arrays' sums (this process's shares, totalled by ``exchange``)."""
        if not self._host:
            return {}
        if exchange is None and jax.process_count() > 1:
            raise RuntimeError("host-summed checksums of a multi-process job need an exchange of the shares")
        try:
            shares = {}
            for path, shape, blocks in self._host:
                shares[path] = add_shares(block_sums(block, shape, index) for index, block in blocks)
        except BaseException as err:
            if exchange is not None:
                exchange.fail(err)
            raise
        return shares if exchange is None else exchange.total(shares)


class ChecksumLayout:
    """Everything the checksums of a tree (a nested dict) need besides its arrays: which leaves
    are arrays, their paths, and the programs (one per sharding, of at most ``_GROUP`` arrays)
    that will sum them, as positions among the tree's leaves (``jax.tree.leaves`` order);
    with ``host``, which arrays are summed on the host instead (see the module docstring).

    A save builds it once and reuses it while its state keeps the same structure and
    shardings (:meth:`fits`), so the training thread does not walk the paths every save.

    Args:
        tree: a nested dict of arrays (and Python scalars, which are skipped).
        host: sum the arrays on CPU devices with numpy (a save's background commit; see
            :func:`_host_summable` for which); without it every array is summed on its
            devices.
    """

    def __init__(self, tree: Any, host: bool = False) -> None:
        groups: dict[Any, list[tuple[str, int]]] = {}  # by sharding: one program, one set of devices
        self.order: list[str] = []
        """The paths of the array leaves, in leaf order."""
        self._host = host
        placements = []
        leaves = []
        for index, (path, leaf) in enumerate(leaf_paths(tree)):
            leaves.append(leaf)
            placements.append(_placement(leaf, host))
            if placements[-1] is not _NOT_ARRAY:
                groups.setdefault(placements[-1], []).append((path, index))
                self.order.append(path)
        self._treedef = jax.tree.structure(tree)
        self._placements = tuple(placements)
        self._on_host = [(path, i, _whole_here(leaves[i].sharding)) for path, i in groups.pop(_ON_HOST, [])]
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
        return treedef == self._treedef and tuple(_placement(leaf, self._host) for leaf in leaves) == self._placements

    def plan(self, leaves: list[Any]) -> ChecksumPlan:
        """The programs of this layout over ``leaves`` (of a tree it :meth:`fits`), and the
        host-summed arrays' blocks, taken now (zero-copy views)."""
        host = [(path, *_blocks(leaves[i], whole)) for path, i, whole in self._on_host]
        return ChecksumPlan([(paths, [leaves[i] for i in indices]) for paths, indices in self._calls], self.order, host)


class ChecksumPlan:
    """The programs that sum one tree's arrays, with their arrays, not launched yet
    (:meth:`ChecksumLayout.plan`), and the blocks of the arrays summed on the host.
    :meth:`dispatch` only launches the programs: a save plans before Orbax's save starts its
    background threads, and dispatches right after Orbax has taken the arrays, so the
    training thread does as little as possible while those threads want the GIL and the
    cores.
    """

    def __init__(
        self,
        calls: list[tuple[list[str], list[Any]]],
        order: list[str],
        host: list[tuple[str, tuple[int, ...], list[tuple[tuple[slice, ...], np.ndarray]]]] | None = None,
    ) -> None:
        self._calls = calls
        self._order = order
        self._host = host or []

    def __len__(self) -> int:
        return len(self._order)

    def dispatch(self) -> PendingChecksums:
        """Launch the sums on the devices and return at once (a collective over global arrays:
        every process dispatches the same plan, in the same order as its other collectives);
        a plan of host-summed arrays only launches nothing."""
        sums = [(paths, _checksums(*leaves)) for paths, leaves in self._calls]
        pending = PendingChecksums(sums, self._order, self._host)
        self._calls, self._host = [], []  # the plan holds the arrays until dispatched, not after
        return pending


def dispatch_checksums(tree: Any) -> PendingChecksums:
    """Start computing the checksum of every array leaf of ``tree`` (a nested dict) on its
    devices and return at once, without waiting for them (:meth:`PendingChecksums.read`
    waits).

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
    sums = dispatch_checksums(tree).read()
    assert sums is not None  # summed on the devices: every process gets them
    return sums
