"""Rows of a batch from independent places.

A dataset's rows in a blend segment are consecutive ranges of its shuffled token stream:
row ``k`` holds tokens ``[start + k * seq_len, start + (k + 1) * seq_len)``. Taken in that
order, the rows of one batch would be consecutive windows of a few shuffled chunks (a
32 x 2048 batch over 16,384-token chunks: 4 places of 8 rows each), whose gradients
correlate. Megatron-LM and Grain draw every row of a batch from an independent place.

:func:`spread_rows` keeps every row and every token (a bijection of a dataset's rows: each
token is still read once per epoch, resume stays O(1)) but deals consecutive rows to
``lanes`` lanes: within a block of ``lanes * depth`` rows, row ``i`` takes the
``i // lanes``-th row of lane ``i % lanes``, and lane ``l`` is stream rows
``[l * depth, (l + 1) * depth)`` of the block. With ``depth * seq_len`` at least a chunk,
any ``lanes`` consecutive rows lie in ``lanes`` different chunks, i.e. independent random
places; and the next batches read on along the same lanes, so reads still run through a
chunk in order (the page cache and the block checks see the same bytes as before).

Blocks are laid out by what the *dataset* holds, never by where a phase ends, so lengthening
the phase a run resumes in keeps every batch before the resumed step (:class:`Lanes`): only
a dataset's last block, shorter than the others, is dealt by its own length. When a segment
ends inside a block, the unread rest of each lane is carried to the dataset's next segment,
which reads those rows first (re-cut to its ``seq_len``; a piece shorter than a row waits for a
phase with shorter rows).
"""

from __future__ import annotations

import dataclasses

import numpy as np

BATCH_ROWS = ("independent", "consecutive")
"""How rows of a batch are drawn from the stream: ``"independent"`` (default) - each row from
its own place (:func:`spread_rows`); ``"consecutive"`` - consecutive windows of the stream,
the order of every earlier version (and what a checkpoint that records no ``batch_rows`` took)."""


def lane_depth(lane_tokens: int, seq_len: int) -> int:
    """Rows of ``seq_len`` tokens per lane and block: enough that consecutive lanes are ``lane_tokens`` apart."""
    return max(1, -(-lane_tokens // seq_len))


def spread_rows(rows: np.ndarray, lanes: int, depth: int, count: np.ndarray | int | None) -> np.ndarray:
    """The stream place of each of a dataset's rows in a segment.

    Args:
        rows: int64 array (any shape) of row indices ``>= 0`` of one dataset within its segment.
        lanes: rows dealt round robin (>= 1): any ``lanes`` consecutive rows go to different
            lanes (the streamer uses the phase's global batch size).
        depth: stream rows per lane in a block (>= 1; see :func:`lane_depth`).
        count: the rows there are (int, or an int array broadcast against ``rows``), or None
            for endless rows. The last block, of ``m < lanes * depth`` rows, is dealt to
            ``min(lanes, m)`` lanes of (almost) equal depth, so that it is a bijection of its own
            rows (lanes ``ceil(m / lanes)`` rows apart: closer than a chunk, and adjacent when
            ``m <= lanes``).

    Returns:
        int64 array of ``rows``' shape: the row's index in stream order; a permutation of
        ``[0, count)``.
    """
    rows = np.asarray(rows, np.int64)
    block = lanes * depth
    b, i = np.divmod(rows, block)
    m: np.ndarray
    if count is None:
        m = np.full(rows.shape, block, np.int64)
    else:
        count = np.asarray(count, np.int64)
        full = count // block
        m = np.where(b < full, block, count - full * block)
    w, d, r = _block_lanes(m, lanes)
    lane, level = i % w, i // w
    return b * block + _lane_start(lane, d, r) + level


def _block_lanes(m, lanes: int):
    """A block of ``m`` rows dealt to ``lanes`` lanes: ``(w, d, r)``, its lanes (``min(lanes, m)``,
    at least 1), the rows of its deepest lanes and how many lanes hold ``d`` rows (the others
    ``d - 1``). Ints or int64 arrays, elementwise."""
    w = np.clip(m, 1, lanes)
    d = -(-m // w)
    return w, d, m - (d - 1) * w


def _lane_start(lane, d, r):
    """The first row, within its block, of lane ``lane`` of a block shaped ``(w, d, r)``."""
    return lane * d - np.maximum(0, lane - r)


@dataclasses.dataclass(frozen=True, eq=False)
class Lanes:
    """Where one dataset's unread tokens lie, between two segments, under independent rows.

    Attributes:
        frontier: token position (in the dataset's shuffled stream, past its size under
            ``repeat``) from which no block has been dealt yet.
        starts, lengths: int64 arrays, the token start and length of each carried piece: the
            unread rest of a lane of the block a segment ended in, read first by the next
            segment that takes the dataset.
    """

    frontier: int = 0
    starts: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))
    lengths: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))


class SegmentLanes:
    """One dataset's row -> token position map within one segment (independent rows).

    The segment's rows of this dataset first read the carried pieces, a row of ``seq_len``
    tokens at a time, dealt round robin over the pieces (the longest first: a row of each piece
    that has one left, then the next row of each, ...), then blocks of ``lanes * depth`` rows
    from ``Lanes.frontier`` by :func:`spread_rows`, the last block dealt by the rows the dataset
    has left (``size``), never by where the segment ends.

    Args:
        state: the dataset's lanes before the segment.
        seq_len: tokens per row.
        lanes, depth: the block's shape (:func:`spread_rows`).
        size: tokens of the dataset's stream (None: endless, under ``repeat``).
    """

    def __init__(self, state: Lanes, seq_len: int, lanes: int, depth: int, size: int | None):
        self.state, self.seq_len, self.lanes, self.depth = state, seq_len, lanes, depth
        rows = state.lengths // seq_len
        self._order = np.argsort(-rows, kind="stable")  # longest pieces first: level v is a prefix of them
        self._rows = rows[self._order]
        levels = int(self._rows.max(initial=0))
        wider = len(rows) - np.searchsorted(np.sort(rows), np.arange(levels), side="right")  # pieces with > v rows
        self._cum = np.concatenate([[0], np.cumsum(wider)]).astype(np.int64)
        self.carried = int(self._cum[-1])
        self.fresh = None if size is None else max(0, (size - state.frontier) // seq_len)
        self.available = None if self.fresh is None else self.carried + self.fresh
        """Rows this dataset can still give at ``seq_len`` (None: endless)."""

    def place(self, done: np.ndarray) -> np.ndarray:
        """Token position of the dataset's rows ``done`` (int64 array of indices within the segment)."""
        out = np.empty(done.shape, np.int64)
        carried = done < self.carried
        if carried.any():
            i = done[carried]
            level = np.searchsorted(self._cum, i, side="right") - 1
            out[carried] = self.state.starts[self._order[i - self._cum[level]]] + level * self.seq_len
        if not carried.all():
            rows = spread_rows(done[~carried] - self.carried, self.lanes, self.depth, self.fresh)
            out[~carried] = self.state.frontier + rows * self.seq_len
        return out

    def after(self, taken: int, shortest: int) -> Lanes:
        """The dataset's lanes once the segment has read its first ``taken`` rows.

        Pieces shorter than ``shortest`` tokens (the curriculum's shortest row) are dropped:
        no later row fits in them.
        """
        L = self.seq_len
        from_pieces = min(taken, self.carried)
        level = int(np.searchsorted(self._cum, from_pieces, side="right")) - 1
        extra = from_pieces - int(self._cum[level])
        used = np.minimum(self._rows, level) + ((np.arange(len(self._rows)) < extra) & (self._rows > level))
        starts = [self.state.starts[self._order] + used * L]
        lengths = [self.state.lengths[self._order] - used * L]
        frontier = self.state.frontier
        fresh = taken - from_pieces
        if fresh:
            block = self.lanes * self.depth
            full, part = divmod(fresh, block)
            frontier += full * block * L
            if part:  # the rest of each lane of the block the segment ended in is carried
                m = block if self.fresh is None else min(block, self.fresh - full * block)
                w, d, r = (int(x) for x in _block_lanes(m, self.lanes))
                lane = np.arange(w, dtype=np.int64)
                first = _lane_start(lane, d, r)  # each lane's first row, as spread_rows deals them
                rows = np.where(lane < r, d, d - 1)
                read = (part - lane + w - 1) // w  # rows part already took from each lane
                starts.append(frontier + (first + read) * L)
                lengths.append((rows - read) * L)
                frontier += m * L
        s, n = np.concatenate(starts), np.concatenate(lengths)
        keep = n >= shortest
        return Lanes(frontier, s[keep], n[keep])
