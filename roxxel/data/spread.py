"""Rows of a batch from independent places.

A dataset's rows in a blend segment are consecutive ranges of its shuffled token stream:
row ``k`` holds tokens ``[start + k * seq_len, start + (k + 1) * seq_len)``. Taken in that
order, the rows of one batch would be consecutive windows of a few shuffled chunks (a
32 x 2048 batch over 16,384-token chunks: 4 places of 8 rows each), whose gradients
correlate. Megatron-LM and Grain draw every row of a batch from an independent place.

:func:`spread_rows` keeps every row and every token of the segment (a bijection of its
rows: each token is still read once per epoch, resume stays O(1)) but deals consecutive
rows to ``lanes`` lanes: within a block of ``lanes * depth`` rows, row ``i`` takes the
``i // lanes``-th row of lane ``i % lanes``, and lane ``l`` is stream rows
``[l * depth, (l + 1) * depth)`` of the block. With ``depth * seq_len`` at least a chunk,
any ``lanes`` consecutive rows lie in ``lanes`` different chunks, i.e. independent random
places; and the next batches read on along the same lanes, so reads still run through a
chunk in order (the page cache and the block checks see the same bytes as before). The
last, short block of a segment is dealt by its own length, so the places of its rows depend
on where the segment ends: a run with independent rows may not change the length of the
phase it resumes in (:func:`~roxxel.data.curriculum.classify_changes` refuses it).
"""

from __future__ import annotations

import numpy as np

BATCH_ROWS = ("consecutive", "independent")
"""How rows of a batch are drawn from the stream: ``"consecutive"`` (default) - consecutive
windows of the stream, the order of every version before the option existed;
``"independent"`` - each row from its own place (:func:`spread_rows`)."""


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
        count: the dataset's rows in the segment (int, or an int array broadcast against
            ``rows``), or None for an endless segment. The last block, of ``m < lanes * depth``
            rows, is dealt to ``min(lanes, m)`` lanes of (almost) equal depth, so that it is a
            bijection of its own rows (lanes ``ceil(m / lanes)`` rows apart: closer than a chunk,
            and adjacent when ``m <= lanes``).

    Returns:
        int64 array of ``rows``' shape: the row's index in the segment's stream order. For
        each segment, a permutation of ``[0, count)``.
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
    w = np.clip(m, 1, lanes)  # lanes of this block (m >= 1 wherever a row exists)
    d = -(-m // w)  # rows of its deepest lanes
    r = m - (d - 1) * w  # lanes holding d rows; the others hold d - 1
    lane, level = i % w, i // w
    return b * block + lane * d - np.maximum(0, lane - r) + level
