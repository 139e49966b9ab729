"""The original Roxxel writing API (``Roxxel(path).write(...)``), producing the current format."""

from __future__ import annotations

import itertools
import os
import shutil
from typing import Any, Iterable, Iterator

import numpy as np

from roxxel.format import layout
from roxxel.format.atomic import commit, temp_name
from roxxel.format.dataset_writer import DEFAULT_SHARD_SIZE, DatasetWriter
from roxxel.format.errors import DatasetExistsError
from roxxel.format.manifest import MANIFEST_NAME, Manifest
from roxxel.tokenizers import ByteTokenizer, EosInTextError, load_tokenizer


def write_dataset(
    path: str,
    documents: Iterable,
    *,
    separator: bytes | int | None = None,
    block_size: int | None = None,
    max_shard_bytes: int | None = None,
    dtype=None,
    tokenizer: Any = None,
    eos_id: int | None = None,
    vocab_size: int | None = None,
    append: bool = False,
) -> Manifest | None:
    """Pack ``documents`` at ``path``.

    Where the data goes:
        * ``path`` ends in ``.rox``, no ``max_shard_bytes``: one shard file at ``path``.
        * ``path`` ends in ``.rox`` with ``max_shard_bytes``: shards ``<stem>_0000.rox``, ... and
          the manifest ``<stem>.dataset.json`` (the original's shard names).
        * otherwise ``path`` is a dataset directory: ``shard-00000.rox``, ... and ``dataset.json``.

    Args:
        documents: strings, bytes, integer arrays or lists of token ids; one per document.
        separator: appended after every document: a token id, or bytes (a single byte
            becomes the EOS id; several bytes are appended as tokens). Exclusive with ``tokenizer``.
        block_size: accepted for compatibility and ignored: the current format stores
            documents unpadded, and the streamer chooses its own chunk size.
        max_shard_bytes: roll over to a new shard past this size (default 256 MiB for directories).
        dtype: token dtype; signed requests map to the unsigned type of the same width. Default:
            from the tokenizer's vocabulary, ``uint8`` for text/bytes, else the first array's
            dtype: a ``float16``/``bfloat16``/``float32`` array makes a float dataset (detected,
            as the original did; no separator, tokenizer or EOS then), a ``float64`` one a
            ``float32`` dataset. Every float array is then cast to that dtype only where each of
            its values is kept: one that would round or overflow to inf is refused, naming the
            document. With ``dtype=`` given, values it rounds are rounded (said once in a
            warning); values beyond its range are still refused.
        tokenizer: ``"bytes"``, a ``tokenizer.json`` path or a ``tokenizers.Tokenizer``; strings are
            encoded with it and its EOS id ends every document.
        eos_id, vocab_size: set them explicitly (e.g. for pre-tokenized arrays).
        append: add to an existing dataset (directory or sharded prefix) instead of refusing.

    Returns:
        The manifest, or None for a single-file write.

    Raises:
        ValueError: both ``separator`` and ``tokenizer``; a glob in ``path``; no documents.
        DatasetExistsError: something is already at ``path`` and ``append`` is False.
        DtypeMismatchError: a token that does not fit; appending with different properties.
    """
    if tokenizer is not None and separator is not None:
        raise ValueError("pass either tokenizer= (its EOS id ends each document) or separator=, not both")
    if any(c in path for c in "*?["):
        raise ValueError(f"cannot write to a glob pattern: {path!r}; name a file or a directory")
    documents = iter(documents)
    tail = np.zeros(0, np.uint8)
    tok = load_tokenizer(tokenizer, eos_id=eos_id) if tokenizer is not None else None
    if tok is not None:
        eos_id, vocab_size, ident = tok.eos_id, tok.vocab_size, tok.identity

        def encode(d, k=0):
            if isinstance(d, bytes) and not isinstance(tok, ByteTokenizer):
                d = d.decode("utf-8")
            try:
                return tok.encode(d) if isinstance(d, (str, bytes)) else d
            except EosInTextError as e:
                raise EosInTextError(f"document {k}: {e}", k) from None
    else:
        ident = None
        if isinstance(separator, (bytes, bytearray)):
            if len(separator) == 1:
                eos_id = separator[0]
            elif separator:
                tail = np.frombuffer(bytes(separator), np.uint8)
        elif separator is not None:
            eos_id = int(separator)

        def encode(d, k=0):
            return d.encode("utf-8") if isinstance(d, str) else d

    first, documents = _peek(documents)
    if first is None:
        raise ValueError(f"no documents to write to {path}")
    round_floats = dtype is not None  # asked for: a float that dtype rounds is rounded (said once)
    if dtype is None and vocab_size is None:
        dtype = _default_dtype(encode(first), eos_id)
    if (
        dtype is not None
        and not layout.shard_dtype(layout.normalize_dtype(dtype)).eos_allowed
        and (eos_id is not None or tail.size)
    ):
        raise ValueError(
            f"float arrays ({np.dtype(dtype).name}) have no end-of-document token: drop separator= / "
            "tokenizer= / eos_id= (the shard's document index keeps the arrays apart)"
        )
    docs = (_with_tail(encode(d, k), tail) for k, d in enumerate(documents))
    opts = dict(dtype=dtype, vocab_size=vocab_size, eos_id=eos_id, tokenizer=ident, round_floats=round_floats)

    if path.endswith(".rox") and max_shard_bytes is None:
        _write_single_shard(path, docs, opts, append)
        return None
    if path.endswith(".rox") and max_shard_bytes is not None:
        stem = path[:-4]
        writer = DatasetWriter(
            stem + ".dataset.json",
            shard_pattern=os.path.basename(stem) + "_{:04d}.rox",
            shard_size=max_shard_bytes,
            append=append,
            **opts,
        )
    else:
        writer = DatasetWriter(
            os.path.join(path, MANIFEST_NAME), shard_size=max_shard_bytes or DEFAULT_SHARD_SIZE, append=append, **opts
        )
    with writer:
        writer.add_documents(docs)
    return Manifest.load(writer.manifest_path)


def _write_single_shard(path: str, docs: Iterator, opts: dict, append: bool) -> None:
    if append:
        raise ValueError(
            f"append needs a dataset with a manifest; write to a directory (or pass max_shard_bytes) instead of {path}"
        )
    if os.path.exists(path):
        raise DatasetExistsError(f"{path} already exists; remove it or write to a new path")
    workdir = temp_name(path) + ".d"
    try:
        with DatasetWriter(os.path.join(workdir, MANIFEST_NAME), shard_size=2**63, **opts) as writer:
            writer.add_documents(docs)
        commit(os.path.join(workdir, "shard-00000.rox"), path)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return None


def _peek(it: Iterator) -> tuple[Any, Iterator]:
    for first in it:
        return first, itertools.chain([first], it)
    return None, it


def _default_dtype(first, eos_id: int | None) -> np.dtype:
    if isinstance(first, (bytes, bytearray, memoryview)):
        return np.dtype(np.uint8) if eos_id is None or eos_id < 256 else np.dtype(np.uint16)
    dtype = np.asarray(first).dtype
    if layout.is_float(dtype) and dtype.name not in layout.FLOAT_DTYPES:
        return np.dtype(np.float32)  # float64: stored as float32 where every value is kept (else refused)
    return layout.normalize_dtype(dtype)  # float16/bfloat16/float32 kept


def _with_tail(doc, tail: np.ndarray):
    if not tail.size:
        return doc
    arr = np.frombuffer(doc, np.uint8) if isinstance(doc, (bytes, bytearray)) else np.asarray(doc)
    return np.concatenate([arr, tail.astype(arr.dtype)])
