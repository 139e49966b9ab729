"""``roxxel pack``: turn text files, JSONL, Parquet or stdin into a dataset of shards.

Documents are read (and tokenized) on a background thread while the main thread writes
shards and a third thread hashes and checksums them, so packing keeps several cores busy;
a Hugging Face tokenizer further spreads each batch over all cores in Rust. Inputs are
visited in a fixed order (the order given; directories walked in sorted order), so
document k of the dataset is the k-th document of the inputs.
"""

from __future__ import annotations

import collections
import contextlib
import fnmatch
import functools
import glob
import gzip
import io
import itertools
import json
import logging
import multiprocessing
import operator
import os
import queue
import re
import signal
import sys
import zlib
from concurrent.futures import Future, ProcessPoolExecutor
from typing import BinaryIO, Callable, Iterable, Iterator, NamedTuple, Sequence

import numpy as np

from roxxel.data.prefetch import Prefetcher
from roxxel.format.errors import for_cli
from roxxel.format.layout import token_dtype_for_vocab
from roxxel.format.manifest import MANIFEST_FORMAT, MANIFEST_NAME, Manifest
from roxxel.format.writer import DEFAULT_SHARD_SIZE, DatasetWriter, join_documents
from roxxel.tokenizers import ByteTokenizer, HFTokenizer, load_tokenizer
from roxxel.wording import count

log = logging.getLogger("roxxel.pack")

FORMATS = ("auto", "text", "jsonl", "parquet")
_JSONL_SUFFIXES = (".jsonl", ".ndjson")
_COMPRESSED = (".gz", ".zst", ".zstd")
_BINARY_PROBE = 8192  # like git: a NUL byte in the first 8 KiB marks a binary file
_BATCH = 64  # documents tokenized together (lets the Rust tokenizer parallelise)
_QUEUE_DEPTH = 8
_TASK_FILES, _TASK_BYTES = 64, 4 << 20  # a pool worker's task: up to 64 input files or 4 MiB, whichever first
_TASKS_AHEAD = 2  # tasks queued per worker: enough to keep it busy, bounded memory
_BYTE_BATCH = 1 << 20  # input bytes per batch of the byte-level path (its 2 MiB of tokens stay in cache)
_BYTE_QUEUE_DEPTH = 2  # its batches ready ahead of the writer: few, so that they are still in the CPU's cache


def iter_input_files(inputs: Sequence[str], include: Sequence[str] = (), exclude: Sequence[str] = ()) -> Iterator[str]:
    """Expand inputs in a fixed order.

    Inputs are taken as given; a glob's matches in sorted order; a directory's files by
    name, then its subdirectories by name. Every input is checked when this is called;
    directories are walked as the files are taken.

    Args:
        inputs: files, directories, glob patterns (``**`` recurses), or ``-`` for stdin.
        include: basename patterns (``*.py``); when given, files found in directories and
            globs must match one of them (files named explicitly are always taken).
        exclude: path patterns (``*/site-packages/*``); files found in directories and globs
            that match one of them are skipped.

    Raises:
        FileNotFoundError: an input does not exist or a glob matches nothing (raised by the
            call itself, before any file is taken).
    """
    excluded, included = _any_of(exclude), _any_of(include)

    def wanted(path: str) -> bool:
        if excluded is not None and excluded(path):
            return False
        return included is None or bool(included(os.path.basename(path)))

    resolved: list[list[str] | str] = []  # a directory to walk, or files taken as they are
    for item in inputs:
        if item == "-":
            resolved.append([item])
        elif os.path.isdir(item):
            resolved.append(item)
        elif os.path.isfile(item):
            resolved.append([item])
        elif any(c in item for c in "*?["):
            matches = sorted(p for p in glob.glob(item, recursive=True) if wanted(p) and os.path.isfile(p))
            if not matches:
                raise FileNotFoundError(f"no files match {item!r}")
            resolved.append(matches)
        else:
            raise FileNotFoundError(f"input not found: {item}")
    return itertools.chain.from_iterable(_walk(r, included, excluded) if isinstance(r, str) else r for r in resolved)


def _walk(top: str, included: Matcher | None, excluded: Matcher | None) -> Iterator[str]:
    """Files under ``top``: its own by name, then each subdirectory's by name (``os.walk``'s rules).

    Like ``os.walk``, an unreadable directory is passed over and a symlink to a directory is
    not entered, but each with a warning (as a broken link or a FIFO among the wanted files):
    nothing is left out silently. Directory entries carry their type, so no file costs an
    extra ``stat``.
    """
    pending = [top]  # directories still to walk, the next one last (depth first, as a recursion would)
    while pending:
        files, subdirs = _scan(pending.pop(), included, excluded)
        yield from files
        pending.extend(reversed(subdirs))


def _scan(top: str, included: Matcher | None, excluded: Matcher | None) -> tuple[list[str], list[str]]:
    """The wanted files and the subdirectories to walk of one directory, each sorted by name.

    An entry that cannot be examined (its type unknown and its ``stat`` failing) is neither,
    as for ``os.walk`` and ``os.path.isfile``. The checks are inline: a walk sees many entries.
    """
    files, subdirs = [], []
    manifest = False
    try:
        with os.scandir(top) as it:
            for entry in it:
                try:
                    is_dir = entry.is_dir()
                except OSError:
                    is_dir = False
                if not is_dir and entry.name == MANIFEST_NAME:
                    manifest = True
                if is_dir:
                    # Prune excluded directories instead of walking them (e.g. site-packages).
                    if excluded is None or not excluded(entry.path + os.sep):
                        if not _is_symlink(entry):
                            subdirs.append(entry.path)
                        else:  # not followed (os.walk's rule: a link may loop), but never silently
                            log.warning("skipping %s: a symbolic link to a directory is not followed "
                                        "(pass it as an input to pack what it holds)", entry.path)
                elif (included is None or included(entry.name)) and (excluded is None or not excluded(entry.path)):
                    try:
                        if entry.is_file():
                            files.append(entry.path)
                            continue
                    except OSError:
                        pass
                    log.warning("skipping %s: %s", entry.path, "a broken symbolic link" if _is_symlink(entry)
                                else "not a regular file (a FIFO, socket or device)")
    except OSError as e:
        log.warning("skipping %s: cannot read the directory (%s)", top, e.strerror or e)
        return [], []
    if manifest and is_dataset(top):
        # An earlier pack's output is not input text: its manifest would be packed as a document.
        log.warning("skipping %s: a Roxxel dataset (pass its files by name to pack them anyway)", top)
        return [], []
    files.sort()  # every path is top + "/" + name: sorting the paths sorts the names
    subdirs.sort()
    return files, subdirs


def _is_symlink(entry: os.DirEntry) -> bool:
    try:
        return entry.is_symlink()
    except OSError:  # its type unknown and its lstat failing: gone since it was listed
        return False


def is_dataset(directory: str) -> bool:
    """Whether ``directory`` holds a Roxxel dataset: a ``dataset.json`` of the Roxxel manifest format."""
    try:
        with open(os.path.join(directory, MANIFEST_NAME), "rb") as f:
            return json.load(f).get("format") == MANIFEST_FORMAT
    except (OSError, ValueError, AttributeError):  # unreadable, not JSON, not an object: someone else's file
        return False


Matcher = Callable[[str], object]  # truthy for a match


def _any_of(patterns: Sequence[str]) -> Matcher | None:
    """One matcher for several ``fnmatch`` patterns (None for none), with ``fnmatch``'s meaning.

    A pattern that is a literal with ``*`` at one or both ends (``*.py``, ``*/site-packages/*``)
    becomes a string method (``endswith``, ``in``) called from C: several times quicker than a
    regex on each of the many paths a walk sees. The others are joined into one regex.
    """
    if not patterns:
        return None
    suffixes, prefixes, exact, others = [], [], set(), []
    tests: list[Matcher] = []
    for p in patterns:
        literal = p.strip("*")
        if any(c in literal for c in "*?["):
            others.append(p)
        elif p.startswith("*") and p.endswith("*"):  # "*" itself too: "" is in every path
            tests.append(operator.methodcaller("__contains__", literal))
        elif p.startswith("*"):
            suffixes.append(literal)
        elif p.endswith("*"):
            prefixes.append(literal)
        else:
            exact.add(literal)
    if suffixes:
        tests.append(operator.methodcaller("endswith", tuple(suffixes)))
    if prefixes:
        tests.append(operator.methodcaller("startswith", tuple(prefixes)))
    if exact:
        tests.append(frozenset(exact).__contains__)
    if others:
        tests.append(re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in others)).match)
    if len(tests) == 1:
        return tests[0]
    return lambda path: any(test(path) for test in tests)


def open_input(path: str) -> io.BufferedIOBase:
    """Open an input for binary reading, decompressing ``.gz`` (gzip) and ``.zst``/``.zstd`` (Zstandard).

    Raises:
        ImportError: a ``.zst`` input without the ``zstandard`` package (``pip install 'roxxel[zstd]'``).
    """
    if path.endswith(".gz"):
        return gzip.open(path, "rb")
    if path.endswith((".zst", ".zstd")):
        try:
            import zstandard
        except ImportError as e:
            raise ImportError(f"{path}: reading .zst input needs zstandard: pip install 'roxxel[zstd]'") from e
        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(open(path, "rb"), closefd=True))
    return open(path, "rb")


def read_input(path: str) -> bytes:
    """The whole content of an input, decompressed as by :func:`open_input`.

    Raises:
        ValueError: a compressed input that is damaged or cut short (names the file).
    """
    if path.endswith(_COMPRESSED):
        with _decompressing(path), open_input(path) as f:
            return f.read()
    with open(path, "rb", buffering=0) as raw:  # no buffer: one sized read of the whole file
        return raw.read()


@contextlib.contextmanager
def _decompressing(path: str) -> Iterator[None]:
    """Name ``path`` in a decompression error (the libraries' messages do not; one about a cut-off
    stream is an ``EOFError``, which the command line would report as a bare "Aborted!")."""
    errors: tuple[type[BaseException], ...] = (EOFError, gzip.BadGzipFile, zlib.error)
    if "zstandard" in sys.modules:
        errors += (sys.modules["zstandard"].ZstdError,)
    try:
        yield
    except errors as e:
        kind = "gzip" if path.endswith(".gz") else "Zstandard"
        raise ValueError(f"{path}: not a complete {kind} file ({e}); re-copy it, or leave it out with --exclude") from None


def _lines(stream: Iterable[bytes], path: str) -> Iterator[bytes]:
    with _decompressing(path):
        yield from stream


def is_binary(data: bytes | bytearray, start: int = 0, end: int | None = None) -> bool:
    """True for content that is not text: a NUL byte in its first 8 KiB (git's rule).

    ``start``/``end`` (byte offsets) pick the content out of a larger buffer (default: all of ``data``).
    """
    stop = start + _BINARY_PROBE if end is None else min(end, start + _BINARY_PROBE)
    return data.find(b"\0", start, stop) != -1  # no copy of the probed bytes


def detect_format(path: str) -> str:
    """``jsonl`` for .jsonl/.ndjson, ``parquet`` for .parquet, else ``text`` (one file = one document).

    A compression suffix (``.gz``, ``.zst``) is looked through: ``x.jsonl.gz`` is JSONL.
    """
    for suffix in _COMPRESSED:
        if path.endswith(suffix):
            path = path[:-len(suffix)]
    if path.endswith(_JSONL_SUFFIXES):
        return "jsonl"
    if path.endswith(".parquet"):
        return "parquet"
    return "text"


def iter_documents(path: str, fmt: str = "auto", text_field: str = "text") -> Iterator[bytes | str]:
    """Documents of one input: a whole text file (bytes); each JSONL line's or Parquet row's ``text_field``.

    ``-`` reads stdin: one document in text format, one per line in JSONL.

    Raises:
        ValueError: a JSONL line that is not an object with a string ``text_field`` (names file and line).
        ImportError: Parquet input without pyarrow (``pip install 'roxxel[parquet]'``).
    """
    if fmt == "auto":
        fmt = "text" if path == "-" else detect_format(path)
    if fmt == "text":
        yield sys.stdin.buffer.read() if path == "-" else read_input(path)
    elif fmt == "jsonl":
        stream: BinaryIO | io.BufferedIOBase = sys.stdin.buffer if path == "-" else open_input(path)
        try:
            for lineno, line in enumerate(_lines(stream, path), 1):
                if line.strip():
                    yield _jsonl_text(line, text_field, path, lineno)
        finally:
            if stream is not sys.stdin.buffer:
                stream.close()
    elif fmt == "parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError as e:
            raise ImportError("Parquet input needs pyarrow: pip install 'roxxel[parquet]'") from e
        pf = pq.ParquetFile(path)
        if text_field not in pf.schema_arrow.names:
            raise ValueError(f"{path}: no column {text_field!r} (columns: {pf.schema_arrow.names}); pass --text-field")
        for batch in pf.iter_batches(columns=[text_field]):
            yield from (t for t in batch.column(0).to_pylist() if t is not None)
    else:
        raise ValueError(f"unknown input format {fmt!r}; choose one of {', '.join(FORMATS)}")


def _jsonl_text(line: bytes, field: str, path: str, lineno: int) -> str:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
    if not isinstance(obj, dict) or not isinstance(obj.get(field), str):
        raise ValueError(f"{path}:{lineno}: expected an object with a string field {field!r}; pass --text-field")
    text = obj[field]
    bad = _SURROGATE.search(text)
    if bad:  # JSON can escape half of a UTF-16 pair ("\ud800"); no UTF-8 text, so no tokenizer, holds one
        raise ValueError(f"{path}:{lineno}: the text holds an unpaired surrogate ({bad.group()!a}), which is not "
                         "Unicode text; fix the line, or leave the file out with --exclude")
    return text


_SURROGATE = re.compile("[\ud800-\udfff]")


def _tokenized_batches(inputs, tok, fmt, text_field, include_binary=False,
                       on_skip: Callable[[str], None] | None = None) -> Iterator[tuple[list[np.ndarray], int]]:
    batch: list = []
    nbytes = 0
    is_bytes = isinstance(tok, ByteTokenizer)
    for path in inputs:
        for doc in iter_documents(path, fmt, text_field):
            if isinstance(doc, bytes) and not include_binary and is_binary(doc):
                log.warning("skipping %s: binary content (pass --include-binary to pack it)", path)
                if on_skip is not None:
                    on_skip(path)
                continue
            if not is_bytes and isinstance(doc, bytes):
                try:
                    doc = doc.decode("utf-8")
                except UnicodeDecodeError:
                    raise ValueError(f"{path} is not UTF-8 text; use --tokenizer bytes, or leave it out with --exclude") from None
            nbytes += len(doc)
            batch.append(doc)
            if len(batch) == _BATCH:
                yield tok.encode_batch(batch), nbytes
                batch, nbytes = [], 0
    if batch:
        yield tok.encode_batch(batch), nbytes


_NOT_WHOLE = {"text": _COMPRESSED, "auto": _COMPRESSED + _JSONL_SUFFIXES + (".parquet",),
              "jsonl": ("",), "parquet": ("",)}  # suffixes of files _reads_whole refuses ("": every file)


def _reads_whole(path: str, fmt: str) -> bool:
    """Whether ``path`` is read whole, as one document, straight from its file (no decompression or parsing)."""
    return path != "-" and not path.endswith(_NOT_WHOLE[fmt])


class Staged(NamedTuple):
    """A batch of documents' bytes as read, back to back, each followed by a slot for its EOS."""

    buf: bytearray
    used: int  # bytes of buf taken by the documents and their EOS slots
    ends: np.ndarray  # int64: each document's EOS slot
    nbytes: int  # input bytes


def _byte_batches(files: Sequence[str], buffers: _ByteBuffers, fmt: str, text_field: str,
                  include_binary: bool, on_skip: Callable[[str], None]) -> Iterator[Staged]:
    """The bytes of the documents of ``files``, in batches of about ``_BYTE_BATCH`` bytes, to widen
    into byte-level tokens with :meth:`_ByteBuffers.widen`.

    The same documents, in the same order, as :func:`_tokenized_batches` with a
    :class:`ByteTokenizer` (so the same dataset), for a fraction of its CPU time: a text
    file is read straight into the batch buffer (``fstat``, then one ``read`` of one byte more
    than its size, whose short count proves the end). The per-file work is kept inline (a few
    system calls) because there are many small files; widening is left to the consumer, whose
    thread has more time to spare.
    """
    batch = _Batch(buffers)
    # Looked up once: a few names per file add up over many small files.
    open_, fstat, readv, close, flags = os.open, os.fstat, os.readv, os.close, os.O_RDONLY | os.O_CLOEXEC

    def skip(path: str) -> None:
        log.warning("skipping %s: binary content (pass --include-binary to pack it)", path)
        on_skip(path)

    for path in files:
        docs: Iterable[bytes | str]
        if not _reads_whole(path, fmt):
            docs = iter_documents(path, fmt, text_field)
        else:
            fd = open_(path, flags)
            try:
                size = fstat(fd).st_size
                full = batch.make_room(size + 2)  # its bytes, the byte that proves the end, the EOS slot
                if full is not None:
                    yield full
                pos = batch.pos
                n = readv(fd, [batch.view[pos:pos + size + 1]])
                if n != size:  # grown or shrunk since fstat, a short read, or no size from fstat (/proc)
                    docs = [bytes(batch.view[pos:pos + n]) + _read_rest(fd)]
            finally:
                close(fd)
            if n == size:  # the whole file, in place
                if include_binary or not is_binary(batch.buf, pos, pos + n):
                    batch.took(n)
                else:
                    skip(path)
                continue
        for doc in docs:
            if isinstance(doc, str):
                doc = doc.encode("utf-8")  # as ByteTokenizer.encode
            elif not include_binary and is_binary(doc):
                skip(path)
                continue
            full = batch.make_room(len(doc) + 1)
            if full is not None:
                yield full
            batch.view[batch.pos:batch.pos + len(doc)] = doc
            batch.took(len(doc))
    if batch.ends:
        yield batch.staged()


class _Batch:
    """The batch :func:`_byte_batches` is filling: documents back to back in ``buf``, each
    followed by its EOS slot."""

    def __init__(self, buffers: _ByteBuffers):
        self._buffers = buffers
        self._fresh(buffers.stage())

    def _fresh(self, buf: bytearray) -> None:
        self.buf, self.view = buf, memoryview(buf)
        self.pos, self.nbytes = 0, 0  # bytes of buf used (documents and EOS slots), input bytes
        self.ends: list[int] = []  # each document's EOS slot in buf

    def make_room(self, need: int) -> Staged | None:
        """Make ``need`` bytes free at :attr:`pos`; returns the batch so far when it had to be
        cut there (to hand on), else None. A document larger than a batch gets a buffer of its own."""
        full = None
        if self.pos + need > len(self.buf):
            if self.ends:
                full = self.staged()
                self._fresh(self._buffers.stage())
            if need > len(self.buf):
                self._fresh(bytearray(need))
        return full

    def took(self, n: int) -> None:
        """A document of ``n`` bytes was put at :attr:`pos`; its EOS slot follows it."""
        self.pos += n + 1
        self.ends.append(self.pos - 1)
        self.nbytes += n

    def staged(self) -> Staged:
        return Staged(self.buf, self.pos, np.array(self.ends, np.int64), self.nbytes)


class _ByteBuffers:
    """The buffers of the byte-level path, each reused once nothing reads it any more.

    A fresh buffer would cost a page fault every 4 KiB and arrive cold in the CPU's cache;
    the few in flight stay warm. A batch buffer (``size`` bytes) is free again once widened,
    a token array (``size`` tokens) once written and checksummed; larger ones, for a
    document larger than ``size``, serve one batch only.
    """

    def __init__(self, dtype: np.dtype, eos_id: int, size: int):
        self.dtype, self.eos_id, self._size = dtype, eos_id, size
        self._stages: queue.SimpleQueue[bytearray] = queue.SimpleQueue()
        self._tokens: queue.SimpleQueue[np.ndarray] = queue.SimpleQueue()

    def stage(self) -> bytearray:
        """A free batch buffer (its contents undefined)."""
        try:
            return self._stages.get_nowait()
        except queue.Empty:
            return bytearray(self._size)

    def widen(self, staged: Staged) -> Batch:
        """The documents of ``staged`` as tokens with their EOS: (tokens, lengths with EOS, input bytes).

        The batch buffer is free again when this returns.
        """
        tokens = self._take(staged.used)
        np.copyto(tokens, np.frombuffer(staged.buf, np.uint8, staged.used))  # the widening copy, outside the GIL
        tokens[staged.ends] = self.eos_id
        if len(staged.buf) == self._size:
            self._stages.put(staged.buf)
        return tokens, np.diff(staged.ends, prepend=-1), staged.nbytes

    def _take(self, n: int) -> np.ndarray:
        if n > self._size:
            return np.empty(n, self.dtype)
        try:
            buf = self._tokens.get_nowait()
        except queue.Empty:
            buf = np.empty(self._size, self.dtype)
        return buf[:n]

    def give_back(self, tokens: np.ndarray) -> None:
        """Let the array under ``tokens`` (from :meth:`widen`) be used again: nothing reads it any more."""
        if isinstance(tokens.base, np.ndarray) and tokens.base.shape == (self._size,):
            self._tokens.put(tokens.base)


def _read_rest(fd: int) -> bytes:
    """Everything left in ``fd`` up to its end."""
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def pack(inputs: Sequence[str], output: str, *, tokenizer="bytes", shard_size: int = DEFAULT_SHARD_SIZE,
         include: Sequence[str] = (), exclude: Sequence[str] = (), fmt: str = "auto", text_field: str = "text", append: bool = False,
         eos_id: int | None = None, on_progress: Callable[[int, int, int], None] | None = None,
         lock_timeout: float = 0.0, include_binary: bool = False,
         on_skip: Callable[[str], None] | None = None, jobs: int = 1) -> Manifest:
    """Pack inputs into the dataset directory ``output`` (``dataset.json`` + ``shard-NNNNN.rox``).

    Args:
        inputs, include, exclude: see :func:`iter_input_files`.
        tokenizer: ``"bytes"`` (256 byte ids + EOS 256) or a ``tokenizer.json`` path.
        shard_size: bytes per shard before rolling over.
        fmt, text_field: see :func:`iter_documents`.
        append: add to an existing dataset in ``output`` instead of refusing.
        lock_timeout: seconds to wait while another pack/append holds ``output`` (0: fail at once).
        include_binary: pack whole files with binary content (a NUL byte in the first 8 KiB) as
            documents too; by default they are skipped and ``on_skip(path)`` is called for each.
            ``.gz``/``.zst`` inputs are decompressed first, so they are not binary.
        on_progress: called with (documents, tokens, input bytes) added since the last call.
        jobs: processes that read and tokenize input files (0: one per CPU; 1, the default:
            none, one reader thread). Files go to them in tasks of up to 64 files or 4 MiB, and
            the results are written in input order, so the dataset is byte for byte the same
            for every ``jobs``. Stdin is always read in this process, and so are plain-text
            files with the byte-level tokenizer (nothing to tokenize: a pool would only copy).

    Returns:
        The dataset's manifest. Nothing under ``output`` opens as a dataset until this returns.

    Raises:
        FileNotFoundError, ValueError: bad inputs (named), or inputs that give no document (all
        skipped as binary, or empty), in which case nothing is written. DatasetExistsError: ``output`` holds a
        dataset and ``append`` is False. DtypeMismatchError: appending with another tokenizer.
        DatasetLockedError: another pack/append into ``output`` is running.
    """
    if jobs < 0:
        raise ValueError(f"jobs must be a number of processes (0: one per CPU), got {jobs}")
    if fmt not in FORMATS:
        raise ValueError(f"unknown input format {fmt!r}; choose one of {', '.join(FORMATS)}")
    tok = load_tokenizer(tokenizer, eos_id=eos_id)
    # Walked before the dataset is opened: it fails on a missing input before writing anything,
    # and never sees the pack's own files. (Walking on the reader thread instead, as the files
    # are read, measured 5% slower on 2 cores: the reader is the longest thread, and the walk's
    # Python work contends with it for the GIL.)
    files = list(iter_input_files(inputs, include, exclude))
    if not files:
        raise FileNotFoundError(_no_files_message(inputs, include, exclude))
    # Byte-level tokens of text files cost no CPU to make, so a pool would only add copies: they
    # are read on one thread while this one writes and a third hashes (see _byte_batches and
    # DatasetWriter's background_checksums).
    by_bytes = isinstance(tok, ByteTokenizer) and (jobs == 1 or all(_reads_whole(f, fmt) for f in files))
    tasks = [] if by_bytes or jobs == 1 or "-" in files else _tasks(files)  # stdin is read in this process
    jobs = min(jobs or os.cpu_count() or 1, len(tasks))  # no more processes than tasks (0, 1: no pool)
    # The pool starts before the dataset is opened, so its workers hold none of the writer's files or lock.
    pool = _start_pool(tok, jobs) if jobs > 1 else None
    skipped: list[str] = []

    def skip(path: str) -> None:
        skipped.append(path)
        if on_skip is not None:
            on_skip(path)

    packed = 0
    try:
        with DatasetWriter(os.path.join(output, MANIFEST_NAME), vocab_size=tok.vocab_size, eos_id=tok.eos_id,
                           tokenizer=tok.identity, shard_size=shard_size, append=append,
                           lock_timeout=lock_timeout, background_checksums=True) as writer:
            buffers = _ByteBuffers(writer.dtype, tok.eos_id, _BYTE_BATCH)
            batches: Iterator[Batch | Staged]
            if by_bytes:
                batches = _byte_batches(files, buffers, fmt, text_field, include_binary, skip)
            elif pool is None:
                batches = (_joined(docs, tok, nbytes) for docs, nbytes in
                           _tokenized_batches(files, tok, fmt, text_field, include_binary, skip))
            else:
                batches = _pooled_batches(pool, tasks, (fmt, text_field, include_binary), jobs, skip)
            # Reading, tokenizing and joining run on the reader thread or the pool; this thread
            # writes (widening byte-level batches first), in input order, and the writer's
            # checksum thread hashes what it wrote.
            reader = Prefetcher(batches, _BYTE_QUEUE_DEPTH if by_bytes else _QUEUE_DEPTH, name="roxxel-pack-reader")
            try:
                for batch in reader:
                    tokens, lengths, nbytes = buffers.widen(batch) if isinstance(batch, Staged) else batch
                    writer.add_joined(tokens, lengths, checked=True)
                    if by_bytes:
                        writer.when_checksummed(functools.partial(buffers.give_back, tokens))
                    packed += len(lengths)
                    if on_progress is not None:
                        on_progress(len(lengths), len(tokens), nbytes)
            finally:
                reader.close()
            if not packed:  # raised inside the writer: it aborts, leaving no (or the old) dataset
                raise _nothing_packed(output, skipped)
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    return Manifest.load(writer.manifest_path)


def _nothing_packed(output: str, skipped: list[str]) -> BaseException:
    """The error for inputs that gave no document: all binary (skipped), or empty JSONL/Parquet."""
    if not skipped:
        problem = f"nothing to pack into {output}: the inputs hold no documents (empty JSONL or Parquet files?)"
        return for_cli(ValueError(f"{problem}; check the inputs, fmt and text_field"),
                       f"{problem}; check the inputs, --format and --text-field")
    problem = (f"nothing to pack into {output}: every input was skipped as binary content "
               f"({count(len(skipped), 'file')}, e.g. {skipped[0]})")
    return for_cli(ValueError(f"{problem}; pass include_binary=True to pack them as byte documents"),
                   f"{problem}; pass --include-binary to pack them as byte documents")


def _no_files_message(inputs: Sequence[str], include: Sequence[str], exclude: Sequence[str]) -> str:
    """Why no input file was found, in the command line's terms (only directories can come up empty)."""
    where = ", ".join(inputs)
    datasets = [d for d in inputs if os.path.isdir(d) and is_dataset(d)]
    if datasets:
        return (f"{datasets[0]} is a Roxxel dataset, not input text (its shards are packed already); "
                f"to add inputs to it, pack them with --append -o {datasets[0]}")
    if include:
        patterns = " ".join(f"--include {p!r}" for p in include)
        return (f"no file in {where} matches {patterns}" + (" (after --exclude)" if exclude else "")
                + "; --include matches file names, e.g. '*.txt' (check the pattern, or leave it out to take every file)")
    if exclude:
        return f"every file in {where} is excluded by --exclude; check the patterns"
    return f"no files in {where}: the directory is empty; pass files, directories with files, or globs"


def _tasks(files: list[str]) -> list[list[str]]:
    """``files`` cut, in order, into runs of up to ``_TASK_FILES`` files or ``_TASK_BYTES`` bytes (on disk)."""
    tasks: list[list[str]] = [[]]
    size = 0
    for path in files:
        if len(tasks[-1]) == _TASK_FILES or (tasks[-1] and size >= _TASK_BYTES):
            tasks.append([])
            size = 0
        tasks[-1].append(path)
        size += 0 if path == "-" else os.path.getsize(path)
    return tasks


Batch = tuple[np.ndarray, np.ndarray, int]  # joined tokens, document lengths with EOS, input bytes
_worker_tokenizer: ByteTokenizer | HFTokenizer | None = None


def _start_pool(tok: ByteTokenizer | HFTokenizer, jobs: int) -> ProcessPoolExecutor:
    """``jobs`` worker processes that each hold ``tok``, started now.

    Workers are forked (quick to start, ``tok`` inherited), unless JAX is loaded: its threads
    make a fork unsafe, so they come from a fresh forkserver process instead.
    """
    method = "forkserver" if "jax" in sys.modules else "fork"
    pool = ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context(method),
                               initializer=_set_worker_tokenizer, initargs=(tok, os.getpid() if method == "fork" else None))
    pool.submit(int).result()  # with fork, the first task starts every worker
    return pool


def _set_worker_tokenizer(tok: ByteTokenizer | HFTokenizer, parent: int | None) -> None:
    global _worker_tokenizer
    _worker_tokenizer = tok
    _die_with(parent)


def _die_with(parent: int | None) -> None:
    """End this pool worker when the process that started it ends, even by SIGKILL (no clean-up runs then).

    Linux's ``PR_SET_PDEATHSIG`` sends it SIGTERM then (a forked worker's parent is the packing
    process; a forkserver's worker's, the forkserver, which exits with it). A forked worker
    whose ``parent`` is gone before the call is caught by the ``getppid`` check after it.
    Elsewhere the pool's own shutdown is all there is.
    """
    # A forked worker inherits the command line's SIGTERM handler, which raises an exception that the
    # pool would catch as a task's error and carry on: SIGTERM must end a worker.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
        except (OSError, AttributeError):
            return
    if parent is not None and os.getppid() != parent:
        os._exit(1)


def _joined(docs: list[np.ndarray], tok: ByteTokenizer | HFTokenizer, nbytes: int) -> Batch:
    """Documents joined in the dataset's dtype with their EOS tokens (one buffer to hand over), range-checked."""
    if not isinstance(tok, ByteTokenizer):  # byte ids always fit; a tokenizer's ids should, but check
        bad = next((d for d in docs if d.size and d.max() >= tok.vocab_size), None)
        if bad is not None:
            raise ValueError(f"the tokenizer returned id {int(bad.max())}, outside its vocabulary of {tok.vocab_size}")
    return (*join_documents(docs, token_dtype_for_vocab(tok.vocab_size), tok.eos_id), nbytes)


def _tokenize_files(files: list[str], fmt: str, text_field: str, include_binary: bool) -> tuple[Batch, list[str]]:
    """In a pool worker: the documents of ``files`` joined (see :func:`_joined`), and the binary files skipped."""
    assert _worker_tokenizer is not None, "pool worker started without its tokenizer"
    docs: list[np.ndarray] = []
    nbytes = 0
    skipped: list[str] = []
    for batch, n in _tokenized_batches(files, _worker_tokenizer, fmt, text_field, include_binary, skipped.append):
        docs.extend(batch)
        nbytes += n
    return _joined(docs, _worker_tokenizer, nbytes), skipped


def _pooled_batches(pool: ProcessPoolExecutor, tasks: list[list[str]], options: tuple[str, str, bool], jobs: int,
                    on_skip: Callable[[str], None] | None) -> Iterator[Batch]:
    """The results of ``tasks`` in their order, ``_TASKS_AHEAD`` per worker in flight.

    A worker's error (a bad JSONL line, a file that is not UTF-8) is re-raised here, with its
    message, when its task's turn comes, so the pack fails as a serial one would.
    """
    pending: collections.deque[Future] = collections.deque()
    queued = iter(tasks)
    for files in itertools.islice(queued, jobs * _TASKS_AHEAD):
        pending.append(pool.submit(_tokenize_files, files, *options))
    while pending:
        batch, skipped = pending.popleft().result()
        for files in itertools.islice(queued, 1):
            pending.append(pool.submit(_tokenize_files, files, *options))
        for path in skipped:
            if on_skip is not None:
                on_skip(path)
        yield batch
