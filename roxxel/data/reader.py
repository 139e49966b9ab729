"""The read path: rows of the global batch of any step, planned and gathered from the datasets.

A :class:`Dataset` is the container (shards, their sizes and metadata, one range at a time);
this module owns the batched reads the streamer makes. :class:`BatchReader` reads a step's
rows of a curriculum: it locates the rows of up to ``_AHEAD`` steps at once (a plan) and
reads each step's rows straight from the shards' memory maps with the native gather
(:class:`~roxxel.data.map_rows.MapRows`: blocks checked ahead on the checking thread, a
SIGBUS answered by reading again with ``pread``). Where that path does not apply (no native
reader, a dtype pair it does not cast, ``mapped_bytes=0``), :func:`row_runs` cuts the rows
into runs (rows whose tokens follow each other in one shard, a :class:`RowRuns` entry), which
:func:`read_runs` reads with one ``pread`` each, no per-row Python work and nothing mapped.
:func:`gather_rows` and :func:`gather_into` are the same ``pread`` reads for rows or ranges
of any length.

The functions take a :class:`Dataset` and read through its
:attr:`~roxxel.data.dataset.Dataset.shard_table` (token offsets, shards opened on demand) and
each shard's public read handle (:class:`~roxxel.format.mapped.MappedFile`: data offset,
descriptor, block checks); of the dataset itself they ask only what a user may ask (its
dtype, a range through ``read_into``, whether an output dtype holds its ids). The
:class:`BatchReader` reads a curriculum through what :class:`PlannedCurriculum` names, so
this module imports neither the dataset's nor the curriculum's module (the curriculum
builds streams, which build readers).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from typing import TYPE_CHECKING, Any, Mapping, Protocol

import numpy as np

from roxxel.data.map_rows import MapRows
from roxxel.data.shard_table import RowRuns as RowRuns  # its home before the shard table: kept importable here
from roxxel.data.source import SOURCES
from roxxel.exit_codes import ConfigValueError
from roxxel.format import mapread

if TYPE_CHECKING:  # annotations only
    from roxxel.data.blend import BlendPlan
    from roxxel.data.dataset import Dataset

log = logging.getLogger(__name__)

_AHEAD = 64  # steps whose rows are located, cut and read in one pass
_MAP_AHEAD = 256  # the same where rows are read from the maps (nothing staged; <= 256: see map_rows._BlockJob)
_STAGED_BYTES = 4 << 20  # at most this many bytes of rows read ahead of their steps (host memory)
_SCRATCH = threading.local()  # per thread: read buffers of the stored dtype by (dtype, row length), cast at once


def row_runs(
    dataset: Dataset, starts: np.ndarray, length: int, groups: np.ndarray | None = None, num_groups: int = 1
) -> RowRuns | None:
    """Cut rows of ``length`` tokens starting at dataset tokens ``starts`` (int64, in row order) into runs.

    A run is a maximal sequence of consecutive rows whose tokens follow each other in one
    shard: :func:`read_runs` reads it with one ``pread``. Computed for all rows in one
    vectorised pass, so a streamer can cut the rows of many steps at once: ``groups``
    (non-decreasing ints in ``[0, num_groups)``, e.g. the step of each row) ends a run
    wherever it changes, and a row's place is its rank within its group.

    Returns:
        The runs, or None when a row crosses into the next shard (read it with :func:`gather_into`).

    Raises:
        IndexError: a row is outside the dataset.
    """
    table = dataset.shard_table
    starts = np.asarray(starts, np.int64)
    n = len(starts)
    if n and (int(starts.min()) < 0 or int(starts.max()) + length > table.num_tokens):
        raise IndexError(f"a token range is outside the dataset's [0, {table.num_tokens})")
    new = np.ones(n, bool)
    np.not_equal(starts[1:], starts[:-1] + length, out=new[1:])
    if groups is not None:
        new[1:] |= groups[1:] != groups[:-1]
    offsets = table.offsets
    if len(offsets) == 2:
        shard_of, local = np.zeros(n, np.int64), starts
    else:
        shard_of = np.searchsorted(offsets, starts, side="right") - 1
        local = starts - offsets[shard_of]
        if (local + length > table.sizes[shard_of]).any():
            return None
        new[1:] |= shard_of[1:] != shard_of[:-1]
    first = np.flatnonzero(new)
    end = np.empty_like(first)
    end[:-1], end[-1:] = first[1:], n
    if groups is None:
        place, bounds = first, [0, len(first)]
    else:
        place = first - np.searchsorted(groups, groups[first], side="left")  # rank of the run's first row
        bounds = np.searchsorted(groups[first], np.arange(num_groups + 1), side="left").tolist()
    row_bytes = length * table.dtype.itemsize
    return RowRuns(
        shard_of[first].tolist(),
        (local[first] * table.dtype.itemsize).tolist(),
        (place * row_bytes).tolist(),
        ((place + end - first) * row_bytes).tolist(),
        bounds,
    )


def read_runs(dataset: Dataset, out: np.ndarray, runs: RowRuns, group: int = 0) -> np.ndarray:
    """Read the runs of ``group`` (see :func:`row_runs`) into ``out`` (C-contiguous, the stored dtype).

    One ``pread`` per run, straight into its place; a block not yet checked in this process
    is checked on the bytes just read before the call returns: when the run covers such a
    block only in part, the same ``preadv`` reads the block's rest into a spare buffer (the
    block is read once, not again after the run). Then every shard read is checked
    unchanged since it was opened. Nothing is mapped. Returns ``out``.

    Raises:
        BlockChecksumError: a block the runs touch is damaged.
        TruncatedShardError: a shard ended early (it was cut after opening).
        ShardChangedError: a shard's file changed since it was opened.
        ShardReadError: the storage failed a read.
    """
    table = dataset.shard_table
    view = out.reshape(-1).view(np.uint8).data  # bytes: bfloat16 has no buffer format
    size = table.dtype.itemsize
    shards, where, los, his = runs.shards, runs.offsets, runs.los, runs.his
    first, end = runs.bounds[group], runs.bounds[group + 1]
    shard: Any = None
    s_last, fd, base, blocks = -1, -1, 0, None
    spare = memoryview(b"")  # the rest of edge blocks read with a run (see _run_parts)
    read: dict[Any, None] = {}  # the shards read, in order, each once
    for k in range(first, end):
        s, lo, hi = shards[k], los[k], his[k]
        if s != s_last:  # the shard is fetched per run (an LRU may close the others), once per run of runs
            shard, s_last = table.shard(s), s
            fd, base = shard.descriptor(), shard.data_offset
            blocks = shard.block_checks if shard.check_blocks else None
            read[shard] = None
        head = tail = 0
        if blocks is not None and blocks.unchecked:
            head, tail = blocks.edges(where[k], where[k] + hi - lo)
            if (head or tail) and len(spare) < 2 * blocks.block_bytes:
                spare = memoryview(bytearray(2 * blocks.block_bytes))
        parts = _run_parts(view[lo:hi], spare, head, tail) if head or tail else [view[lo:hi]]
        try:
            n = os.preadv(fd, parts, base + where[k] - head)
        except OSError:
            n = -1  # read again below, which names the error (or reopens a stale handle)
        if n != head + hi - lo + tail:
            shard.copy_into(out.reshape(-1)[lo // size : hi // size], where[k] // size)  # retried, or raises
            fd = shard.descriptor()
            shard.check_range(where[k] // size, (where[k] + hi - lo) // size, view[lo:hi])
        elif blocks is not None and blocks.unchecked:
            start = where[k] - head
            shard.with_descriptor(lambda fd, start=start, parts=parts: blocks.check_read(fd, start, parts))
    for shard in read:
        shard.check_unchanged()
    if end > first:
        table.bytes_read += his[end - 1] - los[first]  # a group's runs fill its rows back to back
    return out


def _run_parts(run: memoryview, spare: memoryview, head: int, tail: int) -> list[memoryview]:
    """The buffers one ``preadv`` fills: ``head`` bytes before the run and ``tail`` after it into ``spare``
    (two halves), the run into its place in the batch."""
    half = len(spare) // 2
    return [p for p in (spare[:head], run, spare[half : half + tail]) if len(p)]


def gather_rows(dataset: Dataset, out: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Copy ``out.shape[1]`` tokens from each of ``starts`` into the rows of ``out`` (2-D, C-contiguous).

    The same as :func:`gather_into` with every range one row long, with less work per
    row: rows are cut into runs (:func:`row_runs`: rows whose tokens follow each other in
    one shard, such as the rows of one shuffled chunk), each run is one ``pread`` into a
    buffer of the stored dtype, and the buffer is cast into ``out`` once. Returns ``out``.

    Raises:
        IndexError: a row is outside the dataset.
        BlockChecksumError: a block the rows touch is damaged.
        TruncatedShardError: a shard ended early (it was cut after opening).
    """
    n, length = out.shape
    if not n or not length:
        return out
    runs = row_runs(dataset, starts, length)
    if runs is None:  # a row crosses into the next shard: range by range
        gather_into(dataset, out.reshape(-1), starts, np.full(n, length, np.int64))
        return out
    direct = out.dtype == dataset.dtype and out.flags.c_contiguous
    if not direct:
        dataset.check_out_dtype(out.dtype)
    buf = out if direct else scratch(dataset.dtype, n, length)
    read_runs(dataset, buf, runs, 0)
    if not direct:
        np.copyto(out, buf, casting="unsafe")
    return out


def gather_into(dataset: Dataset, out: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Copy the ranges ``[starts[k], starts[k] + counts[k])`` one after another into ``out`` (1-D; cast to its dtype).

    ``len(out)`` must equal ``counts.sum()``. Returns ``out``.

    This is the streamer's read: per shard, the blocks the ranges touch are checked in one
    vectorised lookup (each block's checksum once per process), then each range is one
    ``pread`` straight into its place (through one buffer and one cast when ``out``'s dtype
    differs). Nothing is mapped.

    Raises:
        IndexError: a range is outside the dataset.
        BlockChecksumError: a block the ranges touch is damaged.
    """
    table = dataset.shard_table
    dataset.check_out_dtype(out.dtype)
    starts = np.asarray(starts, np.int64)
    counts = np.asarray(counts, np.int64)
    if len(out) != int(counts.sum()):
        raise ValueError(f"out holds {len(out)} tokens but the ranges add up to {int(counts.sum())}")
    if not starts.size:
        return out
    ends = starts + counts
    if starts.min() < 0 or int(ends.max()) > table.num_tokens:
        raise IndexError(f"a token range is outside the dataset's [0, {table.num_tokens})")
    offsets = table.offsets
    n = int(counts[0])
    rows = n > 0 and (counts == n).all()  # ranges of one length: out holds them as rows
    dst = None if rows else np.cumsum(counts) - counts
    if len(offsets) == 2:  # one shard: every range is inside it
        _gather_shard(table.shard(0), out, dst, starts, counts)
        table.bytes_read += len(out) * table.dtype.itemsize
        return out
    shard_of = np.searchsorted(offsets, starts, side="right") - 1
    inside = ends <= offsets[shard_of + 1]
    if dst is None and not inside.all():
        dst = np.cumsum(counts) - counts
    for s in np.unique(shard_of[inside]).tolist():
        sel = np.flatnonzero((shard_of == s) & inside)
        _gather_shard(table.shard(s), out, sel * n if dst is None else dst[sel], starts[sel] - offsets[s], counts[sel])
    for k in np.flatnonzero(~inside).tolist():  # a range that crosses into the next shard
        assert dst is not None  # set above whenever a range is not inside one shard
        dataset.read_into(out[dst[k] : dst[k] + counts[k]], int(starts[k]))
    table.bytes_read += int(counts[inside].sum()) * table.dtype.itemsize  # read_into counts the rest
    return out


def _gather_shard(shard, out: np.ndarray, dst: np.ndarray | None, local: np.ndarray, counts: np.ndarray) -> None:
    """Copy ranges ``[local[k], local[k] + counts[k])`` of ``shard`` to ``out[dst[k]:]``, blocks checked first.

    ``dst`` None: the ranges are all ``counts[0]`` long and fill ``out`` in order, as rows.
    """
    if dst is None and out.dtype == shard.dtype and out.flags.c_contiguous:
        shard.read_pieces(out, local, counts)  # straight into the batch
        return
    buf = np.empty(len(out) if dst is None else int(counts.sum()), shard.dtype)
    shard.read_pieces(buf, local, counts)
    n = int(counts[0])
    if dst is None:
        out[...] = buf  # one cast of the whole batch
    elif n and not len(out) % n and (counts == n).all() and not (dst % n).any():  # some of the rows
        out.reshape(-1, n)[dst // n] = buf.reshape(-1, n)
    else:
        pos = 0
        for d, c in zip(dst.tolist(), counts.tolist()):
            out[d : d + c] = buf[pos : pos + c]
            pos += c


def scratch(dtype: np.dtype, rows: int, length: int) -> np.ndarray:
    """A ``(rows, length)`` buffer of the stored dtype, this thread's own, reused by every call.

    For reads that are cast into a batch right away: nothing is allocated (or faulted
    in) per batch. Valid until this thread's next call.
    """
    cache = _SCRATCH.__dict__.setdefault("buffers", {})
    key = (dtype.str, length)
    buf = cache.get(key)
    if buf is None or len(buf) < rows:
        if len(cache) >= 4:
            cache.pop(next(iter(cache)))
        buf = cache[key] = np.empty((rows, length), dtype)
    return buf[:rows]


@dataclasses.dataclass
class _Plan:
    """Steps ``[first, end)`` of one phase's rows ``[lo, hi)`` (``key``), located and cut at once.

    ``which``/``starts``: each planned row's dataset and first token (None: some row joins
    pieces; read those steps piece by piece); ``single``: per step, whether one dataset holds
    every row; ``only``: the dataset that holds every row of the plan (None: several do);
    ``maps[d]``: dataset ``d``'s rows as addresses in its shards' maps (the map path, made on
    first use); for the pread path, made on first use too (``cut[d]``):
    ``staged[d]``: dataset ``d``'s rows of the plan in dataset order, cut into runs (None: a
    row crosses a shard boundary); ``slots[d]``: each planned row's place among them;
    ``buffers[d]``: those rows once read.
    """

    key: Any
    first: int
    end: int
    seq_len: int
    which: np.ndarray | None = None
    starts: np.ndarray | None = None
    single: np.ndarray | None = None
    only: int | None = None
    staged: list[RowRuns | None] = dataclasses.field(default_factory=list)
    slots: list[np.ndarray | None] = dataclasses.field(default_factory=list)
    buffers: list[np.ndarray | None] = dataclasses.field(default_factory=list)
    maps: list[MapRows | None] = dataclasses.field(default_factory=list)
    cut: list[bool] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        self.buffers = [None] * len(self.staged)
        self.maps = [None] * len(self.staged)
        self.slots = [None] * len(self.staged)
        self.cut = [False] * len(self.staged)


class PlannedPhase(Protocol):
    """What :class:`BatchReader` reads of a phase (a :class:`~roxxel.data.curriculum.ResolvedPhase`)."""

    @property
    def index(self) -> int: ...  # the phase's place in the curriculum
    @property
    def global_batch_size(self) -> int: ...  # rows per step, every process's together
    @property
    def seq_len(self) -> int: ...  # tokens per row
    @property
    def end_step(self) -> float: ...  # the first step after the phase (math.inf: endless)


class PlannedCurriculum(Protocol):
    """What :class:`BatchReader` reads of a curriculum (a :class:`~roxxel.data.curriculum.Curriculum`):
    its datasets and how their rows are ordered, its phases, and where each global row comes from.

    Named here, rather than imported, because the curriculum builds the streams that build
    readers: the reader sees its parent only through this protocol.
    """

    @property
    def datasets(self) -> Mapping[str, Dataset]: ...  # by name, in the order of the plan's dataset indices
    @property
    def names(self) -> tuple[str, ...]: ...  # the datasets' names, in that order
    @property
    def order(self) -> str: ...  # a key of roxxel.data.source.SOURCES
    @property
    def chunk_tokens(self) -> int: ...  # tokens per shuffled chunk (order "chunks")
    @property
    def vocab_size(self) -> int | None: ...
    @property
    def plan(self) -> BlendPlan: ...  # global rows -> (dataset, its row) (locate)

    def phase_at(self, step: int) -> PlannedPhase: ...
    def rows_before(self, step: int) -> int: ...  # global rows of every step before ``step``


class BatchReader:
    """Reads rows of the global batch of any step from the curriculum's datasets.

    Args:
        curriculum: the curriculum (plan, datasets, phases).
        seed: shuffle seed.
        vocab_size: the model's vocabulary; a row holding an id ``>= vocab_size`` raises
            ``ValueError`` (JAX clamps out-of-range gathers, so such ids would train silently
            on the wrong embedding). Default: the curriculum's ``vocab_size``.
    """

    def __init__(self, curriculum: PlannedCurriculum, seed: int, vocab_size: int | None = None):
        self.curriculum = curriculum
        self.seed = seed
        self.vocab_size = vocab_size if vocab_size is not None else curriculum.vocab_size
        source = SOURCES[curriculum.order]
        self.sources = [
            source(ds, seed, i, curriculum.chunk_tokens) for i, ds in enumerate(curriculum.datasets.values())
        ]
        self.dtypes = [ds.dtype for ds in curriculum.datasets.values()]
        # The largest id each dataset's stored dtype can hold (None: not an integer dtype, original-format data).
        self._max_ids = [np.iinfo(dt).max if np.issubdtype(dt, np.integer) else None for dt in self.dtypes]
        self._plan: _Plan | None = None  # the steps being read
        self._next: _Plan | None = None  # the plan after it, made ahead (rows read from the maps)

    def rows(self, step: int, lo: int, hi: int, dtype=np.int32, *, with_breaks: bool = False):
        """Rows ``[lo, hi)`` of the global batch of ``step``, shape ``(hi - lo, seq_len)``, in ``dtype``.

        With ``with_breaks``, returns ``(rows, breaks)``: ``breaks`` is a bool array of the same
        shape, True at column ``t`` when token ``t`` is not the token that follows token
        ``t - 1`` in its dataset (the row joins two shuffled chunks there).
        """
        phase = self.curriculum.phase_at(step)
        planned = self._planned(step, lo, hi, phase, dtype)
        if planned is None:
            return self._rows_by_pieces(step, lo, hi, phase, dtype, with_breaks)
        plan, k = planned
        n = hi - lo
        out = empty_aligned((n, phase.seq_len), dtype)
        if plan.only is not None:  # one dataset holds every row of the plan (the usual case)
            self._read_dataset(plan, k, plan.only, None, out, dtype)
        else:
            assert plan.which is not None and plan.single is not None  # (planned)
            which = plan.which[k * n : (k + 1) * n]
            if plan.single[k]:
                self._read_dataset(plan, k, int(which[0]), None, out, dtype)
            else:
                for d in np.unique(which).tolist():
                    self._read_dataset(plan, k, d, np.flatnonzero(which == d), out, dtype)
        if k == 0 and any(m is not None for m in plan.maps):
            self._ready_next(plan, lo, hi, phase, dtype)
        return (out, np.zeros(out.shape, bool)) if with_breaks else out

    def _read_dataset(self, plan: _Plan, k: int, d: int, idx: np.ndarray | None, out: np.ndarray, dtype) -> None:
        """Plan step ``k``'s rows of dataset ``d`` into ``out`` (``idx``: their rows of ``out``; None: all
        of them): from the maps where they apply, else with pread (staged, or step by step)."""
        mapped = self._mapped(plan, d, dtype)
        if mapped is not None:
            target = out if idx is None else np.empty((len(idx), out.shape[1]), dtype)
            top = mapped.read(target, k, idx)
            if top is not None:
                self._check_top(top, d)
                if idx is not None:
                    out[idx] = target
                return
        n = len(out)
        sel = slice(None) if idx is None else idx
        if plan.maps[d] is not None or self._too_big(plan, d) or self._runs(plan, d) is None:
            # Step by step with pread: after a map read faulted, in a plan sized for the maps (up to 256
            # steps, beyond what staging holds), or when a row crosses a shard boundary in the plan.
            assert plan.starts is not None  # (planned)
            rows = gather_rows(
                self.sources[d].dataset,
                np.empty((n if idx is None else len(idx), out.shape[1]), self.dtypes[d]),
                plan.starts[k * n : (k + 1) * n][sel],
            )
            self._check_vocab(rows, d)  # on the stored ids, before any (narrowing) cast
        else:
            slots = plan.slots[d]
            assert slots is not None  # set with staged[d]
            rows = self._staged(plan, d)[slots[k * n : (k + 1) * n][sel]]
        if idx is None:
            np.copyto(out, rows, casting="unsafe")  # one cast of the whole batch
        else:
            out[sel] = rows

    def _mapped(self, plan: _Plan, d: int, dtype) -> MapRows | None:
        """Dataset ``d``'s rows of ``plan`` in its shards' maps, or None where the map path does not apply:
        no native reader, a dtype pair it does not cast, ``mapped_bytes=0``, or shards that cannot be mapped."""
        mapped = plan.maps[d]
        if mapped is not None:  # (every step after the plan's first)
            return None if mapped.broken else mapped
        dataset = self.sources[d].dataset
        if plan.buffers[d] is None and dataset.mapped_bytes > 0 and mapread.can_gather(self.dtypes[d], np.dtype(dtype)):
            assert plan.starts is not None and plan.which is not None
            n = len(plan.which) // (plan.end - plan.first)
            mine = plan.which == d
            table = dataset.shard_table
            table.account_mapped(dataset.mapped_bytes)  # (once a plan: the rows of the plans before it are read)
            try:
                mapped = plan.maps[d] = MapRows(
                    table,
                    plan.starts,
                    plan.seq_len,
                    n,
                    lambda row, start: gather_into(dataset, row, np.array([start]), np.array([len(row)])),
                    None if mine.all() else mine,
                )
            except mapread.CannotMap as e:  # e.g. a FUSE mount with direct I/O refuses shared maps (ENODEV)
                log.warning(
                    "dataset %s: its shards cannot be memory-mapped (%s): reading it with pread (slower)",
                    self.curriculum.names[d],
                    e,
                )
                dataset.mapped_bytes = 0
                return None
        return mapped

    def _check_top(self, top: int, d: int) -> None:
        limit = self.vocab_size
        if limit is not None and top >= limit:
            self._check_vocab(np.array([top]), d)

    def _too_big(self, plan: _Plan, d: int) -> bool:
        """Whether dataset ``d``'s rows of ``plan`` exceed what the pread path stages at once (``_STAGED_BYTES``)."""
        assert plan.which is not None
        return plan.end - plan.first > 1 and len(plan.which) * plan.seq_len * self.dtypes[d].itemsize > _STAGED_BYTES

    def _runs(self, plan: _Plan, d: int) -> RowRuns | None:
        """Dataset ``d``'s rows of ``plan`` in dataset order, cut into runs for the pread path (on first
        use: the map path needs none), or None when a row crosses a shard boundary."""
        if not plan.cut[d]:
            assert plan.which is not None and plan.starts is not None
            sel = np.flatnonzero(plan.which == d)
            start = plan.starts[sel]
            # The rows of a lane over the next steps follow each other (roxxel.data.spread), so runs stay
            # long when a batch's rows come from independent places.
            order = np.argsort(start, kind="stable")
            plan.staged[d] = row_runs(self.sources[d].dataset, start[order], plan.seq_len)
            if plan.staged[d] is not None:
                slot = np.full(len(plan.which), -1, np.int64)
                slot[sel[order]] = np.arange(len(sel))
                plan.slots[d] = slot
            plan.cut[d] = True
        return plan.staged[d]

    def _staged(self, plan: _Plan, d: int) -> np.ndarray:
        """Dataset ``d``'s rows of every step of ``plan``, read on first use (vocabulary checked)."""
        buf = plan.buffers[d]
        if buf is None:
            runs = self._runs(plan, d)
            assert runs is not None
            rows = int(runs.his[-1] // (plan.seq_len * self.dtypes[d].itemsize)) if runs.his else 0
            buf = plan.buffers[d] = read_runs(
                self.sources[d].dataset, np.empty((rows, plan.seq_len), self.dtypes[d]), runs
            )
            self._check_vocab(buf, d)  # on the stored ids, before any (narrowing) cast
        return buf

    def _planned(self, step: int, lo: int, hi: int, phase: PlannedPhase, dtype) -> tuple[_Plan, int] | None:
        """The plan holding ``step`` and the step's index in it, or None when some row joins pieces.

        Rows are located and cut for up to ``_AHEAD`` steps at once (one vectorised pass instead
        of one per step); a stream reads steps in order, so the next ones come from this plan.
        When rows are read from the maps, the next plan is made at this one's first step
        (:meth:`_ready_next`), so that its blocks are checked before its first step.
        """
        key = (phase.index, lo, hi)
        plan = self._plan
        if plan is None or plan.key != key or not plan.first <= step < plan.end:
            ahead = self._next
            self._next = None
            if ahead is not None and ahead.key == key and ahead.first == step:
                plan = self._plan = ahead
            else:
                plan = self._plan = self._plan_ahead(
                    step, lo, hi, phase, key, self._plan_size(plan, step, lo, hi, phase, key, dtype)
                )
        if plan.which is None:
            return None
        return plan, step - plan.first

    def _plan_size(self, plan: _Plan | None, step: int, lo: int, hi: int, phase: PlannedPhase, key, dtype) -> int:
        """Steps to plan from ``step``: 1 after a jump (a resume's first batch pays for itself), then 4x
        the last plan up to ``_AHEAD`` (``_MAP_AHEAD`` when every dataset's rows are read from the
        maps); rows staged for pread hold at most ``_STAGED_BYTES``."""
        grown = 4 * (plan.end - plan.first) if plan is not None and plan.key == key and step == plan.end else 1
        if all(
            src.dataset.mapped_bytes > 0 and mapread.can_gather(dt, np.dtype(dtype))
            for src, dt in zip(self.sources, self.dtypes)
        ):  # rows read from the maps: nothing is staged
            return min(_MAP_AHEAD, grown)
        fits = max(1, _STAGED_BYTES // max(1, (hi - lo) * phase.seq_len * max(dt.itemsize for dt in self.dtypes)))
        return min(_AHEAD, fits, grown)

    def _ready_next(self, plan: _Plan, lo: int, hi: int, phase: PlannedPhase, dtype) -> None:
        """At the first step of ``plan`` read from the maps, make the next plan and start checking its blocks:
        the checking thread gets a whole plan's time to check them ahead of their first step (at half
        a plan, the first pass waited for it 1.5x longer in bench/stream.py)."""
        size = plan.end - plan.first
        if size < 2 or self._next is not None or plan.end >= phase.end_step:
            return  # (a one-step plan, as after a jump, returns its batch first: a resume waits for nothing more)
        nxt = self._plan_ahead(
            plan.end, lo, hi, phase, plan.key, self._plan_size(plan, plan.end, lo, hi, phase, plan.key, dtype)
        )
        if nxt.which is not None:
            for d in [nxt.only] if nxt.only is not None else np.unique(nxt.which).tolist():
                self._mapped(nxt, d, dtype)
        self._next = nxt

    def _plan_ahead(self, step: int, lo: int, hi: int, phase: PlannedPhase, key, ahead: int) -> _Plan:
        n = hi - lo
        for steps in dict.fromkeys((int(min(ahead, phase.end_step - step)), 1)):
            rows = (
                self.curriculum.rows_before(step)
                + lo
                + phase.global_batch_size * np.arange(steps, dtype=np.int64)[:, None]
                + np.arange(n, dtype=np.int64)
            ).reshape(-1)
            try:
                which, position, _ = self.curriculum.plan.locate(rows)
            except (IndexError, ValueError):
                if steps == 1:
                    raise
                continue  # the steps ahead run past the data: plan only this one (its own error, if any)
            starts = np.empty_like(position)
            one = len(self.sources) == 1
            for d in [0] if one else np.unique(which).tolist():
                sel = slice(None) if one else np.flatnonzero(which == d)
                mine = position[sel]
                _, start, count = self.sources[d].pieces(mine, phase.seq_len)
                if len(start) != len(mine) or (count != phase.seq_len).any():  # some row is cut into pieces
                    return _Plan(key, step, step + 1, phase.seq_len)
                starts[sel] = start
            by_step = which.reshape(steps, n)
            single = (by_step == by_step[:, :1]).all(axis=1) if n else np.ones(steps, bool)
            only = int(which[0]) if n and single.all() and (by_step[:, 0] == which[0]).all() else None
            return _Plan(
                key, step, step + steps, phase.seq_len, which, starts, single, only, [None] * len(self.sources)
            )
        raise AssertionError("unreachable")

    def _rows_by_pieces(self, step: int, lo: int, hi: int, phase: PlannedPhase, dtype, with_breaks: bool):
        """:meth:`rows` for steps whose rows join several pieces (chunk or document boundaries inside a row)."""
        first = self.curriculum.rows_before(step)
        which, position, _ = self.curriculum.plan.locate(np.arange(first + lo, first + hi, dtype=np.int64))
        out = empty_aligned((hi - lo, phase.seq_len), dtype)
        breaks = np.zeros(out.shape, bool) if with_breaks else None
        for d in np.unique(which).tolist():
            sel = np.flatnonzero(which == d)
            source = self.sources[d]
            row, starts, counts = source.pieces(position[sel], phase.seq_len)
            flat = np.empty(len(sel) * phase.seq_len, dtype if np.can_cast(self.dtypes[d], dtype) else self.dtypes[d])
            gather_into(source.dataset, flat, starts, counts)
            self._check_vocab(flat, d)
            out[sel] = flat.reshape(len(sel), phase.seq_len)
            if breaks is not None:
                breaks[sel] = _joins(row, starts, counts, len(sel), phase.seq_len)
        return (out, breaks) if with_breaks else out

    def _check_vocab(self, tokens: np.ndarray, d: int) -> None:
        limit, max_id = self.vocab_size, self._max_ids[d]
        if limit is None or (max_id is not None and max_id < limit):  # no larger id fits the dtype
            return
        if tokens.size and int(tokens.max()) >= limit:
            bad = int(tokens.max())
            name = self.curriculum.names[d]
            raise ConfigValueError(
                f"dataset {name!r} ({self.curriculum.datasets[name].filepath}) holds token id {bad}, beyond the "
                f"model's vocab_size {limit}; pack it with the model's tokenizer or raise vocab_size"
            )


def empty_aligned(shape: tuple[int, int], dtype, align: int = 64) -> np.ndarray:
    """``np.empty(shape, dtype)`` whose data starts on an ``align``-byte boundary.

    XLA's CPU client takes a host array of that alignment as the device buffer itself in
    ``jax.device_put`` (no copy); numpy's own allocations are only 16-byte aligned. Each
    batch gets a fresh buffer, so a placed batch never shares memory with the next one.
    """
    dtype = np.dtype(dtype)
    nbytes = shape[0] * shape[1] * dtype.itemsize
    raw = np.empty(nbytes + align, np.uint8)
    skip = -mapread.address(raw) % align
    return raw[skip : skip + nbytes].view(dtype).reshape(shape)


def _joins(row: np.ndarray, start: np.ndarray, count: np.ndarray, n_rows: int, seq_len: int) -> np.ndarray:
    """Bool ``(n_rows, seq_len)``: True where a piece starts that does not continue the previous piece of its row."""
    out = np.zeros((n_rows, seq_len), bool)
    if len(row) < 2:
        return out
    same_row = row[1:] == row[:-1]
    not_next = start[1:] != start[:-1] + count[:-1]
    k = np.flatnonzero(same_row & not_next) + 1
    if k.size:
        ends = np.cumsum(count)  # the pieces of a row are consecutive: column = offset within the row
        row_first = np.searchsorted(row, row, side="left")
        col = ends - count - np.where(row_first > 0, ends[row_first - 1], 0)
        out[row[k], col[k]] = True
    return out
