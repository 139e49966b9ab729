"""``roxxel pack``: turn text files, JSONL, Parquet or stdin into a dataset of shards.

Documents are read (and tokenized) on a background thread while the main thread writes
and checksums shards, so packing keeps both cores busy; a Hugging Face tokenizer further
spreads each batch over all cores in Rust. Inputs are visited in a fixed order (the order
given; directories walked in sorted order), so document k of the dataset is the k-th
document of the inputs.
"""

from __future__ import annotations

import fnmatch
import glob
import gzip
import io
import json
import logging
import os
import re
import sys
from typing import BinaryIO, Callable, Iterator, Sequence

import numpy as np

from roxxel.data.prefetch import Prefetcher
from roxxel.format.manifest import MANIFEST_NAME, Manifest
from roxxel.format.writer import DEFAULT_SHARD_SIZE, DatasetWriter
from roxxel.tokenizers import ByteTokenizer, load_tokenizer

log = logging.getLogger("roxxel.pack")

FORMATS = ("auto", "text", "jsonl", "parquet")
_JSONL_SUFFIXES = (".jsonl", ".ndjson")
_COMPRESSED = (".gz", ".zst", ".zstd")
_BINARY_PROBE = 8192  # like git: a NUL byte in the first 8 KiB marks a binary file
_BATCH = 64  # documents tokenized together (lets the Rust tokenizer parallelise)
_QUEUE_DEPTH = 8


def iter_input_files(inputs: Sequence[str], include: Sequence[str] = (), exclude: Sequence[str] = ()) -> Iterator[str]:
    """Expand inputs in a fixed order.

    Inputs are taken as given; a glob's matches in sorted order; a directory's files by
    name, then its subdirectories by name.

    Args:
        inputs: files, directories, glob patterns (``**`` recurses), or ``-`` for stdin.
        include: basename patterns (``*.py``); when given, files found in directories and
            globs must match one of them (files named explicitly are always taken).
        exclude: path patterns (``*/site-packages/*``); files found in directories and globs
            that match one of them are skipped.

    Raises:
        FileNotFoundError: an input does not exist or a glob matches nothing.
    """
    excluded, included = _any_of(exclude), _any_of(include)

    def wanted(path: str) -> bool:
        if excluded is not None and excluded(path):
            return False
        return included is None or included(os.path.basename(path)) is not None

    for item in inputs:
        if item == "-":
            yield item
        elif os.path.isdir(item):
            for root, dirs, files in os.walk(item):
                # Prune excluded directories instead of walking them (e.g. site-packages).
                dirs[:] = sorted(d for d in dirs if excluded is None or not excluded(os.path.join(root, d, "")))
                for name in sorted(files):
                    if included is not None and included(name) is None:
                        continue  # checked before joining: most files of a tree are not wanted
                    path = os.path.join(root, name)
                    if (excluded is None or excluded(path) is None) and os.path.isfile(path):
                        yield path
        elif os.path.isfile(item):
            yield item
        elif any(c in item for c in "*?["):
            matches = sorted(p for p in glob.glob(item, recursive=True) if wanted(p) and os.path.isfile(p))
            if not matches:
                raise FileNotFoundError(f"no files match {item!r}")
            yield from matches
        else:
            raise FileNotFoundError(f"input not found: {item}")


def _any_of(patterns: Sequence[str]) -> Callable[[str], re.Match | None] | None:
    """One compiled matcher for several ``fnmatch`` patterns (None for none): one regex call per path."""
    if not patterns:
        return None
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns)).match


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


def is_binary(data: bytes) -> bool:
    """True for content that is not text: a NUL byte in its first 8 KiB (git's rule)."""
    return b"\0" in data[:_BINARY_PROBE]


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
        if path == "-":
            yield sys.stdin.buffer.read()
        else:
            with open_input(path) as f:
                yield f.read()
    elif fmt == "jsonl":
        stream: BinaryIO | io.BufferedIOBase = sys.stdin.buffer if path == "-" else open_input(path)
        try:
            for lineno, line in enumerate(stream, 1):
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
    return obj[field]


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


def pack(inputs: Sequence[str], output: str, *, tokenizer="bytes", shard_size: int = DEFAULT_SHARD_SIZE,
         include: Sequence[str] = (), exclude: Sequence[str] = (), fmt: str = "auto", text_field: str = "text", append: bool = False,
         eos_id: int | None = None, on_progress: Callable[[int, int, int], None] | None = None,
         lock_timeout: float = 0.0, include_binary: bool = False,
         on_skip: Callable[[str], None] | None = None) -> Manifest:
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

    Returns:
        The dataset's manifest. Nothing under ``output`` opens as a dataset until this returns.

    Raises:
        FileNotFoundError, ValueError: bad inputs (named). DatasetExistsError: ``output`` holds a
        dataset and ``append`` is False. DtypeMismatchError: appending with another tokenizer.
        DatasetLockedError: another pack/append into ``output`` is running.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown input format {fmt!r}; choose one of {', '.join(FORMATS)}")
    tok = load_tokenizer(tokenizer, eos_id=eos_id)
    files = list(iter_input_files(inputs, include, exclude))  # fail on a missing input before writing anything
    if not files:
        raise FileNotFoundError(f"no input files in {list(inputs)} (include={list(include)})")
    with DatasetWriter(os.path.join(output, MANIFEST_NAME), vocab_size=tok.vocab_size, eos_id=tok.eos_id,
                       tokenizer=tok.identity, shard_size=shard_size, append=append,
                       lock_timeout=lock_timeout) as writer:
        batches = _tokenized_batches(files, tok, fmt, text_field, include_binary, on_skip)
        reader = Prefetcher(batches, _QUEUE_DEPTH, name="roxxel-pack-reader")
        try:
            for docs, nbytes in reader:
                before = writer.num_tokens
                writer.add_documents(docs)
                if on_progress is not None:
                    on_progress(len(docs), writer.num_tokens - before, nbytes)
        finally:
            reader.close()
    return Manifest.load(writer.manifest_path)
