"""The shards of an open dataset as a table: where each one's tokens start, and the shard itself.

A :class:`~roxxel.data.dataset.Dataset` is the container users hold; its
:attr:`~roxxel.data.dataset.Dataset.shard_table` is what the read path works on
(:mod:`roxxel.data.reader`, :mod:`roxxel.data.map_rows`): the shards' token offsets, and each
shard opened on demand under two least-recently-used sets, with the public read handle of
:class:`~roxxel.format.mapped.MappedFile` (data offset, descriptor, block checks, map). The
read path needs nothing else of the dataset, and the dataset needs nothing of the read path.
"""

from __future__ import annotations

import collections
from typing import Any, Iterator, NamedTuple

import numpy as np

from roxxel.data.dataset_paths import Entry
from roxxel.format import mapread
from roxxel.format.errors import CorruptShardError, DtypeMismatchError
from roxxel.format.legacy import LegacyShard
from roxxel.format.manifest import first_difference
from roxxel.format.shard import Shard, open_shard

OpenShard = Shard | LegacyShard  # (both are roxxel.format.mapped.MappedFile: the read handle)
KNOWN_SHARDS = 16384  # shards remembered with their descriptor closed (each keeps a map: vm.max_map_count is 65530)


class RowRuns(NamedTuple):
    """Rows cut into runs (by :func:`roxxel.data.reader.row_runs`) as places in a :class:`ShardTable`'s
    shards; one entry per run in each list.

    ``shards``: shard index; ``offsets``: byte offset of the run's first token in the shard's
    token data; ``los``/``his``: byte range of the run in its group's rows; ``bounds``: runs
    ``bounds[g]:bounds[g + 1]`` belong to group ``g``.
    """

    shards: list[int]
    offsets: list[int]
    los: list[int]
    his: list[int]
    bounds: list[int]


class ShardTable:
    """An open dataset's shards, in dataset order.

    Args:
        entries: the shards (paths, and what a manifest said of each); an entry without counts
            gets them from its shard's header on first open.
        max_open_shards: shards holding a file descriptor at once (least recently used closed).
        check_blocks, check_identity: set on every shard opened (see
            :class:`~roxxel.format.mapped.MappedFile`); read when the table is made.

    Attributes (after :meth:`describe`):
        offsets: int64, shape ``(num_shards + 1,)``: dataset token index of each shard's token 0;
            ``offsets[-1]`` is the dataset's token count.
        sizes: int64, shape ``(num_shards,)``: tokens per shard.
        dtype: the stored dtype every shard shares (little-endian).
        bytes_read: token bytes copied out of the shards by the dataset's copies and the read
            path's batched reads (per-process I/O accounting; views of the maps are not counted).
    """

    def __init__(self, entries: list[Entry], *, max_open_shards: int, check_blocks: bool, check_identity: bool):
        self.entries = entries
        self.max_open_shards = max_open_shards
        self.check_blocks, self.check_identity = check_blocks, check_identity
        self.props: dict[str, Any] | None = None  # dtype, vocabulary, EOS, tokenizer: set by describe()
        self.bytes_read = 0
        self._open: collections.OrderedDict[int, OpenShard] = collections.OrderedDict()  # holding a descriptor
        self._known: collections.OrderedDict[int, OpenShard] = collections.OrderedDict()  # opened once
        self._mapped_base: int | None = None  # file pages mapped when the maps were last released

    def describe(self, props: dict[str, Any]) -> None:
        """Record what every shard shares (``dtype``, and the manifest fields ``vocab_size``, ``eos_id``,
        ``tokenizer``) once every entry has its counts: shards opened from now on must agree with it."""
        self.props = props
        self.dtype: np.dtype = props["dtype"]
        self.offsets = np.cumsum([0] + [e.num_tokens for e in self.entries], dtype=np.int64)
        self.sizes = np.diff(self.offsets)

    @property
    def num_tokens(self) -> int:
        """Tokens in every shard together."""
        return int(self.offsets[-1])

    def __len__(self) -> int:
        return len(self.entries)

    def shard(self, i: int) -> OpenShard:
        """Shard ``i``, its descriptor open; checked against what its manifest said on its first open.

        Two least-recently-used sets: ``max_open_shards`` shards hold a descriptor (the others'
        is closed, and opened again by their next read, compared with the first open), and
        ``KNOWN_SHARDS`` are known (parsed, blocks checked, mapped); a shard beyond those is
        closed whole and read afresh when next asked for.

        Raises:
            ShardNotFoundError, CorruptShardError, TruncatedShardError, DtypeMismatchError: the
                shard is missing, damaged, or not the one its manifest lists (names the file).
            ShardChangedError: a reopened shard is not the file first opened.
        """
        shard = self._open.get(i)
        if shard is not None:
            self._open.move_to_end(i)
            return shard
        shard = self._known.get(i)
        if shard is None:
            shard = self._known[i] = self._first_open(i)
            if len(self._known) > max(KNOWN_SHARDS, self.max_open_shards):
                j, gone = self._known.popitem(last=False)
                self._open.pop(j, None)
                gone.close()
        else:
            self._known.move_to_end(i)
        self._open[i] = shard
        if len(self._open) > self.max_open_shards:
            self._open.popitem(last=False)[1].close_file()
        return shard

    def mapped(self, i: int) -> OpenShard:
        """Shard ``i`` for reads out of its map (:mod:`roxxel.data.map_rows`): a known shard that is mapped
        is returned as it is, its descriptor open or not (map reads need none); else :meth:`shard`."""
        shard = self._known.get(i)
        if shard is not None and shard.is_mapped:
            self._known.move_to_end(i)
            return shard
        return self.shard(i)

    def known(self) -> Iterator[OpenShard]:
        """The shards opened and not forgotten (their descriptors open or not)."""
        return iter(list(self._known.values()))

    def _first_open(self, i: int) -> OpenShard:
        """Shard ``i`` opened and checked against what its manifest (and the other shards) said."""
        e = self.entries[i]
        shard = open_shard(e.path)
        shard.expect_identity(e.identity)  # closed by the LRU and opened again: still the same file
        e.identity = shard.file_identity
        if e.num_tokens is not None and (shard.num_tokens, shard.num_documents) != (e.num_tokens, e.num_documents):
            raise CorruptShardError(
                f"{e.path}: holds {shard.num_tokens} tokens / {shard.num_documents} documents but the manifest says "
                f"{e.num_tokens} / {e.num_documents}; the shard was replaced - re-pack the dataset",
                e.path,
            )
        if e.sha256 is not None and shard.sha256 is not None and shard.sha256 != e.sha256:
            raise CorruptShardError(
                f"{e.path}: is not the shard its manifest lists (its footer SHA-256 is {shard.sha256}, the manifest "
                f"says {e.sha256}); shards were swapped, renamed or replaced - restore them or re-pack the dataset",
                e.path,
            )
        if e.nbytes is not None and shard.nbytes != e.nbytes:
            raise CorruptShardError(
                f"{e.path}: {shard.nbytes} bytes but the manifest says {e.nbytes}; "
                "the shard was replaced - restore it or re-pack the dataset",
                e.path,
            )
        shard.check_blocks = self.check_blocks
        shard.check_identity = self.check_identity
        if self.props is not None:
            self._check_shared(shard, e)
        return shard

    def _check_shared(self, shard: OpenShard, e: Entry) -> None:
        """A shard opened after :meth:`describe` must hold the dtype (and, where a manifest described it,
        the vocabulary, EOS and tokenizer) the dataset was opened with."""
        assert self.props is not None
        if shard.dtype != self.dtype:
            raise DtypeMismatchError(
                f"{e.path}: token dtype {shard.dtype.name}, the dataset's is {self.dtype.name}", e.path
            )
        if e.num_tokens is not None:  # described by a manifest: what it says of the tokens must hold
            field = first_difference(shard.metadata, self.props)
            if field is not None:
                raise CorruptShardError(
                    f"{e.path}: the shard records {field} {shard.metadata.get(field)!r}, its manifest says "
                    f"{self.props[field]!r}; the manifest was edited or belongs to other shards - restore it or "
                    "re-pack the dataset",
                    e.path,
                )

    def release(self) -> None:
        """Drop every mapped page from this process's RSS now (they stay in the page cache)."""
        for shard in self._known.values():
            shard.release()
        self._mapped_base = mapread.file_pages_bytes()

    def account_mapped(self, limit: int) -> None:
        """Before more rows are read from the maps: once this process's mapped file pages (``RssFile``)
        grew by ``limit`` bytes since the maps were last released, release them (:meth:`release`)."""
        now = mapread.file_pages_bytes()
        if self._mapped_base is None:
            self._mapped_base = now
        elif now - self._mapped_base >= limit:
            self.release()

    def close(self) -> None:
        """Close every shard and forget it (views already handed out stay valid until dropped)."""
        for shard in self._known.values():
            shard.close()
        self._open.clear()
        self._known.clear()
