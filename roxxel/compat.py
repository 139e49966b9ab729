"""The original Roxxel's API, kept working on top of the core: :class:`Roxxel`.

The original (Roxxel 0.9) had one class that was the dataset, its streamer and its writer:
``Roxxel(path).write(documents)``, ``Roxxel(path).stream(seq_len, batch_size, seed)``,
``estimate_steps`` and the default path ``./stream_reservoir.rox``. The core splits these
into :class:`~roxxel.data.dataset.Dataset` (reading), :class:`~roxxel.data.curriculum.Curriculum`
and :class:`~roxxel.data.stream.Stream` (streaming) and :func:`~roxxel.data.write.write_dataset`
(writing); this module puts them back together under the original names, so that the core
imports none of them from each other in a cycle and has no branches for the original.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from roxxel.data.curriculum import ORIGINAL_PRIMARY, PRIMARY, Curriculum, Phase
from roxxel.data.dataset import DEFAULT_MAPPED_BYTES, DEFAULT_MAX_OPEN_SHARDS, DEFAULT_RELEASE_BYTES, Dataset, PathSpec
from roxxel.data.source import DEFAULT_CHUNK_TOKENS
from roxxel.data.stream import Stream
from roxxel.data.write import write_dataset
from roxxel.format.manifest import Manifest
from roxxel.sharding import batch_sharding

__all__ = ["DEFAULT_PATH", "Roxxel"]

DEFAULT_PATH = "./stream_reservoir.rox"
"""The original's default dataset path (a shard, or the prefix of numbered shards)."""


class Roxxel(Dataset):
    """A dataset (see :class:`~roxxel.data.dataset.Dataset`) with the original Roxxel's methods.

    Args:
        filepath: as for :class:`~roxxel.data.dataset.Dataset`; default ``./stream_reservoir.rox``
            (the original's default).
        release_bytes, max_open_shards, check_blocks, mapped_bytes: as for :class:`~roxxel.data.dataset.Dataset`.

    Unlike a ``Dataset``, a ``Roxxel`` may name a dataset that does not exist yet: it is also
    the writer (``Roxxel(path).write(documents)``). Its first read refuses a missing one
    instead, with the same one-line ``ShardNotFoundError`` naming the path and the fix.
    """

    def __init__(
        self,
        filepath: PathSpec = DEFAULT_PATH,
        *,
        release_bytes: int = DEFAULT_RELEASE_BYTES,
        max_open_shards: int = DEFAULT_MAX_OPEN_SHARDS,
        check_blocks: bool = True,
        mapped_bytes: int = DEFAULT_MAPPED_BYTES,
    ):
        super().__init__(
            filepath,
            release_bytes=release_bytes,
            max_open_shards=max_open_shards,
            check_blocks=check_blocks,
            mapped_bytes=mapped_bytes,
        )

    def _check_found(self) -> None:
        """Nothing to refuse yet: the path may be one :meth:`write` is about to create."""

    def estimate_steps(self, seq_len: int, batch_size: int, chunk_tokens: int | None = None) -> int:
        """Whole steps of ``batch_size`` rows of ``seq_len`` tokens in one epoch of :meth:`stream`.

        An epoch is every whole shuffled chunk of ``chunk_tokens`` tokens (the tail shorter than a
        chunk is left out), so this equals ``len()`` of a one-phase stream over this dataset.
        """
        if seq_len < 1 or batch_size < 1:
            raise ValueError(f"seq_len and batch_size must be >= 1, got {seq_len} and {batch_size}")
        chunk = min(chunk_tokens or DEFAULT_CHUNK_TOKENS, self.num_tokens)
        return (self.num_tokens // chunk * chunk) // (seq_len * batch_size)

    def stream(
        self,
        seq_len: int,
        batch_size: int,
        seed: int,
        start_step: int = 0,
        completed_phases: Sequence[tuple[int, int, int]] | None = None,
        total_steps: int | None = None,
        dtype=None,
        mesh=None,
        data_sharding=None,
        mix_datasets: dict[str, Dataset] | None = None,
        weights: dict[str, float] | None = None,
        prefetch_size: int = 4,
        **kwargs,
    ) -> Stream:
        """Stream global batches of ``(batch_size, seq_len)`` tokens (the original API).

        Args:
            seq_len, batch_size: shape of each global batch of the current phase.
            seed: shuffle seed.
            start_step: global step to start at (counted from the first completed phase).
            completed_phases: ``(steps, batch_size, seq_len)`` of the phases trained before
                this one; their tokens are skipped in O(phases).
            total_steps: at most this many steps from ``start_step`` (default: until the data runs out).
            dtype: dtype of the batches (default: ``int32`` for tokens, the data's own dtype
                for float arrays; see :class:`~roxxel.data.stream.Stream`).
            mesh, data_sharding: where the batch goes (default: rows over every device).
            mix_datasets, weights: datasets to blend in, weights keyed by ``"self"`` (or
                ``"primary"``: this dataset) and their names.
            prefetch_size: batches prepared ahead on a background thread.
            **kwargs: passed to :class:`~roxxel.data.stream.Stream` (``outputs``, ``to_device``)
                and :class:`~roxxel.data.curriculum.Curriculum` (``chunk_tokens``, ``repeat``,
                ``vocab_size``: the model's vocabulary, ``order``, ``batch_rows``; see there).

        Returns:
            A :class:`~roxxel.data.stream.Stream`; ``len()`` is its exact number of steps.

        Raises:
            ValueError: ``start_step`` inside a completed phase; weights naming unknown datasets.
        """
        if mix_datasets and not weights:
            raise ValueError("mix_datasets needs weights keyed by 'self' and the mixed datasets' names")
        # This method is the original's API: its "self" key, mesh and data_sharding are read
        # here, in the core's terms, without the core's deprecation warnings.
        w = {PRIMARY if k == ORIGINAL_PRIMARY else k: v for k, v in weights.items()} if weights else None
        phases = [Phase(steps=s, global_batch_size=b, seq_len=q, weights=w) for s, b, q in (completed_phases or [])]
        done = sum(s for s, _, _ in completed_phases or [])
        if start_step < done:
            raise ValueError(
                f"start_step {start_step} falls inside the completed phases ({done} steps); "
                "stream those phases with their own shapes"
            )
        phases.append(Phase(global_batch_size=batch_size, seq_len=seq_len, weights=w))
        curriculum_args = {
            k: kwargs.pop(k) for k in ("chunk_tokens", "repeat", "vocab_size", "order", "batch_rows") if k in kwargs
        }
        if mix_datasets and PRIMARY in mix_datasets:
            raise ValueError(f"{PRIMARY!r} names this dataset in weights; pick another name for the mixed one")
        curriculum = Curriculum({PRIMARY: self, **(mix_datasets or {})}, phases, **curriculum_args)
        stop = None
        if total_steps is not None:
            stop = min(start_step + total_steps, curriculum.resolved[-1].end_step)
        if data_sharding is None and mesh is not None:
            data_sharding = batch_sharding(mesh)
        return curriculum.stream(
            start_step, stop, seed=seed, dtype=dtype, sharding=data_sharding, prefetch_size=prefetch_size, **kwargs
        )

    def write(
        self,
        data_generator: Iterable,
        separator: bytes | int | None = None,
        block_size: int | None = None,
        max_shard_bytes: int | None = None,
        dtype=None,
        tokenizer=None,
        *,
        eos_id: int | None = None,
        vocab_size: int | None = None,
        append: bool = False,
    ) -> Manifest | None:
        """Pack documents into this path, in the current format (see :func:`roxxel.data.write.write_dataset`)."""
        if isinstance(self.filepath, list):
            raise ValueError("write() needs a single path, not a list")
        self.close()
        return write_dataset(
            self.filepath,
            data_generator,
            separator=separator,
            block_size=block_size,
            max_shard_bytes=max_shard_bytes,
            dtype=dtype,
            tokenizer=tokenizer,
            eos_id=eos_id,
            vocab_size=vocab_size,
            append=append,
        )
