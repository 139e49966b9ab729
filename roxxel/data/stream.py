"""The deterministic streamer: the global batch of any step, each process reading only its rows.

Step ``s`` covers global rows ``[R(s), R(s) + B)`` of the blended stream, where ``R(s)``
comes from the curriculum in O(phases). Each process finds from the batch sharding which
of those rows its devices hold, reads only them (``bytes read = global batch bytes /
processes``), and the global array is assembled with
``jax.make_array_from_process_local_data``. The batch at a step is therefore the same
whatever the number of processes, and after a resume with a different one.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator

import numpy as np

from roxxel.data.documents import document_features
from roxxel.data.placement import Placer
from roxxel.data.prefetch import Prefetcher
from roxxel.data.reader import BatchReader
from roxxel.data.reader import empty_aligned as empty_aligned  # its home before reader.py: kept importable here
from roxxel.deprecation import renamed, warn_renamed
from roxxel.exit_codes import ConfigValueError
from roxxel.format.layout import FLOAT_DTYPES, is_float, shard_dtype
from roxxel.sharding import BatchShardingError, batch_sharding, default_batch_sharding

if TYPE_CHECKING:  # annotations only: the curriculum builds streams (roxxel.data.curriculum imports this)
    from roxxel.data.curriculum import Curriculum, ResolvedPhase

log = logging.getLogger("roxxel.data")

OUTPUTS = ("tokens", "documents")
_PREFETCH_WINDOW = 8  # steps timed (medians) before deciding on a prefetch thread; repeated until it starts
PREFETCH_MIN_OVERLAP = (
    50e-6  # seconds of both read and caller's step above which a prefetch thread pays (bench/stream.py)
)


# The default batch sharding (rows over one "data" axis of every device), shared with the Trainer.
default_sharding = default_batch_sharding


def process_rows(sharding, global_shape: tuple[int, int], phase: int | None = None) -> tuple[int, int]:
    """The contiguous rows ``[lo, hi)`` of a global batch that this process's devices hold.

    Raises:
        ValueError: the batch size does not divide over the sharding's data shards, or this
            process's rows are not contiguous (a mesh that interleaves processes).
    """
    where = f"phase {phase}: " if phase is not None else ""
    size = "global_batch_size" if phase is not None else "batch_size"  # Phase's name; the original stream()'s
    try:
        index_map = sharding.addressable_devices_indices_map(global_shape)
    except ValueError as e:
        raise BatchShardingError(
            f"{where}{size} {global_shape[0]} cannot be split over the batch sharding ({e}); "
            "use a batch size that is a multiple of the number of data shards"
        ) from None
    spans = sorted(
        {(idx[0].start or 0, global_shape[0] if idx[0].stop is None else idx[0].stop) for idx in index_map.values()}
    )
    lo, hi = spans[0][0], spans[-1][1]
    covered = 0
    for a, b in spans:
        if a > lo + covered:
            raise BatchShardingError(
                f"{where}this process's rows of the batch are not contiguous ({spans}); "
                "order the mesh's devices by process"
            )
        covered = max(covered, b - lo)
    return lo, hi


class Stream:
    """Global batches of steps ``[start_step, stop_step)`` of a curriculum, as JAX arrays.

    Args:
        curriculum: what to stream.
        start_step: first step (any step: O(phases) to get there).
        stop_step: end (exclusive); default the curriculum's end.
        seed: shuffle seed.
        dtype: dtype of the batch. Default: ``int32`` for token data; for float data
            (``float16``/``bfloat16``/``float32`` shards) the data's own dtype. Float data may be
            cast to another float dtype, never to an integer one.
        sharding: the batch's ``jax.sharding.Sharding`` (e.g. ``NamedSharding(mesh,
            PartitionSpec("data"))``); default :func:`default_sharding`: rows over every device.
        mesh, data_sharding: deprecated (the original's arguments; warn): ``data_sharding``
            is ``sharding``; ``mesh`` alone means rows over its first axis, i.e.
            ``sharding=roxxel.sharding.batch_sharding(mesh)``.
        outputs: ``"tokens"`` - a ``(batch_size, seq_len)`` array per step: each row is a
            concatenation of shuffled chunks of ``chunk_tokens`` tokens, so it may jump from the
            middle of one document into the middle of another; ``"documents"`` - a dict of such
            arrays (see :func:`~roxxel.data.documents.document_features`) whose ``segment_ids``,
            ``positions`` and ``loss_mask`` mark every EOS *and* every chunk join as a boundary.
        prefetch_size: batches prepared ahead on a background thread (0: none). The thread starts
            once the caller is seen to spend time between batches (a training step, a device
            wait): over the first steps the stream times its read and the caller's step, and
            starts the thread when both last at least ``PREFETCH_MIN_OVERLAP`` seconds (there is
            then something to overlap). A loop that pulls batches back to back reads them on
            its own thread, where a hand-off to another would only add cost.
        to_device: False yields this process's numpy rows instead of global arrays.

    ``len(stream)`` is the exact number of steps. Batches of different phases have
    different shapes; :meth:`Curriculum.phase_streams` gives one stream per phase.

    Raises:
        ValueError: a batch size that does not divide over the processes/devices (names
            the phase); a step range outside the curriculum; ``outputs="documents"`` on a
            dataset without an EOS id or on float data; an integer ``dtype`` for float data;
            a ``dtype`` too narrow for a dataset's token ids (a ``DtypeMismatchError``).
    """

    def __init__(
        self,
        curriculum: Curriculum,
        start_step: int = 0,
        stop_step: float | None = None,
        *,
        seed: int = 0,
        dtype=None,
        sharding=None,
        mesh=None,
        data_sharding=None,
        outputs: str = "tokens",
        prefetch_size: int = 2,
        to_device: bool = True,
    ):
        if outputs not in OUTPUTS:
            raise ConfigValueError(f"outputs must be one of {OUTPUTS}, got {outputs!r}")
        end = curriculum.resolved[-1].end_step
        stop = end if stop_step is None else stop_step
        if not 0 <= start_step <= stop <= end:
            raise ConfigValueError(f"steps [{start_step}, {stop}) are outside the curriculum's [0, {end})")
        if stop == float("inf"):
            raise ConfigValueError("an endless curriculum needs an explicit stop_step")
        self.curriculum = curriculum
        self.start_step, self.stop_step = start_step, int(stop)
        if stop > start_step:
            curriculum.check_positions(self.stop_step - 1)
        self.dtype = _batch_dtype(curriculum, dtype, outputs)
        for dataset in curriculum.datasets.values():  # before any batch: a narrow dtype would wrap ids
            dataset.check_out_dtype(self.dtype, curriculum.vocab_size)
        self.outputs = outputs
        self.eos_id = curriculum.primary.eos_id
        if outputs == "documents" and self.eos_id is None:
            raise ConfigValueError(
                "outputs='documents' needs an EOS id, and the primary dataset has none; pack it with a tokenizer"
            )
        self.to_device = to_device
        self.sharding = _one_sharding(sharding, mesh, data_sharding)
        if self.sharding is None and to_device:
            self.sharding = default_sharding()
        self.reader = BatchReader(curriculum, seed)
        self._placer = Placer(self.sharding)
        self._row_ranges = {p.index: self._rows_of(p) for p in curriculum.resolved if self._overlaps(p)}
        self._step = start_step
        self._source: Iterator = self._produce(start_step)
        if prefetch_size < 0:
            raise ConfigValueError(f"prefetch_size must be >= 0, got {prefetch_size}")
        self.prefetch_size = prefetch_size
        self._prefetch: Prefetcher | None = None
        self._timings: list[tuple[float, float]] = []  # (caller's step, read) of recent steps read inline
        self._returned: float | None = None  # when the last batch read inline was handed to the caller

    def _overlaps(self, p: ResolvedPhase) -> bool:
        return p.start_step < self.stop_step and p.end_step > self.start_step and p.steps != 0

    def _rows_of(self, p: ResolvedPhase) -> tuple[int, int]:
        if self.sharding is None:
            return 0, p.global_batch_size
        return process_rows(self.sharding, (p.global_batch_size, p.seq_len), p.index)

    def local_rows(self, step: int, *, with_breaks: bool = False):
        """This process's rows of the global batch of ``step`` (numpy, before device placement).

        With ``with_breaks``, ``(rows, breaks)`` (see :meth:`BatchReader.rows`).
        """
        phase = self.curriculum.phase_at(step)
        lo, hi = self._row_ranges[phase.index]
        return self.reader.rows(step, lo, hi, self.dtype, with_breaks=with_breaks)

    def _place(self, step: int, rows):
        eos_id = self.eos_id  # never None with outputs='documents' (checked in __init__)
        arrays: Any = (
            rows if self.outputs == "tokens" or eos_id is None else document_features(rows[0], eos_id, rows[1])
        )
        if not self.to_device:
            return arrays
        import jax

        phase = self.curriculum.phase_at(step)
        shape = (phase.global_batch_size, phase.seq_len)

        place: Callable[[np.ndarray], Any] = self._placer  # this process holds the whole batch
        if jax.process_count() > 1:  # each process holds its rows of the global batch
            first_row = self._row_ranges[phase.index][0]

            def place(a):
                return self._placer(a, shape, first_row)

        return place(arrays) if self.outputs == "tokens" else {k: place(v) for k, v in arrays.items()}

    def _produce(self, start: int) -> Iterator:
        for step in range(start, self.stop_step):
            yield self._place(step, self.local_rows(step, with_breaks=self.outputs == "documents"))

    def __iter__(self) -> Stream:
        return self

    def __next__(self):
        batch = next(self._prefetch) if self._prefetch is not None else self._next_inline()
        self._step += 1
        return batch

    def _next_inline(self):
        """The next batch, read on the caller's thread; times it and the caller's step to decide on a prefetch thread."""
        if not self.prefetch_size:
            return next(self._source)
        t0 = time.perf_counter()
        batch = next(self._source)
        t1 = time.perf_counter()
        if self._returned is not None:
            self._timings.append((t0 - self._returned, t1 - t0))
            if len(self._timings) == _PREFETCH_WINDOW:
                step = sorted(t for t, _ in self._timings)[_PREFETCH_WINDOW // 2]
                read = sorted(t for _, t in self._timings)[_PREFETCH_WINDOW // 2]
                self._timings.clear()
                if min(step, read) >= PREFETCH_MIN_OVERLAP:  # the overlap outweighs a hand-off between threads
                    self._prefetch = Prefetcher(self._source, self.prefetch_size)
        self._returned = time.perf_counter()
        return batch

    def __len__(self) -> int:
        """Steps this stream yields in all (from ``start_step``)."""
        return self.stop_step - self.start_step

    @property
    def step(self) -> int:
        """The step of the next batch."""
        return self._step

    def close(self) -> None:
        """Stop the prefetch thread."""
        if self._prefetch is not None:
            self._prefetch.close()

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    def __repr__(self) -> str:
        return f"Stream(steps=[{self.start_step}, {self.stop_step}), outputs={self.outputs!r})"


def _one_sharding(sharding, mesh, data_sharding):
    """The batch sharding from :class:`Stream`'s ``sharding`` or its deprecated ``mesh``/``data_sharding``."""
    sharding = renamed("Stream", "sharding", sharding, "data_sharding", data_sharding)
    if mesh is None:
        return sharding
    warn_renamed(
        "Stream",
        "mesh",
        "sharding=NamedSharding(mesh, PartitionSpec(axis)) "
        "(roxxel.sharding.batch_sharding(mesh) splits rows over the mesh's first axis)",
    )
    if sharding is None:
        return batch_sharding(mesh)
    if getattr(sharding, "mesh", mesh) != mesh:
        raise ConfigValueError(
            f"Stream got mesh {mesh} and a sharding on another mesh ({sharding}); give only sharding"
        )
    return sharding


def _batch_dtype(curriculum: Curriculum, dtype: Any, outputs: str) -> np.dtype:
    """The batch dtype: ``dtype``, or the default for the data (see :class:`Stream`); refuses
    token-only outputs and integer casts of float data."""
    primary = curriculum.primary
    row = shard_dtype(primary.dtype)
    if row.ids:
        return np.dtype(np.int32 if dtype is None else dtype)
    data = f"{primary.filepath} holds {primary.dtype.name} arrays, not tokens"
    if outputs != "tokens" and not row.eos_allowed:  # documents and their positions are cut at EOS ids
        raise ConfigValueError(f"outputs={outputs!r} needs token data with an EOS id; {data}: use outputs='tokens'")
    if dtype is None:
        return primary.dtype
    if not is_float(dtype):
        raise ConfigValueError(
            f"dtype {np.dtype(dtype).name} would truncate float data ({data}): pass a float dtype "
            f"({', '.join(reversed(FLOAT_DTYPES))}) or leave dtype unset to keep {primary.dtype.name}"
        )
    return np.dtype(dtype)
