"""Shards are made durable on a background thread while the next one is written; still, no shard
is renamed before its data and trailer are fsynced, and a failed fsync or writeback fails the
write, leaving nothing that opens as a dataset."""

import os
import threading

import numpy as np
import pytest

from roxxel import Roxxel
from roxxel.format import DatasetWriter
from roxxel.format import atomic
from roxxel.format import background
from roxxel.format.manifest import Manifest


@pytest.fixture
def events(monkeypatch):
    """Every fsync/fdatasync (path, thread) and shard rename, in order; writebacks every 64 KiB."""
    log: list[tuple[str, str, str]] = []
    lock = threading.Lock()
    real_fsync, real_fdatasync, real_replace = os.fsync, os.fdatasync, os.replace

    def traced(kind, real):
        def call(fd):
            path = os.readlink(f"/proc/self/fd/{fd}")
            real(fd)  # the event is logged once the data is durable
            with lock:
                log.append((kind, os.path.basename(path), threading.current_thread().name))

        return call

    def replace(src, dst):
        real_replace(src, dst)
        with lock:
            log.append(("rename", os.path.basename(src), os.path.basename(dst)))

    monkeypatch.setattr(os, "fsync", traced("fsync", real_fsync))
    monkeypatch.setattr(os, "fdatasync", traced("fdatasync", real_fdatasync))
    monkeypatch.setattr(atomic.os, "replace", replace)
    monkeypatch.setattr(background, "_WRITEBACK_BYTES", 64 << 10)
    return log


def write(directory, n_docs=60):
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 999, 5000).astype(np.uint16) for _ in range(n_docs)]
    with DatasetWriter(os.path.join(directory, "dataset.json"), vocab_size=1000, eos_id=999, shard_size=200_000) as w:
        for k in range(0, n_docs, 7):
            w.add_documents(docs[k : k + 7])
    return docs


def test_every_shard_is_fsynced_in_the_background_before_its_rename(tmp_path, events):
    docs = write(str(tmp_path))
    ds = Roxxel(str(tmp_path))
    assert len(ds) == len(docs) and all(np.array_equal(ds[k][:-1], d) for k, d in enumerate(docs))
    renames = [(i, e) for i, e in enumerate(events) if e[0] == "rename" and e[2].endswith(".rox")]
    assert len(renames) == len(Manifest.load(str(tmp_path / "dataset.json")).shards) > 2
    for i, (_, tmp, final) in renames:
        synced = [k for k, e in enumerate(events) if e[0] == "fsync" and e[1] == tmp]
        assert synced and synced[-1] < i, (final, events)  # the full file fsynced before it got its name
    background = {
        e[2] for e in events if e[0] in ("fsync", "fdatasync") and e[1].endswith(tuple(r[1][1] for r in renames))
    }
    assert background == {n for n in background if n.startswith("roxxel-fsync")}, background
    assert any(e[0] == "fdatasync" for e in events)  # data written back while the shard grew


@pytest.mark.parametrize("failing", ["fsync", "fdatasync"])
def test_a_failed_background_fsync_fails_the_write_and_leaves_no_dataset(tmp_path, monkeypatch, failing):
    real = getattr(os, failing)

    def fail_on_shards(fd):
        if ".rox" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(5, "Input/output error")
        real(fd)

    monkeypatch.setattr(os, failing, fail_on_shards)
    monkeypatch.setattr(background, "_WRITEBACK_BYTES", 64 << 10)
    with pytest.raises(OSError, match="Input/output error"):
        write(str(tmp_path))
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".rox") or n == "dataset.json"]
    with pytest.raises(Exception):
        len(Roxxel(str(tmp_path)))  # opening is lazy


def test_on_a_fuse_mount_each_shard_is_synced_once(tmp_path, events, monkeypatch, caplog):
    """GCS FUSE (staged writes, its default) uploads the whole file written so far on every fsync
    (gcsfuse docs/semantics.md; release notes of 2.9: "uploading to GCS on close/fsync"): the
    periodic writeback sent a 256 MiB shard 16 times over. Where the dataset directory is on
    FUSE, a shard is synced once, when finished, and still before its rename. (No FUSE
    file system can be mounted here: the mount table is a written one, the real parser reads it.)"""
    table = tmp_path / "mountinfo"
    data = tmp_path / "bucket data"  # mountinfo writes the space as \040
    data.mkdir()
    table.write_text(
        f"27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
        f"90 27 0:50 / {str(data).replace(' ', chr(92) + '040')} rw,nosuid - fuse.gcsfuse bucket rw\n"
    )
    monkeypatch.setattr(atomic, "filesystem_type", lambda path, real=atomic.filesystem_type: real(path, str(table)))
    with caplog.at_level("INFO", logger="roxxel.format"):
        docs = write(str(data / "ds"))
    assert "is on a FUSE file system" in caplog.text
    ds = Roxxel(str(data / "ds"))
    assert len(ds) == len(docs) and all(np.array_equal(ds[k][:-1], d) for k, d in enumerate(docs))
    shards = [e[1] for e in events if e[0] == "rename" and e[2].endswith(".rox")]
    assert len(shards) > 2
    assert not [e for e in events if e[0] == "fdatasync"], events  # no writeback while a shard grows
    for tmp in shards:
        assert [e[0] for e in events if e[1] == tmp and e[0] != "rename"] == ["fsync"]  # once, when finished
