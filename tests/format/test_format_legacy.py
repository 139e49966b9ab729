"""Shards of the original Roxxel (ROXXEL02) decode exactly, read-only."""

import hashlib
import json

import numpy as np
import pytest

from roxxel import Roxxel
from roxxel.format import LegacyShard, open_shard


@pytest.fixture
def expected(seed_dir):
    return json.loads((seed_dir / "expected.json").read_text())


def test_text_bytes_payload(seed_dir, expected):
    want = expected["text_bytes.rox"]
    ds = Roxxel(str(seed_dir / "text_bytes.rox"))
    assert ds.dtype == np.dtype("uint8")
    payload = ds.read(0, want["payload_len"]).tobytes()
    assert hashlib.sha256(payload).hexdigest() == want["payload_sha256"]
    lines = payload.decode("utf-8").split("\n")
    assert len([line for line in lines if line]) == 200
    # The original's records are uniform blocks.
    shard = open_shard(str(seed_dir / "text_bytes.rox"))
    assert isinstance(shard, LegacyShard) and shard.block_size == want["block_size"]
    assert all(len(ds[i]) == want["block_size"] for i in range(len(ds)))
    ds.verify()


def test_token_shards_across_files(seed_dir, expected):
    want = expected["tokens_*.rox"]
    ds = Roxxel(str(seed_dir / "tokens_*.rox"))
    assert ds.num_shards == 5 and ds.dtype == np.dtype("int32")
    tokens = ds.read(0, want["num_tokens"])
    assert hashlib.sha256(tokens.astype("<i4").tobytes()).hexdigest() == want["tokens_sha256"]
    assert tokens[:16].tolist() == want["first_tokens"]
    assert tokens[-16:].tolist() == want["last_tokens"]
    assert not ds.read(want["num_tokens"], ds.num_tokens).any()  # the last block's zero padding
    # The original's prefix form names the same shards.
    assert Roxxel(str(seed_dir / "tokens.rox")).num_tokens == ds.num_tokens


def test_legacy_int16_reads_as_uint16(tmp_path):
    """Rebuild an original int16 shard byte for byte: ids >= 32,768 come back whole."""
    ids = np.array([5, 40000, 65000, 7], np.int64)
    data = ids.astype(np.int16).tobytes() + b"\0" * 8  # one 16-byte block
    footer = np.array([1, 16], "<i8").tobytes() + b"int16\0\0\0" + b"ROXXEL02"
    p = tmp_path / "old.rox"
    p.write_bytes(data + np.array([16], "<i8").tobytes() + footer)
    ds = Roxxel(str(p))
    assert ds.dtype == np.dtype("uint16")
    assert ds.read(0, 4).tolist() == ids.tolist()


def test_legacy_files_are_not_written(seed_dir, tmp_path):
    import shutil

    copy = tmp_path / "text_bytes.rox"
    shutil.copy(seed_dir / "text_bytes.rox", copy)
    before = copy.read_bytes()
    ds = Roxxel(str(copy))
    ds.read(0, 100)
    ds.close()
    assert copy.read_bytes() == before
