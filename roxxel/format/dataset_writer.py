"""``DatasetWriter``: documents into a dataset's shards and manifest, atomically.

A shard is written under a hidden temporary name and renamed only once complete. A
dataset's shards keep their temporary names until the whole pack succeeds; then they
are renamed and the manifest is written (atomically) last. A pack that is killed at any
point therefore leaves nothing that opens as a valid dataset: temporary files are not
``*.rox`` names, and a directory whose pack did not finish carries a marker that readers
refuse.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import re
from typing import Any, Callable, Iterable

import numpy as np

from roxxel._version import __version__
from roxxel.format import layout
from roxxel.format.atomic import fsync_dir, is_fuse, is_temp_name
from roxxel.format.background import _BackgroundChecksums, _BackgroundSync
from roxxel.format.directory import _lock, _make_directory, _now, _pid_alive, _write_marker, pending_shards
from roxxel.format.errors import DatasetExistsError, DtypeMismatchError, for_cli
from roxxel.format.manifest import ID_FIELDS, MANIFEST_NAME, Manifest, first_difference
from roxxel.format.shard_writer import ShardWriter
from roxxel.wording import count

log = logging.getLogger("roxxel.format")

DEFAULT_SHARD_SIZE = 256 << 20


class DatasetWriter:
    """Packs documents into a dataset: shards that roll over at ``shard_size`` bytes, then a manifest.

    Args:
        manifest_path: where the manifest goes (``DIR/dataset.json`` for a dataset directory).
        shard_pattern: shard file name with one ``{}`` field for the shard number, relative
            to the manifest's directory (``shard-{:05d}.rox``).
        dtype: token dtype; default from ``vocab_size`` (uint16 up to 65,536 ids, else uint32).
            ``float16``/``bfloat16``/``float32`` store float arrays instead (no vocabulary, no EOS).
        vocab_size: number of token ids; tokens must be below it.
        eos_id: token appended after every document (None: no separator).
        tokenizer: identity of the tokenizer, stored in every shard and the manifest.
        shard_size: roll over to a new shard when the next document would take the current
            one past this many bytes (a shard may exceed it only when one document does).
        append: add shards to an existing dataset instead of refusing.
        lock_timeout: seconds to wait for another pack/append into the same dataset to
            finish (0: fail at once). The writer holds an exclusive ``flock`` on
            ``DIR/.dataset.json.lock`` from construction to commit or abort; Linux maps it to
            POSIX byte-range locks on NFS, so it also excludes writers on other hosts.
        background_checksums: hash and checksum the shards on a background thread (see
            :class:`_BackgroundChecksums`), in parallel with writing. The arrays handed to
            ``add_*`` are then read after the call returns: the caller must not change them
            (``roxxel pack`` hands over arrays it never touches again).
        round_floats: for float data, the caller chose ``dtype``: a value it cannot hold exactly
            (float64's 0.1 in float32, float32's 1.0001 in bfloat16) is rounded, said once in a
            warning. False (``Roxxel.write`` without ``dtype=``, whose first array chose it):
            refused. A finite value beyond the dtype's range (it would become inf) is always refused.

    Raises:
        DatasetLockedError: another writer holds the dataset's lock past ``lock_timeout``.
        DatasetExistsError: the target holds a dataset or shards and ``append`` is False.
        DtypeMismatchError: appending with a different dtype, vocabulary, EOS id or tokenizer;
            a token outside ``[0, vocab_size)``; a float value the dtype cannot keep (see ``round_floats``).

    Use as a context manager: the dataset is committed when the block exits normally and
    discarded (temporary files removed) when it raises.
    """

    def __init__(
        self,
        manifest_path: str,
        *,
        shard_pattern: str = "shard-{:05d}.rox",
        dtype=None,
        vocab_size: int | None = None,
        eos_id: int | None = None,
        tokenizer: dict[str, Any] | None = None,
        shard_size: int = DEFAULT_SHARD_SIZE,
        append: bool = False,
        lock_timeout: float = 0.0,
        background_checksums: bool = False,
        round_floats: bool = True,
    ):
        if shard_size < 1:
            raise ValueError(f"shard_size must be a positive number of bytes, got {shard_size}")
        self.manifest_path = manifest_path
        self.directory = os.path.dirname(os.path.abspath(manifest_path))
        self.shard_pattern = shard_pattern
        self.shard_size = shard_size
        if dtype is None:
            dtype = layout.token_dtype_for_vocab(vocab_size) if vocab_size else np.dtype("uint32")
        self.dtype = layout.normalize_dtype(dtype)
        self.shard_dtype = layout.shard_dtype(self.dtype)  # what the data allows: EOS, vocabulary, tokenizer
        row = self.shard_dtype
        if (
            (vocab_size is not None and not row.vocab_checked)
            or (eos_id is not None and not row.eos_allowed)
            or (tokenizer is not None and not row.decodes)
        ):
            raise ValueError(
                f"{self.dtype.name} data is not a token stream: it has no vocabulary, EOS id or tokenizer; "
                "drop vocab_size/eos_id/tokenizer (the document index keeps the arrays apart)"
            )
        if vocab_size is not None and vocab_size > self.shard_dtype.id_limit:
            raise DtypeMismatchError(f"vocab_size {vocab_size} does not fit dtype {self.dtype.name}; use uint32")
        if eos_id is not None and not 0 <= eos_id < (vocab_size or self.shard_dtype.id_limit):
            raise ValueError(f"eos_id {eos_id} is outside the vocabulary [0, {vocab_size})")
        self.vocab_size, self.eos_id, self.tokenizer = vocab_size, eos_id, tokenizer
        self._limit = vocab_size if vocab_size is not None else self.shard_dtype.id_limit
        self._eos = None if eos_id is None else np.array([eos_id], self.dtype)
        self.round_floats = round_floats
        self._said_rounding = False
        self.marker_path = os.path.join(self.directory, "." + os.path.basename(manifest_path) + ".incomplete")
        self._made_directory = not os.path.isdir(self.directory)  # an abort removes it again, if left empty
        self._lock_path = os.path.join(self.directory, "." + os.path.basename(manifest_path) + ".lock")
        self._lock_fd: int | None = None
        marked = False  # this pack's marker is written (a new dataset's, by _prepare)
        try:  # whatever stops the set-up (a refusal, a held lock, Ctrl-C or SIGTERM) leaves nothing behind
            _make_directory(self.directory)
            self._lock_fd = _lock(self._lock_path, lock_timeout)
            self._previous = self._prepare(append)
            marked = self._previous is None
            self._shards: list[ShardWriter] = []
            self._current: ShardWriter | None = None
            fuse = is_fuse(self.directory)
            if fuse:
                log.info(
                    "%s is on a FUSE file system (GCS FUSE uploads a file on each fsync): each shard is "
                    "synced once, when finished",
                    self.directory,
                )
            self._sync = _BackgroundSync(periodic=not fuse)
            self._checksums = _BackgroundChecksums() if background_checksums else None
            self._next_index = self._first_free_index()
            self.num_documents = 0
            self.num_tokens = 0
            self._closed = False
        except BaseException:
            self._release(marked)
            raise

    # -- setup ------------------------------------------------------------------------
    def _own_shard_paths(self) -> list[str]:
        prefix, _, suffix = self.shard_pattern.partition("{")
        suffix = suffix.partition("}")[2]
        rx = re.compile(re.escape(prefix) + r"\d+" + re.escape(suffix) + "$")
        return sorted(p for p in glob.glob(os.path.join(self.directory, "*")) if rx.match(os.path.basename(p)))

    def _prepare(self, append: bool) -> Manifest | None:
        if os.path.exists(self.marker_path) and not os.path.exists(self.manifest_path):
            # An earlier pack here was killed before committing: its files are ours to remove.
            log.warning("removing the leftovers of an unfinished pack in %s", self.directory)
            for p in self._own_shard_paths() + [self.marker_path]:
                os.remove(p)
        elif os.path.exists(self.marker_path):
            # An append was killed while committing: drop the shards its manifest never listed.
            listed = {s.path for s in Manifest.load(self.manifest_path).shards}
            leftovers = [name for name in pending_shards(self.marker_path) if name not in listed]
            if leftovers:  # one line, however many (an append may have been committing hundreds)
                log.warning(
                    "removing %s left by an append into %s that did not finish (%s)",
                    count(len(leftovers), "shard"),
                    self.directory,
                    ", ".join(leftovers[:3]) + (", ..." if len(leftovers) > 3 else ""),
                )
            for name in leftovers:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(self.directory, name))
            os.remove(self.marker_path)
        self._remove_stale_temps()
        if os.path.exists(self.manifest_path):
            if not append:
                fix = "to add to it, or write to an empty directory"
                raise for_cli(
                    DatasetExistsError(f"{self.manifest_path} already holds a dataset; pass append=True {fix}"),
                    f"{self.manifest_path} already holds a dataset; pass --append {fix}",
                )
            previous = Manifest.load(self.manifest_path)
            self._check_compatible(previous)
            return previous
        existing = self._own_shard_paths()
        if os.path.basename(self.manifest_path) == MANIFEST_NAME:  # a dataset directory: any shard is in the way
            existing += glob.glob(os.path.join(self.directory, "*.rox"))
        if existing:
            raise DatasetExistsError(
                f"{self.directory} already holds shards ({os.path.basename(existing[0])}, ...) but no manifest "
                f"{os.path.basename(self.manifest_path)}; write to an empty directory"
            )
        _write_marker(self.marker_path, [])
        return None

    def _remove_stale_temps(self) -> None:
        self._remove_temps(lambda pid: not _pid_alive(pid))

    def _remove_temps(self, whose: Callable[[int], bool]) -> None:
        """Remove the temporary files (:func:`temp_name`) in the directory written by the
        processes ``whose(pid)`` is true for."""
        try:
            names = os.listdir(self.directory)
        except OSError:  # a set-up stopped before the directory was made (its error is the one to raise)
            return
        for name in names:
            pid = name.rpartition("-")[2]
            if is_temp_name(name) and pid.isdigit() and whose(int(pid)):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(self.directory, name))

    def _check_compatible(self, m: Manifest) -> None:
        fields = (*ID_FIELDS, "dtype")
        mine = {k: getattr(self, k) for k in ID_FIELDS} | {"dtype": self.dtype.name}
        theirs = {k: getattr(m, k) for k in fields}
        field = first_difference(mine, theirs, fields)
        if field is not None:
            named = (m.tokenizer or {}).get("name")
            fix = (
                f"pack with the tokenizer it was packed with (--tokenizer {named}, found next to the dataset or "
                "wherever you keep it)"
                if field == "tokenizer" and named
                else "pack into a new directory instead"
            )
            raise DtypeMismatchError(
                f"cannot append to {self.manifest_path}: its {field} is {theirs[field]!r}, this pack's is "
                f"{mine[field]!r}; {fix}",
                self.manifest_path,
            )

    def _first_free_index(self) -> int:
        used = [int(re.findall(r"\d+", os.path.basename(p))[-1]) for p in self._own_shard_paths()]
        return max(used, default=-1) + 1

    # -- writing ----------------------------------------------------------------------
    def _new_shard(self) -> ShardWriter:
        name = self.shard_pattern.format(self._next_index)
        self._next_index += 1
        meta = {"vocab_size": self.vocab_size, "eos_id": self.eos_id, "tokenizer": self.tokenizer}
        return ShardWriter(os.path.join(self.directory, name), self.dtype, meta, self._checksums)

    def _roll_if_needed(self, incoming_bytes: int) -> ShardWriter:
        """The shard to write the next document to: a new one once the current one is full."""
        cur = self._current
        if cur is not None and cur.num_documents and cur.nbytes + incoming_bytes > self.shard_size:
            self._sync.finish(cur)  # made durable while the next shard is written
            self._shards.append(cur)
            self._current = None
        if self._current is None:
            self._current = self._new_shard()
        return self._current

    def _fits(self, dtype: np.dtype) -> bool:
        """Every value of integer ``dtype`` is a valid token: no range check needed."""
        return dtype == self.dtype or (
            dtype.kind == "u" and 2 ** (8 * dtype.itemsize) <= self._limit and dtype.itemsize <= self.dtype.itemsize
        )

    def _convert(self, tokens, doc: int | None = None) -> np.ndarray:
        """``tokens`` in this dataset's dtype, range-checked; ``doc`` (default: the next one) names it in errors."""
        doc = self.num_documents if doc is None else doc
        arr = np.asarray(tokens)
        if arr.ndim != 1:
            arr = _one_document(arr, doc)
        if not self.shard_dtype.ids:  # numbers of any kind, cast only where every value is kept
            if arr.size and not (layout.is_float(arr.dtype) or arr.dtype.kind in "iu"):
                raise DtypeMismatchError(f"document {doc}: {self.dtype.name} data must be numbers, got {arr.dtype}")
            return self._floats(arr, doc)
        if self._fits(arr.dtype):
            return arr.astype(self.dtype, copy=False)  # every value of this type fits: no range check
        if arr.dtype.kind not in "iu":
            if arr.size == 0:
                return arr.astype(self.dtype)
            raise DtypeMismatchError(
                f"document {doc}: tokens must be integers, got {arr.dtype}; "
                "float arrays go into a dataset of their own (dtype='float32')"
            )
        if arr.size and (arr.min() < 0 or arr.max() >= self._limit):
            bad = arr[(arr < 0) | (arr >= self._limit)][0]
            raise DtypeMismatchError(
                f"document {doc}: token {int(bad)} is outside [0, {self._limit}) "
                f"(vocab_size={self.vocab_size}, dtype={self.dtype.name})"
            )
        return arr.astype(self.dtype)

    def _floats(self, arr: np.ndarray, doc: int) -> np.ndarray:
        """``arr`` (floats or integers) as this float dataset's dtype, refused where the cast would
        change a value's meaning: a finite value beyond the dtype's range (it would become inf),
        always; a value that rounds (a float's precision, an integer past the mantissa), unless
        the caller chose the dtype (``round_floats``: then it is said once)."""
        if arr.dtype == self.dtype or not arr.size:
            return arr.astype(self.dtype, copy=False)
        with np.errstate(over="ignore", invalid="ignore", under="ignore"):  # checked below
            out = arr.astype(self.dtype)
        overflow, changed = _cast_changes(arr, out, rounding=not (self.round_floats and self._said_rounding))
        if overflow is not None:
            raise DtypeMismatchError(_overflow_message(arr, out, overflow, doc, self.dtype))
        if changed is not None:
            k = int(np.argmax(changed))
            value, stored = arr[k].item(), out[k].item()
            if not self.round_floats:
                raise DtypeMismatchError(
                    f"document {doc}: {arr.dtype.name} value {value!r} (at index {k}) would be stored as {stored!r} "
                    f"in {self.dtype.name}, the dtype the first array chose; pass dtype='{self.dtype.name}' "
                    f"to round on purpose{_keep_hint(value)}"
                )
            if not self._said_rounding:
                self._said_rounding = True
                log.warning(
                    "document %d: %s values rounded to %s, as dtype='%s' asks (%r became %r); said once",
                    doc,
                    arr.dtype.name,
                    self.dtype.name,
                    self.dtype.name,
                    value,
                    stored,
                )
        return out

    def add_document(self, tokens: np.ndarray | Iterable[np.ndarray]) -> None:
        """Append one document: an integer array (or a sequence of ints), or an iterator of such chunks.

        Chunks are streamed to disk as they come, so a document may be larger than RAM. The
        EOS token (when set) follows it. Documents never span shards.
        """
        if isinstance(tokens, (bytes, bytearray, memoryview)):
            tokens = np.frombuffer(tokens, np.uint8)
        if isinstance(tokens, (list, tuple)):
            tokens = np.asarray(tokens)
        chunks = iter([tokens] if isinstance(tokens, np.ndarray) else tokens)
        size_hint = tokens.size * self.dtype.itemsize if isinstance(tokens, np.ndarray) else 0
        first = next(chunks, None)  # checked before the document starts: a bad one leaves no trace
        arr = self._convert(first) if first is not None else np.empty(0, self.dtype)
        shard = self._roll_if_needed(size_hint)
        shard.start_document()
        shard.write(arr)
        n = len(arr)
        for chunk in chunks:
            arr = self._convert(chunk)
            shard.write(arr)
            n += len(arr)
        if self._eos is not None:
            shard.write(self._eos)
            n += 1
        self.num_documents += 1
        self.num_tokens += n
        self._sync.wrote(shard, n * self.dtype.itemsize)

    def add_documents(self, documents: Iterable) -> None:
        """``add_document`` for each document of an iterable.

        A list of 1-D integer arrays (what tokenizers return) is written in runs: the
        documents that go to one shard are joined, with their EOS tokens, into one array and
        written, hashed and checksummed in one pass, which makes many small documents cost
        little more than their bytes. The shards are byte for byte those of one
        ``add_document`` per document. A document with an out-of-range token raises after
        the documents before it are written, as ``add_document`` would.
        """
        if (
            not self.shard_dtype.ids
            or not isinstance(documents, (list, tuple))
            or not all(isinstance(d, np.ndarray) and d.ndim == 1 for d in documents)
        ):
            for doc in documents:
                self.add_document(doc)
            return
        ready: list[np.ndarray] = []
        try:
            for k, doc in enumerate(documents):
                ready.append(doc if self._fits(doc.dtype) else self._convert(doc, self.num_documents + k))
        finally:  # on a bad document, the ones before it are still written
            self._add_run_of_documents(ready)

    def _add_run_of_documents(self, docs: list[np.ndarray]) -> None:
        """Write ``docs`` (1-D, safely castable to the dtype) with one write per shard they fall into."""
        if docs:
            self.add_joined(*join_documents(docs, self.dtype, self.eos_id), checked=True)

    def add_joined(self, tokens: np.ndarray, lengths: np.ndarray, checked: bool = False) -> None:
        """Append documents given back to back, as :func:`join_documents` returns them.

        Args:
            tokens: 1-D array of this dataset's dtype: the documents one after another, each
                followed by the EOS token when the dataset has one.
            lengths: int64 token count of each document, its EOS included.
            checked: the caller has range-checked ``tokens`` (skips one pass over them).

        The documents that go to one shard are written, hashed and checksummed in one pass;
        the shards are byte for byte those of one :meth:`add_document` per document.

        Raises:
            ValueError: ``tokens`` and ``lengths`` disagree (dtype, total, a missing EOS).
            DtypeMismatchError: a token outside the vocabulary.
        """
        eos = 0 if self._eos is None else 1
        ends = np.cumsum(lengths)
        if (
            tokens.dtype != self.dtype
            or tokens.ndim != 1
            or (len(ends) and ends[-1] != len(tokens))
            or (eos and len(ends) and (lengths.min() < 1 or (tokens[ends - 1] != self.eos_id).any()))
        ):
            raise ValueError(
                f"joined documents must be 1-D {self.dtype.name} tokens whose lengths add up to their "
                f"count{', each ending with EOS ' + str(self.eos_id) if eos else ''}; build them with "
                "join_documents()"
            )
        if not checked and not self._fits(tokens.dtype) and tokens.size and tokens.max() >= self._limit:
            doc = int(np.searchsorted(ends, int(np.argmax(tokens >= self._limit)), side="right"))
            raise DtypeMismatchError(
                f"document {self.num_documents + doc}: a token is outside [0, {self._limit}) "
                f"(vocab_size={self.vocab_size}, dtype={self.dtype.name})"
            )
        item = self.dtype.itemsize
        starts = ends - lengths
        i = 0
        while i < len(lengths):
            shard = self._roll_if_needed((int(lengths[i]) - eos) * item)
            j = self._fitting(shard, i, starts, ends, lengths, eos)
            shard.start_documents(starts[i:j] - starts[i])
            shard.write(tokens[starts[i] : ends[j - 1]])
            self.num_documents += j - i
            self.num_tokens += int(ends[j - 1] - starts[i])
            self._sync.wrote(shard, int(ends[j - 1] - starts[i]) * item)
            i = j

    def _fitting(
        self, shard: ShardWriter, i: int, starts: np.ndarray, ends: np.ndarray, lengths: np.ndarray, eos: int
    ) -> int:
        """The end j of the run of documents i..j-1 that go to ``shard`` (it takes document i).

        The rule of :meth:`_roll_if_needed`, applied to every later document at once: document
        j joins while the shard with documents i..j-1, plus j's tokens, stays within the shard
        size. Only documents whose tokens alone could still fit are looked at (so a batch of
        many documents over many small shards costs no more than one pass).
        """
        item = self.dtype.itemsize
        # A run whose tokens exceed shard_size // item cannot fit: document `stop` never joins.
        stop = min(len(lengths), int(np.searchsorted(ends, starts[i] + self.shard_size // item, side="right")) + 1)
        if stop <= i + 1:
            return i + 1
        k = np.arange(i + 1, stop)
        sizes = (
            shard.nbytes_with(shard.num_tokens + (ends[k - 1] - starts[i]), shard.num_documents + (k - i))
            + (lengths[k] - eos) * item
        )
        over = sizes > self.shard_size
        return int(i + 1 + np.argmax(over)) if over.any() else stop

    def when_checksummed(self, fn: Callable[[], None]) -> None:
        """Call ``fn()`` once every token added so far is hashed and checksummed: at once, or
        on the checksum thread with ``background_checksums`` (e.g. to reuse their buffers)."""
        if self._checksums is None:
            fn()
        else:
            self._checksums.submit(fn)

    # -- commit -----------------------------------------------------------------------
    def close(self) -> Manifest:
        """Finish the last shard, give every shard its final name, then write the manifest.

        Returns the new manifest (previous shards first when appending).
        """
        if self._closed:
            raise RuntimeError("DatasetWriter is already closed")
        self._closed = True
        try:
            return self._commit()
        finally:
            self._stop_threads()
            self._unlock()

    def _commit(self) -> Manifest:
        if self._current is not None and self._current.num_documents:
            self._sync.finish(self._current)
            self._shards.append(self._current)
        elif self._current is not None:
            self._current.abort()
        self._sync.wait()  # every shard durable before any is renamed
        if self._previous is not None and self._shards:
            # Until the manifest names them, the appended shards are not part of the dataset:
            # the marker lists them so that readers by glob skip them and the next pack removes them.
            _write_marker(self.marker_path, [os.path.basename(s.path) for s in self._shards])
        for s in self._shards:
            s.commit()
        prev = self._previous.shards if self._previous else ()
        manifest = Manifest(
            dtype=self.dtype.name,
            vocab_size=self.vocab_size,
            eos_id=self.eos_id,
            tokenizer=self.tokenizer,
            shards=prev + tuple(s.finished_entry for s in self._shards),
            writer_version=__version__,
            created=self._previous.created if self._previous else _now(),
        )
        manifest.save(self.manifest_path)
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.marker_path)
        fsync_dir(self.directory)
        return manifest

    def abort(self) -> None:
        """Discard everything this writer wrote (the previous dataset, when appending, is untouched)."""
        self._closed = True
        self._stop_threads()  # no file is closed under a background fsync
        for s in self._shards + ([self._current] if self._current else []):
            s.abort()
        self._release(self._previous is None)

    def _release(self, marked: bool) -> None:
        """Undo the set-up: this pack's marker (``marked``: a new dataset's), the lock, and the
        directory if this writer made it and it is empty again."""
        if marked:
            with contextlib.suppress(FileNotFoundError):
                os.remove(self.marker_path)
        # Also the temporary files this process made but had not yet recorded: a stop (Ctrl-C,
        # SIGTERM) can land between opening a shard's file and keeping its writer.
        self._remove_temps(lambda pid: pid == os.getpid())
        self._unlock()
        if self._made_directory:
            with contextlib.suppress(OSError):  # not empty (someone else's files): kept
                os.rmdir(self.directory)

    def _stop_threads(self) -> None:
        if self._checksums is not None:
            self._checksums.close()
        self._sync.close()

    def _unlock(self) -> None:
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            with contextlib.suppress(FileNotFoundError):
                os.remove(self._lock_path)  # still holding the lock: waiters notice the new inode
            os.close(fd)  # closing the descriptor releases the flock

    def __enter__(self) -> DatasetWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        elif not self._closed:
            self.abort()


def _cast_changes(arr: np.ndarray, out: np.ndarray, rounding: bool) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Where ``out`` (``arr`` cast to a float dtype) does not hold ``arr``'s value: (a finite value
    became inf, a value changed: looked for only if ``rounding``), each None where there is none.

    Vectorised and exact for every source dtype: integers are compared as integers, floats in a
    type that holds both. The common case (no value lost) costs a pass or two over the arrays.
    """
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        inf = np.isinf(out)
        if arr.dtype.kind in "iu":  # no integer is inf: every inf is an overflow
            overflow = inf if inf.any() else None
            if not rounding or overflow is not None:
                return overflow, None
            wide = out.astype(np.float64)  # exact: every stored float fits a float64, and is integer-valued here
            bits = 8 * arr.dtype.itemsize - (arr.dtype.kind == "i")
            fits = (wide >= (-(2.0**bits) if arr.dtype.kind == "i" else 0.0)) & (wide < 2.0**bits)
            changed = ~fits | (np.where(fits, wide, 0).astype(arr.dtype) != arr)
            return None, (changed if changed.any() else None)
        overflow = (inf & np.isfinite(arr)) if inf.any() else None
        if overflow is not None and overflow.any():
            return overflow, None
        if not rounding:
            return None, None
        common = np.longdouble if arr.dtype == np.longdouble else np.float64
        changed = out.astype(common) != arr.astype(common, copy=False)
        if changed.any():
            changed &= ~np.isnan(arr)  # NaN stays NaN (and never compares equal)
        return None, (changed if changed.any() else None)


def _overflow_message(arr: np.ndarray, out: np.ndarray, overflow: np.ndarray, doc: int, dtype: np.dtype) -> str:
    k = int(np.argmax(overflow))
    value = arr[k].item()
    with np.errstate(over="ignore", invalid="ignore"):
        stored = {name: np.asarray(value).astype(layout.normalize_dtype(name)) for name in layout.FLOAT_DTYPES}
        exact = [name for name, v in stored.items() if v.astype(np.longdouble) == np.longdouble(value)]
        finite = [name for name, v in stored.items() if np.isfinite(v.astype(np.float64))]
    wider = exact or finite
    fix = (
        f"pass dtype={' or '.join(repr(w) for w in wider)}"
        if wider
        else "scale or clip them (float32, the widest stored float, holds up to 3.4e38)"
    )
    return (
        f"document {doc}: {arr.dtype.name} value {value!r} (at index {k}) is beyond {dtype.name}'s range and would be "
        f"stored as {out[k].item()!r}; {fix}"
    )


def _keep_hint(value) -> str:
    """How to keep ``value`` exactly, if a stored float dtype can."""
    with np.errstate(over="ignore", invalid="ignore"):
        kept = np.float32(value) == np.longdouble(value)
    return ", or dtype='float32' to keep it" if kept else " (no stored float holds it exactly: float32 is the widest)"


def _one_document(arr: np.ndarray, doc: int) -> np.ndarray:
    """A (1, n) or (n, 1) array (a tokenizer's batch of one) as 1-D; refuses an array with
    more than one axis longer than 1, which would join several documents into one."""
    if sum(n > 1 for n in arr.shape) > 1:
        raise ValueError(
            f"document {doc}: an array of shape {arr.shape} is not one document (it would join "
            f"{arr.shape[0]} rows into one); pass its rows as documents (add_documents(list(arr))), "
            "or arr.reshape(-1) if it really is one"
        )
    return arr.reshape(-1)


def join_documents(docs: list[np.ndarray], dtype, eos_id: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Documents back to back, ready for :meth:`DatasetWriter.add_joined`.

    Args:
        docs: 1-D integer arrays whose values fit ``dtype`` (no range check here).
        dtype: the dataset's token dtype.
        eos_id: token put after every document (None: none).

    Returns:
        ``(tokens, lengths)``: the tokens as one 1-D ``dtype`` array, and each document's
        token count (int64) with its EOS.
    """
    dtype = np.dtype(dtype)
    eos = [] if eos_id is None else [np.array([eos_id], dtype)]
    lengths = np.fromiter((len(d) + len(eos) for d in docs), np.int64, len(docs))
    if not docs:
        return np.empty(0, dtype), lengths
    return np.concatenate([p for d in docs for p in (d, *eos)], dtype=dtype), lengths
