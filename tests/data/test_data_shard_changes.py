"""A shard's bytes cannot change under a stream unnoticed: rewritten in place, replaced by rename, removed.

Block checksums are checked on a block's first read only; a shard rewritten afterwards (same
size, valid ids) would flow into the batches. A read compares the open file's identity (size,
modification and change times) with the one it had when opened, at most every CHECK_SECONDS
per shard, and the path's (inode) at most every PATH_CHECK_SECONDS, before the tokens leave
the read. ``settle()``: the time after which a change is found by the next read.
"""

import itertools
import os
import shutil
import time

import numpy as np
import pytest

from roxxel import Curriculum, Phase, Roxxel
from roxxel.exit_codes import ConfigurationError
from roxxel.format import ShardChangedError, open_shard
from roxxel.format import mapped

VOCAB = 60_000


def make(path, n_tokens=200_000):
    ids = (np.arange(n_tokens, dtype=np.int64) * 7919) % (VOCAB - 1)
    Roxxel(str(path)).write([ids[i : i + 1000] for i in range(0, n_tokens, 1000)], vocab_size=VOCAB, dtype="uint16")
    return str(path)


def rewrite_in_place(shard_path):
    """Every token id + 1 (still valid ids), written over the token data through the same inode: same size."""
    s = open_shard(shard_path)
    data = np.array(s.tokens)
    s.close()
    with open(shard_path, "r+b") as f:
        f.seek(s.data_offset)
        f.write(((data.astype(np.int64) + 1) % VOCAB).astype(np.uint16).tobytes())


def settle():
    time.sleep(mapped.CHECK_SECONDS)


def stream(path, chunk):
    c = Curriculum(Roxxel(path), [Phase(global_batch_size=4, seq_len=256)], chunk_tokens=chunk, repeat=True)
    return c.stream(0, 10**6, seed=0, to_device=False, prefetch_size=0)


@pytest.mark.parametrize("chunk", [4096, 100])  # planned runs of rows (read_runs), rows cut into pieces (gather)
def test_a_shard_rewritten_in_place_mid_stream_is_refused_before_a_changed_token_is_used(tmp_path, chunk):
    """Rows read ahead before the rewrite (up to 64 steps: reader.py's _AHEAD) hold the bytes as
    they were; the first read after it is refused, so no batch holds a changed token."""
    d = make(tmp_path / "d")
    pristine = shutil.copytree(d, tmp_path / "copy")
    want = list(itertools.islice(stream(str(pristine), chunk), 3 + 64 + 1))
    Roxxel(d).read_into(np.empty(200_000, np.uint16), 0)  # (another reader: the page cache is warm)
    s = stream(d, chunk)
    got = [next(s) for _ in range(3)]
    s.reader.sources[0].dataset.read_into(np.empty(200_000, np.uint16), 0)  # every block checked: CRCs pass
    shard = Roxxel(d).shard_paths[0]
    rewrite_in_place(shard)
    settle()
    with pytest.raises(ShardChangedError, match=rf"{shard}: changed while this process read it .*modified"):
        for b in itertools.islice(s, 64 + 1):
            got.append(b)  # every token changed: any batch read after the rewrite would hold changed ones
    assert 3 <= len(got) < 3 + 64 + 1
    for g, w in zip(got, want):
        assert np.array_equal(g, w)


def test_views_and_documents_are_refused_after_an_in_place_rewrite(tmp_path):
    d = make(tmp_path / "d")
    ds = Roxxel(d).open()
    ds.read(0, 10), ds[3]
    rewrite_in_place(ds.shard_paths[0])
    settle()
    with pytest.raises(ShardChangedError, match="modified"):
        ds.read(0, 10)
    with pytest.raises(ShardChangedError):
        ds[3]
    with pytest.raises(ShardChangedError):
        ds.read_into(np.empty(10, np.int32), 5)


def test_a_shard_replaced_by_rename_mid_stream_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(mapped, "PATH_CHECK_SECONDS", 0.0)  # the path is looked up on every read
    d = make(tmp_path / "d")
    s = stream(d, 4096)
    next(s)
    shard = Roxxel(d).shard_paths[0]
    new = shard + ".new"
    shutil.copyfile(shard, new)
    os.replace(new, shard)  # the same bytes even: another file all the same
    settle()
    with pytest.raises(ShardChangedError, match=rf"{shard}: changed .*replaced: the path names another file"):
        next(s)


def test_a_path_that_names_another_file_is_noticed_within_the_path_check_interval(tmp_path, monkeypatch):
    """A replace-by-rename of the file itself unlinks it (its ctime moves: found by the next read); a renamed
    directory leaves the open file as it was, and the path, looked up at most every PATH_CHECK_SECONDS per
    shard, finds the other file (the bytes read come from the open file, which did not change)."""
    d = make(tmp_path / "d")
    ds = Roxxel(d).open()
    clock = [time.monotonic()]
    monkeypatch.setattr(mapped.time, "monotonic", lambda: clock[0])
    ds.read_into(np.empty(10, np.int32), 0)
    os.rename(d, d + ".old")
    shutil.copytree(d + ".old", d)
    ds.read_into(np.empty(10, np.int32), 0)  # within the interval: not looked up yet
    clock[0] += mapped.PATH_CHECK_SECONDS + 1
    with pytest.raises(ShardChangedError, match="replaced: the path names another file"):
        ds.read_into(np.empty(10, np.int32), 0)


def test_a_change_is_found_by_the_first_read_check_seconds_after_the_last_check(tmp_path, monkeypatch):
    """The window: reads within CHECK_SECONDS of a shard's last check are not compared (the cost stays < 1%)."""
    d = make(tmp_path / "d")
    ds = Roxxel(d).open()
    clock = [time.monotonic() + 10]
    monkeypatch.setattr(mapped.time, "monotonic", lambda: clock[0])
    ds.read_into(np.empty(10, np.int32), 0)  # checked (unchanged) at clock
    rewrite_in_place(ds.shard_paths[0])
    clock[0] += mapped.CHECK_SECONDS / 2
    ds.read_into(np.empty(10, np.int32), 0)  # inside the window: not compared
    clock[0] += mapped.CHECK_SECONDS / 2 + 1e-6  # past the window whatever the float rounding of the sums
    with pytest.raises(ShardChangedError, match="modified"):
        ds.read_into(np.empty(10, np.int32), 0)
    assert 0 < mapped.CHECK_SECONDS <= 0.05


def test_a_removed_shard_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(mapped, "PATH_CHECK_SECONDS", 0.0)
    d = make(tmp_path / "d")
    ds = Roxxel(d).open()
    ds.read_into(np.empty(10, np.int32), 0)
    os.remove(ds.shard_paths[0])
    settle()
    with pytest.raises(ShardChangedError, match="removed or renamed away"):
        ds.read_into(np.empty(10, np.int32), 0)


def test_a_change_is_a_configuration_error_and_says_what_changed(tmp_path):
    """Every restart would read other tokens than the run's past batches: not restarted (exit 78)."""
    d = make(tmp_path / "d")
    ds = Roxxel(d).open()
    ds.read_into(np.empty(10, np.int32), 0)
    shard = ds.shard_paths[0]
    with open(shard, "ab") as f:
        f.write(b"\0" * 10)
    settle()
    with pytest.raises(ShardChangedError, match=r"size \d+ -> \d+ bytes") as e:
        ds.read_into(np.empty(10, np.int32), 0)
    assert isinstance(e.value, ConfigurationError) and e.value.path == shard


def test_a_status_change_alone_is_named(tmp_path):
    """A ctime that moved while size and mtime did not: a chmod, or a rewrite whose mtime was put back."""
    d = make(tmp_path / "d")
    ds = Roxxel(d).open()
    ds.read_into(np.empty(10, np.int32), 0)
    shard = ds.shard_paths[0]
    st = os.stat(shard)
    rewrite_in_place(shard)
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime put back, as `touch -d` or `cp -p` would
    settle()
    with pytest.raises(ShardChangedError, match="status changed .*modification time put back"):
        ds.read_into(np.empty(10, np.int32), 0)


def test_a_shard_closed_by_the_lru_and_reopened_is_compared_with_its_first_open(tmp_path):
    """An evicted shard is opened again from its path: it must still be the file the run read before."""
    ids = (np.arange(100_000, dtype=np.int64) * 7919) % (VOCAB - 1)
    Roxxel(str(tmp_path / "d")).write(
        [ids[i : i + 1000] for i in range(0, 100_000, 1000)],
        vocab_size=VOCAB,
        dtype="uint16",
        max_shard_bytes=2 * 50_000,
    )
    ds = Roxxel(str(tmp_path / "d"), max_open_shards=1, check_blocks=False).open()
    ds.read_into(np.empty(10, np.int32), 0)
    ds.read_into(np.empty(10, np.int32), 60_000)  # shard 0 closed
    rewrite_in_place(ds.shard_paths[0])
    with pytest.raises(ShardChangedError, match="modified"):
        ds.read_into(np.empty(10, np.int32), 0)


def test_unchanged_shards_read_on(tmp_path, monkeypatch):
    """No false alarm: reads, re-reads and other readers of the same files change nothing."""
    monkeypatch.setattr(mapped, "PATH_CHECK_SECONDS", 0.0)
    d = make(tmp_path / "d")
    a, b = Roxxel(d).open(), Roxxel(d).open()
    for _ in range(3):
        assert np.array_equal(a.read_into(np.empty(500, np.int32), 7), b.read(7, 507))
    a.verify()
    list(itertools.islice(stream(d, 4096), 5))
