"""Damaged or foreign bytes never reach a batch: block checksums, shard identity, safe opening."""

import gc
import hashlib
import json
import os

import numpy as np
import pytest

from roxxel import Curriculum, Phase, Roxxel
from roxxel.data import reader
from roxxel.format import (
    BlockChecksumError,
    ChecksumMismatchError,
    CorruptShardError,
    DatasetWriter,
    RoxxelFormatError,
    ShardNotFoundError,
    layout,
    open_shard,
)

from support import paths
from support.shards import flip_byte

FIXTURES = str(paths.FIXTURES)


def write(path, n_docs=20, doc=5000, shard_size=1 << 40, vocab=257, eos=256):
    rng = np.random.default_rng(0)
    with DatasetWriter(
        os.path.join(path, "dataset.json"), vocab_size=vocab, eos_id=eos, dtype="uint16", shard_size=shard_size
    ) as w:
        for _ in range(n_docs):
            w.add_document(rng.integers(0, eos, doc))
    return str(path)


def test_flipped_byte_is_refused_before_it_reaches_a_batch(tmp_path):
    d = write(tmp_path)
    shard = Roxxel(d).shard_paths[0]
    flip_byte(shard, 70_000)  # inside block 2 (64 KiB blocks of uint16 = 32768 tokens)
    ds = Roxxel(d)
    c = Curriculum(ds, [Phase(global_batch_size=4, seq_len=512)], chunk_tokens=2048)
    with pytest.raises(BlockChecksumError, match=rf"{shard}: token block 2 .*roxxel verify.*re-pack"):
        list(c.stream(seed=0, to_device=False, prefetch_size=0))
    with pytest.raises(BlockChecksumError):
        Roxxel(d).read(69_990, 70_010)  # the zero-copy view path
    with pytest.raises(BlockChecksumError):
        Roxxel(d)[14]  # document 14 holds token 70,000
    assert Roxxel(d).read(0, 100).max() < 257  # undamaged blocks still read
    with pytest.raises(ChecksumMismatchError, match="checksum mismatch.*first damaged token block: 2"):
        Roxxel(d).verify()


@pytest.mark.parametrize(
    "damaged, read",
    [(66_000, (70_000, 70_100)), (75_000, (70_000, 70_100)), (70_050, (70_000, 70_100))],
    ids=["before-the-read-part", "after-the-read-part", "in-the-read-part"],
)
def test_a_partly_read_block_is_checked_whole_on_its_first_read(tmp_path, damaged, read):
    """A read covering part of a block checks the whole block on its first read: a damaged byte
    anywhere in the block is refused, also outside the part read."""
    d = write(tmp_path)
    flip_byte(Roxxel(d).shard_paths[0], damaged)  # block 2 holds tokens 65,536..98,303
    with pytest.raises(BlockChecksumError, match="token block 2"):
        Roxxel(d).read_into(np.empty(read[1] - read[0], np.uint16), read[0])
    ds = Roxxel(d)
    ds.read_into(np.empty(100, np.uint16), 0)  # an undamaged block reads
    assert ds.shard_table.shard(0).block_checks.checked[0] and not ds.shard_table.shard(0).block_checks.checked[2]


def test_each_block_is_checked_once_per_process(tmp_path, monkeypatch):
    import roxxel.format.blocks as blocks

    d = write(tmp_path)
    calls = []
    real = blocks.ALGORITHMS["crc32c"]
    monkeypatch.setitem(blocks.ALGORITHMS, "crc32c", lambda b, *a: calls.append(len(b)) or real(b, *a))
    ds = Roxxel(d).open()
    out = np.empty(100, ds.dtype)
    ds.read_into(out, 10)
    ds.read_into(out, 500)  # same block: not checked again
    assert len(calls) == 1
    ds.read_into(np.empty(40_000, ds.dtype), 0)
    assert len(calls) == 2  # block 1 only
    blk = open_shard(ds.shard_paths[0])._blocks
    assert blk.block_bytes == layout.DEFAULT_BLOCK_BYTES
    s = ds.shard_table.shard(0)
    assert s.has_block_checksums and s._blocks.checked[:2].all() and not s._blocks.checked[2:].any()


def test_unchecked_reader_reads_the_same_tokens(tmp_path):
    d = write(tmp_path)
    a, b = Roxxel(d), Roxxel(d, check_blocks=False)
    assert np.array_equal(a.read(0, a.num_tokens), b.read(0, b.num_tokens))
    b.read_into(np.empty(1000, b.dtype), 0)
    assert not b.shard_table.shard(0).block_checks.checked.any()


def flip_index(path, doc, xor):
    """Flip bits of the low byte of document ``doc``'s start in the shard's index."""
    s = open_shard(path)
    off = s._index_offset + doc * layout.INDEX_DTYPE.itemsize
    with open(path, "r+b") as f:
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ xor]))


@pytest.mark.parametrize("xor", [0x04, 0xFF])
def test_a_flipped_byte_in_the_document_index_is_refused_before_a_boundary_is_used(tmp_path, xor):
    """Found by a new user: a flipped index byte moved document boundaries (documents 99 and 100
    came back as 962 and 821 tokens instead of 966 and 817) and every read went on without a word;
    only `verify`'s SHA-256 noticed. The block checksums covered the token data only."""
    d = write(tmp_path)
    shard = Roxxel(d).shard_paths[0]
    flip_index(shard, 10, xor)  # the index stays increasing: its order alone would not tell
    with pytest.raises(CorruptShardError, match=rf"{shard}: the document index fails its CRC-32C check.*re-pack"):
        Roxxel(d)[10]
    c = Curriculum(Roxxel(d), [Phase(global_batch_size=4, seq_len=512)], order="documents")  # shuffles by the index
    with pytest.raises(CorruptShardError, match="document index"):
        list(c.stream(seed=0, to_device=False, prefetch_size=0))
    with pytest.raises(ChecksumMismatchError, match="the damage is in the document index"):
        Roxxel(d).verify()
    flip_index(shard, 10, xor)  # restored: reads as before
    assert len(Roxxel(d)[10]) == 5001


def test_format_1_0_shards_still_open_without_block_checks():
    d = os.path.join(FIXTURES, "format-v1.0")
    want = json.load(open(os.path.join(d, "expected.json")))
    ds = Roxxel(d)
    toks = ds.read_into(np.empty(ds.num_tokens, ds.dtype), 0)
    assert hashlib.sha256(toks.tobytes()).hexdigest() == want["tokens_sha256"]
    s = open_shard(ds.shard_paths[0])
    assert s.version == (1, 0) and not s.has_block_checksums
    ds.verify()


def test_new_shards_are_format_1_1_with_block_checksums(tmp_path):
    d = write(tmp_path, n_docs=2, doc=40_000)
    s = open_shard(Roxxel(d).shard_paths[0])
    assert s.version == (1, 1) and s._blocks.num_blocks == 3  # 80,002 uint16 tokens in 64 KiB blocks
    s.verify()


def test_swapped_shards_of_equal_size_are_refused(tmp_path):
    d = write(tmp_path, n_docs=4, doc=1000, shard_size=2000 * 2 + 5000)
    paths = Roxxel(d).shard_paths
    assert len(paths) == 2 and os.path.getsize(paths[0]) == os.path.getsize(paths[1])
    tmp = paths[0] + ".x"
    os.rename(paths[0], tmp)
    os.rename(paths[1], paths[0])
    os.rename(tmp, paths[1])
    with pytest.raises(CorruptShardError, match="is not the shard its manifest lists.*swapped"):
        Roxxel(d).read(0, 10)


@pytest.mark.parametrize("bad", ["../other/shard-00000.rox", "/etc/passwd", "a/../../x.rox", "", "./shard.rox"])
def test_manifest_paths_must_stay_inside_the_dataset_directory(tmp_path, bad):
    d = write(tmp_path / "ds", n_docs=2, doc=100)
    m = json.load(open(os.path.join(d, "dataset.json")))
    m["shards"][0]["path"] = bad
    json.dump(m, open(os.path.join(d, "dataset.json"), "w"))
    with pytest.raises(CorruptShardError, match="not a relative name inside the dataset directory"):
        Roxxel(d).open()


def test_only_regular_files_are_opened_as_shards(tmp_path):
    os.mkfifo(tmp_path / "a.rox")  # opening a FIFO for reading would wait for a writer forever
    with pytest.raises(RoxxelFormatError, match="is a FIFO, not a regular file"):
        Roxxel(str(tmp_path)).open()
    os.remove(tmp_path / "a.rox")
    os.symlink("/dev/zero", tmp_path / "b.rox")  # endless zeros
    with pytest.raises(RoxxelFormatError, match="is a device, not a regular file"):
        Roxxel(str(tmp_path)).open()


@pytest.mark.parametrize("how", ["dangling-link", "empty", "directory", "not-json"])
def test_broken_manifest_is_an_error_not_ignored(tmp_path, how):
    d = write(tmp_path / "ds", n_docs=2, doc=100)
    m = os.path.join(d, "dataset.json")
    os.remove(m)
    if how == "dangling-link":
        os.symlink(os.path.join(d, "nowhere.json"), m)
    elif how == "directory":
        os.mkdir(m)
    else:
        open(m, "w").write("" if how == "empty" else "{oops")
    with pytest.raises((CorruptShardError, ShardNotFoundError), match="manifest"):
        Roxxel(d).open()


def test_garbage_after_a_valid_signature_is_called_damage_not_a_newer_version(tmp_path):
    p = tmp_path / "x.rox"
    rng = np.random.default_rng(1)
    p.write_bytes(layout.SIGNATURE + bytes([9, 0]) + rng.integers(0, 256, 5000, dtype=np.uint8).tobytes())
    with pytest.raises(CorruptShardError) as e:
        open_shard(str(p))
    assert "upgrade" not in str(e.value) and "damaged" in str(e.value)


def test_dropped_datasets_release_their_file_descriptors(tmp_path):
    d = write(tmp_path, n_docs=30, doc=200, shard_size=500)
    assert Roxxel(d).num_shards == 30

    def open_fds():
        return len(os.listdir("/proc/self/fd"))

    gc.collect()
    before = open_fds()
    for _ in range(20):
        ds = Roxxel(d)
        reader.gather_into(ds, np.empty(30, ds.dtype), np.arange(30) * 201, np.ones(30, np.int64))
        del ds
    gc.collect()
    assert open_fds() - before < 5


def _edit_manifest(d, edit):
    path = os.path.join(d, "dataset.json")
    m = json.load(open(path))
    edit(m)
    json.dump(m, open(path, "w"))


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda m: m["shards"].pop(1), "its num_tokens is .* but its shards hold"),
        (lambda m: m["shards"].append(dict(m["shards"][0])), "lists shard 'shard-00000.rox' 2 times"),
        (
            lambda m: m["shards"][0].update(num_tokens=str(m["shards"][0]["num_tokens"])),
            "has num_tokens '.*', not a count",
        ),
        (lambda m: m["shards"][1].update(sha256=None), "has sha256 None, not a hex SHA-256"),
        (lambda m: m.update(eos_id=300), "eos_id 300 is not an id of the vocabulary"),
        (lambda m: m.update(vocab_size=True), "vocab_size True is not a positive int"),
    ],
)
def test_an_edited_manifest_is_refused_when_loaded(tmp_path, edit, message):
    """Found by a new user's pass: an entry deleted (its file still there) gave 70% of the tokens and
    verify said OK; a shard listed twice was read twice; a string count ended in a numpy traceback."""
    d = write(tmp_path / "ds", n_docs=6, doc=1000, shard_size=2 * 2000 + 5000)
    assert len(Roxxel(d).shard_paths) == 3
    _edit_manifest(d, edit)
    with pytest.raises(CorruptShardError, match=message + ".*the manifest was edited or damaged"):
        Roxxel(d).open()


@pytest.mark.parametrize("field, value", [("eos_id", 10), ("vocab_size", 50_000), ("tokenizer", {"type": "bytes"})])
def test_what_a_manifest_says_of_the_ids_must_be_what_its_shards_record(tmp_path, field, value):
    """Found by a new user's pass: eos_id edited in dataset.json (the shards say 256) made every
    newline a document boundary for outputs='documents', and verify said OK."""
    d = write(tmp_path / "ds", n_docs=6, doc=1000, shard_size=2 * 2000 + 5000)
    _edit_manifest(d, lambda m: m.update({field: value}))
    with pytest.raises(
        CorruptShardError,
        match=rf"shard-00000.rox: the shard records {field} .*, its manifest says "
        rf"{value!r}".replace("{", r"\{").replace("}", r"\}"),
    ):
        Roxxel(d).read(0, 10)
    with pytest.raises(CorruptShardError, match="its manifest says"):
        Roxxel(d).verify()


def test_verify_refuses_a_shard_file_its_manifest_does_not_list(tmp_path):
    """Found by a new user's pass: an entry removed from dataset.json (its totals fixed too) left its
    file in the directory, out of the dataset, and verify said OK."""
    d = write(tmp_path / "ds", n_docs=6, doc=1000, shard_size=2 * 2000 + 5000)
    Roxxel(d).verify()

    def drop_last(m):
        gone = m["shards"].pop()
        m["num_tokens"] -= gone["num_tokens"]
        m["num_documents"] -= gone["num_documents"]

    _edit_manifest(d, drop_last)
    assert Roxxel(d).num_shards == 2  # a consistent manifest of two shards: it opens
    with pytest.raises(
        CorruptShardError, match=r"shard-00002.rox: a shard next to .*dataset.json that it does not list"
    ):
        Roxxel(d).verify()
    # Datasets written as single files share a directory: each checks only its own STEM_*.rox.
    for stem in ("a", "a_b", "c"):
        Roxxel(str(tmp_path / "flat" / f"{stem}.rox")).write(["x" * 3000, "y" * 3000], max_shard_bytes=2000)
    assert len([n for n in os.listdir(tmp_path / "flat") if n.startswith("a_b_")]) > 1
    Roxxel(str(tmp_path / "flat" / "a.rox")).verify()
    os.rename(tmp_path / "flat" / "c_0001.rox", tmp_path / "flat" / "a_0009.rox")
    with pytest.raises(CorruptShardError, match="a_0009.rox: a shard next to .*a.dataset.json that it does not list"):
        Roxxel(str(tmp_path / "flat" / "a.rox")).verify()
