"""Documents written as a list go out in runs (one write per shard), yet the shards are byte for
byte those of one ``add_document`` per document: same rollover points, index, checksums, EOS."""

import os

import numpy as np
import pytest

from roxxel.format import DatasetWriter
from roxxel.format import dataset_writer as writer_module  # its _now dates the manifest
from roxxel.format.errors import DtypeMismatchError


@pytest.fixture(autouse=True)
def fixed_clock(monkeypatch):
    """Shards record their creation time; pin it so that two writes can be compared byte for byte."""
    monkeypatch.setattr(writer_module, "_now", lambda: "2026-01-01T00:00:00+00:00")


def documents(seed: int, n: int, dtype, high: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    lengths = rng.choice([0, 1, 7, 300, 2000, 9000], n)  # empty ones, and ones larger than a small shard
    return [rng.integers(0, high, int(k)).astype(dtype) for k in lengths]


def write(directory, docs, batched: bool, batch: int = 13, **kw) -> dict[str, bytes]:
    with DatasetWriter(os.path.join(directory, "dataset.json"), **kw) as w:
        if batched:
            for i in range(0, len(docs), batch):
                w.add_documents(docs[i : i + batch])
        else:
            for d in docs:
                w.add_document(d)
    return {name: open(os.path.join(directory, name), "rb").read() for name in sorted(os.listdir(directory))}


@pytest.mark.parametrize(
    "dtype,high,kw",
    [
        (np.uint8, 256, dict(vocab_size=257, eos_id=256, shard_size=5000)),  # bytes, many rollovers
        (np.uint8, 256, dict(vocab_size=257, eos_id=256)),  # one shard
        (np.uint32, 50_000, dict(vocab_size=50_000, eos_id=0, shard_size=40_000)),  # narrowed, range-checked
        (np.int64, 70_000, dict(vocab_size=70_000, eos_id=None, shard_size=60_000)),  # uint32 tokens, no EOS
    ],
)
def test_runs_of_documents_write_the_same_bytes_as_one_document_at_a_time(tmp_path, dtype, high, kw):
    docs = documents(0, 120, dtype, high)
    one_by_one = write(tmp_path / "one", docs, batched=False, **kw)
    in_runs = write(tmp_path / "runs", docs, batched=True, **kw)
    assert list(in_runs) == list(one_by_one) and len([n for n in in_runs if n.endswith(".rox")]) >= 1
    for name in one_by_one:
        assert in_runs[name] == one_by_one[name], name


def test_a_bad_token_in_a_run_fails_naming_the_document_after_writing_the_ones_before(tmp_path):
    good = documents(1, 3, np.int64, 257)
    bad = np.array([5, 300, 7])
    w = DatasetWriter(os.path.join(tmp_path, "dataset.json"), vocab_size=257, eos_id=256)
    with pytest.raises(DtypeMismatchError, match=r"document 3: token 300 is outside \[0, 257\)"):
        w.add_documents([*good, bad, good[0]])
    assert w.num_documents == 3 and w.num_tokens == sum(len(d) + 1 for d in good)
    w.abort()
    assert not [n for n in os.listdir(tmp_path) if not n.startswith(".")]
