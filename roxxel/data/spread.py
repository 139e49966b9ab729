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
a dataset's last block, shorter than the others, is dealt by its own length. Under ``repeat``
the rows that end in the current epoch are dealt the same way (the epoch's last block by its
own length), and only the rows after them as endless blocks, so an epoch's batches do not
depend on whether another epoch or phase follows it. Successive blocks
deal their lanes in alternating order, so the rows dealt across a block boundary are a lane
apart too. When a segment ends inside a block, the unread rest of each lane is carried to the
dataset's next segment (re-cut to its ``seq_len``; a piece shorter than a row waits for a phase
with shorter rows), which reads them level by level together with its first block's lanes
(:class:`SegmentLanes`): where the global batch grew, its first batch still has a place per row.
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


def spread_rows(
    rows: np.ndarray, lanes: int, depth: int, count: np.ndarray | int | None, first_block: int = 0
) -> np.ndarray:
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
        first_block: the number of the block row 0 lies in, counted over the dataset. Full
            blocks of odd number deal their lanes last to first: the last row of a block and
            the first of the next, dealt one after the other, are then a lane apart in the
            stream, not adjacent.

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
    lane = np.where(((b + first_block) % 2 == 1) & (m == block), w - 1 - lane, lane)
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
            unread rest of a lane of a block a segment ended in, none of them ending at
            ``frontier`` (such a rest is given back to the blocks still to deal).
        blocks: blocks dealt so far (their number sets the lane order of the next; see
            :func:`spread_rows`).
    """

    frontier: int = 0
    starts: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))
    lengths: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))
    blocks: int = 0


class _Levels:
    """Pieces of a stream read a row at a time, level by level: row ``v`` of every piece that has
    one, then row ``v + 1``, ...; in each level the pieces of the first group come first, then
    those of the second, each group's pieces longest first (so a level's pieces are a prefix of
    each group's order)."""

    def __init__(self, groups: list[tuple[np.ndarray, np.ndarray]], seq_len: int):
        self.seq_len = seq_len
        self.starts, self.lengths, self.rows, self.wider = [], [], [], []
        for starts, lengths in groups:  # token starts and lengths of a group's pieces
            order = np.argsort(-(lengths // seq_len), kind="stable")
            self.starts.append(starts[order])
            self.lengths.append(lengths[order])
            self.rows.append(lengths[order] // seq_len)
        levels = max((int(r.max(initial=0)) for r in self.rows), default=0)
        for rows in self.rows:  # per level, the pieces with a row there
            self.wider.append(len(rows) - np.searchsorted(np.sort(rows), np.arange(levels), side="right"))
        self.cum = np.concatenate([[0], np.cumsum(np.sum(self.wider, axis=0, dtype=np.int64))]).astype(np.int64)
        self.total = int(self.cum[-1])

    def place(self, i: np.ndarray) -> np.ndarray:
        """Token position of rows ``i`` (int64 array, each ``< total``)."""
        level = np.searchsorted(self.cum, i, side="right") - 1
        j = i - self.cum[level]
        out = np.empty(i.shape, np.int64)
        for starts, wider in zip(self.starts, self.wider):
            here = (j >= 0) & (j < wider[level])
            out[here] = starts[j[here]] + level[here] * self.seq_len
            j = j - wider[level]
        return out

    def rests(self, taken: int) -> tuple[np.ndarray, np.ndarray]:
        """The token starts and lengths of what every piece has left after the first ``taken`` rows."""
        level = int(np.searchsorted(self.cum, taken, side="right")) - 1
        extra = taken - int(self.cum[level])
        starts, lengths = [], []
        for group in zip(self.starts, self.lengths, self.rows, self.wider):
            start, length, rows, wider = group
            here = min(extra, int(wider[level])) if level < len(wider) else 0
            used = (np.minimum(rows, level) + (np.arange(len(rows)) < here)) * self.seq_len
            starts.append(start + used)
            lengths.append(length - used)
            extra -= here
        return np.concatenate(starts), np.concatenate(lengths)


class SegmentLanes:
    """One dataset's row -> token position map within one segment (independent rows).

    Without carried pieces, the segment's rows are blocks of ``lanes * depth`` rows from
    ``Lanes.frontier`` by :func:`spread_rows`, the last block dealt by the rows the dataset has
    left (``size``), never by where the segment ends. With carried pieces (the rests of the
    lanes of a block an earlier segment ended in), the first block's lanes and the pieces are
    read together, level by level, the block's lanes first (:class:`_Levels`): a batch of the
    segment has as many places as rows even where its global batch grew; the blocks after it
    follow by :func:`spread_rows`.

    Under ``repeat`` the stream goes on past ``size`` with the next epochs: the rows that end in
    the epoch the segment starts in are dealt as if the dataset ended there, the rows after
    them (a *tail*) as endless blocks, numbered on from there.

    Args:
        state: the dataset's lanes before the segment.
        seq_len: tokens per row.
        lanes, depth: the block's shape (:func:`spread_rows`).
        size: tokens of the dataset's stream (one epoch).
        repeat: whether new epochs follow (``Curriculum(repeat=True)``).
    """

    def __init__(self, state: Lanes, seq_len: int, lanes: int, depth: int, size: int, repeat: bool = False):
        self.state, self.seq_len, self.lanes, self.depth = state, seq_len, lanes, depth
        self.block = lanes * depth
        fresh: int | None
        if repeat:  # the rows that end in the current epoch; none left (a row across its end): endless
            fresh = ((state.frontier // size + 1) * size - state.frontier) // seq_len or None
        else:
            fresh = max(0, (size - state.frontier) // seq_len)
        self.tail = repeat and fresh is not None  # endless blocks after the epoch's rows
        grouped = bool((state.lengths >= seq_len).any())  # pieces with a row at this seq_len: read with the first block
        m = 0 if not grouped else self.block if fresh is None else min(self.block, fresh)
        first = self._block_pieces(m, state.frontier, state.blocks) if m else (np.zeros(0, np.int64),) * 2
        self.levels = _Levels([first, (state.starts, state.lengths)], seq_len)
        self.frontier = state.frontier + m * seq_len  # where spread_rows' blocks start
        self.first_block = state.blocks + (1 if m else 0)
        self.fresh = None if fresh is None else fresh - m
        self.available = None if self.fresh is None or self.tail else self.levels.total + self.fresh
        """Rows this dataset can still give at ``seq_len`` (None: endless)."""

    def _block_pieces(self, m: int, frontier: int, number: int) -> tuple[np.ndarray, np.ndarray]:
        """The lanes of block ``number``, of ``m`` rows at ``frontier``, as pieces (token starts and
        lengths) in dealing order (:func:`spread_rows`)."""
        w, d, r = (int(x) for x in _block_lanes(m, self.lanes))
        lane = np.arange(w, dtype=np.int64)
        if number % 2 and m == self.block:
            lane = lane[::-1]
        return frontier + _lane_start(lane, d, r) * self.seq_len, np.where(lane < r, d, d - 1) * self.seq_len

    def place(self, done: np.ndarray) -> np.ndarray:
        """Token position of the dataset's rows ``done`` (int64 array of indices within the segment)."""
        out = np.empty(done.shape, np.int64)
        grouped = done < self.levels.total
        if grouped.any():
            out[grouped] = self.levels.place(done[grouped])
        if not grouped.all():
            out[~grouped] = self.frontier + self._rows(done[~grouped] - self.levels.total) * self.seq_len
        return out

    def _rows(self, q: np.ndarray) -> np.ndarray:
        """Stream rows (from ``frontier``) of the blocks' rows ``q``: dealt over ``fresh`` rows, then
        (under ``repeat``) the tail's endless blocks after them."""
        if not self.tail:
            return spread_rows(q, self.lanes, self.depth, self.fresh, self.first_block)
        assert self.fresh is not None
        rows = np.empty(q.shape, np.int64)
        head = q < self.fresh
        rows[head] = spread_rows(q[head], self.lanes, self.depth, self.fresh, self.first_block)
        tail_block = self.first_block + -(-self.fresh // self.block)
        rows[~head] = self.fresh + spread_rows(q[~head] - self.fresh, self.lanes, self.depth, None, tail_block)
        return rows

    def after(self, taken: int, shortest: int) -> Lanes:
        """The dataset's lanes once the segment has read its first ``taken`` rows.

        Pieces shorter than ``shortest`` tokens (the curriculum's shortest row) are dropped:
        no later row fits in them.
        """
        L = self.seq_len
        from_levels = min(taken, self.levels.total)
        rest_starts, rest_lengths = self.levels.rests(from_levels)
        starts, lengths = [rest_starts], [rest_lengths]
        frontier, blocks, fresh = self.frontier, self.first_block, self.fresh
        taken -= from_levels
        if self.tail and fresh is not None and taken >= fresh:  # past the epoch's rows: into the tail
            frontier += fresh * L
            blocks += -(-fresh // self.block)
            taken, fresh = taken - fresh, None
        full, part = divmod(taken, self.block)
        frontier += full * self.block * L
        blocks += full
        if part:  # the rest of each lane of the block the segment ended in is carried
            m = self.block if fresh is None else min(self.block, fresh - full * self.block)
            lane_starts, lane_lengths = self._block_pieces(m, frontier, blocks)
            w = len(lane_starts)
            read = (part - np.arange(w) + w - 1) // w * L  # what part took from each lane, in dealing order
            starts.append(lane_starts + read)
            lengths.append(lane_lengths - read)
            frontier += m * L
            blocks += 1
        return _settled(frontier, np.concatenate(starts), np.concatenate(lengths), blocks, shortest)


def _settled(frontier: int, starts: np.ndarray, lengths: np.ndarray, blocks: int, shortest: int) -> Lanes:
    """Lanes with the pieces that end at the frontier given back to it (a rest read beside the next
    block's first lane would give adjacent rows) and those shorter than ``shortest`` dropped."""
    keep = lengths > 0
    starts, lengths = starts[keep], lengths[keep]
    order = np.argsort(starts, kind="stable")
    starts, lengths = starts[order], lengths[order]
    n = len(starts)
    while n and starts[n - 1] + lengths[n - 1] == frontier:
        n -= 1
        frontier = int(starts[n])
    starts, lengths = starts[:n], lengths[:n]
    keep = lengths >= shortest
    return Lanes(frontier, starts[keep], lengths[keep], blocks)
