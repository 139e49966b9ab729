"""``pack()``: inputs -> a dataset. Picks the path (byte-level, tokenized on a thread, or a
process pool), runs it on a reader thread ahead of the writer, and writes its batches in input order.
"""

from __future__ import annotations

import functools
import os
from typing import Callable, Iterator, Sequence

from roxxel.data.prefetch import Prefetcher
from roxxel.format.dataset_writer import DEFAULT_SHARD_SIZE, DatasetWriter
from roxxel.format.errors import for_cli
from roxxel.format.manifest import MANIFEST_NAME, Manifest
from roxxel.pack import byte_path
from roxxel.pack.byte_path import ByteBuffers, Staged, byte_batches
from roxxel.pack.inputs import FORMATS, reads_whole
from roxxel.pack.tokenizing import Batch, joined, pooled_batches, split_tasks, start_pool, tokenized_batches
from roxxel.pack.walk import is_dataset, iter_input_files
from roxxel.tokenizers import ByteTokenizer, load_tokenizer
from roxxel.wording import count

_QUEUE_DEPTH = 8  # tokenized batches ready ahead of the writer
_BYTE_QUEUE_DEPTH = 2  # byte-level batches ready ahead of it: few, so that they are still in the CPU's cache


def pack(
    inputs: Sequence[str],
    output: str,
    *,
    tokenizer="bytes",
    shard_size: int = DEFAULT_SHARD_SIZE,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    fmt: str = "auto",
    text_field: str = "text",
    append: bool = False,
    eos_id: int | None = None,
    on_progress: Callable[[int, int, int], None] | None = None,
    lock_timeout: float = 0.0,
    include_binary: bool = False,
    on_skip: Callable[[str], None] | None = None,
    jobs: int = 1,
) -> Manifest:
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
            Compressed inputs (``.gz``, ``.bz2``, ``.xz``, ``.zst``) are decompressed first, so they are not binary.
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
    # are read on one thread while this one writes and a third hashes (see byte_batches and
    # DatasetWriter's background_checksums).
    by_bytes = isinstance(tok, ByteTokenizer) and (jobs == 1 or all(reads_whole(f, fmt) for f in files))
    tasks = [] if by_bytes or jobs == 1 or "-" in files else split_tasks(files)  # stdin is read in this process
    jobs = min(jobs or os.cpu_count() or 1, len(tasks))  # no more processes than tasks (0, 1: no pool)
    # The pool starts before the dataset is opened, so its workers hold none of the writer's files or lock.
    pool = start_pool(tok, jobs) if jobs > 1 else None
    skipped: list[str] = []

    def skip(path: str) -> None:
        skipped.append(path)
        if on_skip is not None:
            on_skip(path)

    packed = 0
    try:
        with DatasetWriter(
            os.path.join(output, MANIFEST_NAME),
            vocab_size=tok.vocab_size,
            eos_id=tok.eos_id,
            tokenizer=tok.identity,
            shard_size=shard_size,
            append=append,
            lock_timeout=lock_timeout,
            background_checksums=True,
        ) as writer:
            buffers = ByteBuffers(writer.dtype, tok.eos_id, byte_path.BATCH_BYTES)
            batches: Iterator[Batch | Staged]
            if by_bytes:
                batches = byte_batches(files, buffers, fmt, text_field, include_binary, skip)
            elif pool is None:
                batches = (
                    joined(docs, tok, nbytes)
                    for docs, nbytes in tokenized_batches(files, tok, fmt, text_field, include_binary, skip)
                )
            else:
                batches = pooled_batches(pool, tasks, (fmt, text_field, include_binary), jobs, skip)
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
        return for_cli(
            ValueError(f"{problem}; check the inputs, fmt and text_field"),
            f"{problem}; check the inputs, --format and --text-field",
        )
    problem = (
        f"nothing to pack into {output}: every input was skipped as binary content "
        f"({count(len(skipped), 'file')}, e.g. {skipped[0]})"
    )
    return for_cli(
        ValueError(f"{problem}; pass include_binary=True to pack them as byte documents"),
        f"{problem}; pass --include-binary to pack them as byte documents",
    )


def _no_files_message(inputs: Sequence[str], include: Sequence[str], exclude: Sequence[str]) -> str:
    """Why no input file was found, in the command line's terms (only directories can come up empty)."""
    where = ", ".join(inputs)
    datasets = [d for d in inputs if os.path.isdir(d) and is_dataset(d)]
    if datasets:
        return (
            f"{datasets[0]} is a Roxxel dataset, not input text (its shards are packed already); "
            f"to add inputs to it, pack them with --append -o {datasets[0]}"
        )
    if include:
        patterns = " ".join(f"--include {p!r}" for p in include)
        return (
            f"no file in {where} matches {patterns}"
            + (" (after --exclude)" if exclude else "")
            + "; --include matches file names, e.g. '*.txt' (check the pattern, or leave it out to take every file)"
        )
    if exclude:
        return f"every file in {where} is excluded by --exclude; check the patterns"
    return f"no files in {where}: the directory is empty; pass files, directories with files, or globs"
