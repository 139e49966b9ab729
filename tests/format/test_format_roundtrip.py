"""Writing and reading shards and datasets: round trips for every token dtype."""

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from roxxel import Roxxel
from roxxel.format import DatasetWriter, DtypeMismatchError, Manifest, open_shard
from roxxel.format.layout import DATA_ALIGNMENT, token_dtype_for_vocab

DTYPE_VOCAB = {"uint8": 256, "uint16": 65536, "uint32": 2**32}


@st.composite
def documents(draw, vocab):
    n = draw(st.integers(0, 12))
    lens = draw(st.lists(st.integers(0, 300), min_size=n, max_size=n))
    seed = draw(st.integers(0, 2**31))
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, size=k, dtype=np.uint64) for k in lens]


@pytest.mark.parametrize("dtype", list(DTYPE_VOCAB))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_documents_round_trip(tmp_path_factory, dtype, data):
    vocab = DTYPE_VOCAB[dtype]
    docs = data.draw(documents(vocab - 1))  # the last id is the EOS
    shard_size = data.draw(st.sampled_from([1, 5000, 10**9]))
    out = tmp_path_factory.mktemp("ds")
    with DatasetWriter(
        str(out / "dataset.json"), dtype=dtype, vocab_size=vocab, eos_id=vocab - 1, shard_size=shard_size
    ) as w:
        for d in docs:
            w.add_document(d)
    if not docs:
        assert Manifest.load(str(out / "dataset.json")).num_tokens == 0
        return
    ds = Roxxel(str(out))
    assert ds.dtype == np.dtype(dtype)
    assert len(ds) == len(docs)
    assert ds.num_tokens == sum(len(d) + 1 for d in docs)
    flat = np.concatenate([np.append(d, vocab - 1) for d in docs]).astype(dtype)
    for i, d in enumerate(docs):
        got = ds[i]
        assert np.array_equal(got[:-1], d) and got[-1] == vocab - 1
    # Any range, also across shard boundaries.
    a = data.draw(st.integers(0, len(flat)))
    b = data.draw(st.integers(a, len(flat)))
    assert np.array_equal(ds.read(a, b), flat[a:b])
    assert np.array_equal(ds.read_into(np.empty(b - a, np.int64), a), flat[a:b])
    ds.verify()


def test_ids_above_32767_survive_in_uint16(tmp_path):
    """The original stored 65,535-id vocabularies as int16, turning ids >= 32,768 negative."""
    ids = np.array([0, 32767, 32768, 50000, 65534], np.int64)
    Roxxel(str(tmp_path / "ds")).write([ids], vocab_size=65535, eos_id=65534, dtype="int16")
    ds = Roxxel(str(tmp_path / "ds"))
    assert ds.dtype == np.dtype("uint16")
    assert ds[0].tolist() == ids.tolist() + [65534]


def test_dtype_from_vocabulary():
    assert token_dtype_for_vocab(257) == np.dtype("uint16")
    assert token_dtype_for_vocab(65536) == np.dtype("uint16")
    assert token_dtype_for_vocab(65537) == np.dtype("uint32")


def test_token_outside_vocabulary_is_refused(tmp_path):
    with pytest.raises(DtypeMismatchError, match=r"document 1: token 300 is outside \[0, 257\)"):
        with DatasetWriter(str(tmp_path / "dataset.json"), vocab_size=257, eos_id=256) as w:
            w.add_document([1, 2])
            w.add_document(np.array([5, 300]))
    assert not os.path.exists(tmp_path / "dataset.json")
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".rox")]


def test_float64_documents_are_refused_where_float32_would_change_them(tmp_path):
    # float16/bfloat16/float32 arrays are stored (tests/format/test_format_floats.py); float64 ones
    # as float32 where that keeps every value (tests/format/test_format_float_casts.py)
    with pytest.raises(ValueError, match="float arrays are stored as float16, bfloat16, float32, got 'float64'"):
        Roxxel(str(tmp_path / "x.rox")).write([np.zeros(3, np.float64)], dtype="float64")
    with pytest.raises(ValueError, match="float64 value 1e-300 .* would be stored as 0.0 in float32"):
        Roxxel(str(tmp_path / "x.rox")).write([np.full(3, 1e-300)])
    Roxxel(str(tmp_path / "x.rox")).write([np.zeros(3, np.float64)])
    assert Roxxel(str(tmp_path / "x.rox")).dtype == np.float32


def test_token_data_is_page_aligned_and_zero_copy(tmp_path):
    Roxxel(str(tmp_path / "ds")).write([np.arange(1000)], vocab_size=1001, eos_id=1000)
    shard = open_shard(str(tmp_path / "ds" / "shard-00000.rox"))
    assert shard.data_offset % DATA_ALIGNMENT == 0
    view = shard.tokens[10:20]
    assert not view.flags.owndata and not view.flags.writeable
    ds = Roxxel(str(tmp_path / "ds"))
    assert not ds.read(5, 50).flags.owndata  # inside one shard: a view of the map


def test_shards_roll_over_and_documents_stay_whole(tmp_path):
    docs = [np.full(1000, i, np.uint16) for i in range(20)]
    m = Roxxel(str(tmp_path / "ds")).write(docs, vocab_size=100, eos_id=99, max_shard_bytes=10_000)
    assert len(m.shards) > 3
    for s in m.shards:
        shard = open_shard(str(tmp_path / "ds" / s.path))
        assert shard.nbytes == s.bytes and shard.sha256 == s.sha256
        for k in range(shard.num_documents):
            a, b = shard.document_bounds(k)
            assert b - a == 1001  # a document never spans shards
    assert m.num_documents == 20


def test_document_streamed_in_chunks(tmp_path):
    chunks = (np.full(10_000, i % 256, np.uint8) for i in range(50))
    with DatasetWriter(str(tmp_path / "dataset.json"), vocab_size=257, eos_id=256) as w:
        w.add_document(chunks)
    ds = Roxxel(str(tmp_path))
    assert ds.num_tokens == 500_001 and ds.num_documents == 1
    assert ds.read(10_000 * 7, 10_000 * 7 + 3).tolist() == [7, 7, 7]


def test_opening_reads_no_token_data(tmp_path, monkeypatch):
    Roxxel(str(tmp_path / "ds")).write([np.arange(50)] * 30, vocab_size=51, eos_id=50, max_shard_bytes=4500)
    import roxxel.data.shard_table as table_mod

    opened = []
    real = table_mod.open_shard
    monkeypatch.setattr(table_mod, "open_shard", lambda p: opened.append(p) or real(p))
    ds = Roxxel(str(tmp_path / "ds")).open()
    assert ds.num_tokens == 30 * 51 and opened == []  # the manifest alone describes the dataset
    ds.read(0, 10)
    assert len(opened) == 1
    raw = Roxxel(str(tmp_path / "ds" / "*.rox")).open()  # no manifest: headers only, no maps
    assert all(s._mmap is None for s in raw.shard_table.known())
