"""Per-token document structure of packed rows, derived from EOS tokens and chunk joins.

Documents are packed back to back, each ending with EOS. A model that must not attend
across documents needs, for every token, which document it belongs to and where it
sits in it; a loss must not ask a row to predict the first token of the next document
from the end of the previous one.

A row is cut from shuffled chunks of the token stream, so it can also jump from the
middle of one document into the middle of an unrelated one. The reader knows where
(``breaks``): every such join starts a new segment exactly as an EOS does.
"""

from __future__ import annotations

import numpy as np


def document_features(tokens: np.ndarray, eos_id: int, breaks: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Segment ids, positions and loss mask of packed rows.

    Args:
        tokens: ``(rows, seq_len)`` integer array.
        eos_id: the token that ends every document.
        breaks: ``(rows, seq_len)`` bool, True at column ``t`` when token ``t`` is not the
            source successor of token ``t - 1`` (a join of two shuffled chunks); such a
            column starts a new segment and token ``t - 1`` gets no loss. None: no joins.

    Returns:
        A dict of ``(rows, seq_len)`` int32 arrays. ``tokens``: the input, as int32.
        ``segment_ids``: 1 for the first document in a row, +1 after each EOS (the EOS
        belongs to the document it ends); attention is allowed only within a segment.
        ``positions``: the index of each token within its document, 0 at each start.
        ``loss_mask``: 1 where predicting the *next* token is a valid target; 0 on EOS
        (what follows is another document), before a break, and on the last column (no
        target in the row).
    """
    tokens = np.asarray(tokens)
    rows, seq_len = tokens.shape
    is_eos = tokens == eos_id
    ends_before = np.zeros_like(is_eos)
    ends_before[:, 1:] = is_eos[:, :-1]  # an EOS at t-1 starts a new document at t
    if breaks is not None:
        breaks = np.asarray(breaks, bool)
        if breaks.shape != tokens.shape:
            raise ValueError(f"breaks has shape {breaks.shape}, tokens {tokens.shape}")
        ends_before[:, 1:] |= breaks[:, 1:]
    segment_ids = 1 + np.cumsum(ends_before, axis=1, dtype=np.int32)
    cols = np.broadcast_to(np.arange(seq_len, dtype=np.int32), (rows, seq_len))
    starts = np.maximum.accumulate(np.where(ends_before, cols, 0), axis=1)
    loss_mask = (~is_eos).astype(np.int32)
    loss_mask[:, :-1] &= ~ends_before[:, 1:]  # no target across any document boundary
    loss_mask[:, -1] = 0
    return {
        "tokens": tokens.astype(np.int32),
        "segment_ids": segment_ids.astype(np.int32),
        "positions": (cols - starts).astype(np.int32),
        "loss_mask": loss_mask,
    }
