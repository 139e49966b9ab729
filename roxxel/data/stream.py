"""The deterministic streamer: the global batch of any step, each process reading only its rows.

Step ``s`` covers global rows ``[R(s), R(s) + B)`` of the blended stream, where ``R(s)``
comes from the curriculum in O(phases). Each process finds from the batch sharding which
of those rows its devices hold, reads only them (``bytes read = global batch bytes /
processes``), and the global array is assembled with
``jax.make_array_from_process_local_data``. The batch at a step is therefore the same
whatever the number of processes, and after a resume with a different one.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator

import numpy as np

from roxxel.data.dataset import RowRuns
from roxxel.data.documents import document_features
from roxxel.data.placement import Placer
from roxxel.data.prefetch import Prefetcher
from roxxel.data.source import SOURCES
from roxxel.deprecation import renamed, warn_renamed
from roxxel.exit_codes import ConfigValueError
from roxxel.format.layout import FLOAT_DTYPES, is_float, shard_dtype
from roxxel.sharding import BatchShardingError, batch_sharding, default_batch_sharding

if TYPE_CHECKING:  # annotations only: the curriculum builds streams (roxxel.data.curriculum imports this)
    from roxxel.data.curriculum import Curriculum, ResolvedPhase

log = logging.getLogger("roxxel.data")

OUTPUTS = ("tokens", "documents")
_AHEAD = 64  # steps whose rows are located, cut and read in one pass
_STAGED_BYTES = 4 << 20  # at most this many bytes of rows read ahead of their steps (host memory)
_PREFETCH_WINDOW = 8  # steps timed (medians) before deciding on a prefetch thread; repeated until it starts
PREFETCH_MIN_OVERLAP = 50e-6  # seconds of both read and caller's step above which a prefetch thread pays (bench/stream.py)


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
        raise BatchShardingError(f"{where}{size} {global_shape[0]} cannot be split over the batch sharding ({e}); "
                         "use a batch size that is a multiple of the number of data shards") from None
    spans = sorted({(idx[0].start or 0, global_shape[0] if idx[0].stop is None else idx[0].stop)
                    for idx in index_map.values()})
    lo, hi = spans[0][0], spans[-1][1]
    covered = 0
    for a, b in spans:
        if a > lo + covered:
            raise BatchShardingError(f"{where}this process's rows of the batch are not contiguous ({spans}); "
                             "order the mesh's devices by process")
        covered = max(covered, b - lo)
    return lo, hi


@dataclasses.dataclass
class _Plan:
    """Steps ``[first, end)`` of one phase's rows ``[lo, hi)`` (``key``), located and cut at once.

    ``which``/``starts``: each planned row's dataset and first token (None: some row joins
    pieces; read those steps piece by piece); ``single``: per step, whether one dataset holds
    every row; ``staged[d]``: dataset ``d``'s rows of the plan in dataset order, cut into runs
    (None: a row crosses a shard boundary); ``slots[d]``: each planned row's place among them;
    ``buffers[d]``: those rows once read.
    """

    key: Any
    first: int
    end: int
    seq_len: int
    which: np.ndarray | None = None
    starts: np.ndarray | None = None
    single: np.ndarray | None = None
    staged: list[RowRuns | None] = dataclasses.field(default_factory=list)
    slots: list[np.ndarray | None] = dataclasses.field(default_factory=list)
    buffers: list[np.ndarray | None] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        self.buffers = [None] * len(self.staged)


class BatchReader:
    """Reads rows of the global batch of any step from the curriculum's datasets.

    Args:
        curriculum: the curriculum (plan, datasets, phases).
        seed: shuffle seed.
        vocab_size: the model's vocabulary; a row holding an id ``>= vocab_size`` raises
            ``ValueError`` (JAX clamps out-of-range gathers, so such ids would train silently
            on the wrong embedding). Default: the curriculum's ``vocab_size``.
    """

    def __init__(self, curriculum: Curriculum, seed: int, vocab_size: int | None = None):
        self.curriculum = curriculum
        self.seed = seed
        self.vocab_size = vocab_size if vocab_size is not None else curriculum.vocab_size
        source = SOURCES[curriculum.order]
        self.sources = [source(ds, seed, i, curriculum.chunk_tokens) for i, ds in enumerate(curriculum.datasets.values())]
        self.dtypes = [ds.dtype for ds in curriculum.datasets.values()]
        # The largest id each dataset's stored dtype can hold (None: not an integer dtype, original-format data).
        self._max_ids = [np.iinfo(dt).max if np.issubdtype(dt, np.integer) else None for dt in self.dtypes]
        self._plan: _Plan | None = None  # the steps being read

    def rows(self, step: int, lo: int, hi: int, dtype=np.int32, *, with_breaks: bool = False):
        """Rows ``[lo, hi)`` of the global batch of ``step``, shape ``(hi - lo, seq_len)``, in ``dtype``.

        With ``with_breaks``, returns ``(rows, breaks)``: ``breaks`` is a bool array of the same
        shape, True at column ``t`` when token ``t`` is not the token that follows token
        ``t - 1`` in its dataset (the row joins two shuffled chunks there).
        """
        phase = self.curriculum.phase_at(step)
        planned = self._planned(step, lo, hi, phase)
        if planned is None:
            return self._rows_by_pieces(step, lo, hi, phase, dtype, with_breaks)
        plan, k = planned
        assert plan.which is not None and plan.starts is not None and plan.single is not None  # (planned)
        n = hi - lo
        which, starts, single = plan.which[k * n:(k + 1) * n], plan.starts[k * n:(k + 1) * n], bool(plan.single[k])
        out = empty_aligned((n, phase.seq_len), dtype)
        for d in ([int(which[0])] if single else np.unique(which).tolist()):
            idx = None if single else np.flatnonzero(which == d)
            sel = slice(None) if idx is None else idx
            if plan.staged[d] is None:  # a row of this dataset crosses a shard boundary somewhere in the plan
                rows = self.sources[d].dataset.gather_rows(np.empty((n if idx is None else len(idx), phase.seq_len),
                                                                    self.dtypes[d]), starts[sel])
                self._check_vocab(rows, d)  # on the stored ids, before any (narrowing) cast
            else:
                slots = plan.slots[d]
                assert slots is not None  # set with staged[d]
                rows = self._staged(plan, d)[slots[k * n:(k + 1) * n][sel]]
            if single:
                np.copyto(out, rows, casting="unsafe")  # one cast of the whole batch
            else:
                out[sel] = rows
        return (out, np.zeros(out.shape, bool)) if with_breaks else out

    def _staged(self, plan: _Plan, d: int) -> np.ndarray:
        """Dataset ``d``'s rows of every step of ``plan``, read on first use (vocabulary checked)."""
        buf = plan.buffers[d]
        if buf is None:
            runs = plan.staged[d]
            assert runs is not None
            rows = int(runs.his[-1] // (plan.seq_len * self.dtypes[d].itemsize)) if runs.his else 0
            buf = plan.buffers[d] = self.sources[d].dataset.read_runs(
                np.empty((rows, plan.seq_len), self.dtypes[d]), runs)
            self._check_vocab(buf, d)  # on the stored ids, before any (narrowing) cast
        return buf

    def _planned(self, step: int, lo: int, hi: int, phase: ResolvedPhase) -> tuple[_Plan, int] | None:
        """The plan holding ``step`` and the step's index in it, or None when some row joins pieces.

        Rows are located and cut for up to ``_AHEAD`` steps at once (one vectorised pass instead
        of one per step); a stream reads steps in order, so the next ones come from this plan.
        """
        key = (phase.index, lo, hi)
        plan = self._plan
        if plan is None or plan.key != key or not plan.first <= step < plan.end:
            # Plan 1 step after a jump (a resume's first batch pays for itself), then more and more up to
            # _AHEAD, and no more rows than _STAGED_BYTES hold.
            fits = max(1, _STAGED_BYTES // max(1, (hi - lo) * phase.seq_len * max(dt.itemsize for dt in self.dtypes)))
            grown = 4 * (plan.end - plan.first) if plan is not None and plan.key == key and step == plan.end else 1
            plan = self._plan = self._plan_ahead(step, lo, hi, phase, key, min(_AHEAD, fits, grown))
        if plan.which is None:
            return None
        return plan, step - plan.first

    def _plan_ahead(self, step: int, lo: int, hi: int, phase: ResolvedPhase, key, ahead: int) -> _Plan:
        n = hi - lo
        for steps in dict.fromkeys((int(min(ahead, phase.end_step - step)), 1)):
            rows = (self.curriculum.rows_before(step) + lo + phase.global_batch_size * np.arange(steps, dtype=np.int64)[:, None]
                    + np.arange(n, dtype=np.int64)).reshape(-1)
            try:
                which, position, _ = self.curriculum.plan.locate(rows)
            except (IndexError, ValueError):
                if steps == 1:
                    raise
                continue  # the steps ahead run past the data: plan only this one (its own error, if any)
            starts = np.empty_like(position)
            staged: list[RowRuns | None] = [None] * len(self.sources)
            slots: list[np.ndarray | None] = [None] * len(self.sources)
            for d in np.unique(which).tolist():
                sel = np.flatnonzero(which == d)
                _, start, count = self.sources[d].pieces(position[sel], phase.seq_len)
                if len(start) != len(sel) or (count != phase.seq_len).any():  # some row is cut into pieces
                    return _Plan(key, step, step + 1, phase.seq_len)
                starts[sel] = start
                # The plan's rows of this dataset in dataset order, cut into runs (one pread each): the
                # rows of a lane over the next steps follow each other (roxxel.data.spread), so runs
                # stay long when a batch's rows come from independent places.
                order = np.argsort(start, kind="stable")
                staged[d] = self.sources[d].dataset.row_runs(start[order], phase.seq_len)
                if staged[d] is not None:
                    slot = np.full(len(which), -1, np.int64)
                    slot[sel[order]] = np.arange(len(sel))
                    slots[d] = slot
            by_step = which.reshape(steps, n)
            single = (by_step == by_step[:, :1]).all(axis=1) if n else np.ones(steps, bool)
            return _Plan(key, step, step + steps, phase.seq_len, which, starts, single, staged, slots)
        raise AssertionError("unreachable")

    def _rows_by_pieces(self, step: int, lo: int, hi: int, phase: ResolvedPhase, dtype, with_breaks: bool):
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
            source.dataset.gather_into(flat, starts, counts)
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
                f"model's vocab_size {limit}; pack it with the model's tokenizer or raise vocab_size")


def empty_aligned(shape: tuple[int, int], dtype, align: int = 64) -> np.ndarray:
    """``np.empty(shape, dtype)`` whose data starts on an ``align``-byte boundary.

    XLA's CPU client takes a host array of that alignment as the device buffer itself in
    ``jax.device_put`` (no copy); numpy's own allocations are only 16-byte aligned. Each
    batch gets a fresh buffer, so a placed batch never shares memory with the next one.
    """
    dtype = np.dtype(dtype)
    nbytes = shape[0] * shape[1] * dtype.itemsize
    raw = np.empty(nbytes + align, np.uint8)
    skip = -raw.__array_interface__["data"][0] % align  # (cheaper than .ctypes.data)
    return raw[skip:skip + nbytes].view(dtype).reshape(shape)


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

    def __init__(self, curriculum: Curriculum, start_step: int = 0, stop_step: float | None = None, *, seed: int = 0,
                 dtype=None, sharding=None, mesh=None, data_sharding=None, outputs: str = "tokens",
                 prefetch_size: int = 2, to_device: bool = True):
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
            raise ConfigValueError("outputs='documents' needs an EOS id, and the primary dataset has none; pack it with a tokenizer")
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
        phase = self.curriculum.phase_at(step)
        eos_id = self.eos_id  # never None with outputs='documents' (checked in __init__)
        arrays: Any = rows if self.outputs == "tokens" or eos_id is None else document_features(rows[0], eos_id, rows[1])
        if not self.to_device:
            return arrays
        import jax

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
    warn_renamed("Stream", "mesh", "sharding=NamedSharding(mesh, PartitionSpec(axis)) "
                 "(roxxel.sharding.batch_sharding(mesh) splits rows over the mesh's first axis)")
    if sharding is None:
        return batch_sharding(mesh)
    if getattr(sharding, "mesh", mesh) != mesh:
        raise ConfigValueError(f"Stream got mesh {mesh} and a sharding on another mesh ({sharding}); give only sharding")
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
        raise ConfigValueError(f"dtype {np.dtype(dtype).name} would truncate float data ({data}): pass a float dtype "
                         f"({', '.join(reversed(FLOAT_DTYPES))}) or leave dtype unset to keep {primary.dtype.name}")
    return np.dtype(dtype)

