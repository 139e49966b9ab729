"""The writer's two background threads: checksums of the data being written, and the fsyncs that
make shards durable while the next one is written.
"""

from __future__ import annotations

import os
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Protocol

_WRITEBACK_BYTES = 16 << 20  # a shard's bytes between two background writebacks (see _BackgroundSync)
_CHECKSUMS_AHEAD = 8  # writes a background checksum thread may lag behind (bounds the memory they hold)


class SyncedShard(Protocol):
    """What :class:`_BackgroundSync` needs of a shard being written (a
    :class:`~roxxel.format.shard_writer.ShardWriter`): named here so that this module does not
    import the writer, which takes a :class:`_BackgroundChecksums`."""

    def flush_to_os(self) -> int:
        """Hand the buffered bytes to the OS; returns the file's descriptor."""
        ...

    def finish(self, sync: bool = True) -> Any:
        """Write what ends the shard; with ``sync=False`` leave it open for :meth:`sync`."""
        ...

    def sync(self) -> None:
        """fsync and close a finished shard."""
        ...


class _BackgroundChecksums:
    """Hashes and block-checksums shard data on one background thread, in the order it was written.

    SHA-256 (``hashlib``) releases the GIL while it hashes a buffer, so the thread runs on a
    second core while the writer's thread writes and its caller reads the next input. The
    buffers handed over must not change until they are checksummed: :meth:`wait` returns
    once they are. At most ``_CHECKSUMS_AHEAD`` writes wait their turn (:meth:`submit` blocks
    beyond that), which bounds the memory they hold. An error is re-raised by the next
    :meth:`submit` or :meth:`wait`.
    """

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="roxxel-checksum")  # its thread starts on first use
        self._pending: deque[Future] = deque()

    def submit(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` on the thread after everything submitted before it."""
        while len(self._pending) >= _CHECKSUMS_AHEAD:
            self._pending.popleft().result()
        self._pending.append(self._pool.submit(fn, *args))

    def wait(self) -> None:
        """Block until every submitted checksum is done; raise the first error."""
        while self._pending:
            self._pending.popleft().result()

    def close(self) -> None:
        """Drop the checksums not started (for an abort: errors ignored) and stop the thread."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._pending.clear()


class _BackgroundSync:
    """Makes a writer's shards durable on one background thread while it goes on writing.

    The data of the shard being written is handed to the disk (``fdatasync``) every
    ``_WRITEBACK_BYTES``, so that its final ``fsync`` waits for little (not with
    ``periodic=False``: on GCS FUSE every ``fsync`` uploads the whole file so far, so a
    shard would be sent 16 times over); a full shard is fsynced and closed here while the
    next one is written. Tasks run in the order given, so
    a shard's descriptor is closed only after its last writeback. :meth:`wait` returns once
    everything is durable and re-raises the first error (a failed writeback included: the
    kernel reports a lost write once); the writer renames no shard before that, so a crash
    still never leaves a shard that looks valid.
    """

    def __init__(self, periodic: bool = True) -> None:
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="roxxel-fsync")  # its thread starts on first use
        self._tasks: list[Future] = []
        self._unsynced = 0  # bytes written to the current shard since its last writeback
        self._periodic = periodic

    def wrote(self, shard: SyncedShard, nbytes: int) -> None:
        """Count ``nbytes`` written to ``shard``; past ``_WRITEBACK_BYTES``, start writing them back."""
        self._unsynced += nbytes
        if (
            self._periodic and self._unsynced >= _WRITEBACK_BYTES and all(t.done() for t in self._tasks)
        ):  # one at a time
            self._raise_errors()
            self._tasks.append(self._pool.submit(os.fdatasync, shard.flush_to_os()))
            self._unsynced = 0

    def finish(self, shard: SyncedShard) -> None:
        """Finish ``shard`` here and make it durable (fsync, close) in the background."""
        shard.finish(sync=False)
        self._tasks.append(self._pool.submit(shard.sync))
        self._unsynced = 0

    def wait(self) -> None:
        """Block until every task is done; raise the first error."""
        for t in self._tasks:
            t.exception()
        self._raise_errors()

    def _raise_errors(self) -> None:
        done, self._tasks = [t for t in self._tasks if t.done()], [t for t in self._tasks if not t.done()]
        for t in done:
            t.result()

    def close(self) -> None:
        """Wait for every task (errors ignored: for an abort) and stop the thread."""
        self._pool.shutdown(wait=True)
        self._tasks = []
