"""What both shard formats share: a lazily opened memory map, ``pread`` copies (one range or many), page
release, the check that a shard's file has not changed since it was opened, and storage errors named.

**A shard cannot change under a reader unnoticed.** Block checksums are checked on a block's
first read only, so a shard rewritten afterwards (same size, valid ids) would flow into
batches. Every read therefore compares the open descriptor's identity (``os.fstat``: size,
modification and change times, to the nanosecond) with the one it had when the shard was
opened, *after* copying the tokens and before they leave the read (the kernel moves a file's
modification time before a ``write`` changes its bytes, so a read that saw changed bytes
finds the changed time), at most every :data:`CHECK_SECONDS` per shard so that it costs
under 1% of the read path. The path itself (``os.stat``: device and inode) is looked up at
most every :data:`PATH_CHECK_SECONDS` per shard. A shard closed (LRU) and opened again is
compared with its first open. The window that remains is said in
:meth:`MappedFile.check_unchanged`.

**Storage errors name the shard and the mount.** An ``OSError`` from a read becomes a
:class:`~roxxel.format.errors.ShardReadError` naming the shard, the mount point and its file
system type, and whether a retry can help; a stale NFS handle (``ESTALE``) is answered by
reopening the shard once (compared with its first open: a shard replaced on the server is a
:class:`~roxxel.format.errors.ShardChangedError`) and reading again.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import stat
import time
from typing import BinaryIO, Callable, Iterator, TypeVar

import numpy as np

from roxxel.format.atomic import mount_of
from roxxel.format.blocks import BlockChecks
from roxxel.format.errors import RoxxelFormatError, ShardChangedError, ShardReadError, TruncatedShardError

CHECK_SECONDS = 0.05  # a shard's open file is compared (os.fstat) at most this often: see check_unchanged
PATH_CHECK_SECONDS = 1.0  # a shard's path is looked up (replaced? removed?) at most this often
Identity = tuple[int, int, int, int, int]  # st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns
_T = TypeVar("_T")
_NETWORK = {"nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "ceph", "lustre", "glusterfs", "beegfs", "gpfs", "virtiofs"}
_UNREACHABLE = {
    errno.ETIMEDOUT,
    errno.EHOSTDOWN,
    errno.EHOSTUNREACH,
    errno.ECONNRESET,
    errno.ECONNABORTED,
    errno.ENETDOWN,
    errno.ENETUNREACH,
    errno.EREMOTEIO,
}


def open_regular(path: str) -> BinaryIO:
    """Open ``path`` for binary reading, refusing anything but a regular file.

    The open does not block (a FIFO or device would wait for a writer forever); the type
    is checked on the opened descriptor, so a file swapped in between cannot slip through.

    Raises:
        FileNotFoundError: no such file.
        RoxxelFormatError: a directory, FIFO, socket or device.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = (
                "directory"
                if stat.S_ISDIR(mode)
                else "FIFO"
                if stat.S_ISFIFO(mode)
                else "socket"
                if stat.S_ISSOCK(mode)
                else "device"
            )
            raise RoxxelFormatError(f"{path}: is a {kind}, not a regular file; a shard must be a regular file", path)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def identity(st: os.stat_result) -> Identity:
    """What must not change while a shard is read: device, inode, size, modification and change times."""
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _when(ns: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ns // 10**9)) + f".{ns % 10**9:09d} UTC"


def changed_error(path: str, was: Identity, now: Identity | None) -> ShardChangedError:
    """The error for a shard whose file is no longer the one opened (``now`` None: the path is gone)."""
    if now is None:
        what = "removed or renamed away: its path names no file"
    elif now[:2] != was[:2]:
        what = f"replaced: the path names another file (device {was[0]}, inode {was[1]} -> device {now[0]}, inode {now[1]})"
    else:
        parts = [f"size {was[2]} -> {now[2]} bytes"] if now[2] != was[2] else []
        if now[3] != was[3]:
            parts.append(f"modified at {_when(now[3])}, last modified at {_when(was[3])} when opened")
        elif now[4] != was[4]:
            parts.append(
                f"status changed at {_when(now[4])} with its size and modification time as when opened: "
                "a chmod, chown or hard link, or a rewrite with its modification time put back"
            )
        what = "; ".join(parts)
    return ShardChangedError(
        f"{path}: changed while this process read it ({what}); its tokens may no longer be those of the run's "
        "earlier batches - restore the shard (or re-pack into a new directory) and start a new run, or resume this "
        "run if the change is meant (`roxxel verify` checks the shard)",
        path,
    )


def read_error(path: str, err: OSError, reopened: bool = False) -> ShardReadError:
    """A storage error of a read of ``path``, naming the shard, its mount and whether a retry can help."""
    mount, fstype = mount_of(path)
    where = f"on the mount {mount}" + (f" ({fstype})" if fstype else "")
    remote = (
        None
        if fstype is None
        else (fstype.split(".")[0] in _NETWORK or fstype.startswith("fuse") and fstype != "fuseblk")
    )
    code = err.errno if err.errno is not None else errno.EIO
    name = errno.errorcode.get(code, str(code))
    if code == errno.ESTALE:
        what = "stale file handle (ESTALE)"
        advice = (
            "also after reopening the shard once: the server no longer knows the file (deleted or replaced "
            "there, or its export changed) - check the dataset on the server (`roxxel verify`) and remount; a "
            "restart (from the checkpoint) can help once the mount is healthy"
            if reopened
            else "the server no longer knows the file: a restart reopens it, which can help"
        )
    elif code == errno.EIO:
        what = "input/output error (EIO)"
        advice = {
            True: "the storage behind a network or FUSE mount failed the read, often for a while only - the job "
            "is restarted from its checkpoint; if it repeats, look at the mount's server or daemon logs",
            False: "the local device failed the read (see `dmesg`): a restart will likely hit it again - run "
            "`roxxel verify` on the dataset and re-copy the shard",
            None: "a network or FUSE mount often recovers (the job is restarted from its checkpoint); a local "
            "device that fails reads does not (see `dmesg`, re-copy the shard)",
        }[remote]
    elif code == errno.ENOTCONN:
        what = "transport endpoint not connected (ENOTCONN)"
        advice = (
            "the FUSE daemon serving the mount is gone - remount it; a restart on a node with a healthy mount can help"
        )
    elif code in _UNREACHABLE:
        what = f"no answer from the storage ({name})"
        advice = (
            "the network storage did not answer, usually for a while only - the job is restarted from its checkpoint"
        )
    else:
        what = f"{os.strerror(code).lower()} ({name})"
        advice = "a restart can help only if the storage recovers"
    return ShardReadError(code, f"{path}: {what} reading the shard {where}: {advice}", path, mount, fstype)


def _of_storage(err: OSError) -> bool:
    """An error from a read (the OS names no file for it), not one of Roxxel's own."""
    return err.errno is not None and err.filename is None and not isinstance(err, ShardReadError)


@contextlib.contextmanager
def storage_errors(path: str) -> Iterator[None]:
    """Turn an ``OSError`` of a read of ``path`` (EIO, ESTALE, ...) into a :class:`ShardReadError` naming it."""
    try:
        yield
    except OSError as e:
        if not _of_storage(e):
            raise
        raise read_error(path, e) from e


class MappedFile:
    """Base of :class:`~roxxel.format.shard.Shard` and :class:`~roxxel.format.legacy.LegacyShard`.

    Subclasses set ``path``, ``dtype`` and ``data_offset``, and list their cached views in
    ``_VIEWS`` so :meth:`close` can drop them.

    The read handle: what a reader outside this package (the streamer's batched reads,
    :mod:`roxxel.data.reader` and :mod:`roxxel.data.map_rows`) may use to read token bytes
    itself rather than through :meth:`read_pieces` or :meth:`pread_into`, the way a
    Grain transformation reads its parent only through the parent's protocol:

    - ``data_offset`` (int, bytes): where token 0 starts in the file; token ``t`` of a
      dtype of ``itemsize`` bytes is at byte ``data_offset + t * itemsize``.
    - :meth:`descriptor`: the open file descriptor (reopened, and compared with the first
      open, after the dataset's LRU closed it).
    - :meth:`with_descriptor`: ``op(descriptor)`` with the storage's errors named and a stale
      handle reopened once: the way to run a check or read that must say which shard failed.
    - :attr:`block_checks`: the block checksums and which blocks this process has checked
      (None for a shard that stores none); a reader that copies bytes itself checks the
      blocks it copied through it before the tokens leave.
    - :meth:`native_map` / :attr:`is_mapped`: the whole file mapped for native gathers.
    - :meth:`check_unchanged`: after every read, before its tokens leave.
    """

    _VIEWS: tuple[str, ...] = ()
    path: str
    dtype: np.dtype
    data_offset: int
    _mmap: mmap.mmap | None = None
    _native: object | None = None  # the streamer's map (roxxel.format.mapread.map_file): holds no descriptor
    _fd: int | None = None
    _blocks: BlockChecks | None = None  # set when the shard stores block checksums (format 1.1)
    check_blocks: bool = True  # check each block on its first read (off only for benchmarks)
    check_identity: bool = True  # refuse a file changed since it was opened (off only for benchmarks)
    _identity: Identity | None = None  # of the file when first opened
    _next_check: float = 0.0
    _refused: str | None = None  # the change found: every later read of the shard is refused at once
    _next_path_check: float = 0.0

    @property
    def has_block_checksums(self) -> bool:
        """True when reads are checked against stored per-block checksums (format 1.1 shards)."""
        return self._blocks is not None

    @property
    def block_checks(self) -> BlockChecks | None:
        """The shard's stored block checksums and which blocks this process has checked (format 1.1 shards;
        None for a shard that stores none). Shared by every read of the shard in this process: a block
        marked checked here is not checked again by :meth:`check_range`."""
        return self._blocks

    @property
    def is_mapped(self) -> bool:
        """Whether :meth:`native_map` has mapped the file (and :meth:`close` has not forgotten the map)."""
        return self._native is not None

    @property
    def file_identity(self) -> Identity | None:
        """The file's identity when this shard first opened it (:func:`identity`: device, inode, size,
        modification and change times), None before; a dataset that reopens the path compares the new
        shard with it (:meth:`expect_identity`)."""
        return self._identity

    def descriptor(self) -> int:
        """The open descriptor; a closed shard is opened again and must still be the file first opened."""
        if self._fd is None:
            try:
                with storage_errors(self.path), open_regular(self.path) as f:
                    fd = os.dup(f.fileno())
            except FileNotFoundError:
                if self._identity is None:
                    raise
                raise changed_error(self.path, self._identity, None) from None
            try:
                self._remember(fd)
            except BaseException:
                os.close(fd)
                raise
            self._fd = fd
        return self._fd

    def _remember(self, fd: int) -> None:
        """Record the identity of the file open as ``fd``; one opened before must match it."""
        now = identity(os.fstat(fd))
        if self._identity is not None and now != self._identity:
            raise changed_error(self.path, self._identity, now)
        self._identity = now
        self._next_path_check = time.monotonic() + PATH_CHECK_SECONDS

    def expect_identity(self, first: Identity | None) -> None:
        """Refuse this (newly opened) shard unless its file is the one whose identity is ``first``
        (recorded by an earlier open of the same path); None: nothing to compare."""
        if first is not None and self._identity is not None and self._identity != first:
            raise changed_error(self.path, first, self._identity)

    def check_unchanged(self) -> None:
        """Refuse a shard whose file changed since it was opened; called after each read, before its tokens leave.

        At most every :data:`CHECK_SECONDS` per shard, one ``os.fstat`` of the open descriptor
        (size, modification and change times; an unlink, such as a replace-by-rename's, moves
        the change time too); at most every :data:`PATH_CHECK_SECONDS`, one ``os.stat`` of the
        path (a renamed directory, an NFS client that does not see the old file's unlink).

        The window that remains: a change is found by the first read of the shard that starts
        at least ``CHECK_SECONDS`` after it (a read sooner after the shard's last check may
        copy changed tokens, and the error still ends the run a moment later: nothing passes
        unnoticed, it is at most 50 ms of that shard's reads late). Unchecked on every read
        because one ``fstat`` per shard per batch cost 8% of a 32x2048 batch over 4 shards in
        ``bench/stream.py`` (2 loaded cores), more when rows spread over many shards; every
        50 ms it costs well under 1%. Also left: a write that moves none of size, mtime and
        ctime (timestamps coarser than the time since the shard's last change before it was
        opened), and on NFS and FUSE mounts a change made on another machine, seen when the
        client's cached attributes expire (NFS ``acregmax``, 60 s by default; GCS FUSE's stat
        cache TTL). A shard the LRU closed while the streamer still reads its map is looked up by
        its path instead, at most every :data:`PATH_CHECK_SECONDS`. Set ``CHECK_SECONDS = 0`` to
        compare on every read.

        Raises:
            ShardChangedError: rewritten in place, replaced, or removed (names the shard and what changed).
            ShardReadError: the storage failed the ``stat``.
        """
        if self._identity is None or not self.check_identity:
            return
        if self._refused is not None:
            raise ShardChangedError(self._refused, self.path)
        now = time.monotonic()
        if now < self._next_check:
            return
        self._next_check = now + CHECK_SECONDS
        if self._fd is None:  # closed (LRU) while the streamer still reads its map: the path tells, nothing reopened
            if now >= self._next_path_check:  # (at the path's pace: many closed shards, one stat each a second)
                self._next_path_check = now + PATH_CHECK_SECONDS
                at_path = self._path_identity()
                if at_path != self._identity:
                    self._refuse(at_path)
            return
        st = self.with_descriptor(os.fstat)
        was = self._identity
        if st.st_mtime_ns != was[3] or st.st_ctime_ns != was[4] or st.st_size != was[2]:
            # An unlink moves the ctime too (a replace-by-rename unlinks the old file): the path tells which.
            at_path = self._path_identity()
            self._refuse(identity(st) if at_path is not None and at_path[:2] == was[:2] else at_path)
        if now >= self._next_path_check:
            self._next_path_check = now + PATH_CHECK_SECONDS
            at_path = self._path_identity()
            if at_path != was:
                self._refuse(at_path)

    def _refuse(self, now: Identity | None) -> None:
        """Raise the change found, and refuse every later read of this shard at once (no waiting for a check)."""
        assert self._identity is not None
        err = changed_error(self.path, self._identity, now)
        self._refused = str(err)
        raise err

    def _path_identity(self) -> Identity | None:
        """The identity of the file the path names now (None: no file there)."""
        try:
            with storage_errors(self.path):
                return identity(os.stat(self.path))
        except FileNotFoundError:
            return None

    def with_descriptor(self, op: Callable[[int], _T]) -> _T:
        """``op(descriptor)``; an ``OSError`` of the storage becomes a :class:`ShardReadError`, except a stale
        handle (ESTALE), answered by reopening the shard once (it must be the same file) and calling ``op`` again."""
        fd = self.descriptor()
        try:
            return op(fd)
        except OSError as e:
            if not _of_storage(e):
                raise
            if e.errno != errno.ESTALE:
                raise read_error(self.path, e) from e
        self.close()  # the map and views of the stale descriptor go too
        fd = self.descriptor()  # compared with the first open: a file replaced on the server is named
        try:
            return op(fd)
        except OSError as e:
            if not _of_storage(e):
                raise
            raise read_error(self.path, e, reopened=True) from e

    def check_range(self, start: int, stop: int, copied: memoryview | None = None) -> None:
        """Check the blocks holding tokens ``[start, stop)`` not yet checked in this process.

        ``copied``: those tokens' bytes as just read, if any (blocks they cover whole are checked on them).

        Raises:
            BlockChecksumError: a block is damaged (names the shard, the block and the fix).
            ShardReadError: the storage failed a read.
        """
        if self._blocks is not None and self.check_blocks:
            size, blocks = self.dtype.itemsize, self._blocks
            self.with_descriptor(lambda fd: blocks.check(fd, start * size, stop * size, copied))

    def check_pieces(self, starts: np.ndarray, counts: np.ndarray) -> None:
        """:meth:`check_range` for many token ranges ``[starts[k], starts[k] + counts[k])`` at once (int64 arrays).

        Raises:
            BlockChecksumError: a block is damaged.
        """
        if self._blocks is not None and self.check_blocks and self._blocks.unchecked:
            size, blocks = self.dtype.itemsize, self._blocks
            self.with_descriptor(lambda fd: blocks.check_pieces(fd, starts * size, (starts + counts) * size))

    def read_pieces(self, out: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> None:
        """Copy token ranges ``[starts[k], starts[k] + counts[k])`` back to back into ``out`` (1-D, C-contiguous, this dtype).

        The blocks they touch are checked first in one vectorised lookup; then one ``pread``
        per range, nothing mapped (a page fault per newly touched page makes gathering out of
        the map slower on large datasets); then :meth:`check_unchanged`.

        Raises:
            BlockChecksumError: a block is damaged.
            TruncatedShardError: the file ended early (it shrank after opening).
            ShardChangedError: the file changed since it was opened.
            ShardReadError: the storage failed a read.
        """
        self.check_pieces(starts, counts)
        fd = self.descriptor()
        size = self.dtype.itemsize
        view = out.view(np.uint8).data  # as bytes: bfloat16 has no buffer format
        base = self.data_offset
        pos = 0
        for a, c in zip(starts.tolist(), counts.tolist()):
            nbytes = c * size
            try:
                n = os.preadv(fd, [view[pos : pos + nbytes]], base + a * size)
            except OSError:
                n = -1  # read again below, which names the error (or reopens a stale handle)
            if n != nbytes:  # short read: retry or raise
                self.copy_into(out[pos // size : pos // size + c], a)
                fd = self.descriptor()
            pos += nbytes
        self.check_unchanged()

    def block_crcs(self) -> np.ndarray:
        """The stored block checksums (uint32, one per block; read once, kept while the shard is known).

        Raises:
            ShardReadError: the storage failed the read.
        """
        assert self._blocks is not None  # (has_block_checksums)
        blocks = self._blocks
        loaded = blocks.loaded_crcs  # (already read: a closed shard is not reopened for them)
        return loaded if loaded is not None else self.with_descriptor(blocks.crcs)

    def native_map(self) -> object:
        """The whole file mapped for the streamer's native reads (:func:`roxxel.format.mapread.map_file`):
        unlike :meth:`_map` it keeps no descriptor open, so plans may hold the maps of more shards
        than ``max_open_shards`` keeps open. Valid while referenced, closed or not.

        Raises:
            CannotMap: the file system refused the map.
        """
        if self._native is None:
            from roxxel.format import mapread

            fd = self.descriptor()
            assert self._identity is not None  # (recorded by _descriptor)
            self._native = mapread.map_file(fd, self._identity[2])
        return self._native

    def _map(self) -> mmap.mmap:
        if self._mmap is None:
            self._mmap = mmap.mmap(self.descriptor(), 0, access=mmap.ACCESS_READ)  # the map holds its own dup
        return self._mmap

    def pread_into(self, out: np.ndarray, start: int) -> None:
        """Copy tokens ``[start, start + len(out))`` into ``out`` (1-D, C-contiguous, this shard's dtype) with ``pread``.

        Unlike slicing the memory map, a read maps no pages into the process, so copying
        through a whole dataset leaves the RSS where it was.

        Raises:
            BlockChecksumError: a block is damaged.
            TruncatedShardError: the file ended early (it shrank after opening).
            ShardChangedError: the file changed since it was opened.
            ShardReadError: the storage failed a read.
        """
        self.copy_into(out, start)
        self.check_unchanged()

    def copy_into(self, out: np.ndarray, start: int) -> None:
        """:meth:`pread_into` without :meth:`check_unchanged` (for a caller that checks once after many reads)."""
        whole = out.view(np.uint8).data  # as bytes: bfloat16 has no buffer format
        first = start * self.dtype.itemsize

        def read(fd: int) -> None:
            buf, offset = whole, self.data_offset + first
            while len(buf):
                n = os.preadv(fd, [buf], offset)
                if n <= 0:
                    raise TruncatedShardError(
                        f"{self.path}: file ended while reading (was it truncated after opening?)", self.path
                    )
                buf, offset = buf[n:], offset + n
            if self._blocks is not None and self.check_blocks:
                self._blocks.check(fd, first, first + len(whole), whole)

        self.with_descriptor(read)

    def release(self) -> None:
        """Drop this process's mapped pages (they stay in the page cache; views stay valid).

        Reading through a memory map counts the touched pages in the process RSS; calling
        this after a pass keeps host RAM flat whatever the dataset size.
        """
        if self._mmap is not None:
            self._mmap.madvise(mmap.MADV_DONTNEED)
        if self._native is not None:
            from roxxel.format import mapread

            mapread.release(self._native)

    def close_file(self) -> None:
        """Close the descriptor (and the Python map, which holds one) but keep what was learned of the
        shard: its header, the blocks checked, the streamer's map (it holds none). The next read
        opens the file again, compared with the first open (a changed file is refused)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        for name in self._VIEWS:
            setattr(self, name, None)
        self._mmap = None

    def close(self) -> None:
        """Close the file and forget the mapping; it is unmapped once no view of it is alive."""
        self.close_file()
        self._native = None

    def __del__(self, _close=os.close):
        # A dropped shard must not keep its descriptor open (the mmap closes itself).
        # os.close is bound at definition: at interpreter shutdown the os module's
        # attributes may already be None when the last reference goes.
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                _close(fd)
            except OSError:
                pass
