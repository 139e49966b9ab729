"""Block checksums: new shards use hardware CRC-32C; shards written with CRC-32 still read and are still checked."""

import os

import numpy as np
import pytest

from roxxel import Curriculum, Phase, Roxxel
from roxxel.data import reader
from roxxel.format import BlockChecksumError, CorruptShardError, DatasetWriter, open_shard
from roxxel.format import blocks
from support.shards import flip_byte


def write(path, doc=70_000):
    rng = np.random.default_rng(1)
    with DatasetWriter(os.path.join(path, "dataset.json"), vocab_size=257, eos_id=256, dtype="uint16") as w:
        for _ in range(3):
            w.add_document(rng.integers(0, 256, doc))
    return str(path)


def stream_all(d):
    c = Curriculum(Roxxel(d), [Phase(global_batch_size=4, seq_len=512)], chunk_tokens=2048)
    return list(c.stream(seed=0, to_device=False, prefetch_size=0))


def test_new_shards_name_crc32c_and_its_table_matches_the_data(tmp_path):
    import google_crc32c

    d = write(tmp_path)
    s = open_shard(Roxxel(d).shard_paths[0])
    assert s.metadata["block_checksums"]["algorithm"] == "crc32c" and s._blocks.algorithm == "crc32c"
    raw = s.tokens.tobytes()
    want = [google_crc32c.value(raw[i : i + s._blocks.block_bytes]) for i in range(0, len(raw), s._blocks.block_bytes)]
    assert s._blocks.crcs(s.descriptor()).tolist() == want
    s.verify()


@pytest.mark.parametrize("algorithm", ["crc32", "crc32c"])
def test_both_algorithms_read_the_same_tokens_and_catch_a_flipped_byte(tmp_path, monkeypatch, algorithm):
    monkeypatch.setattr(blocks, "DEFAULT_ALGORITHM", algorithm)  # as the first 1.1 writers did for "crc32"
    d = write(tmp_path / algorithm)
    monkeypatch.undo()
    shard = Roxxel(d).shard_paths[0]
    assert open_shard(shard).metadata["block_checksums"]["algorithm"] == algorithm
    clean = stream_all(d)
    flip_byte(shard, 100_000)  # block 3 of 32,768-token blocks
    name = {"crc32": "CRC-32", "crc32c": "CRC-32C"}[algorithm]
    with pytest.raises(BlockChecksumError, match=rf"token block 3 .*fails its {name} check"):
        stream_all(d)
    assert len(clean) > 0


def test_unknown_algorithm_is_refused_on_open(tmp_path, monkeypatch):
    monkeypatch.setitem(blocks.ALGORITHMS, "md5", blocks.ALGORITHMS["crc32"])
    monkeypatch.setattr(blocks, "DEFAULT_ALGORITHM", "md5")
    d = write(tmp_path, doc=100)
    monkeypatch.undo()
    with pytest.raises(CorruptShardError, match=r"malformed block_checksums entry .*algorithms read: crc32, crc32c"):
        Roxxel(d).read(0, 10)


def test_a_batch_gather_checks_a_damaged_block_even_when_its_neighbours_are_checked(tmp_path):
    d = write(tmp_path)
    shard = Roxxel(d).shard_paths[0]
    ds = Roxxel(d).open()
    ds.read(0, ds.num_tokens)  # every block checked in this process
    flip_byte(shard, 150_000)
    ds2 = Roxxel(d).open()
    starts = np.array([10, 40_000, 149_990, 200_000])
    reader.gather_into(ds2, np.empty(8, np.int32), starts[:1], np.array([8]))  # block 0 only: fine
    with pytest.raises(BlockChecksumError, match="token block 4 "):
        reader.gather_into(ds2, np.empty(4 * 64, np.int32), starts, np.full(4, 64))
