"""What one input holds: its bytes (``.gz``/``.bz2``/``.xz``/``.zst`` decompressed), its format (text,
JSONL, Parquet) and the documents in it; binary content by git's rule.
"""

from __future__ import annotations

import bz2
import io
import json
import lzma
import re
import sys
import zlib
from typing import Any, BinaryIO, Callable, Iterator

FORMATS = ("auto", "text", "jsonl", "parquet")
_JSONL_SUFFIXES = (".jsonl", ".ndjson")
_KINDS = {".gz": "gzip", ".bz2": "bzip2", ".xz": "xz", ".zst": "Zstandard", ".zstd": "Zstandard"}
_COMPRESSED = tuple(_KINDS)
_BINARY_PROBE = 8192  # like git: a NUL byte in the first 8 KiB marks a binary file
_CHUNK = 1 << 20  # decompressed bytes buffered for a streamed input (JSONL)
_READ = 1 << 17  # compressed bytes read at a time from it: what it holds in memory is this times its ratio


def open_input(path: str) -> io.BufferedIOBase:
    """Open an input for binary reading, decompressing ``.gz`` (gzip), ``.bz2`` (bzip2), ``.xz``
    and ``.zst``/``.zstd`` (Zstandard).

    A compressed input is read whole, every frame of it (gzip members, bzip2 and xz streams,
    Zstandard frames, as ``cat a.gz b.gz`` or a parallel compressor makes them), and must end
    complete: a read that reaches its end inside a frame, or finds data after the last frame
    that is not one, raises ``ValueError`` naming the file ("not a complete ... file"); so does
    an empty file, which holds no frame.

    Raises:
        ImportError: a ``.zst`` input without the ``zstandard`` package (``pip install 'roxxel[zstd]'``).
    """
    for suffix, kind in _KINDS.items():
        if path.endswith(suffix):
            return io.BufferedReader(_Frames(path, kind, *_decompressor(path, kind)), _CHUNK)
    return open(path, "rb")


def read_input(path: str) -> bytes:
    """The whole content of an input, decompressed as by :func:`open_input`.

    Raises:
        ValueError: a compressed input that is damaged or cut short (names the file).
    """
    if path.endswith(_COMPRESSED):
        with open_input(path) as f:
            return f.read()
    with open(path, "rb", buffering=0) as raw:  # no buffer: one sized read of the whole file
        return raw.read()


def _decompressor(path: str, kind: str) -> tuple[Callable[[], Any], tuple[type[Exception], ...]]:
    """A maker of the decompressor of one frame of ``kind`` (each has ``decompress(data)``, ``eof``:
    its frame ended, and ``unused_data``: what followed the frame's end), and the errors it raises
    for data that is not of ``kind``."""
    if kind == "gzip":
        return (lambda: zlib.decompressobj(wbits=31)), (zlib.error,)  # one member; checks its CRC-32 and length
    if kind == "bzip2":
        return bz2.BZ2Decompressor, (OSError,)  # "Invalid data stream": raised by decompress, which does no I/O
    if kind == "xz":
        return lzma.LZMADecompressor, (lzma.LZMAError,)
    try:
        import zstandard
    except ImportError as e:
        raise ImportError(f"{path}: reading .zst input needs zstandard: pip install 'roxxel[zstd]'") from e
    # One frame per object (python-zstandard's stream reader returns what it decoded, and raises
    # nothing, when the input ends inside a frame: a cut file read as its prefix).
    return zstandard.ZstdDecompressor().decompressobj, (zstandard.ZstdError,)


class _Frames(io.RawIOBase):
    """The decompressed content of a compressed file of one or more frames, which must end complete.

    Zero bytes between frames and after the last are read past (xz's stream padding, tape blocks);
    anything else there must be a frame.
    """

    def __init__(self, path: str, kind: str, decompressor: Callable[[], Any], errors: tuple[type[Exception], ...]):
        self._file = open(path, "rb")
        self._path, self._kind, self._new, self._errors = path, kind, decompressor, errors
        self._frame: Any = None  # the decompressor of the frame being read, None between frames
        self._frames = 0  # frames begun
        self._out = memoryview(b"")  # decompressed bytes not yet returned

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while not self._out:
            chunk = self._file.read(_READ)
            if not chunk:
                self._check_end()
                return 0
            self._out = memoryview(self._decompress(chunk))
        n = min(len(b), len(self._out))
        b[:n] = self._out[:n]
        self._out = self._out[n:]
        return n

    def readall(self) -> bytes:
        rest = self._decompress(self._file.read())
        self._check_end()
        if self._out:
            rest, self._out = bytes(self._out) + rest, memoryview(b"")
        return rest

    def _decompress(self, data: bytes) -> bytes:
        out = []
        while data:
            if self._frame is None:
                data = data.lstrip(b"\0")
                if not data:
                    break
                self._frame, self._frames = self._new(), self._frames + 1
            try:
                out.append(self._frame.decompress(data))
            except self._errors as e:
                raise self._damaged(str(e)) from None
            if self._frame.eof:
                data, self._frame = self._frame.unused_data, None
            else:
                data = b""
        return b"".join(out)

    def _check_end(self) -> None:
        if self._frame is not None:
            raise self._damaged("it ends inside a compressed frame: cut short")
        if not self._frames:
            raise self._damaged("the file is empty" if self._file.tell() == 0 else "it holds only zero bytes")

    def _damaged(self, why: str) -> ValueError:
        return ValueError(
            f"{self._path}: not a complete {self._kind} file ({why}); re-copy it, or leave it out with --exclude"
        )

    def close(self) -> None:
        if not self.closed:
            self._file.close()
        super().close()


def is_binary(data: bytes | bytearray, start: int = 0, end: int | None = None) -> bool:
    """True for content that is not text: a NUL byte in its first 8 KiB (git's rule).

    ``start``/``end`` (byte offsets) pick the content out of a larger buffer (default: all of ``data``).
    """
    stop = start + _BINARY_PROBE if end is None else min(end, start + _BINARY_PROBE)
    return data.find(b"\0", start, stop) != -1  # no copy of the probed bytes


def detect_format(path: str) -> str:
    """``jsonl`` for .jsonl/.ndjson, ``parquet`` for .parquet, else ``text`` (one file = one document).

    A compression suffix (``.gz``, ``.bz2``, ``.xz``, ``.zst``) is looked through: ``x.jsonl.gz`` is JSONL.
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

    Every line or row is a document, in order, so document k is line or row k (blank JSONL
    lines are not documents). Text that is missing is refused, not guessed: a null, a number
    or any other value that is not a string, in JSONL or Parquet, is an error naming the line or
    row; an empty string is an empty document.

    Raises:
        ValueError: a JSONL line that is not an object with a string ``text_field`` (names file and
            line), a Parquet column that is not text or a null in it (names file and row).
        ImportError: Parquet input without pyarrow (``pip install 'roxxel[parquet]'``).
    """
    if fmt == "auto":
        fmt = "text" if path == "-" else detect_format(path)
    if fmt == "text":
        yield sys.stdin.buffer.read() if path == "-" else read_input(path)
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
        import pyarrow as pa

        try:
            yield from _parquet_texts(path, pq.ParquetFile(path), text_field)
        except pa.ArrowException as e:  # pyarrow's messages name no file: a cut or damaged one, or not Parquet
            raise ValueError(
                f"{path}: cannot be read as Parquet ({e}); re-copy it, or leave it out with --exclude"
            ) from None
    else:
        raise ValueError(f"unknown input format {fmt!r}; choose one of {', '.join(FORMATS)}")


def _jsonl_text(line: bytes, field: str, path: str, lineno: int) -> str:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
    text = obj.get(field) if isinstance(obj, dict) else None
    if not isinstance(text, str):
        raise ValueError(f"{path}:{lineno}: {_not_text(obj, field)}")
    bad = _SURROGATE.search(text)
    if bad:  # JSON can escape half of a UTF-16 pair ("\ud800"); no UTF-8 text, so no tokenizer, holds one
        raise ValueError(
            f"{path}:{lineno}: the text holds an unpaired surrogate ({bad.group()!a}), which is not "
            "Unicode text; fix the line, or leave the file out with --exclude"
        )
    return text


def _not_text(obj: object, field: str) -> str:
    """Why a JSONL line's ``field`` is no text, and the fix."""
    if not isinstance(obj, dict):
        return f"the line is {_json_kind(obj)}, not an object with a field {field!r}; give each line an object"
    if field not in obj:
        fields = ", ".join(repr(k) for k in list(obj)[:8]) + (", ..." if len(obj) > 8 else "")
        return (
            f"the line has no field {field!r} (it has {fields or 'none'}); pass --text-field to name the text's field"
        )
    value = obj[field]
    if value is None:
        return f'the field {field!r} is null, not text; give the line a string ("" for an empty document) or drop it'
    return f"the field {field!r} is {_json_kind(value)}, not text; give the line a string, or pass --text-field"


def _json_kind(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return f"a number ({type(value).__name__})"
    if value is None:
        return "null"
    return "an object" if isinstance(value, dict) else "a list" if isinstance(value, list) else type(value).__name__


def _parquet_texts(path: str, pf: Any, field: str) -> Iterator[str | bytes]:
    """The cells of a Parquet file's column ``field``, one document per row: strings (or bytes,
    as a text file's); a column of another type, or a null cell, is refused."""
    import pyarrow as pa

    schema = pf.schema_arrow
    if field not in schema.names:
        raise ValueError(f"{path}: no column {field!r} (columns: {schema.names}); pass --text-field")
    kind = schema.field(field).type
    texts = kind.value_type if pa.types.is_dictionary(kind) else kind
    if not (
        pa.types.is_string(texts)
        or pa.types.is_large_string(texts)
        or pa.types.is_binary(texts)
        or pa.types.is_large_binary(texts)
        or _is_view(pa, texts)
    ):
        raise ValueError(
            f"{path}: column {field!r} holds {kind}, not text; pass --text-field with a string column "
            f"(columns: {schema.names})"
        )
    row = 0
    for batch in pf.iter_batches(columns=[field]):
        column = batch.column(0)
        if column.null_count:
            first = row + column.is_null().to_pylist().index(True)
            raise ValueError(
                f"{path}: row {first} (counting from 0) of column {field!r} is null, not text"
                f"{_nulls_in(pf, field)}; fill the nulls with '' to pack them as empty documents, or drop those rows"
            )
        yield from column.to_pylist()
        row += len(column)


def _nulls_in(pf: Any, field: str) -> str:
    """How many of the file's rows are null in ``field``, from its row groups' statistics ("" without them)."""
    meta = pf.metadata
    try:
        j = pf.schema_arrow.names.index(field)
        columns = [meta.row_group(i).column(j) for i in range(meta.num_row_groups)]
        if any(c.path_in_schema != field for c in columns):  # a nested column before it: leaves and fields differ
            return ""
        stats = [c.statistics for c in columns]
        nulls = sum(s.null_count for s in stats)  # AttributeError: a row group without statistics
    except (AttributeError, ValueError, IndexError):
        return ""
    return f" ({nulls:,} of its {meta.num_rows:,} rows are)"


def _is_view(pa: Any, kind: Any) -> bool:
    """``string_view``/``binary_view`` (pyarrow 16 on)."""
    return any(getattr(pa.types, f"is_{v}_view", lambda _: False)(kind) for v in ("string", "binary"))


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
