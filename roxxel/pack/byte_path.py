"""The byte-level path: text files read straight into reused batch buffers and widened to
byte tokens with their EOS, with no tokenizer and no pool (the same dataset as
:func:`~roxxel.pack.tokenizing.tokenized_batches` with a byte tokenizer, for a fraction of its CPU time).
"""

from __future__ import annotations

import logging
import os
import queue
from typing import Callable, Iterable, Iterator, NamedTuple, Sequence

import numpy as np

from roxxel.pack.inputs import is_binary, iter_documents, reads_whole
from roxxel.pack.tokenizing import Batch

log = logging.getLogger("roxxel.pack")  # one logger for the whole command: its name is what users filter on

BATCH_BYTES = 1 << 20  # input bytes per batch of the byte-level path (its 2 MiB of tokens stay in cache)


class Staged(NamedTuple):
    """A batch of documents' bytes as read, back to back, each followed by a slot for its EOS."""

    buf: bytearray
    used: int  # bytes of buf taken by the documents and their EOS slots
    ends: np.ndarray  # int64: each document's EOS slot
    nbytes: int  # input bytes


def byte_batches(
    files: Sequence[str],
    buffers: ByteBuffers,
    fmt: str,
    text_field: str,
    include_binary: bool,
    on_skip: Callable[[str], None],
) -> Iterator[Staged]:
    """The bytes of the documents of ``files``, in batches of about ``BATCH_BYTES`` bytes, to widen
    into byte-level tokens with :meth:`ByteBuffers.widen`.

    The same documents, in the same order, as :func:`~roxxel.pack.tokenizing.tokenized_batches` with a
    :class:`~roxxel.tokenizers.ByteTokenizer` (so the same dataset), for a fraction of its CPU time: a text
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
        if not reads_whole(path, fmt):
            docs = iter_documents(path, fmt, text_field)
        else:
            fd = open_(path, flags)
            try:
                size = fstat(fd).st_size
                full = batch.make_room(size + 2)  # its bytes, the byte that proves the end, the EOS slot
                if full is not None:
                    yield full
                pos = batch.pos
                n = readv(fd, [batch.view[pos : pos + size + 1]])
                if n != size:  # grown or shrunk since fstat, a short read, or no size from fstat (/proc)
                    docs = [bytes(batch.view[pos : pos + n]) + _read_rest(fd)]
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
            batch.view[batch.pos : batch.pos + len(doc)] = doc
            batch.took(len(doc))
    if batch.ends:
        yield batch.staged()


class _Batch:
    """The batch :func:`byte_batches` is filling: documents back to back in ``buf``, each
    followed by its EOS slot."""

    def __init__(self, buffers: ByteBuffers):
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


class ByteBuffers:
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
