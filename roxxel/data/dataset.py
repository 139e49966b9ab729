"""``Dataset``: shards read as one virtual token array (the core of :class:`roxxel.Roxxel`).

A dataset is a sequence of shards (a manifest, a directory, a glob, one shard, or a
list of those; :mod:`roxxel.data.dataset_paths` resolves them). Its tokens are the
shards' tokens concatenated in order; its documents are the shards' documents in order.
Nothing grows with the dataset's size on the host: shards are memory maps opened lazily
(a manifest gives their sizes without opening them); copies (``read_into``, and the streamer's
batched reads, :func:`~roxxel.data.reader.read_runs`, ``gather_rows`` and ``gather_into`` in
:mod:`roxxel.data.reader`) map nothing, and pages touched through zero-copy views are handed
back to the OS after every ``release_bytes`` bytes, so the process RSS stays flat while
streaming terabytes.

This module is the container: opening, sizes, metadata, documents, ranges, integrity. The
read path works on its :attr:`Dataset.shard_table` (:mod:`roxxel.data.shard_table`) and is
not reached from here.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import logging
import os
from typing import Any, Callable, Sequence

import numpy as np

from roxxel.data.dataset_paths import Entry, check_found, check_unlisted, resolve
from roxxel.data.shard_table import KNOWN_SHARDS, RowRuns, ShardTable
from roxxel.format.errors import (
    CorruptShardError,
    DtypeMismatchError,
    EmptyDatasetError,
    ShardNotFoundError,
)
from roxxel.format.layout import is_float, shard_dtype
from roxxel.format.manifest import ID_FIELDS, Manifest, first_difference
from roxxel.wording import count

log = logging.getLogger("roxxel.data")

PathSpec = str | os.PathLike | Sequence[str | os.PathLike]
DEFAULT_RELEASE_BYTES = 32 << 20
# The streamer's reads from the maps (roxxel.data.map_rows) keep pages mapped: a row read again (a
# later epoch) costs no page fault. Past this many bytes of mapped file pages they are handed back.
DEFAULT_MAPPED_BYTES = 4 << 30
DEFAULT_MAX_OPEN_SHARDS = 256
_FAULT_AROUND = 2 << 20  # a fault can map a whole large folio of the page cache (up to 2 MiB)

# RowRuns (roxxel.data.shard_table) and KNOWN_SHARDS: importable from here, as before the shard table.
__all__ = ["KNOWN_SHARDS", "Dataset", "PathSpec", "RowRuns"]


class Dataset:
    """A dataset of ``.rox`` shards (current format or the original ``ROXXEL02``), read as one token array.

    :class:`roxxel.Roxxel` is this class plus the original Roxxel's methods (``stream``,
    ``write``, ``estimate_steps``) and its default path; see :mod:`roxxel.compat`.

    Args:
        filepath: a shard file; a dataset directory (``dataset.json`` inside, else its ``*.rox``
            files in name order); a manifest ``.json``; a glob; the original's prefix form
            (``data/wiki.rox`` naming ``data/wiki_0000.rox``, ...); or a list of any of these.
        release_bytes: hand mapped pages back to the OS after this many bytes have been read
            through views of the map (keeps RSS flat; the pages stay in the page cache).
        mapped_bytes: the streamer reads rows straight from the shards' memory maps
            (:mod:`roxxel.data.map_rows`, 1.5-2x faster than ``pread``) and keeps the pages it
            touched mapped, so that later epochs fault none in; once this process's mapped file
            pages (``RssFile`` in ``/proc/self/status``: page cache, not anonymous memory) grew
            by this many bytes, they are handed back (they stay in the page cache). Default 4 GiB.
            0: read with ``pread`` only, nothing mapped.
        max_open_shards: shards kept open at once (file descriptors), least recently used closed.
            A closed shard is not forgotten: what was read of it (header, blocks checked, the
            streamer's map, which holds no descriptor) stays for up to ``KNOWN_SHARDS`` shards, so
            a plan that spans more shards than this opens none of them again.
        check_blocks: check each block of tokens against its stored checksum (CRC-32C, or CRC-32 in
            the first 1.1 shards) the first time this process reads it (format 1.1 shards; older
            shards have no block checksums). Leave
            on; turning it off is for benchmarks.

    A path that names no dataset is refused at once; the dataset opens on first use (or
    ``open()``/``with``); opening reads manifests and shard headers, never token data.

    Raises (when made):
        ShardNotFoundError: a path does not exist, a glob matches nothing, a directory holds
            neither a manifest nor shards (one line naming the path and the fix: pack it, or
            check the path and its mount).
        TypeError, ValueError: ``filepath`` is not a path or list of paths, or is empty.

    Raises (on open):
        ShardNotFoundError: a shard a manifest lists does not exist.
        IncompleteDatasetError: a directory whose pack was killed before committing.
        BadSignatureError, TruncatedShardError, CorruptShardError: a damaged shard (names the file).
        CorruptShardError: a broken manifest; a manifest path outside the dataset directory; a
            shard whose size or footer SHA-256 differs from its manifest entry (checked when
            the shard is opened, so swapped or replaced shards are refused).
        DtypeMismatchError: shards with different token dtypes.
        EmptyDatasetError: no tokens at all.

    Raises (on read):
        BlockChecksumError: a block of tokens does not match its checksum (names shard and block).
        ShardChangedError: a shard's file changed since this dataset first opened it (rewritten in
            place, replaced, removed), found before its tokens leave the read (see
            :mod:`roxxel.format.mapped` for how, and the window that remains).
        ShardReadError: the storage failed a read (names the shard, its mount, whether a retry helps).
    """

    check_identity = True  # refuse shards that change while read (off only for benchmarks)

    def __init__(
        self,
        filepath: PathSpec,
        *,
        release_bytes: int = DEFAULT_RELEASE_BYTES,
        max_open_shards: int = DEFAULT_MAX_OPEN_SHARDS,
        check_blocks: bool = True,
        mapped_bytes: int = DEFAULT_MAPPED_BYTES,
    ):
        if isinstance(filepath, (str, os.PathLike)):
            self.filepath: str | list[str] = os.fspath(filepath)
        elif isinstance(filepath, (list, tuple)):
            self.filepath = [os.fspath(p) for p in filepath]
        else:
            raise TypeError(f"filepath must be a path, a glob or a list of paths, got {type(filepath).__name__}")
        if not self.filepath:
            raise ValueError("filepath is empty: give the dataset's path (a directory, manifest, shard or glob)")
        self._check_found()
        self.release_bytes = release_bytes
        self.mapped_bytes = mapped_bytes
        self.max_open_shards = max_open_shards
        self.check_blocks = check_blocks
        self._is_open = False
        self._out_dtypes_ok: dict[tuple[np.dtype, int | None], bool] = {}  # check_out_dtype's answers

    # ------------------------------------------------------------------------------
    # opening
    # ------------------------------------------------------------------------------
    def _check_found(self) -> None:
        """Refuse now a path that names no dataset (a typo, a volume not mounted), not at the first read."""
        for spec in self.filepath if isinstance(self.filepath, list) else [self.filepath]:
            check_found(spec)

    def open(self) -> Dataset:
        """Resolve the paths and read manifests/headers. Idempotent. Returns ``self``."""
        if self._is_open:
            return self
        specs = self.filepath if isinstance(self.filepath, list) else [self.filepath]
        manifests: list[tuple[str, Manifest]] = []
        entries: list[Entry] = []
        for spec in specs:
            resolve(spec, manifests, entries)
        if not entries and manifests:
            raise EmptyDatasetError(f"dataset {self.filepath!r} holds no tokens (its manifest lists no shards)")
        if not entries:
            raise ShardNotFoundError(f"no shards found for {self.filepath!r}")
        self._manifest = manifests[0][1] if len(manifests) == 1 and len(specs) == 1 else None
        self._manifest_path = manifests[0][0] if self._manifest is not None else None
        self._entries = entries
        self._table = ShardTable(
            entries,
            max_open_shards=self.max_open_shards,
            check_blocks=self.check_blocks,
            check_identity=self.check_identity,
        )
        props = self._props = self._shared_properties(manifests)
        self._table.describe(props)
        self._token_offsets = self._table.offsets
        self._doc_offsets = np.cumsum([0] + [e.num_documents for e in entries], dtype=np.int64)
        self._touched = 0
        self._is_open = True
        if self.num_tokens == 0:
            self.close()
            raise EmptyDatasetError(f"dataset {self.filepath!r} holds no tokens")
        return self

    def _shared_properties(self, manifests: list[tuple[str, Manifest]]) -> dict[str, Any]:
        """dtype/vocabulary/EOS/tokenizer shared by every shard; opens the shards no manifest described.

        Every manifest and every shard opened here must agree on all four (a list or glob can
        name datasets of other tokenizers: their ids would be read as this one's).
        """
        first_by_dtype: dict[str, str] = {}
        seen: list[tuple[str, dict[str, Any]]] = []  # (where, vocabulary/EOS/tokenizer) of each manifest or shard

        for path, m in manifests:
            first_by_dtype.setdefault(
                m.dtype, os.path.join(os.path.dirname(path), m.shards[0].path) if m.shards else path
            )
            seen.append((path, {k: getattr(m, k) for k in ID_FIELDS}))
        for i, e in enumerate(self._entries):
            if e.num_tokens is None:
                shard = self._table.shard(i)
                e.num_tokens, e.num_documents, e.sha256, e.nbytes = (
                    shard.num_tokens,
                    shard.num_documents,
                    shard.sha256,
                    shard.nbytes,
                )
                first_by_dtype.setdefault(shard.dtype.name, e.path)
                seen.append((e.path, {k: shard.metadata.get(k) for k in ID_FIELDS}))
        if len(first_by_dtype) > 1:
            (d1, p1), (d2, p2) = list(first_by_dtype.items())[:2]
            raise DtypeMismatchError(
                f"shards of one dataset must share a token dtype: {p1} is {d1}, {p2} is {d2}; "
                "re-pack them with the same tokenizer, or read them as separate datasets and blend them"
            )
        (p1, meta), *others = seen
        for p2, other in others:
            field = first_difference(meta, other)
            if field is not None:
                raise DtypeMismatchError(
                    f"one dataset's shards must come from one tokenizer: {p1} has {field} {meta[field]!r}, {p2} has "
                    f"{other[field]!r}; read them as separate datasets (a blend refuses them too), or re-pack them "
                    "with the same tokenizer"
                )
        return {"dtype": np.dtype(next(iter(first_by_dtype))).newbyteorder("<"), **meta}

    def close(self) -> None:
        """Forget every mapping (views already handed out stay valid until dropped)."""
        if not self._is_open:
            return
        self._table.close()
        self._is_open = False

    def __del__(self) -> None:
        try:
            self.close()  # a dropped dataset must not keep descriptors open until interpreter exit
        except Exception:
            pass

    def __enter__(self) -> Dataset:
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()

    def _ensure_open(self) -> None:
        if not self._is_open:
            self.open()

    @property
    def shard_table(self) -> ShardTable:
        """The open dataset's shards as a table (offsets, each shard on demand): what the read path
        (:mod:`roxxel.data.reader`) works on. Opens the dataset."""
        self._ensure_open()
        return self._table

    @property
    def bytes_read(self) -> int:
        """Token bytes copied out of the shards by ``read_into`` and the read path's batched reads in this
        process (views of the maps are not counted); 0 before the dataset opens."""
        return self._table.bytes_read if self._is_open else 0

    @bytes_read.setter
    def bytes_read(self, value: int) -> None:  # (a counter a caller may reset, as when it was an attribute)
        self.shard_table.bytes_read = value

    # ------------------------------------------------------------------------------
    # sizes and metadata
    # ------------------------------------------------------------------------------
    @property
    def dtype(self) -> np.dtype:
        """Dtype shared by all shards: ``uint8``/``uint16``/``uint32`` for tokens, ``float16``/``bfloat16``/
        ``float32`` for float arrays (any for original-format shards)."""
        self._ensure_open()
        return self._props["dtype"]

    @property
    def vocab_size(self) -> int | None:
        """Number of token ids (None when the shards do not record it)."""
        self._ensure_open()
        return self._props["vocab_size"]

    @property
    def eos_id(self) -> int | None:
        """The id that ends every document (None when documents carry no EOS)."""
        self._ensure_open()
        return self._props["eos_id"]

    @property
    def tokenizer(self) -> dict | None:
        """Identity of the tokenizer that produced the tokens (None when unknown)."""
        self._ensure_open()
        return self._props["tokenizer"]

    @property
    def num_tokens(self) -> int:
        """Tokens in the dataset (EOS tokens included)."""
        self._ensure_open()
        return int(self._token_offsets[-1])

    @property
    def num_documents(self) -> int:
        """Documents in the dataset (blocks, for original-format shards)."""
        self._ensure_open()
        return int(self._doc_offsets[-1])

    @property
    def num_shards(self) -> int:
        """Shards in the dataset."""
        self._ensure_open()
        return len(self._entries)

    @property
    def shard_paths(self) -> list[str]:
        """Path of every shard, in dataset order."""
        self._ensure_open()
        return [e.path for e in self._entries]

    @property
    def manifest(self) -> Manifest | None:
        """The manifest this dataset was opened from (None for shards, globs and lists)."""
        self._ensure_open()
        return self._manifest

    @property
    def nbytes(self) -> int:
        """Bytes on disk of all shards."""
        self._ensure_open()
        return sum(e.nbytes if e.nbytes is not None else os.path.getsize(e.path) for e in self._entries)

    def fingerprint(self) -> str:
        """SHA-256 (hex) of the dataset's identity: dtype and each shard's token count and checksum, in order.

        Two datasets with the same fingerprint hold the same tokens. Used by checkpoints to
        refuse a resume on different data. (Original-format shards have no checksum; their
        path and size stand in.)
        """
        self._ensure_open()
        if self._manifest is not None:
            return self._manifest.fingerprint()
        ident = {
            "dtype": self.dtype.name,
            "vocab_size": self.vocab_size,
            "eos_id": self.eos_id,
            "shards": [[e.num_tokens, e.sha256 or f"{os.path.basename(e.path)}:{e.nbytes}"] for e in self._entries],
        }
        return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()

    def info(self) -> dict[str, Any]:
        """Summary: path, shards, tokens, documents, dtype, vocab_size, eos_id, bytes, tokenizer."""
        self._ensure_open()
        return {
            "path": self.filepath,
            "shards": self.num_shards,
            "tokens": self.num_tokens,
            "documents": self.num_documents,
            "dtype": self.dtype.name,
            "vocab_size": self.vocab_size,
            "eos_id": self.eos_id,
            "bytes": self.nbytes,
            "tokenizer": self.tokenizer,
            "legacy": any(getattr(s, "legacy", False) for s in self._table.known()),
        }

    # ------------------------------------------------------------------------------
    # reading
    # ------------------------------------------------------------------------------
    def __len__(self) -> int:
        """Number of documents (the original Roxxel's records)."""
        return self.num_documents

    def __getitem__(self, idx):
        """Document ``idx`` as a zero-copy token view (its EOS included); a slice gives a list."""
        self._ensure_open()
        n = self.num_documents
        if isinstance(idx, slice):
            return [self[i] for i in range(*idx.indices(n))]
        asked = idx = int(idx)
        if idx < 0:
            idx += n
        if not 0 <= idx < n:
            raise IndexError(
                f"document index {asked} out of range: the dataset holds {count(n, 'document')}, "
                "numbered from 0 (a negative index counts from the end)"
            )
        s = bisect.bisect_right(self._doc_offsets, idx) - 1
        shard = self._table.shard(s)
        start, stop = shard.document_bounds(idx - int(self._doc_offsets[s]))
        shard.check_range(start, stop)
        shard.check_unchanged()
        return self._account(shard.tokens[start:stop])

    def document_starts(self) -> np.ndarray:
        """Global token offset of every document's first token, shape ``(num_documents,)``, int64.

        Opens every shard (reads each document index); O(documents) memory.
        """
        self._ensure_open()
        parts = [
            self._table.shard(i).document_starts.astype(np.int64) + self._token_offsets[i]
            for i in range(self.num_shards)
        ]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    def document_bounds(self, idx: int) -> tuple[int, int]:
        """``(start, stop)`` global token offsets of document ``idx``."""
        self._ensure_open()
        s = bisect.bisect_right(self._doc_offsets, idx) - 1
        start, stop = self._table.shard(s).document_bounds(idx - int(self._doc_offsets[s]))
        base = int(self._token_offsets[s])
        return base + start, base + stop

    def read(self, start: int, stop: int) -> np.ndarray:
        """Tokens ``[start, stop)`` of the dataset, shape ``(stop - start,)``, in the dataset's dtype.

        A zero-copy view of the memory map when the range lies in one shard, else a new array.

        Raises:
            IndexError: the range is not inside ``[0, num_tokens]``.
        """
        self._ensure_open()
        self._check_range(start, stop)
        if start == stop:
            return np.empty(0, self.dtype)
        s = int(np.searchsorted(self._token_offsets, start, side="right")) - 1
        base = int(self._token_offsets[s])
        if stop <= int(self._token_offsets[s + 1]):
            shard = self._table.shard(s)
            shard.check_range(start - base, stop - base)
            shard.check_unchanged()
            return self._account(shard.tokens[start - base : stop - base])
        return self.read_into(np.empty(stop - start, self.dtype), start)

    def check_out_dtype(self, dtype: Any, vocab_size: int | None = None) -> None:
        """Refuse a dtype that cannot hold every value of this dataset, so that a read never
        wraps or rounds a token id silently (an ``int8`` batch would turn id 256 into 0).

        Token data: an integer dtype must reach ``vocab_size - 1`` (without a vocabulary, the
        stored dtype's largest value); a float dtype must represent that id exactly (float32:
        up to 2**24). Float data: a float dtype only. ``vocab_size``: the vocabulary a reader
        checks every id against before its cast (a Curriculum's), in place of the dataset's.

        Raises:
            DtypeMismatchError: naming the dtype, the largest value and what to use instead.
        """
        dtype = np.dtype(dtype)
        if dtype == self.dtype:  # the stored dtype holds whatever is stored (the streamer's reads)
            return
        vocab_size = vocab_size or self.vocab_size
        ok = self._out_dtypes_ok.get((dtype, vocab_size))
        if ok is None:
            ok = self._out_dtypes_ok[dtype, vocab_size] = _holds(dtype, self.dtype, vocab_size)
        if not ok:
            ids = shard_dtype(self.dtype).ids
            what = f"token ids up to {_largest_id(self.dtype, vocab_size)}" if ids else f"{self.dtype.name} arrays"
            fix = "int32 (the default) or another dtype that holds them" if ids else "a float dtype"
            raise DtypeMismatchError(f"{self.filepath}: dtype {dtype.name} cannot hold {what}: use {fix}")

    def read_into(self, out: np.ndarray, start: int) -> np.ndarray:
        """Copy tokens ``[start, start + len(out))`` into ``out`` (1-D; cast to its dtype). Returns ``out``.

        Raises:
            IndexError: the range is not inside ``[0, num_tokens]``.
        """
        self._ensure_open()
        self.check_out_dtype(out.dtype)
        stop = start + len(out)
        self._check_range(start, stop)
        s = int(np.searchsorted(self._token_offsets, start, side="right")) - 1
        pos = start
        while pos < stop:
            base, end = int(self._token_offsets[s]), int(self._token_offsets[s + 1])
            take = min(stop, end) - pos
            if take > 0:
                self._copy(s, pos - base, out[pos - start : pos - start + take])
                pos += take
            s += 1
        self._table.bytes_read += len(out) * self.dtype.itemsize
        return out

    def _copy(self, s: int, local_start: int, out: np.ndarray) -> None:
        """Copy from shard ``s`` with ``pread`` (no pages mapped); through a buffer if ``out``'s dtype differs."""
        shard = self._table.shard(s)
        if out.dtype == shard.dtype and out.flags.c_contiguous:
            shard.pread_into(out, local_start)
        else:
            buf = np.empty(len(out), shard.dtype)
            shard.pread_into(buf, local_start)
            out[:] = buf

    def _check_range(self, start: int, stop: int) -> None:
        if not 0 <= start <= stop <= self.num_tokens:
            raise IndexError(f"token range [{start}, {stop}) is outside the dataset's [0, {self.num_tokens})")

    def _account(self, arr: np.ndarray) -> np.ndarray:
        """Count bytes handed out as views of the map; past ``release_bytes``, return mapped pages to the OS.

        A page fault may map more than the page it needs (fault-around, large page-cache
        folios), so each view is counted as at least ``_FAULT_AROUND`` bytes.
        """
        self._touched += max(arr.nbytes, _FAULT_AROUND)
        if self._touched >= self.release_bytes:
            self.release()
        return arr

    def release(self) -> None:
        """Drop every mapped page from this process's RSS now (they stay in the page cache)."""
        if self._is_open:
            self._table.release()
        self._touched = 0

    # ------------------------------------------------------------------------------
    # integrity
    # ------------------------------------------------------------------------------
    def verify(self, progress: Callable[[str, int], None] | None = None) -> None:
        """Recompute every shard's checksum and compare with its footer and the manifest.

        Args:
            progress: called as ``progress(path, nbytes)`` after each shard.

        Raises:
            ChecksumMismatchError, CorruptShardError, TruncatedShardError, ShardNotFoundError:
                the first damaged shard, by name. CorruptShardError also for a ``.rox`` file
                next to a manifest that does not list it (an entry the manifest lost, or a
                stray file).
        """
        self._ensure_open()
        if self._manifest_path is not None:
            check_unlisted(self._manifest_path, self._entries)
        for i, e in enumerate(self._entries):
            shard = self._table.shard(i)
            if e.nbytes is not None and shard.nbytes != e.nbytes:
                raise CorruptShardError(f"{e.path}: {shard.nbytes} bytes but the manifest says {e.nbytes}", e.path)
            shard.verify(expected_sha256=e.sha256 if self._manifest is not None else None)
            if progress is not None:
                progress(e.path, shard.nbytes)

    def __repr__(self) -> str:
        if not self._is_open:
            return f"{type(self).__name__}({self.filepath!r})"
        return (
            f"{type(self).__name__}({self.filepath!r}, shards={self.num_shards}, tokens={self.num_tokens}, "
            f"documents={self.num_documents}, dtype={self.dtype.name})"
        )


# ----------------------------------------------------------------------------------
# dtypes
# ----------------------------------------------------------------------------------
def _largest_id(stored: np.dtype, vocab_size: int | None) -> int:
    """The largest id data stored as ``stored`` can hold: below the vocabulary and the dtype's range."""
    largest = int(np.iinfo(stored).max)
    return min(vocab_size - 1, largest) if vocab_size else largest


def _holds(out: np.dtype, stored: np.dtype, vocab_size: int | None) -> bool:
    """Whether ``out`` holds every value of data stored as ``stored`` (see Dataset.check_out_dtype)."""
    if not shard_dtype(stored).ids or not np.issubdtype(stored, np.integer):  # float arrays; original-format data
        return is_float(out) or out == stored
    largest = _largest_id(stored, vocab_size)
    if np.issubdtype(out, np.integer):
        return int(np.iinfo(out).max) >= largest
    if is_float(out):  # every integer up to `largest` is exact iff it and its predecessor are
        ids = np.array([largest - 1, largest], np.int64)
        with np.errstate(over="ignore", invalid="ignore"):  # too large: inf, which compares unequal
            return bool((ids.astype(out).astype(np.float64) == ids).all())
    return False
