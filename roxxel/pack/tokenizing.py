"""Documents -> token batches for the writer: tokenized in batches on the reader thread, or by a
pool of processes (``--jobs``) whose results come back in input order.
"""

from __future__ import annotations

import collections
import itertools
import logging
import multiprocessing
import os
import signal
import sys
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Callable, Iterator

import numpy as np

from roxxel.format.dataset_writer import join_documents
from roxxel.format.errors import for_cli
from roxxel.format.layout import token_dtype_for_vocab
from roxxel.pack.inputs import is_binary, iter_documents
from roxxel.tokenizers import ByteTokenizer, EosInTextError, HFTokenizer

log = logging.getLogger("roxxel.pack")  # one logger for the whole command: its name is what users filter on

_BATCH = 64  # documents tokenized together (lets the Rust tokenizer parallelise)
_TASK_FILES, _TASK_BYTES = 64, 4 << 20  # a pool worker's task: up to 64 input files or 4 MiB, whichever first
_TASKS_AHEAD = 2  # tasks queued per worker: enough to keep it busy, bounded memory


Batch = tuple[np.ndarray, np.ndarray, int]  # joined tokens, document lengths with EOS, input bytes


def tokenized_batches(
    inputs, tok, fmt, text_field, include_binary=False, on_skip: Callable[[str], None] | None = None
) -> Iterator[tuple[list[np.ndarray], int]]:
    """The documents of ``inputs`` tokenized ``_BATCH`` at a time: (their token arrays, their input bytes).

    Binary content is skipped (``on_skip(path)``) unless ``include_binary``; a tokenizer other
    than the byte one gets UTF-8 text and refuses a file that is not (ValueError naming it).
    """
    batch: list = []
    where: list[tuple[str, int]] = []  # each document's file and number in it, for an error
    nbytes = 0
    is_bytes = isinstance(tok, ByteTokenizer)
    for path in inputs:
        for number, doc in enumerate(iter_documents(path, fmt, text_field), 1):
            if isinstance(doc, bytes) and not include_binary and is_binary(doc):
                log.warning("skipping %s: binary content (pass --include-binary to pack it)", path)
                if on_skip is not None:
                    on_skip(path)
                continue
            if not is_bytes and isinstance(doc, bytes):
                try:
                    doc = doc.decode("utf-8")
                except UnicodeDecodeError:
                    raise ValueError(
                        f"{path} is not UTF-8 text; use --tokenizer bytes, or leave it out with --exclude"
                    ) from None
            nbytes += len(doc)
            batch.append(doc)
            where.append((path, number))
            if len(batch) == _BATCH:
                yield _encoded(tok, batch, where), nbytes
                batch, where, nbytes = [], [], 0
    if batch:
        yield _encoded(tok, batch, where), nbytes


def _encoded(tok: ByteTokenizer | HFTokenizer, batch: list, where: list[tuple[str, int]]) -> list[np.ndarray]:
    """``tok.encode_batch(batch)``; a document whose text encodes to the EOS id is refused naming its
    file and its number there (``where``)."""
    try:
        return tok.encode_batch(batch)
    except EosInTextError as e:
        path, number = where[e.index]
        named = f"{path}, document {number}: {e}"
        raise for_cli(EosInTextError(named, e.index), f"{path}, document {number}: {e.cli_message}") from None  # type: ignore[attr-defined]


def split_tasks(files: list[str]) -> list[list[str]]:
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


_worker_tokenizer: ByteTokenizer | HFTokenizer | None = None


def start_pool(tok: ByteTokenizer | HFTokenizer, jobs: int) -> ProcessPoolExecutor:
    """``jobs`` worker processes that each hold ``tok``, started now.

    Workers are forked (quick to start, ``tok`` inherited), unless JAX is loaded: its threads
    make a fork unsafe, so they come from a fresh forkserver process instead.
    """
    method = "forkserver" if "jax" in sys.modules else "fork"
    pool = ProcessPoolExecutor(
        jobs,
        mp_context=multiprocessing.get_context(method),
        initializer=_set_worker_tokenizer,
        initargs=(tok, os.getpid() if method == "fork" else None),
    )
    try:
        pool.submit(int).result()  # with fork, the first task starts every worker
    except BaseException:  # e.g. a SIGTERM's exception while the workers start: none may outlive us
        end_workers(pool)
        raise
    return pool


def end_workers(pool: ProcessPoolExecutor) -> None:
    """Stop ``pool``'s worker processes now (SIGTERM) and shut it down without waiting.

    ``shutdown`` alone is not enough when the pool was interrupted while it started: until its
    manager thread runs, nothing tells the workers to stop, they wait for work forever, and
    the interpreter's exit then waits for them (multiprocessing joins its children at exit): a
    hang. Python 3.14 has ``ProcessPoolExecutor.terminate_workers``; 3.11 keeps the workers in
    ``_processes``.
    """
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        process.terminate()
    pool.shutdown(wait=False, cancel_futures=True)


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


def joined(docs: list[np.ndarray], tok: ByteTokenizer | HFTokenizer, nbytes: int) -> Batch:
    """Documents joined in the dataset's dtype with their EOS tokens (one buffer to hand over), range-checked."""
    if not isinstance(tok, ByteTokenizer):  # byte ids always fit; a tokenizer's ids should, but check
        bad = next((d for d in docs if d.size and d.max() >= tok.vocab_size), None)
        if bad is not None:
            raise ValueError(f"the tokenizer returned id {int(bad.max())}, outside its vocabulary of {tok.vocab_size}")
    return (*join_documents(docs, token_dtype_for_vocab(tok.vocab_size), tok.eos_id), nbytes)


def _tokenize_files(files: list[str], fmt: str, text_field: str, include_binary: bool) -> tuple[Batch, list[str]]:
    """In a pool worker: the documents of ``files`` joined (see :func:`joined`), and the binary files skipped."""
    assert _worker_tokenizer is not None, "pool worker started without its tokenizer"
    docs: list[np.ndarray] = []
    nbytes = 0
    skipped: list[str] = []
    for batch, n in tokenized_batches(files, _worker_tokenizer, fmt, text_field, include_binary, skipped.append):
        docs.extend(batch)
        nbytes += n
    return joined(docs, _worker_tokenizer, nbytes), skipped


def pooled_batches(
    pool: ProcessPoolExecutor,
    tasks: list[list[str]],
    options: tuple[str, str, bool],
    jobs: int,
    on_skip: Callable[[str], None] | None,
) -> Iterator[Batch]:
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
