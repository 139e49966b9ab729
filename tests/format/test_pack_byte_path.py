"""Byte-level packing reads text files straight into one buffer and hashes on a background thread,
yet writes the dataset the per-document writer writes, byte for byte (SHA-256 and block CRCs
included), for any ``jobs``; and a read error, a failed checksum or a kill still fails the pack
loudly, leaves nothing that opens as a dataset, and leaves no thread behind."""

import gzip
import json
import os
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest

from roxxel import Roxxel
from roxxel.format import DatasetWriter
from roxxel.format import background
from roxxel.format import dataset_writer as writer_module  # its _now dates the manifest
from roxxel.format import shard_writer
from roxxel.format.errors import IncompleteDatasetError
from roxxel.pack import is_binary, iter_documents, pack
from roxxel.pack import byte_path
from roxxel.tokenizers import ByteTokenizer

FIXED_TIME = "2026-01-01T00:00:00+00:00"  # shards and manifests record their creation time


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """Text files of many sizes (empty, larger than a batch), binary files to skip, JSONL and gzip;
    batches of 1,000 bytes, so that files fill, overflow and outgrow them."""
    monkeypatch.setattr(writer_module, "_now", lambda: FIXED_TIME)
    monkeypatch.setattr(byte_path, "BATCH_BYTES", 1000)
    root = tmp_path / "in"
    for i in range(90):
        d = root / f"d{i % 3}" / ("deep" if i % 5 == 0 else "")
        d.mkdir(parents=True, exist_ok=True)
        if i % 29 == 4:
            (d / f"f{i:03d}.bin").write_bytes(b"\0\1\2" * (i + 1))
        elif i % 31 == 7:
            (d / f"f{i:03d}.jsonl").write_text(
                "".join(json.dumps({"text": f"line {k} of {i} ✓"}) + "\n" for k in range(3))
            )
        elif i % 37 == 2:
            (d / f"f{i:03d}.txt.gz").write_bytes(gzip.compress(f"compressed {i}\n".encode() * i))
        else:
            (d / f"f{i:03d}.txt").write_text(f"file {i}: naïve café\n" * (i * i % 150))  # i = 0: empty
    return root


def walked(top):
    """The files under ``top`` in the documented order (its files by name, then each subdirectory's), by ``os.walk``."""
    for root, dirs, files in os.walk(top):
        dirs.sort()
        yield from (os.path.join(root, f) for f in sorted(files))


def reference(top, out):
    """The dataset of one ``add_document`` per document, hashed and checksummed inline (the writer's
    plain path, as every pack wrote before the byte-level path)."""
    tok = ByteTokenizer()
    with DatasetWriter(
        os.path.join(out, "dataset.json"),
        vocab_size=tok.vocab_size,
        eos_id=tok.eos_id,
        tokenizer=tok.identity,
        shard_size=5_000,
    ) as w:
        for path in walked(top):
            for doc in iter_documents(path):
                if not (isinstance(doc, bytes) and is_binary(doc)):
                    w.add_document(tok.encode(doc))


def text(tokens) -> bytes:
    """A byte-level document's bytes, its EOS dropped."""
    return np.asarray(tokens[:-1], np.uint8).tobytes()


def contents(directory) -> dict[str, bytes]:
    return {n: (directory / n).read_bytes() for n in sorted(os.listdir(directory))}


@pytest.mark.parametrize("only_text", [False, True])
def test_a_byte_level_pack_writes_the_reference_dataset_byte_for_byte_for_any_jobs(tree, tmp_path, only_text):
    if only_text:  # every input read whole: the byte-level path for every jobs
        for p in list(tree.rglob("*.jsonl")) + list(tree.rglob("*.gz")):
            p.unlink()
    reference(str(tree), str(tmp_path / "ref"))
    expected = contents(tmp_path / "ref")
    assert len([n for n in expected if n.endswith(".rox")]) > 3, "the test should cover shard rollover"
    for jobs in (1, 2):
        out = tmp_path / f"jobs{jobs}"
        pack([str(tree)], str(out), shard_size=5_000, jobs=jobs)
        assert contents(out) == expected, jobs


def test_a_file_that_fstat_gives_no_size_is_read_to_its_end(tmp_path):
    pack(["/proc/self/status"], str(tmp_path / "out"))  # size 0 for fstat, a few hundred bytes to read
    doc = text(Roxxel(str(tmp_path / "out"))[0])
    assert doc.startswith(b"Name:") and doc.endswith(b"\n") and len(doc) > 200


def test_packing_a_directory_into_itself_takes_only_the_files_there_before(tmp_path):
    for name in ("a.txt", "b.txt"):
        (tmp_path / name).write_text(f"text of {name}\n")
    pack([str(tmp_path)], str(tmp_path))
    ds = Roxxel(str(tmp_path))
    assert [text(ds[k]) for k in range(len(ds))] == [b"text of a.txt\n", b"text of b.txt\n"]


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def pack_threads() -> list[str]:
    return [
        t.name for t in threading.enumerate() if t.name.startswith(("roxxel-pack", "roxxel-checksum", "roxxel-fsync"))
    ]


def test_an_unreadable_file_fails_the_pack_and_leaves_no_dataset_or_thread(tree, tmp_path, monkeypatch):
    bad = str(tree / "d1" / "f049.txt")  # mid-walk, after a few batches were written
    real_open = os.open

    def refuse(path, *args, **kwargs):
        if path == bad:
            raise PermissionError(13, "Permission denied", path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(byte_path.os, "open", refuse)
    out = tmp_path / "out"
    fds = open_fds()
    with pytest.raises(PermissionError, match="f049.txt"):
        pack([str(tree)], str(out), shard_size=5_000)
    assert not os.path.exists(out)  # no shard, temporary file, marker or lock: not even the directory it made
    assert pack_threads() == [] and open_fds() == fds


def test_a_failed_checksum_fails_the_pack_and_leaves_no_dataset_or_thread(tree, tmp_path, monkeypatch):
    real = shard_writer.ShardWriter._checksum
    calls = []

    def fail_on_the_fifth(self, buf):
        calls.append(threading.current_thread().name)
        if len(calls) == 5:
            raise MemoryError("checksum failed")
        real(self, buf)

    monkeypatch.setattr(shard_writer.ShardWriter, "_checksum", fail_on_the_fifth)
    out = tmp_path / "out"
    fds = open_fds()
    with pytest.raises(MemoryError, match="checksum failed"):
        pack([str(tree)], str(out), shard_size=5_000)
    assert set(calls) == {"roxxel-checksum_0"}  # hashed on the background thread
    assert not os.path.exists(out)  # no shard, temporary file, marker or lock: not even the directory it made
    assert pack_threads() == [] and open_fds() == fds


def test_a_checksum_that_fails_as_the_last_shard_is_finished_leaves_nothing_that_opens(tree, tmp_path, monkeypatch):
    def fail(self):
        raise MemoryError("checksum failed")

    monkeypatch.setattr(background._BackgroundChecksums, "wait", fail)  # called by each shard's finish()
    out = tmp_path / "out"
    with pytest.raises(MemoryError, match="checksum failed"):
        pack([str(tree)], str(out))  # one shard: it fails in close()
    assert not [n for n in os.listdir(out) if n.endswith(".rox") or n == "dataset.json"]
    with pytest.raises(IncompleteDatasetError):
        Roxxel(str(out)).open()
    assert pack_threads() == []


_KILLED_PACK = r"""
import sys, time
from roxxel.pack import pack

def stall(docs, tokens, nbytes):
    print("writing", flush=True)
    time.sleep(60)  # killed here: batches written, their checksums on the background thread

pack([sys.argv[1]], sys.argv[2], shard_size=5_000, on_progress=stall)
"""


def test_a_pack_killed_midway_leaves_nothing_that_opens(tree, tmp_path):
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_PACK, str(tree), str(out)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "writing"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert not [n for n in os.listdir(out) if n.endswith(".rox") or n == "dataset.json"]
    with pytest.raises(IncompleteDatasetError):
        Roxxel(str(out)).open()
