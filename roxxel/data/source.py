"""One dataset seen as an endless, shuffled token stream.

The dataset's tokens are cut into fixed-size chunks (the tail shorter than a chunk is
left out); epoch ``e`` visits every chunk exactly once, in the order of a Feistel
permutation keyed by ``(seed, dataset index, e)``. Position ``p`` of the stream is
token ``p % chunk`` of chunk ``perm_e((p % size) // chunk)`` with ``e = p // size``:
any position is found in O(1), with no index in memory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from roxxel.data.permutation import FeistelPermutation, _mix64

if TYPE_CHECKING:  # annotations only: roxxel.data.reader reads through the sources, and the dataset through it
    from roxxel.data.dataset import Dataset

DEFAULT_CHUNK_TOKENS = 16384  # 2k-8k rows span at most two chunks (usually one)
_WINDOW = 4096  # chunks whose shuffled places are computed together


def stream_key(seed: int, index: int) -> int:
    """The permutation seed of dataset ``index`` under the run's ``seed`` (independent orders per dataset)."""
    return int(_mix64(np.array([seed * 1_000_003 + index], np.uint64))[0])


def _in_row_order(
    rows: list[np.ndarray], starts: list[np.ndarray], counts: list[np.ndarray]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pieces collected pass by pass (pass ``j`` holds the ``j``-th piece of each live row),
    as ``(row, start, count)`` sorted by row and, within a row, by pass."""
    row, start, count = (np.concatenate(a) for a in (rows, starts, counts))
    order = np.lexsort((np.concatenate([np.full(len(r), j) for j, r in enumerate(rows)]), row))
    return row[order], start[order], count[order]


class ShuffledTokens:
    """The shuffled token stream of one dataset.

    Args:
        dataset: the dataset.
        seed: the run's shuffle seed.
        index: the dataset's index in the blend (gives each dataset its own order).
        chunk_tokens: tokens per shuffled chunk (smaller shuffles finer; larger reads
            longer contiguous runs). Capped at the dataset's size.

    Attributes:
        size: tokens of one epoch (``num_chunks * chunk``).
    """

    @staticmethod
    def epoch_tokens(dataset: Dataset, chunk_tokens: int) -> int:
        """Tokens of one epoch: the dataset's whole chunks (the tail shorter than a chunk is left out)."""
        chunk = min(chunk_tokens, dataset.num_tokens)
        return (dataset.num_tokens // chunk) * chunk

    def __init__(self, dataset: Dataset, seed: int, index: int = 0, chunk_tokens: int = DEFAULT_CHUNK_TOKENS):
        if chunk_tokens < 1:
            raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
        self.dataset = dataset
        self.chunk = min(chunk_tokens, dataset.num_tokens)
        self.num_chunks = dataset.num_tokens // self.chunk
        self.size = self.num_chunks * self.chunk
        self._key = stream_key(seed, index)
        self._permutations: dict[int, FeistelPermutation] = {}
        self._window: tuple[int, int, np.ndarray] | None = None  # (epoch, first chunk, permuted chunks)

    def permutation(self, epoch: int) -> FeistelPermutation:
        """The chunk order of ``epoch`` (the last few are kept)."""
        perm = self._permutations.get(epoch)
        if perm is None:
            if len(self._permutations) >= 4:
                self._permutations.pop(next(iter(self._permutations)))
            perm = self._permutations[epoch] = FeistelPermutation(self.num_chunks, self._key, epoch)
        return perm

    def _permute(self, epoch: int, chunks: np.ndarray) -> np.ndarray:
        """``permutation(epoch)(chunks)``, served from a window of consecutive chunks computed at once.

        A stream reads chunks in increasing order, so one vectorised Feistel pass over the
        next ``_WINDOW`` chunks replaces many small ones (fixed memory: one window).
        """
        lo, hi = int(chunks.min()), int(chunks.max())
        w = self._window
        if w is None or w[0] != epoch or lo < w[1] or hi >= w[1] + len(w[2]):
            # Grow from what is asked (a resume's first batch pays for its own chunks only) to _WINDOW.
            grown = 4 * len(w[2]) if w is not None and w[0] == epoch else 0
            size = min(max(min(grown, _WINDOW), hi - lo + 1), self.num_chunks - lo)
            w = self._window = (epoch, lo, self.permutation(epoch)(np.arange(lo, lo + size, dtype=np.int64)))
        return w[2][chunks - w[1]]

    def _physical(self, epoch: np.ndarray, chunk: np.ndarray) -> np.ndarray:
        """The dataset chunk at each ``(epoch, chunk)`` of the stream (one permutation pass per epoch present)."""
        e0 = int(epoch[0])
        if (epoch == e0).all():  # the usual case: a batch inside one epoch
            return self._permute(e0, chunk)
        physical = np.empty_like(chunk)
        for e in np.unique(epoch):
            sel = epoch == e
            physical[sel] = self._permute(int(e), chunk[sel])
        return physical

    def pieces(self, positions: np.ndarray, length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Contiguous dataset ranges that make up rows of ``length`` tokens at stream ``positions``.

        Returns:
            ``(row, start, count)`` int64 arrays: piece ``k`` is ``count[k]`` tokens of the dataset
            from token ``start[k]``, belonging to row ``row[k]``; a row's pieces are in order.
        """
        positions = np.asarray(positions, np.int64)
        n_rows = len(positions)
        if n_rows:
            epoch, q = np.divmod(positions, self.size)
            chunk, within = np.divmod(q, self.chunk)
            if int((within + length).max()) <= self.chunk:  # every row inside one chunk: one piece per row
                return (
                    np.arange(n_rows, dtype=np.int64),
                    self._physical(epoch, chunk) * self.chunk + within,
                    np.full(n_rows, length, np.int64),
                )
        max_pieces = -(-length // self.chunk) + 1
        rows, starts, counts = [], [], []
        offset = np.zeros(n_rows, np.int64)  # tokens of each row already covered
        for _ in range(max_pieces):
            live = np.flatnonzero(offset < length)
            if not live.size:
                break
            pos = positions[live] + offset[live]
            epoch, q = np.divmod(pos, self.size)
            chunk, within = np.divmod(q, self.chunk)
            take = np.minimum(self.chunk - within, length - offset[live])
            physical = self._physical(epoch, chunk)
            rows.append(live)
            starts.append(physical * self.chunk + within)
            counts.append(take)
            offset[live] += take
        return _in_row_order(rows, starts, counts)

    def __repr__(self) -> str:
        return f"ShuffledTokens({self.dataset!r}, chunk={self.chunk}, chunks={self.num_chunks})"


class ShuffledDocuments:
    """The stream of one dataset in document order: whole documents, shuffled, back to back.

    Epoch ``e`` visits every document once in the order of a Feistel permutation keyed by
    ``(seed, dataset index, e)`` and concatenates them (Megatron-style packing): a row is
    a run of whole documents, except where it starts or ends inside one. Unlike
    :class:`ShuffledTokens` this keeps per-epoch prefix sums of the shuffled document
    lengths in memory: 16 bytes per document (two epochs cached).

    Args:
        dataset: the dataset.
        seed: the run's shuffle seed.
        index: the dataset's index in the blend.

    Attributes:
        size: tokens of one epoch (every token of the dataset).
    """

    @staticmethod
    def epoch_tokens(dataset: Dataset, chunk_tokens: int) -> int:
        """Tokens of one epoch: every token of the dataset (``chunk_tokens`` plays no part)."""
        return dataset.num_tokens

    def __init__(self, dataset: Dataset, seed: int, index: int = 0, chunk_tokens: int | None = None):
        """``chunk_tokens`` is accepted and unused, so that every order's source is made alike (:data:`SOURCES`)."""
        self.dataset = dataset
        self.bounds = np.append(dataset.document_starts(), np.int64(dataset.num_tokens))
        self.lengths = np.diff(self.bounds)
        self.num_documents = len(self.lengths)
        self.size = int(dataset.num_tokens)
        self._key = stream_key(seed, index)
        self._epochs: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def _epoch(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """``(order, ends)``: documents in visiting order and the cumulative token count after each."""
        cached = self._epochs.get(epoch)
        if cached is None:
            if len(self._epochs) >= 2:
                self._epochs.pop(next(iter(self._epochs)))
            order = FeistelPermutation(self.num_documents, self._key, epoch)(
                np.arange(self.num_documents, dtype=np.int64)
            )
            cached = self._epochs[epoch] = (order, np.cumsum(self.lengths[order]))
        return cached

    def pieces(self, positions: np.ndarray, length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Contiguous dataset ranges that make up rows of ``length`` tokens (see :meth:`ShuffledTokens.pieces`)."""
        positions = np.asarray(positions, np.int64)
        offset = np.zeros(len(positions), np.int64)
        rows, starts, counts = [], [], []
        while True:
            live = np.flatnonzero(offset < length)
            if not live.size:
                break
            epoch, q = np.divmod(positions[live] + offset[live], self.size)
            start = np.empty_like(q)
            take = np.empty_like(q)
            for e in np.unique(epoch):
                sel = epoch == e
                order, ends = self._epoch(int(e))
                k = np.searchsorted(ends, q[sel], side="right")
                doc = order[k]
                within = q[sel] - (ends[k] - self.lengths[doc])
                start[sel] = self.bounds[doc] + within
                take[sel] = np.minimum(self.lengths[doc] - within, length - offset[live][sel])
            rows.append(live)
            starts.append(start)
            counts.append(take)
            offset[live] += take
        return _in_row_order(rows, starts, counts)

    def __repr__(self) -> str:
        return f"ShuffledDocuments({self.dataset!r}, documents={self.num_documents})"


SOURCES: dict[str, type[ShuffledTokens] | type[ShuffledDocuments]] = {
    "chunks": ShuffledTokens,
    "documents": ShuffledDocuments,
}
"""Each ``Curriculum(order=...)`` and the class of its per-dataset stream: made as
``SOURCES[order](dataset, seed, index, chunk_tokens)``; ``epoch_tokens(dataset, chunk_tokens)``
gives the tokens of one epoch. A new order is one class and one entry here."""
