"""Deterministic blending of datasets into one row stream, with closed-form positions.

Rows of the stream are dealt to datasets by a periodic low-discrepancy pattern, so
that each dataset's share of any prefix is within one row of its weight. When a
dataset runs out, the others are re-normalised. All of this is precomputed as a
few *segments* (one per phase and exhaustion point), so the dataset and token
offset of any row - and each dataset's consumption before any row - is computed
directly instead of by replaying every earlier choice, as the original Roxxel did
on resume.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import heapq
import math
import numbers
import operator
from fractions import Fraction
from typing import NamedTuple, Sequence

import numpy as np

from roxxel.data.spread import Lanes, SegmentLanes, lane_depth

__all__ = ["BlendPlan", "Segment"]


class Segment(NamedTuple):
    """A run of rows dealt by one pattern to one fixed set of datasets.

    ``weights`` are the rationalised integer weights (0 for inactive datasets);
    their sum is the pattern's period and they identify the pattern.
    ``start_positions`` are the tokens consumed from each dataset before
    ``start_row``. ``end_row`` is exclusive, ``None`` for an endless segment.
    """

    start_row: int
    end_row: int | None
    phase: int
    seq_len: int
    active: tuple[int, ...]
    weights: tuple[int, ...]
    start_positions: tuple[int, ...]


@dataclasses.dataclass(frozen=True, eq=False)
class _Pattern:
    """One period of assignments and its per-dataset prefix counts.

    ``assign[t]`` is the dataset of row ``t`` of the period; ``table[m, i]`` is how
    many of the first ``m`` rows went to dataset ``i`` (shape ``(period + 1, k)``).
    """

    weights: np.ndarray
    period: int
    assign: np.ndarray
    table: np.ndarray

    def counts(self, m: int) -> np.ndarray:
        """Rows per dataset among the first ``m`` rows of a segment, ``(k,)`` int64."""
        q, r = divmod(m, self.period)
        return q * self.weights + self.table[r]

    def row_of(self, i: int, j: int) -> int:
        """Row (from the segment start) of dataset ``i``'s ``j``-th row, 0-based."""
        q, r = divmod(j, int(self.weights[i]))
        # First prefix length whose count reaches r + 1, minus one, is that row.
        m = int(np.searchsorted(self.table[:, i], r + 1, side="left"))
        return q * self.period + m - 1


@functools.lru_cache(maxsize=32)
def _pattern(weights: tuple[int, ...]) -> _Pattern:
    """Earliest-deadline schedule of one period for integer ``weights``.

    Dataset ``i``'s ``j``-th row (1-based) of a period of ``W = sum(weights)`` rows
    must fall in slots ``[floor((j-1) W / w_i), ceil(j W / w_i))``: exactly the
    slots that keep ``|count_i(m) - m w_i / W| < 1`` at every prefix ``m``. These
    windows never cross a period boundary, and earliest-deadline-first (ties to
    the lower index) meets every window because no interval holds more rows'
    windows than slots. The simpler "largest deficit" rule does not keep that
    bound once there are four or more datasets (e.g. weights 55:1:10:55 reach 1).
    """
    period = sum(weights)
    k = len(weights)
    nxt = [1] * k
    waiting = [(0, i) for i, w in enumerate(weights) if w > 0]  # (release slot, dataset)
    heapq.heapify(waiting)
    ready: list[tuple[int, int]] = []  # (deadline slot, dataset)
    assign = np.empty(period, np.int64)
    for slot in range(period):
        while waiting and waiting[0][0] <= slot:
            _, i = heapq.heappop(waiting)
            heapq.heappush(ready, (-(-nxt[i] * period // weights[i]), i))
        _, i = heapq.heappop(ready)
        assign[slot] = i
        nxt[i] += 1
        if nxt[i] <= weights[i]:
            heapq.heappush(waiting, ((nxt[i] - 1) * period // weights[i], i))
    table = np.zeros((period + 1, k), np.int64)
    np.cumsum(np.eye(k, dtype=np.int64)[assign], axis=0, out=table[1:])
    w = np.array(weights, np.int64)
    for arr in (w, assign, table):
        arr.flags.writeable = False  # shared through the cache
    return _Pattern(w, period, assign, table)


def _integer_weights(weights: Sequence[float], active: Sequence[int], max_period: int) -> tuple[int, ...]:
    """Integer weights (0 outside ``active``) with period ``<= max_period``.

    Exact when the normalised weights are fractions whose common denominator fits
    (0.5:0.3:0.2 -> 5:3:2, 1:1:1 -> 1:1:1); otherwise the largest-remainder
    apportionment of ``max_period`` rows, with at least one row per active dataset.
    """
    total = math.fsum(weights[i] for i in active)
    shares = {i: weights[i] / total for i in active}
    fracs = {i: Fraction(p).limit_denominator(max_period) for i, p in shares.items()}
    out = [0] * len(weights)
    if all(f > 0 for f in fracs.values()):
        s = sum(fracs.values())
        exact = {i: f / s for i, f in fracs.items()}
        period = math.lcm(*(f.denominator for f in exact.values()))
        if period <= max_period:
            for i, f in exact.items():
                out[i] = int(f * period)
            return tuple(out)
    quotas = {i: Fraction(p) * max_period for i, p in shares.items()}
    for i, qt in quotas.items():
        out[i] = max(1, math.floor(qt))
    spare = max_period - sum(out)
    # Spare rows go to the largest remainders; an excess (from the minimum of one
    # row) comes off the largest weights. Ties go to the lower index.
    if spare > 0:
        order = sorted(active, key=lambda i: (-(quotas[i] - out[i]), i))
        for i in order[:spare]:
            out[i] += 1
    for _ in range(-spare):
        out[max(active, key=lambda i: (out[i], -i))] -= 1
    g = math.gcd(*out)
    return tuple(w // g for w in out)


def _check_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return int(value)


class BlendPlan:
    """Assignment of stream rows to ``k`` datasets, phase by phase, in closed form.

    Phase ``j`` covers ``rows`` rows of ``seq_len`` tokens each, dealt to the
    datasets with positive weight by a periodic pattern (see ``_pattern``): over
    any prefix of a segment each dataset's row count is within one row of its
    weighted share. Without ``repeat``, a dataset takes part while it has at least
    ``seq_len`` tokens left; it drops out right after its last whole row, the
    others are re-normalised and a new segment starts. Each phase starts from the
    datasets with enough tokens left for its ``seq_len``; the stream ends when
    none is left (later phases are then never reached). With ``repeat``, positions
    grow past ``sizes`` (the caller maps ``p`` to epoch ``p // size``, offset
    ``p % size``) and only a finite last phase ends the stream.

    Building costs O(phases * k * (k + log period)) plus pattern construction
    (O(period log k), cached), whatever the number of rows.

    Args:
      sizes: ``k`` non-negative ints, tokens of one epoch of each dataset.
      phases: ``(rows, seq_len, weights)`` triples; ``rows`` an int >= 0, or
        ``None`` (until the stream ends) for the last phase only; ``seq_len`` an
        int >= 1; ``weights`` ``k`` finite non-negative floats, one positive.
      repeat: datasets restart instead of running out.
      max_period: longest pattern period in rows; weights that are not simple
        fractions are approximated to about ``1 / max_period``.
      lanes: per phase, the number of lanes a dataset's consecutive rows are dealt to
        (:func:`~roxxel.data.spread.spread_rows`; the streamer gives the phase's global
        batch size), or None: each dataset's rows in stream order. Blocks of lanes are laid
        out by the data, not by where a phase ends (:class:`~roxxel.data.spread.SegmentLanes`),
        so a phase's length changes no row before its end.
      lane_tokens: with ``lanes``, the least distance in tokens between two lanes (the
        streamer gives its chunk size, so the rows of a batch lie in different chunks).

    Raises:
      ValueError: an argument is malformed; the message names the value.
    """

    def __init__(
        self,
        sizes: Sequence[int],
        phases: Sequence[tuple[int | None, int, Sequence[float]]],
        repeat: bool = False,
        max_period: int = 10_000,
        lanes: Sequence[int] | None = None,
        lane_tokens: int = 1,
    ):
        self.sizes = tuple(_check_int(f"sizes[{i}]", s, 0) for i, s in enumerate(sizes))
        if not self.sizes:
            raise ValueError("sizes must name at least one dataset, got []")
        self.repeat = bool(repeat)
        self.max_period = _check_int("max_period", max_period, 1)
        self.phases = self._check_phases(phases)
        if lanes is not None and len(lanes) != len(self.phases):
            raise ValueError(f"lanes gives {len(lanes)} values for {len(self.phases)} phases")
        self.lanes = None if lanes is None else tuple(_check_int(f"lanes[{j}]", w, 1) for j, w in enumerate(lanes))
        self.lane_tokens = _check_int("lane_tokens", lane_tokens, 1)
        self._lanes: list[dict[int, SegmentLanes]] = []  # per segment, with lanes: each active dataset's row map
        segments, self._final = self._build()
        self._segments = tuple(segments)
        self._start_list = [s.start_row for s in segments]
        self._starts = np.array(self._start_list, np.int64)
        endless = bool(segments) and segments[-1].end_row is None
        self.total_rows: int | None = None if endless else (segments[-1].end_row if segments else 0)
        # Per segment: its pattern and start positions as an array, for locate().
        self._compiled = [(_pattern(s.weights), np.array(s.start_positions, np.int64)) for s in segments]

    def _check_phases(self, phases):
        k = len(self.sizes)
        if len(phases) == 0:
            raise ValueError("phases must hold at least one phase, got []")
        checked = []
        for j, phase in enumerate(phases):
            if len(phase) != 3:
                raise ValueError(f"phases[{j}] must be (rows, seq_len, weights), got {phase!r}")
            rows, seq_len, weights = phase
            if rows is None:
                if j != len(phases) - 1:
                    raise ValueError(f"phases[{j}]: rows=None is only allowed for the last phase")
            else:
                rows = _check_int(f"phases[{j}] rows", rows, 0)
            seq_len = _check_int(f"phases[{j}] seq_len", seq_len, 1)
            weights = tuple(weights)
            if len(weights) != k:
                raise ValueError(f"phases[{j}] has {len(weights)} weights for {k} datasets: {weights!r}")
            for w in weights:
                if isinstance(w, bool) or not isinstance(w, numbers.Real) or not (math.isfinite(w) and w >= 0):
                    raise ValueError(f"phases[{j}] weights must be finite and >= 0, got {weights!r}")
            if not any(w > 0 for w in weights):
                raise ValueError(f"phases[{j}] needs a positive weight, got {weights!r}")
            weights = tuple(float(w) for w in weights)
            used = [i for i, w in enumerate(weights) if w > 0]
            if len(used) > self.max_period:
                raise ValueError(f"max_period={self.max_period} is below the {len(used)} datasets of phases[{j}]")
            if self.repeat:
                empty = [i for i in used if self.sizes[i] == 0]
                if empty:
                    raise ValueError(
                        f"repeat=True needs non-empty datasets, but dataset {empty[0]} has "
                        f"size 0 and weight {weights[empty[0]]} in phases[{j}]"
                    )
            checked.append((rows, seq_len, weights))
        return tuple(checked)

    def _build(self) -> tuple[list[Segment], tuple[int, ...]]:
        k = len(self.sizes)
        pos = [0] * k  # tokens consumed from each dataset
        lanes = [Lanes() for _ in range(k)]  # each dataset's unread lanes (independent rows only)
        shortest = min(seq_len for _, seq_len, _ in self.phases)
        segments: list[Segment] = []
        row = 0
        integer_weights: dict[
            tuple, tuple[int, ...]
        ] = {}  # phases often share their weights (exact fractions are slow)
        for j, (rows, seq_len, weights) in enumerate(self.phases):
            phase_end = None if rows is None else row + rows
            while phase_end is None or row < phase_end:
                maps = None if self.lanes is None else self._segment_lanes(lanes, j, seq_len, weights)
                # Rows each weighted dataset can still give (None: endless).
                left = {
                    i: None
                    if self.repeat
                    else maps[i].available
                    if maps is not None
                    else (self.sizes[i] - pos[i]) // seq_len
                    for i in range(k)
                    if weights[i] > 0
                }
                active = tuple(i for i, n in left.items() if n is None or n >= 1)
                if not active:
                    return segments, tuple(pos)  # nothing left: the stream ends here
                iw = integer_weights.get((weights, active))
                if iw is None:
                    iw = integer_weights[weights, active] = _integer_weights(weights, active, self.max_period)
                pat = _pattern(iw)
                length = None if phase_end is None else phase_end - row
                if not self.repeat:
                    # The segment ends right after the first dataset's last whole row.
                    for i in active:
                        last = pat.row_of(i, (left[i] or 0) - 1) + 1
                        length = last if length is None else min(length, last)
                end = None if length is None else row + length
                segments.append(Segment(row, end, j, seq_len, active, iw, tuple(pos)))
                if maps is not None:
                    self._lanes.append({i: maps[i] for i in active})
                if end is None or length is None:
                    return segments, tuple(pos)  # endless repeat
                counts = pat.counts(length)
                for i in active:
                    pos[i] += int(counts[i]) * seq_len
                    if maps is not None:  # independent rows: what this dataset's lanes hold next
                        lanes[i] = maps[i].after(int(counts[i]), shortest)
                row = end
        return segments, tuple(pos)

    def _segment_lanes(
        self, lanes: list[Lanes], phase: int, seq_len: int, weights: Sequence[float]
    ) -> dict[int, SegmentLanes]:
        """Each weighted dataset's row map for a segment of ``phase`` (independent rows)."""
        assert self.lanes is not None
        depth = lane_depth(self.lane_tokens, seq_len)
        return {
            i: SegmentLanes(lanes[i], seq_len, self.lanes[phase], depth, self.sizes[i], self.repeat)
            for i, w in enumerate(weights)
            if w > 0
        }

    @property
    def segments(self) -> tuple[Segment, ...]:
        """The plan's segments in row order (contiguous from row 0)."""
        return self._segments

    def __repr__(self) -> str:
        return (
            f"BlendPlan(sizes={list(self.sizes)}, phases={len(self.phases)}, "
            f"segments={len(self._segments)}, total_rows={self.total_rows}, "
            f"repeat={self.repeat}, max_period={self.max_period})"
        )

    @staticmethod
    def _check_rows(rows: np.ndarray, limit: int | None) -> None:
        if rows.size == 0 or (rows.min() >= 0 and (limit is None or rows.max() < limit)):
            return
        bad = rows < 0
        if limit is not None:
            bad |= rows >= limit
        if bad.any():
            bound = "inf" if limit is None else limit
            raise IndexError(f"row {int(rows[bad][0])} is out of range [0, {bound})")

    def locate(self, rows) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Dataset, token offset and seq_len of each row.

        Args:
          rows: integer array (any shape, any order) of row indices.

        Returns:
          ``(dataset, position, seq_len)``: int64 arrays of ``rows``' shape; row
          ``r`` holds tokens ``[position, position + seq_len)`` of dataset
          ``dataset``'s stream (beyond its size in repeat mode).

        Raises:
          TypeError: ``rows`` is not integral.
          IndexError: a row is negative or ``>= total_rows``; the message names it.
        """
        arr = np.asarray(rows)
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            raise TypeError(f"rows must be integers, got dtype {arr.dtype}")
        flat = arr.astype(np.int64, copy=False).reshape(-1)
        self._check_rows(flat, self.total_rows)
        dataset = np.empty(flat.shape, np.int64)
        position = np.empty(flat.shape, np.int64)
        seq_len = np.empty(flat.shape, np.int64)
        if len(self._segments) == 1:
            seg, one = np.zeros(1, np.int64), True
        else:  # a batch usually lies in one segment (else two), so a pass per segment is cheap
            seg = np.searchsorted(self._starts, flat, side="right") - 1
            one = bool(flat.size) and int(seg.min()) == int(seg.max())
        for s in (seg[:1] if one else np.unique(seg)).tolist():
            idx = slice(None) if one else np.flatnonzero(seg == s)
            pat, start_pos = self._compiled[s]
            segment = self._segments[s]
            q, r = np.divmod(flat[idx] - segment.start_row, pat.period)
            d = pat.assign[r]
            done = q * pat.weights[d] + pat.table[r, d]  # each row's index among its dataset's rows in the segment
            dataset[idx] = d
            if self.lanes is None:
                position[idx] = start_pos[d] + done * segment.seq_len
            else:  # rows of a batch from independent places
                place = np.empty(done.shape, np.int64)
                for i, lanes in self._lanes[s].items():
                    mine = d == i
                    if mine.any():
                        place[mine] = lanes.place(done[mine])
                position[idx] = place
            seq_len[idx] = segment.seq_len
        shape = arr.shape
        return dataset.reshape(shape), position.reshape(shape), seq_len.reshape(shape)

    def positions_at(self, row: int) -> np.ndarray:
        """Tokens consumed from each dataset before ``row``, ``(k,)`` int64.

        ``row`` may equal ``total_rows`` (the consumption of the whole stream).

        Raises:
          TypeError: ``row`` is not an int.
          IndexError: ``row`` is negative or beyond ``total_rows``.
        """
        row = operator.index(row)
        limit = None if self.total_rows is None else self.total_rows + 1
        self._check_rows(np.array([row]), limit)
        if row == self.total_rows:
            return np.array(self._final, np.int64)
        s = bisect.bisect_right(self._start_list, row) - 1
        pat, start_pos = self._compiled[s]
        segment = self._segments[s]
        return start_pos + pat.counts(row - segment.start_row) * segment.seq_len
