"""Errors of the storage name the shard and its mount and say whether a retry can help.

A shared mount returning EIO or ESTALE used to end a worker with a bare ``OSError: [Errno 5]
Input/output error`` naming no file; a size-0 shard (a stale FUSE read) was "another kind of file".
"""

import errno
import os

import numpy as np
import pytest

from roxxel import Curriculum, Phase, Roxxel
from roxxel.data import reader
from roxxel.exit_codes import ConfigurationError
from roxxel.format import ShardChangedError, ShardReadError, TruncatedShardError, atomic, mapread, open_shard


def make(path, n_tokens=100_000):
    ids = (np.arange(n_tokens, dtype=np.int64) * 7919) % 60_000
    Roxxel(str(path)).write([ids[i : i + 1000] for i in range(0, n_tokens, 1000)], vocab_size=65536, dtype="uint16")
    return Roxxel(str(path))


def failing(monkeypatch, code, times=10**9, calls=("preadv", "pread")):
    """Make os.preadv/os.pread raise OSError(code) ``times`` times, then work again.

    Reads through the shards' maps fault meanwhile, as the kernel answers a mapped read that
    the storage fails (SIGBUS, which the native reader catches and reports): the streamer then
    reads with pread, which meets the error.
    """
    left = [times]
    real_gather, real_crc32c = mapread.gather, mapread.crc32c
    monkeypatch.setattr(mapread, "gather", lambda out, *a: (0, None) if left[0] > 0 else real_gather(out, *a))
    monkeypatch.setattr(
        mapread, "crc32c", lambda src, *a: (np.zeros(len(src), np.uint32), 0) if left[0] > 0 else real_crc32c(src, *a)
    )
    for name in calls:
        real = getattr(os, name)

        def fake(*a, _real=real):
            if left[0] > 0:
                left[0] -= 1
                raise OSError(code, os.strerror(code))
            return _real(*a)

        monkeypatch.setattr(os, name, fake)
    return left


@pytest.mark.parametrize("how", ["stream", "read_into", "gather_into"])
def test_eio_names_the_shard_and_the_mount_and_is_not_a_configuration_error(tmp_path, monkeypatch, how):
    ds = make(tmp_path / "d")
    ds.read(0, 10)  # open before the storage fails
    shard = ds.shard_paths[0]
    mount = atomic.mount_of(shard)[0]
    failing(monkeypatch, errno.EIO)
    with pytest.raises(ShardReadError, match=rf"{shard}: input/output error \(EIO\) .* on the mount {mount} ") as e:
        if how == "stream":
            c = Curriculum(ds, [Phase(global_batch_size=4, seq_len=256)])
            next(c.stream(seed=0, to_device=False, prefetch_size=0))
        elif how == "read_into":
            ds.read_into(np.empty(100, np.int32), 50)
        else:
            reader.gather_into(ds, np.empty(200, np.uint16), np.array([5, 90_000]), np.array([100, 100]))
    err = e.value
    assert isinstance(err, OSError) and err.errno == errno.EIO and not isinstance(err, ConfigurationError)
    assert err.path == shard and err.mount == mount
    assert "restart" in str(err)


def test_estale_reopens_the_shard_once_and_reads_on(tmp_path, monkeypatch):
    ds = make(tmp_path / "d")
    want = ds.read_into(np.empty(300, np.int32), 1000).copy()
    s = ds.shard_table.shard(0)
    old_fd = s._fd
    failing(monkeypatch, errno.ESTALE, times=1)
    assert np.array_equal(ds.read_into(np.empty(300, np.int32), 1000), want)
    assert s._fd is not None and s._fd != old_fd or os.fstat(s._fd).st_ino == os.stat(s.path).st_ino


def test_estale_again_after_the_reopen_is_named_with_what_to_do(tmp_path, monkeypatch):
    ds = make(tmp_path / "d")
    ds.read(0, 10)
    failing(monkeypatch, errno.ESTALE)
    with pytest.raises(
        ShardReadError,
        match=rf"{ds.shard_paths[0]}: stale file handle \(ESTALE\).*after reopening "
        r"the shard once.*remount",
    ) as e:
        ds.read_into(np.empty(100, np.int32), 0)
    assert e.value.errno == errno.ESTALE


def test_estale_from_a_replaced_shard_is_a_change_not_a_retry(tmp_path, monkeypatch):
    """On NFS a shard replaced on the server gives ESTALE: the reopen finds another file, and says so."""
    import shutil

    ds = make(tmp_path / "d")
    ds.read(0, 10)
    shard = ds.shard_paths[0]
    shutil.copyfile(shard, shard + ".new")
    os.replace(shard + ".new", shard)
    failing(monkeypatch, errno.ESTALE, times=1)
    with pytest.raises(ShardChangedError, match="replaced"):
        ds.read_into(np.empty(100, np.int32), 0)


def test_eio_while_opening_a_shard_is_named(tmp_path, monkeypatch):
    ds = make(tmp_path / "d")
    shard = ds.shard_paths[0]
    monkeypatch.setattr(os, "fdopen", lambda fd, mode: _Failing(fd))  # the header read fails
    with pytest.raises(ShardReadError, match=rf"{shard}: input/output error \(EIO\)"):
        open_shard(shard)


class _Failing:
    """A file object whose reads fail with EIO (a header read on a failing mount)."""

    def __init__(self, fd):
        self.fd, self.name = fd, "<fd>"

    def fileno(self):
        return self.fd

    def read(self, *a):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    seek = readinto = read

    def close(self):
        os.close(self.fd)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def test_an_empty_shard_is_called_empty_not_another_kind_of_file(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    (d / "a.rox").write_bytes(b"")
    mount = atomic.mount_of(str(d / "a.rox"))[0]
    for opener in (open_shard, lambda p: Roxxel(p).open()):
        with pytest.raises(
            TruncatedShardError,
            match=rf"a.rox: the file is empty \(0 bytes\) on the mount {mount}.*"
            "stale read",
        ) as e:
            opener(str(d / "a.rox"))
        assert "another kind of file" not in str(e.value)


def test_the_mount_is_found_from_mountinfo_or_by_walking_up(tmp_path):
    table = tmp_path / "mountinfo"
    data = tmp_path / "bucket data"
    data.mkdir()
    escaped = str(data).replace(" ", "\\040")
    table.write_text(
        f"22 1 0:21 / / rw - ext4 /dev/vda rw\n40 22 0:50 / {escaped} rw,nosuid - fuse.gcsfuse bucket rw\n"
    )
    assert atomic.mount_of(str(data / "x.rox"), str(table)) == (str(data), "fuse.gcsfuse")
    assert atomic.mount_of("/etc/hostname", str(table)) == ("/", "ext4")
    mount, _ = atomic.mount_of(str(data / "x.rox"), str(tmp_path / "no such table"))
    assert os.path.ismount(mount) and str(data).startswith(mount)
