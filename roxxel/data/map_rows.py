"""Rows of planned steps read straight from the shards' memory maps (the streamer's fast path).

:class:`MapRows` holds, for one dataset's rows of a plan (up to 256 steps), each row's address
in its shard's map; :meth:`MapRows.read` gathers a step's rows into the batch with the cast on
the way (:mod:`roxxel.format.mapread`).

**Every token is checked before it is copied.** The blocks the plan's rows touch that this
process has not checked yet are checked by the CRC-32C of the block's bytes in the map (no
copy, no second read), on a thread of their own (:class:`_BlockJob`: native code, the GIL
released), in the order the steps need them: step ``k``'s rows are copied only once every
block they touch has matched its stored checksum. While the reader copies one step, the
thread checks the next steps' blocks (on a second core), so a first pass runs near the speed
of later ones.

**A fault never passes silently.** A read that faults (SIGBUS: the file was cut short under
the map, or its storage failed) returns None; the caller reads those rows again with
``pread`` (:func:`roxxel.data.reader.read_runs`), which raises the error that names the
shard. After the copy, each shard read is checked unchanged since it was opened, as on the
``pread`` path. Reads with ``pread`` are also what the streamer does wherever this path does
not apply (no native reader, a dtype pair it does not cast, rows that cross a shard boundary).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from typing import Any, Callable

import numpy as np

from roxxel.data.shard_table import ShardTable
from roxxel.format import mapread
from roxxel.format.mapped import CHECK_SECONDS

log = logging.getLogger(__name__)

_INLINE_BLOCKS = 4  # a job of at most this many blocks runs in the calling thread (a thread costs ~0.1 ms to start)


class MapRows:
    """One dataset's rows of a plan as addresses in its shards' maps.

    Args:
        table: the dataset's shards (:attr:`roxxel.data.dataset.Dataset.shard_table`).
        starts: each planned row's first token in the dataset (int64, step by step, ``n`` rows a
            step); no row of this dataset may cross a shard boundary (the caller cut them with
            :func:`roxxel.data.reader.row_runs`).
        length: tokens per row.
        n: rows per step.
        read_row: ``read_row(out, start)`` copies tokens ``[start, start + len(out))`` into ``out``
            (1-D, the stored dtype) with ``pread``, blocks checked: for rows that cross into the
            next shard (:func:`roxxel.data.reader.gather_into`).
        mine: which planned rows are this dataset's (bool), None: all of them.
    """

    def __init__(
        self,
        table: ShardTable,
        starts: np.ndarray,
        length: int,
        n: int,
        read_row: Callable[[np.ndarray, int], object],
        mine: np.ndarray | None = None,
    ):
        self.table, self.length, self.n, self._read_row = table, length, n, read_row
        self.broken = False  # a read faulted: the caller reads with pread from then on
        rows = np.arange(len(starts)) if mine is None else np.flatnonzero(mine)
        starts = starts[rows]
        offsets = table.offsets
        one = len(offsets) == 2
        shard_of = np.zeros(len(starts), np.int64) if one else np.searchsorted(offsets, starts, side="right") - 1
        local = (starts - offsets[shard_of]) * table.dtype.itemsize  # data bytes
        crossing = starts + length > offsets[shard_of + 1]  # rows that go on in the next shard: read with pread
        self.crossing = {int(r): int(a) for r, a in zip(rows[crossing], starts[crossing])}
        self.addresses = np.zeros(len(mine) if mine is not None else len(starts), np.int64)  # 0: another dataset's row
        self.shards: list[Any] = []
        self._maps: list[Any] = []  # each map stays mapped while its addresses are in use (no descriptor held)
        # Shards with unchecked blocks: the shard, the map address of its token 0, its stored checksums.
        checking: list[tuple[Any, int, np.ndarray]] = []
        check_ix = np.full(int(shard_of.max(initial=0)) + 1, -1, np.int64)
        base_of = np.zeros(len(check_ix), np.int64)  # per shard: the map address of its token 0
        for s in [0] if one else np.flatnonzero(np.bincount(shard_of)).tolist():  # (a plan may span 1000s)
            shard = table.mapped(s)
            mapping = shard.native_map()  # (CannotMap: the caller reads this dataset with pread)
            base_of[s] = base = mapread.mapping_address(mapping) + shard.data_offset
            self.shards.append(shard)
            self._maps.append(mapping)
            blocks = shard.block_checks
            if blocks is not None and shard.check_blocks and blocks.unchecked:
                shard = table.shard(s)  # (reads with its descriptor may follow: back under the descriptor LRU)
                if blocks.algorithm == "crc32c" and mapread.crc32c_ready():
                    check_ix[s] = len(checking)
                    checking.append((shard, base, shard.block_crcs()))
                else:  # (the first 1.1 shards' zlib CRC-32: checked now, with pread)
                    sel = np.flatnonzero((shard_of == s) & ~crossing)
                    shard.check_pieces(local[sel] // shard.dtype.itemsize, np.full(len(sel), length, np.int64))
        direct = np.flatnonzero(~crossing)
        self.addresses[rows[direct]] = base_of[shard_of[direct]] + local[direct]
        self._crossing_steps = set((rows[crossing] // n).tolist())  # steps with rows left at address 0
        self._stored = table.dtype
        self._row_bytes = length * self._stored.itemsize
        self._job = None
        ix = np.where(crossing, -1, check_ix[shard_of])
        keep = ix >= 0
        if keep.any():
            one_step = len(self.addresses) <= n  # (a plan of one step)
            self._job = _BlockJob(checking, ix[keep], local[keep], rows[keep], n, self._row_bytes, self._maps, one_step)
        self._next_check = 0.0

    def read(self, out: np.ndarray, step: int, which: np.ndarray | None = None) -> int | None:
        """Gather plan step ``step``'s rows (``which``: those of its rows that are this dataset's, None:
        all) into ``out`` (2-D, ``length`` columns, a dtype :func:`mapread.can_gather` takes).

        Returns the largest stored id copied, or None when a read faulted (``out`` is then
        partly written: read the rows again with ``pread``, which names the problem).

        Raises:
            BlockChecksumError: a block the rows touch is damaged.
            ShardChangedError: a shard's file changed since it was opened.
        """
        job = self._job  # (the test of wait's first lines, inline: most steps have nothing to wait for)
        if (
            job is not None
            and (job.need[step] if step < len(job.need) else len(job.blocks)) > job.verified
            and not job.wait(step)
        ):
            self.broken = True
            return None
        first = step * self.n
        step_rows = self.addresses[first : first + self.n]
        sources = step_rows if which is None else step_rows[which]
        if step in self._crossing_steps:  # rows that go on in the next shard: pread, the others gathered
            return self._read_crossing(out, sources, first + (np.arange(self.n) if which is None else which))
        faulted, top = mapread.gather(out, sources, self._stored) if len(sources) else (None, 0)
        if faulted is not None:
            self.broken = True
            return None
        self.check_unchanged()
        self.table.bytes_read += out.shape[0] * self._row_bytes
        return top

    def check_unchanged(self) -> None:
        """Refuse rows of a shard whose file changed since it was opened (after each copy, before the
        rows leave): each shard's :meth:`~roxxel.format.mapped.MappedFile.check_unchanged`, asked at
        most every ``CHECK_SECONDS`` (each shard's own check is timed the same way).

        Raises:
            ShardChangedError: rewritten in place, replaced, or removed.
        """
        now = time.monotonic()
        if now >= self._next_check:
            self._next_check = now + CHECK_SECONDS
            for shard in self.shards:
                shard.check_unchanged()

    def _read_crossing(self, out: np.ndarray, sources: np.ndarray, planned: np.ndarray) -> int | None:
        """:meth:`read` for a step with rows that cross into the next shard (address 0): those are read
        with ``pread`` (blocks checked on that path), the others gathered from the maps. Returns the
        largest stored id of ``out``, or None when a map read faulted."""
        mapped = np.flatnonzero(sources != 0)
        top = 0
        if len(mapped):
            part = np.empty((len(mapped), self.length), out.dtype)
            faulted, most = mapread.gather(part, sources[mapped], self._stored)
            if faulted is not None or most is None:
                self.broken = True
                return None
            out[mapped], top = part, most
        for r in np.flatnonzero(sources == 0).tolist():
            row = np.empty(self.length, self._stored)
            self._read_row(row, self.crossing[int(planned[r])])
            out[r] = row
            top = max(int(row.max()), top)
        self.check_unchanged()
        self.table.bytes_read += out.shape[0] * self._row_bytes
        return top


class _BlockJob:
    """The CRC-32C of the unchecked blocks a plan's rows touch, computed in the order of the step
    that first needs each, on the checking thread (:func:`_submit`); :meth:`wait` compares them
    with the stored checksums as steps come to need them.

    Args:
        checking: per shard with unchecked blocks: the shard, the map address of its token 0, its stored checksums.
        shard_ix, local, rows: per row: its shard (index into ``shards``), data byte offset, and
            index among the plan's rows (increasing; row ``r`` is in plan step ``r // n``).
        n: rows per step.
        row_bytes: bytes per row.
        views: the maps (kept alive while the job lives).
        inline: compute in the calling thread (a one-step plan, as after a jump: its step needs
            every block now, and a hand-off to the thread would only add a wait).
    """

    def __init__(
        self,
        checking: list[tuple[Any, int, np.ndarray]],
        shard_ix,
        local,
        rows,
        n: int,
        row_bytes: int,
        views: list,
        inline: bool,
    ):
        self.shards = [shard for shard, _, _ in checking]
        self.checks = [shard.block_checks for shard in self.shards]  # (each has unchecked blocks: not None)
        sizes = [checks.block_bytes for checks in self.checks]
        size = (
            sizes[0] if len(set(sizes)) == 1 else np.array(sizes, np.int64)[shard_ix]
        )  # (one size: a scalar divides faster)
        first, last = local // size, (local + row_bytes - 1) // size
        if int((last - first).max(initial=0)) > 1:  # long rows: every block of every row, first to last
            count = last - first + 1
            shard_ix, steps = np.repeat(shard_ix, count), np.repeat(rows // n, count)
            blocks = np.repeat(first, count) + np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
            keys = (shard_ix << 36) | blocks
        else:
            keys, steps = _lane_keys((shard_ix << 36) | first, (shard_ix << 36) | last, rows, n)
        # One sort finds each block and the first step that needs it: block key high, step low.
        assert int(steps.max(initial=0)) < 256  # (reader._MAP_AHEAD)
        packed = np.sort((keys << 8) | steps)
        keys = packed >> 8
        first_of_key = np.ones(len(keys), bool)  # (the first of each key's run: its earliest step)
        np.not_equal(keys[1:], keys[:-1], out=first_of_key[1:])
        packed = packed[first_of_key]
        keys, when_first = packed >> 8, packed & 255
        ix, blocks = keys >> 36, keys & ((1 << 36) - 1)
        todo = np.ones(len(keys), bool)
        expected = np.empty(len(keys), np.uint32)
        sources, lengths = np.empty(len(keys), np.int64), np.empty(len(keys), np.int64)
        bounds = np.searchsorted(ix, np.arange(len(checking) + 1)).tolist()  # (sorted by key: each shard's together)
        for i, (_, base, stored) in enumerate(checking):
            sel = slice(bounds[i], bounds[i + 1])
            checks = self.checks[i]
            b = blocks[sel]
            todo[sel] = ~checks.checked[b]
            expected[sel] = stored[b]
            lo = b * checks.block_bytes
            sources[sel] = base + lo
            lengths[sel] = np.minimum(lo + checks.block_bytes, checks.data_bytes) - lo
        todo = np.flatnonzero(todo)
        todo = todo[np.argsort(when_first[todo], kind="stable")]  # in the order the steps need them
        self.ix, self.blocks, self.expected = ix[todo], blocks[todo], expected[todo]
        when_first = when_first[todo]
        self.need = np.searchsorted(when_first, np.arange(int(when_first.max(initial=0)) + 1), side="right").tolist()
        self.crcs = np.empty(len(self.blocks), np.uint32)
        self.done = np.zeros(1, np.int64)  # set by the native loop: crcs[:done] are computed
        self.finished = False
        self.fault: int | None = None
        self.verified = 0
        self._work = (sources[todo], lengths[todo], views)  # (the maps stay mapped while the job lives)
        self._pid = os.getpid()
        if inline or len(self.blocks) <= _INLINE_BLOCKS:
            self.run()
        else:
            _submit(self)

    def run(self) -> None:
        """Compute the checksums (on the checking thread, or in the caller for a small job, or again
        in a forked child, whose copy of the job the parent's thread may have left half done)."""
        sources, lengths, _ = self._work
        try:
            _, self.fault = mapread.crc32c(sources, lengths, self.crcs, self.done)
        finally:
            self.finished = True

    def wait(self, step: int) -> bool:
        """Block until every block step ``step`` (or an earlier one) needs is checked; False when a read faulted.

        Raises:
            BlockChecksumError: such a block does not match its stored checksum (names the shard and the block).
        """
        need = self.need[step] if step < len(self.need) else len(self.blocks)
        if need <= self.verified:
            return True
        if os.getpid() != self._pid and not self.finished:  # a forked child: the checking thread is the parent's
            self._pid = os.getpid()
            self.run()
        spins = 0
        while (done := mapread.progress(self.done)) < need:
            if self.finished and mapread.progress(self.done) < need:
                return False  # a read faulted
            spins += 1  # yield at first (the checker is usually a block away), then sleep: never spin a core
            time.sleep(0 if spins < 100 else 0.0005)
        lo, need = self.verified, done  # every block checksummed so far: fewer, larger comparisons
        bad = np.flatnonzero(self.crcs[lo:need] != self.expected[lo:need])
        if len(bad):  # (verified stays put: asking for these steps again raises again)
            j = lo + int(bad[0])
            shard, checks = self.shards[int(self.ix[j])], self.checks[int(self.ix[j])]
            shard.with_descriptor(lambda fd: checks.settle(fd, int(self.blocks[j]), int(self.crcs[j])))  # raises
        self.verified = need
        if need == len(self.blocks):  # all verified: recorded in the shards at once (not per step: it costs)
            for i in np.unique(self.ix).tolist():
                self.checks[i].mark(self.blocks[self.ix == i])
        return True


def _lane_keys(first: np.ndarray, last: np.ndarray, rows: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The block keys of rows that cover one or two blocks (``first``/``last``: each row's first and
    last block key, per plan row index ``rows``), and the step of each, less those the row at the
    same place of the step before already covers: a batch place reads on through one region for
    several steps (a lane, or consecutive rows), so this drops most repeats before the sort
    (an 8x smaller sort; sorting is the job's main cost). Each block's earliest step stays."""
    if len(rows) and int(rows[-1]) == len(rows) - 1:  # every row of the plan: the place's row a step before is n back
        new_first, new_last = np.ones(len(rows), bool), last != first
        new_first[n:] = (first[n:] != first[:-n]) & (first[n:] != last[:-n])
        new_last[n:] &= (last[n:] != first[:-n]) & (last[n:] != last[:-n])
    else:  # some rows are not this job's (another dataset's, another shard's, or crossing into the next)
        before_first = np.full(int(rows.max(initial=0)) + n + 1, -1, np.int64)
        before_last = before_first.copy()
        before_first[rows + n], before_last[rows + n] = first, last  # indexed by the row a step later
        bf, bl = before_first[rows], before_last[rows]
        new_first = (first != bf) & (first != bl)
        new_last = (last != first) & (last != bf) & (last != bl)
    steps = rows // n
    return np.concatenate([first[new_first], last[new_last]]), np.concatenate([steps[new_first], steps[new_last]])


_queue: queue.SimpleQueue | None = None


def _submit(job: _BlockJob) -> None:
    """Run ``job`` on the checking thread (one per process, started on first use; jobs run in order)."""
    global _queue
    if _queue is None:
        _queue = queue.SimpleQueue()
        threading.Thread(target=_checker, args=(_queue,), name="roxxel-block-checks", daemon=True).start()
    _queue.put(job)


def _checker(jobs: queue.SimpleQueue) -> None:
    while True:
        job = jobs.get()
        try:
            job.run()
        except Exception:  # (the job counts as faulted: its reader reads with pread, which names any error)
            log.exception("roxxel: checking a plan's blocks failed; those rows are read with pread")


def _forget_checker() -> None:  # a forked child has no checking thread: start its own on first use
    global _queue
    _queue = None


os.register_at_fork(after_in_child=_forget_checker)
