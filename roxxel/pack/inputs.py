"""What one input holds: its bytes (``.gz``/``.zst`` decompressed), its format (text, JSONL,
Parquet) and the documents in it; binary content by git's rule.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import re
import sys
import zlib
from typing import BinaryIO, Iterable, Iterator

FORMATS = ("auto", "text", "jsonl", "parquet")
_JSONL_SUFFIXES = (".jsonl", ".ndjson")
_COMPRESSED = (".gz", ".zst", ".zstd")
_BINARY_PROBE = 8192  # like git: a NUL byte in the first 8 KiB marks a binary file


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
        raise ValueError(
            f"{path}: not a complete {kind} file ({e}); re-copy it, or leave it out with --exclude"
        ) from None


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
            path = path[: -len(suffix)]
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
        raise ValueError(
            f"{path}:{lineno}: the text holds an unpaired surrogate ({bad.group()!a}), which is not "
            "Unicode text; fix the line, or leave the file out with --exclude"
        )
    return text


_SURROGATE = re.compile("[\ud800-\udfff]")
_NOT_WHOLE = {
    "text": _COMPRESSED,
    "auto": _COMPRESSED + _JSONL_SUFFIXES + (".parquet",),
    "jsonl": ("",),
    "parquet": ("",),
}  # suffixes of files reads_whole refuses ("": every file)


def reads_whole(path: str, fmt: str) -> bool:
    """Whether ``path`` is read whole, as one document, straight from its file (no decompression or parsing)."""
    return path != "-" and not path.endswith(_NOT_WHOLE[fmt])
