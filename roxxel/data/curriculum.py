"""Curriculum: phases of training that change batch size, sequence length and blend weights.

The data position is a pure function of the step: phase ``j`` takes ``steps_j`` global
batches of ``batch_size_j`` rows of ``seq_len_j`` tokens, rows are dealt to datasets by
:class:`~roxxel.data.blend.BlendPlan`, and the row of any step (hence every dataset's
token position) follows in O(phases) - never by replaying earlier steps.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
from typing import Any, Mapping, Sequence

from roxxel.data.blend import BlendPlan
from roxxel.data.dataset import Dataset
from roxxel.data.identity import RECORD_DEFAULTS, SEED_KEY, RunIdentity
from roxxel.data.source import DEFAULT_CHUNK_TOKENS, SOURCES
from roxxel.data.spread import BATCH_ROWS
from roxxel.data.stream import Stream
from roxxel.deprecation import renamed, warn_renamed
from roxxel.exit_codes import ConfigurationError
from roxxel.format.errors import DtypeMismatchError
from roxxel.format.layout import shard_dtype
from roxxel.format.manifest import ID_FIELDS
from roxxel.wording import count

PRIMARY = "primary"
"""The name of the primary dataset when :class:`Curriculum` is given one dataset."""
ORIGINAL_PRIMARY = "self"
"""The original's weight key for the primary dataset (deprecated; still accepted)."""
ORDERS = tuple(SOURCES)  # ("chunks", "documents")
DATA_ORDER_VERSION = 3
"""The version of the algorithms that put tokens in order (the Feistel shuffle, the chunk and
document orders, the blend, the spread of independent rows): bump it with any change that gives
another batch at some step. Recorded in :meth:`Curriculum.describe`, so a checkpoint saved under
another version is refused on resume instead of continuing on a different data order. Version 2
lays independent rows out by the data instead of by where a phase ends; version 3, under
``repeat``, deals the rows of an epoch as if no epoch followed (its last block by its own
length), so the first epoch's batches do not depend on what follows it. A curriculum records the
last version that changed its own batches (:func:`order_version`): consecutive rows 1,
independent rows 2, independent rows under ``repeat`` 3."""
ORDER_VERSIONS: dict[str, int] = {"consecutive": 1, "independent": 2}
"""The data order version each ``batch_rows`` records without ``repeat`` (:func:`order_version`)."""


def order_version(batch_rows: str, repeat: bool) -> int:
    """The data order version a curriculum records: the last version that changed its batches."""
    return DATA_ORDER_VERSION if batch_rows == "independent" and repeat else ORDER_VERSIONS[batch_rows]


_MAX_POSITION = 2**62
log = logging.getLogger(__name__)
_PHASE_KEYS = {"steps", "epochs", "global_batch_size", "batch_size", "seq_len", "weights"}


class CurriculumError(ConfigurationError, ValueError):
    """A curriculum that cannot be run as given: a bad phase, unknown datasets, a phase the
    data cannot fill, a step outside the plan. A property of the spec and the data, so every
    restart would hit it again: ``roxxel-worker`` exits 78 and the launcher does not restart."""


@dataclasses.dataclass(frozen=True, init=False)
class Phase:
    """One phase of a curriculum.

    Args:
        global_batch_size: rows in each global batch (all processes together).
        seq_len: tokens per row.
        steps: global steps in this phase; or
        epochs: passes over the data the phase blends (resolved to whole steps from the
            datasets' sizes); leave both unset on the last phase to run until the data
            runs out.
        weights: blend weights keyed by the datasets' names (the primary dataset is
            ``"primary"`` unless :class:`Curriculum` is given other names); they need not
            sum to 1. Default: ``{"primary": 1}`` without mixed datasets, else every dataset
            in proportion to its size. The original's key ``"self"`` for the primary dataset
            is accepted with a ``RoxxelDeprecationWarning``.
        batch_size: deprecated name of ``global_batch_size`` (the original's; warns).

    Raises:
        ValueError: a non-positive size, both ``steps`` and ``epochs``, negative weights,
            both ``global_batch_size`` and ``batch_size`` with different values.
        TypeError: no ``global_batch_size`` or no ``seq_len``.
    """

    global_batch_size: int
    seq_len: int
    steps: int | None = None
    epochs: float | None = None
    weights: Mapping[str, float] | None = None

    def __init__(
        self,
        global_batch_size: int | None = None,
        seq_len: int | None = None,
        steps: int | None = None,
        epochs: float | None = None,
        weights: Mapping[str, float] | None = None,
        *,
        batch_size: int | None = None,
    ):
        size = renamed("Phase", "global_batch_size", global_batch_size, "batch_size", batch_size)
        if size is None or seq_len is None:
            raise TypeError(f"Phase needs global_batch_size and seq_len, got {size!r} and {seq_len!r}")
        for name, value in (
            ("global_batch_size", size),
            ("seq_len", seq_len),
            ("steps", steps),
            ("epochs", epochs),
            ("weights", weights),
        ):
            object.__setattr__(self, name, value)
        self.__post_init__()

    @property
    def batch_size(self) -> int:
        """The global batch size (:attr:`global_batch_size`, under the original's name)."""
        return self.global_batch_size

    def __post_init__(self):
        for name in ("global_batch_size", "seq_len"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise CurriculumError(f"Phase {name} must be a positive int, got {v!r}")
        if self.steps is not None and self.epochs is not None:
            raise CurriculumError(
                f"give a Phase either steps or epochs, not both (got steps={self.steps}, epochs={self.epochs})"
            )
        if self.steps is not None and (
            isinstance(self.steps, bool) or not isinstance(self.steps, int) or self.steps < 0
        ):
            raise CurriculumError(f"Phase steps must be a non-negative int, got {self.steps!r}")
        if self.epochs is not None and not (
            isinstance(self.epochs, (int, float)) and self.epochs > 0 and math.isfinite(self.epochs)
        ):
            raise CurriculumError(f"Phase epochs must be a positive number, got {self.epochs!r}")
        if self.weights is not None:
            bad = {
                k: w
                for k, w in self.weights.items()
                if not (isinstance(w, (int, float)) and w >= 0 and math.isfinite(w))
            }
            if bad or not any(w > 0 for w in self.weights.values()):
                raise CurriculumError(
                    f"Phase weights must be non-negative numbers, at least one positive, got {dict(self.weights)}"
                )
            object.__setattr__(self, "weights", dict(self.weights))

    @classmethod
    def coerce(cls, phase: Phase | Mapping[str, Any]) -> Phase:
        """A ``Phase`` from a ``Phase`` or a dict with the same keys (the original's form).

        A dict may say ``"batch_size"`` (the original's key, accepted without a warning: the
        dict form is the original's) or ``"global_batch_size"``.
        """
        if isinstance(phase, Phase):
            return phase
        if not isinstance(phase, Mapping):
            raise TypeError(f"a phase must be a Phase or a dict, got {type(phase).__name__}")
        unknown = set(phase) - _PHASE_KEYS
        if unknown:
            raise CurriculumError(f"unknown phase keys {sorted(unknown)}; known: {sorted(_PHASE_KEYS)}")
        fields = dict(phase)
        if "batch_size" in fields:
            if fields.setdefault("global_batch_size", fields["batch_size"]) != fields["batch_size"]:
                raise CurriculumError(f"phase {dict(phase)}: global_batch_size and batch_size disagree; give one")
            del fields["batch_size"]
        return cls(**fields)


@dataclasses.dataclass(frozen=True)
class ResolvedPhase:
    """A phase with its place in the run: everything a stream needs, in steps, rows and tokens.

    ``steps`` is exact (epochs resolved, cut short where the data runs out; None only for
    an endless last phase in repeat mode); ``weights`` is aligned with :attr:`Curriculum.names`.
    """

    index: int
    start_step: int
    steps: int | None
    global_batch_size: int
    seq_len: int
    weights: tuple[float, ...]
    start_row: int
    start_token: int

    @property
    def batch_size(self) -> int:
        """The global batch size (:attr:`global_batch_size`, under the original's name)."""
        return self.global_batch_size

    @property
    def end_step(self) -> float:
        """First step after the phase (``math.inf`` for an endless phase)."""
        return math.inf if self.steps is None else self.start_step + self.steps

    @property
    def tokens_per_step(self) -> int:
        """Tokens in one global batch of this phase: ``global_batch_size * seq_len``."""
        return self.global_batch_size * self.seq_len


_SHARED_FIELDS = (*ID_FIELDS, "dtype")  # what blended datasets must share


def _check_compatible(datasets: Mapping[str, Dataset], vocab_size: int | None) -> int | None:
    """Refuse datasets that cannot share one model; returns the vocabulary size rows are checked against.

    Blended rows feed one embedding table and one EOS convention, so tokenizer identity,
    vocabulary size, EOS id and token dtype must be the same for every dataset.
    """
    first_name, first = next(iter(datasets.items()))
    floats = [name for name, ds in datasets.items() if not shard_dtype(ds.dtype).ids]
    if floats and len(floats) < len(datasets):
        tokens = next(name for name in datasets if name not in floats)
        raise DtypeMismatchError(
            f"dataset {floats[0]!r} ({datasets[floats[0]].filepath}) holds {datasets[floats[0]].dtype.name} arrays and "
            f"{tokens!r} ({datasets[tokens].filepath}) holds token ids: a blend feeds one model input, so blend float "
            "datasets only with float datasets of the same dtype"
        )
    if vocab_size is not None and not shard_dtype(first.dtype).vocab_checked:
        raise CurriculumError(
            f"vocab_size={vocab_size} checks token ids, but {first.filepath} holds {first.dtype.name} "
            "arrays: drop vocab_size for float data"
        )
    for name, ds in list(datasets.items())[1:]:
        for field in _SHARED_FIELDS:
            a, b = getattr(first, field), getattr(ds, field)
            if a != b:
                raise DtypeMismatchError(
                    f"datasets {first_name!r} ({first.filepath}) and {name!r} ({ds.filepath}) differ in {field}: "
                    f"{a!r} vs {b!r}; blended datasets must come from the same tokenizer - re-pack one of them "
                    "with the other's tokenizer"
                )
    declared = first.vocab_size
    if vocab_size is None:
        return declared
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1:
        raise CurriculumError(f"vocab_size must be a positive int, got {vocab_size!r}")
    if declared is not None and declared > vocab_size:
        raise CurriculumError(
            f"dataset {first_name!r} ({first.filepath}) has a vocabulary of {declared} ids but the model's vocab_size "
            f"is {vocab_size}; ids up to {declared - 1} would be out of range - pack the data with the model's "
            "tokenizer or give the model a vocabulary of at least that size"
        )
    return vocab_size


def _named_datasets(
    datasets: Dataset | Mapping[str, Dataset] | None, mix_streamers: Mapping[str, Dataset] | None
) -> dict[str, Dataset]:
    """Curriculum's datasets by name, the primary first, from its new and deprecated arguments."""
    if datasets is None:
        raise CurriculumError(
            "Curriculum needs datasets: a Dataset, or a dict of names to datasets (the first is primary)"
        )
    if mix_streamers is not None:
        warn_renamed("Curriculum", "mix_streamers", "datasets={'primary': dataset, **mixed}")
        if isinstance(datasets, Mapping):
            raise CurriculumError("give the mixed datasets in the datasets dict, not also as mix_streamers")
    named = dict(datasets) if isinstance(datasets, Mapping) else {PRIMARY: datasets, **(mix_streamers or {})}
    if isinstance(datasets, Mapping) and not named:
        raise CurriculumError("Curriculum got an empty datasets dict; give at least one dataset")
    if ORIGINAL_PRIMARY in named:
        raise CurriculumError(
            f"a dataset is named {ORIGINAL_PRIMARY!r}, the original's weight key for the primary "
            "dataset; pick another name"
        )
    if mix_streamers and PRIMARY in mix_streamers:
        raise CurriculumError(f"{PRIMARY!r} names the primary dataset; pick another name for the mixed one")
    for name, ds in named.items():
        if not isinstance(ds, Dataset):
            raise TypeError(
                f"dataset {name!r} is a {type(ds).__name__}, not a roxxel Dataset (open it with roxxel.Roxxel(path))"
            )
    return named


class Curriculum:
    """Phases over one or more named datasets, blended by the phases' weights.

    Args:
        datasets: the data: one :class:`~roxxel.data.dataset.Dataset` (named ``"primary"``
            in weights), or a mapping of names to datasets, the first being the primary
            one (whose EOS id the document features use; all must agree on tokenizer,
            vocabulary, EOS id and dtype anyway).
        phases: :class:`Phase` objects or dicts with the same keys.
        mix_streamers: deprecated (the original's name, also its third positional
            argument): the mixed datasets by name, blended in next to ``datasets`` (which
            is then the primary dataset alone); give ``datasets={"primary": ds, **mixed}``.
        primary_streamer: deprecated (the original's name) for a single ``datasets``.
        chunk_tokens: tokens per shuffled chunk of each dataset (``order="chunks"``).
        order: ``"chunks"`` (default) - each dataset is cut into chunks of ``chunk_tokens``
            tokens, shuffled, in O(1) memory; a row may jump between chunks mid-document.
            ``"documents"`` - whole documents are shuffled and packed back to back (Megatron
            style): rows are runs of whole documents, every token of the dataset is used,
            at 16 bytes of host memory per document.
        batch_rows: ``"independent"`` (default) - each row of a global batch comes from its own
            random place, as in Megatron-LM and Grain (rows are dealt to ``global_batch_size``
            lanes at least ``chunk_tokens`` apart: :mod:`roxxel.data.spread`); where ``seq_len``
            changes, each lane's unread rest shorter than the new row waits for a phase with
            shorter rows (under a row per lane and dataset). ``"consecutive"`` - rows are
            consecutive windows of the shuffled stream (a 32 x 2048 batch over 16,384-token
            chunks is 4 places of 8 rows), the only order before the option existed: pass it to
            resume a run saved without ``batch_rows``.
        repeat: start a new epoch of a dataset when it runs out (instead of dropping it from
            the blend and re-normalising the others' weights, the original's behaviour).
        vocab_size: the number of token ids the model embeds. Data that declares a larger
            vocabulary is refused here; every row read is checked to hold ids below it.
            Default: the datasets' own ``vocab_size``.

    Weights keyed ``"self"`` (the original's key for the primary dataset) are read as the
    primary dataset's name, with a ``RoxxelDeprecationWarning``. Checkpoint fingerprints
    (:meth:`describe`) still record a primary dataset named ``"primary"`` as ``"self"``, so
    runs saved before the rename resume.

    Raises:
        ValueError: an unknown dataset name in weights (lists the known ones); a phase
            without steps or epochs before the last; an endless curriculum asked for its length;
            a phase the data cannot deliver (fewer steps than asked without ``repeat``, or not
            one step), with how many steps it can give and the fix;
            a dataset whose vocabulary exceeds ``vocab_size``; no datasets, a dataset named
            ``"self"``, or a new and a deprecated name given together.
        TypeError: no phases, or a dataset that is not a :class:`~roxxel.data.dataset.Dataset`.
        DtypeMismatchError: two datasets disagree on tokenizer, vocabulary size, EOS id or
            token dtype (names both datasets and the field).
    """

    def __init__(
        self,
        datasets: Dataset | Mapping[str, Dataset] | None = None,
        phases: Sequence[Phase | Mapping[str, Any]] | None = None,
        mix_streamers: Mapping[str, Dataset] | None = None,
        *,
        primary_streamer: Dataset | None = None,
        chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
        repeat: bool = False,
        vocab_size: int | None = None,
        order: str = "chunks",
        batch_rows: str = "independent",
    ):
        if order not in ORDERS:
            raise CurriculumError(f"order must be one of {ORDERS}, got {order!r}")
        if batch_rows not in BATCH_ROWS:
            raise CurriculumError(f"batch_rows must be one of {BATCH_ROWS}, got {batch_rows!r}")
        self.batch_rows = batch_rows
        if phases is None:
            raise TypeError("Curriculum needs phases: a list of Phase objects or dicts")
        self.order = order
        self.datasets: dict[str, Dataset] = _named_datasets(
            renamed("Curriculum", "datasets", datasets, "primary_streamer", primary_streamer), mix_streamers
        )
        self.names = tuple(self.datasets)
        self.phases = tuple(self._primary_key(Phase.coerce(p)) for p in phases)
        if not self.phases:
            raise CurriculumError("a curriculum needs at least one phase")
        for i, p in enumerate(self.phases[:-1]):
            if p.steps is None and p.epochs is None:
                raise CurriculumError(
                    f"phase {i}: only the last phase may omit steps/epochs (it then runs until the data runs out)"
                )
        if isinstance(chunk_tokens, bool) or not isinstance(chunk_tokens, int) or chunk_tokens < 1:
            raise CurriculumError(f"chunk_tokens must be an int >= 1 (tokens per shuffled chunk), got {chunk_tokens!r}")
        self.chunk_tokens = chunk_tokens
        self.repeat = repeat
        self.vocab_size = _check_compatible(self.datasets, vocab_size)
        self._sizes = tuple(self._usable_size(ds) for ds in self.datasets.values())
        self.plan, self.resolved = self._resolve()
        self._warn_shared_chunks()

    def _warn_shared_chunks(self) -> None:
        """Name each dataset too small for independent rows: fewer lanes a chunk apart than a batch has rows."""
        if self.batch_rows != "independent":
            return
        for i, (name, size) in enumerate(zip(self.names, self._sizes)):
            places = max(1, size // self.chunk_tokens)
            short = [p for p in self.resolved if p.weights[i] > 0 and p.global_batch_size > places]
            if short:
                p = max(short, key=lambda q: q.global_batch_size)
                log.warning(
                    "dataset %r holds %s of %s tokens, fewer than the %s of phase %d's global batch: with "
                    "batch_rows='independent' some rows of a batch share a chunk; a smaller chunk_tokens "
                    "spreads them",
                    name,
                    count(places, "chunk"),
                    f"{self.chunk_tokens:,}",
                    count(p.global_batch_size, "row"),
                    p.index,
                )

    @property
    def primary(self) -> Dataset:
        """The primary dataset: the first of :attr:`datasets`."""
        return self.datasets[self.names[0]]

    def _primary_key(self, phase: Phase) -> Phase:
        """``phase`` with weights keyed ``"self"`` re-keyed by the primary dataset's name (warns)."""
        if phase.weights is None or ORIGINAL_PRIMARY not in phase.weights:
            return phase
        primary = self.names[0]
        warn_renamed("Curriculum", f"the weight key {ORIGINAL_PRIMARY!r}", f"the primary dataset's name {primary!r}")
        if primary in phase.weights:
            raise CurriculumError(
                f"weights {dict(phase.weights)} give the primary dataset twice, as {ORIGINAL_PRIMARY!r} "
                f"and as {primary!r}; keep {primary!r}"
            )
        weights = {primary if k == ORIGINAL_PRIMARY else k: w for k, w in phase.weights.items()}
        return dataclasses.replace(phase, weights=weights)

    def _recorded_name(self, name: str) -> str:
        """The name :meth:`describe` records: ``"self"`` for a primary dataset named ``"primary"``."""
        return ORIGINAL_PRIMARY if name == PRIMARY and name == self.names[0] else name

    def _usable_size(self, ds: Dataset) -> int:
        return SOURCES[self.order].epoch_tokens(ds, self.chunk_tokens)

    def _weights(self, i: int, phase: Phase) -> tuple[float, ...]:
        if phase.weights is None:
            return (1.0,) + (0.0,) * (len(self.names) - 1) if len(self.names) == 1 else tuple(map(float, self._sizes))
        unknown = set(phase.weights) - set(self.names)
        if unknown:
            raise CurriculumError(
                f"phase {i}: weights name unknown datasets {sorted(unknown)}; known: {list(self.names)}"
            )
        return tuple(float(phase.weights.get(n, 0.0)) for n in self.names)

    def _resolve(self) -> tuple[BlendPlan, tuple[ResolvedPhase, ...]]:
        weights = [self._weights(i, p) for i, p in enumerate(self.phases)]
        steps: list[int | None] = []
        for p, w in zip(self.phases, weights):
            if p.epochs is not None:
                tokens = sum(s for s, wi in zip(self._sizes, w) if wi > 0)
                steps.append(int(p.epochs * tokens) // (p.global_batch_size * p.seq_len))
            else:
                steps.append(p.steps)
        lanes = [p.global_batch_size for p in self.phases] if self.batch_rows == "independent" else None
        plan = BlendPlan(
            self._sizes,
            [
                (None if s is None else s * p.global_batch_size, p.seq_len, w)
                for s, p, w in zip(steps, self.phases, weights)
            ],
            repeat=self.repeat,
            lanes=lanes,
            lane_tokens=self.chunk_tokens,
        )
        resolved, step, row, token = [], 0, 0, 0
        for i, (p, s, w) in enumerate(zip(self.phases, steps, weights)):
            if plan.total_rows is None:  # endless blend: repeat mode with an open last phase
                n = s
            else:  # the data runs out: only a last phase without steps/epochs may end there
                cap = max(0, plan.total_rows - row) // p.global_batch_size
                n = cap if s is None else min(s, cap)
                if n < (1 if s is None else s):
                    raise CurriculumError(self._short_message(i, p, s, n))
            resolved.append(ResolvedPhase(i, step, n, p.global_batch_size, p.seq_len, w, row, token))
            if n is None:
                break
            step, row, token = step + n, row + n * p.global_batch_size, token + n * p.global_batch_size * p.seq_len
        return plan, tuple(resolved)

    def _short_message(self, i: int, p: Phase, asked: int | None, n: int) -> str:
        want = (
            (f"asks for {asked} steps" if p.epochs is None else f"asks for {p.epochs} epochs ({asked} steps)")
            if asked is not None
            else "runs until the data runs out"
        )
        sizes = ", ".join(f"{name}: {size:,} tokens" for name, size in zip(self.names, self._sizes))
        fix = (
            "use data of at least one row per step, or a smaller global_batch_size/seq_len"
            if n == 0
            else f"pass repeat=True to start new epochs, ask for at most {n} steps, or leave steps/epochs unset on "
            "the last phase to train until the data runs out"
        )
        return (
            f"phase {i} {want} of {p.global_batch_size} x {p.seq_len} tokens, but the data ({sizes}, in chunks of "
            f"{self.chunk_tokens}) can give only {n} steps there; {fix}"
        )

    def check_positions(self, step: int) -> None:
        """Refuse a step whose token positions do not fit the streamer's int64 arithmetic.

        Positions are exact Python ints in the curriculum and int64 in the vectorised reader;
        a wrapped-around position would read an unrelated batch, so anything past 2**62
        tokens (headroom for a row and a chunk) is an error.

        Raises:
            ValueError: names the step, its token position and the limit.
        """
        p = self._phase_or_end(step) if step >= 0 else None
        if p is None:
            raise CurriculumError(f"step {step} is negative")
        # With independent rows a row may lie past the tokens consumed by a block of lanes (global batch x a
        # chunk and a row) and by the unread rests carried from earlier blocks (at most a block per segment).
        block = max(q.global_batch_size * (self.chunk_tokens + q.seq_len) for q in self.resolved)
        end = self.tokens_before(step) + p.tokens_per_step + (len(self.plan.segments) + 1) * block
        if end >= _MAX_POSITION:
            raise CurriculumError(
                f"step {step} starts at token position {self.tokens_before(step):,}, beyond the 2**62 "
                "tokens the streamer's 64-bit positions can address; use a smaller start step"
            )

    # -- the step -> data position map --------------------------------------------------
    @property
    def total_steps(self) -> int:
        """Steps in the whole curriculum.

        Raises:
            ValueError: the curriculum is endless (repeat mode with an open last phase).
        """
        last = self.resolved[-1]
        if last.steps is None:
            raise CurriculumError("this curriculum is endless (repeat=True and the last phase has no steps/epochs)")
        return last.start_step + last.steps

    def __len__(self) -> int:
        return self.total_steps

    def phase_at(self, step: int) -> ResolvedPhase:
        """The phase that step ``step`` belongs to.

        Raises:
            IndexError: ``step`` is negative or past the end.
        """
        for p in self.resolved:
            if p.start_step <= step < p.end_step:
                return p
        raise IndexError(f"step {step} is outside the curriculum's {self.resolved[-1].end_step} steps")

    def _phase_or_end(self, step: int) -> ResolvedPhase:
        last = self.resolved[-1]
        return last if step == last.end_step else self.phase_at(step)

    def rows_before(self, step: int) -> int:
        """Global rows consumed before ``step`` (O(phases)); ``step`` may be the end of the curriculum."""
        p = self._phase_or_end(step)
        return p.start_row + (step - p.start_step) * p.global_batch_size

    def tokens_before(self, step: int) -> int:
        """Tokens consumed (all processes, all datasets) before ``step``: the sum over phases of steps x batch x seq_len."""
        p = self._phase_or_end(step)
        return p.start_token + (step - p.start_step) * p.tokens_per_step

    def dataset_positions(self, step: int) -> dict[str, int]:
        """Tokens consumed from each dataset's shuffled stream before ``step`` (closed form)."""
        self.check_positions(step)
        return dict(zip(self.names, self.plan.positions_at(self.rows_before(step)).tolist()))

    # -- identity -----------------------------------------------------------------------
    def describe(self) -> RunIdentity:
        """JSON-able description: datasets (fingerprints), resolved phases, chunking, repeat,
        the data order version; a :class:`~roxxel.data.identity.RunIdentity` (a dict), whose
        judge a checkpointer given it as ``fingerprint`` asks about a resume."""
        # Options at the values of earlier versions are left out: older fingerprints stay valid.
        options = {k: v for k, v in (("order", self.order), ("batch_rows", self.batch_rows)) if v != RECORD_DEFAULTS[k]}
        return RunIdentity(
            {
                **options,
                "data_order_version": order_version(self.batch_rows, self.repeat),
                "datasets": {self._recorded_name(n): ds.fingerprint() for n, ds in self.datasets.items()},
                "chunk_tokens": self.chunk_tokens,
                "repeat": self.repeat,
                "phases": [
                    {
                        "steps": p.steps,
                        "batch_size": p.global_batch_size,
                        "seq_len": p.seq_len,
                        "weights": dict(zip(map(self._recorded_name, self.names), p.weights)),
                    }
                    for p in self.resolved
                ],
            }
        )

    def identity(self, seed: int | None = None) -> RunIdentity:
        """The run's data identity, what a checkpoint records and judges a resume by:
        :meth:`describe`, with the data ``seed`` as ``"seed"`` when given (the Trainer's)."""
        return self.describe() if seed is None else RunIdentity({**self.describe(), SEED_KEY: seed})

    def fingerprint(self) -> str:
        """SHA-256 (hex) of :meth:`describe`: equal fingerprints mean the same data at every step."""
        return hashlib.sha256(json.dumps(self.describe(), sort_keys=True).encode()).hexdigest()

    def stream(self, start_step: int = 0, stop_step: float | None = None, **kwargs) -> Stream:
        """A :class:`~roxxel.data.stream.Stream` over steps ``[start_step, stop_step)``; see its arguments."""
        return Stream(self, start_step=start_step, stop_step=stop_step, **kwargs)

    def phase_streams(self, start_step: int = 0, **kwargs):
        """``(phase, stream)`` for each phase from the one holding ``start_step``; each stream ends at its phase's end."""
        for p in self.resolved:
            if p.end_step > start_step:
                yield p, self.stream(max(start_step, p.start_step), p.end_step, **kwargs)

    def __repr__(self) -> str:
        phases = ", ".join(f"{p.steps}x({p.global_batch_size}x{p.seq_len})" for p in self.resolved)
        return f"Curriculum(datasets={list(self.names)}, phases=[{phases}])"
