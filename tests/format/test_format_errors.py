"""Damaged, mismatched and missing inputs give clear errors that name the file."""

import os
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest

from roxxel import Roxxel
from roxxel.format import (
    BadSignatureError,
    ChecksumMismatchError,
    CorruptShardError,
    DatasetExistsError,
    DatasetWriter,
    DtypeMismatchError,
    EmptyDatasetError,
    IncompleteDatasetError,
    ShardNotFoundError,
    TruncatedShardError,
    open_shard,
)
from roxxel.format import layout


@pytest.fixture
def shard_path(tmp_path):
    Roxxel(str(tmp_path / "one.rox")).write([np.arange(3000) % 1000] * 3, vocab_size=1001, eos_id=1000)
    return str(tmp_path / "one.rox")


def _regions(path):
    s = open_shard(path)
    index_end = s._index_offset + 8 * s.num_documents
    return {
        "header": 30,
        "metadata": layout.HEADER.size + 5,
        "token data": s.data_offset + 100,
        "document index": s._index_offset + 4,
        "footer": index_end + 20,
    }


@pytest.mark.parametrize("region", ["header", "metadata", "token data", "document index", "footer"])
def test_truncation_inside_each_region_is_named(shard_path, region):
    cut = _regions(shard_path)[region]
    with open(shard_path, "r+b") as f:
        f.truncate(cut)
    with pytest.raises(TruncatedShardError, match=f"{shard_path}: truncated inside the {region}"):
        Roxxel(shard_path).open()


def test_trailing_bytes_are_refused(shard_path):
    with open(shard_path, "ab") as f:
        f.write(b"junk")
    with pytest.raises(CorruptShardError, match="unexpected bytes after the footer"):
        open_shard(shard_path)


def test_checksum_mismatch_found_by_verify(shard_path):
    s = open_shard(shard_path)
    with open(shard_path, "r+b") as f:
        f.seek(s.data_offset + 1234)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0xFF]))
    ds = Roxxel(shard_path).open()  # opening reads no token data, so it cannot notice
    with pytest.raises(ChecksumMismatchError, match=f"{shard_path}: checksum mismatch"):
        ds.verify()


def test_corrupt_header_is_caught_on_open(shard_path):
    with open(shard_path, "r+b") as f:
        f.seek(layout.HEADER.size + 3)
        f.write(b"X")
    with pytest.raises(CorruptShardError, match="header checksum mismatch"):
        open_shard(shard_path)


def test_wrong_signature(tmp_path):
    p = tmp_path / "notes.rox"
    p.write_bytes(b"just some text, not a shard at all" * 10)
    with pytest.raises(BadSignatureError, match=f"{p}: not a Roxxel shard"):
        Roxxel(str(p)).open()


def test_missing_paths(tmp_path):
    with pytest.raises(ShardNotFoundError, match="dataset not found"):
        Roxxel(str(tmp_path / "nope.rox")).open()
    with pytest.raises(ShardNotFoundError, match="no files match"):
        Roxxel(str(tmp_path / "*.rox")).open()
    with pytest.raises(ShardNotFoundError, match="no dataset.json and no .rox shards"):
        Roxxel(str(tmp_path)).open()


def test_manifest_shard_missing_is_named(tmp_path):
    Roxxel(str(tmp_path / "ds")).write([np.arange(10)] * 40, vocab_size=11, eos_id=10, max_shard_bytes=4200)
    victim = tmp_path / "ds" / "shard-00001.rox"
    victim.unlink()
    ds = Roxxel(str(tmp_path / "ds")).open()  # the manifest still describes it
    with pytest.raises(ShardNotFoundError, match=str(victim)):
        ds.verify()


def test_swapped_shard_is_caught(tmp_path):
    Roxxel(str(tmp_path / "a")).write([np.arange(10)] * 40, vocab_size=11, eos_id=10, max_shard_bytes=4200)
    Roxxel(str(tmp_path / "b")).write([np.arange(10)[::-1]] * 40, vocab_size=11, eos_id=10, max_shard_bytes=4200)
    shutil.copy(tmp_path / "b" / "shard-00000.rox", tmp_path / "a" / "shard-00000.rox")
    with pytest.raises(CorruptShardError, match="manifest says"):  # refused when the shard is opened
        Roxxel(str(tmp_path / "a")).verify()


def test_dtype_mismatch_between_shards(tmp_path):
    Roxxel(str(tmp_path / "small.rox")).write(["abc"])  # uint8
    Roxxel(str(tmp_path / "big.rox")).write([np.array([70000])], vocab_size=70001)  # uint32
    with pytest.raises(DtypeMismatchError, match="must share a token dtype"):
        Roxxel(str(tmp_path / "*.rox")).open()


def test_empty_dataset(tmp_path):
    with DatasetWriter(str(tmp_path / "dataset.json"), vocab_size=10):
        pass
    with pytest.raises(EmptyDatasetError, match="holds no tokens"):
        Roxxel(str(tmp_path)).open()


@pytest.mark.parametrize("write", ["add_document", "add_documents", "chunks"])
def test_a_2d_array_is_not_joined_into_one_document(tmp_path, write):
    """Rows of a (batch, n) array are separate texts: joining them would train on rows
    that run one text into the next. A tokenizer's (1, n) batch of one is one document."""
    batch = np.arange(24).reshape(4, 6)
    with DatasetWriter(str(tmp_path / "dataset.json"), vocab_size=100, eos_id=99) as writer:
        writer.add_document(np.arange(6)[None, :])
        with pytest.raises(ValueError, match=r"document 1: an array of shape \(4, 6\) is not one document"):
            {
                "add_document": lambda: writer.add_document(batch),
                "add_documents": lambda: writer.add_documents([batch]),
                "chunks": lambda: writer.add_document(iter([batch])),
            }[write]()
        with pytest.raises(DtypeMismatchError, match="token 500 is outside"):
            writer.add_document(np.array([1, 500]))
        writer.add_documents(list(batch))
    ds = Roxxel(str(tmp_path))  # the refused documents left no trace (no empty document either)
    assert ds.num_documents == 5 and list(ds[0]) == [0, 1, 2, 3, 4, 5, 99] and list(ds[1]) == [0, 1, 2, 3, 4, 5, 99]


def test_existing_dataset_is_refused_then_appended(tmp_path):
    out = str(tmp_path / "ds")
    Roxxel(out).write(["one", "two"], tokenizer="bytes")
    with pytest.raises(DatasetExistsError, match="append"):
        Roxxel(out).write(["three"], tokenizer="bytes")
    Roxxel(out).write(["three"], tokenizer="bytes", append=True)
    ds = Roxxel(out)
    assert [bytes(ds[i][:-1].astype(np.uint8)) for i in range(len(ds))] == [b"one", b"two", b"three"]
    ds.verify()
    with pytest.raises(DtypeMismatchError, match="cannot append"):
        Roxxel(out).write([np.array([1, 2])], vocab_size=70000, append=True)
    assert len(Roxxel(out)) == 3  # the refused append changed nothing


def test_writing_a_single_file_twice_is_refused(tmp_path):
    Roxxel(str(tmp_path / "x.rox")).write(["a"])
    with pytest.raises(DatasetExistsError, match="already exists"):
        Roxxel(str(tmp_path / "x.rox")).write(["b"])
    assert bytes(Roxxel(str(tmp_path / "x.rox"))[0]) == b"a"


def test_failed_write_leaves_nothing(tmp_path):
    def docs():
        yield "fine"
        raise RuntimeError("source broke")

    with pytest.raises(RuntimeError):
        Roxxel(str(tmp_path / "ds")).write(docs(), tokenizer="bytes")
    assert not os.path.exists(
        tmp_path / "ds"
    )  # no shard, temporary file, marker or lock: not even the directory it made


_KILL_SCRIPT = r"""
import sys, numpy as np
from roxxel.format import DatasetWriter
with DatasetWriter(sys.argv[1] + "/dataset.json", vocab_size=1000, eos_id=999, shard_size=200_000) as w:
    for i in range(10**7):
        w.add_document(np.full(5000, i % 999, np.uint16))
        if i == 300:
            print("writing", flush=True)
"""


def test_pack_killed_midway_leaves_nothing_that_opens(tmp_path):
    out = tmp_path / "ds"
    proc = subprocess.Popen([sys.executable, "-c", _KILL_SCRIPT, str(out)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    names = os.listdir(out)
    assert not [n for n in names if n.endswith(".rox")], names  # finished shards keep hidden temp names
    for spec in (str(out), str(out / "*.rox"), str(out / "dataset.json")):
        with pytest.raises((IncompleteDatasetError, ShardNotFoundError)):
            Roxxel(spec).open()
    # A new pack into the same directory cleans up and succeeds.
    Roxxel(str(out)).write([np.arange(5)], vocab_size=10, eos_id=9)
    assert sorted(os.listdir(out)) == ["dataset.json", "shard-00000.rox"]


def test_marker_refuses_renamed_shards_without_manifest(tmp_path):
    """Killed between renaming shards and writing the manifest: the marker still guards the directory."""
    out = tmp_path / "ds"
    Roxxel(str(out)).write([np.arange(5)], vocab_size=10, eos_id=9)
    (out / "dataset.json").unlink()
    (out / ".dataset.json.incomplete").write_text("pack started")
    with pytest.raises(IncompleteDatasetError, match="did not finish"):
        Roxxel(str(out)).open()
    with pytest.raises(IncompleteDatasetError):
        Roxxel(str(out / "shard-00000.rox")).open()


def test_legacy_truncated(tmp_path, seed_dir):
    p = tmp_path / "t.rox"
    data = (seed_dir / "text_bytes.rox").read_bytes()
    p.write_bytes(data[:5000] + data[-32:])  # footer intact, body cut
    with pytest.raises(TruncatedShardError, match="footer implies"):
        Roxxel(str(p)).open()
    p.write_bytes(data[:-10])  # footer cut: no signature anywhere
    with pytest.raises(BadSignatureError, match="footer was cut off"):
        Roxxel(str(p)).open()
