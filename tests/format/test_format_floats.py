"""Float arrays in shards (float16, bfloat16, float32): written, read, checked, shown and streamed,
and refused clearly by every feature that only makes sense for token ids.

Real files on disk; the streamer runs with ``to_device=False`` (this process's numpy rows).
"""

from __future__ import annotations

import json
import os

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from click.testing import CliRunner

from roxxel import Curriculum, Phase, Roxxel
from roxxel.cli import main
from roxxel.format import BlockChecksumError, DatasetWriter, DtypeMismatchError, open_shard

FLOATS = [np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32)]
IDS = [d.name for d in FLOATS]


def _docs(dtype: np.dtype, n: int = 3) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.standard_normal(50 + 7 * i).astype(np.float32).astype(dtype) for i in range(n)]


@pytest.mark.parametrize("dtype", FLOATS, ids=IDS)
def test_each_float_dtype_round_trips_bit_exactly_and_is_detected_on_write(tmp_path, dtype):
    docs = _docs(dtype)
    path = str(tmp_path / "x.rox")
    Roxxel(path).write(docs)  # no dtype given: detected from the first array, as the original did
    ds = Roxxel(path)
    assert ds.dtype == dtype and ds.num_documents == 3 and ds.vocab_size is None and ds.eos_id is None
    shard = open_shard(path)
    assert shard.metadata["dtype"] == dtype.name
    for i, doc in enumerate(docs):
        assert ds[i].dtype == dtype
        assert ds[i].tobytes() == doc.tobytes()
    flat = np.concatenate(docs)
    assert ds.read(10, 120).tobytes() == flat[10:120].tobytes()
    out = np.empty(110, np.float32)
    np.testing.assert_array_equal(ds.read_into(out, 10), flat[10:120].astype(np.float32))
    ds.verify()


def test_a_sharded_float_dataset_records_its_dtype_in_the_manifest(tmp_path):
    with DatasetWriter(str(tmp_path / "dataset.json"), dtype="bfloat16", shard_size=200) as w:
        w.add_documents(_docs(np.dtype(ml_dtypes.bfloat16), 6))
    manifest = json.loads((tmp_path / "dataset.json").read_text())
    assert manifest["dtype"] == "bfloat16"
    ds = Roxxel(str(tmp_path))
    assert ds.num_shards > 1 and ds.dtype == np.dtype(ml_dtypes.bfloat16)


def test_block_checksums_cover_float_data(tmp_path):
    path = str(tmp_path / "x.rox")
    Roxxel(path).write([np.arange(40_000, dtype=np.float32)])  # 160 KB: three 64 KiB blocks
    shard = open_shard(path)
    off = shard.data_offset + 20_000 * 4 + 3  # the exponent byte of value 20,000 (block 1)
    with open(path, "r+b") as f:
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ 0x40]))
    with pytest.raises(BlockChecksumError, match="block 1"):
        Roxxel(path).read(19_990, 20_010)
    np.testing.assert_array_equal(Roxxel(path).read(0, 100), np.arange(100, dtype=np.float32))


def test_float64_and_mixed_inputs_are_refused_with_the_fix(tmp_path):
    # A float64 first array makes a float32 dataset, kept only where float32 holds every value
    # (tests/format/test_format_float_casts.py); float64 itself is not a stored dtype.
    with pytest.raises(DtypeMismatchError, match=r"float64 value 0.1 .* would be stored as 0.100000001.* in float32"):
        Roxxel(str(tmp_path / "a.rox")).write([np.full(4, 0.1)])
    with pytest.raises(ValueError, match=r"'float64'.*astype\(np.float32\)"):
        Roxxel(str(tmp_path / "a.rox")).write([np.zeros(4)], dtype="float64")
    with pytest.raises(DtypeMismatchError, match="tokens must be integers, got float32.*dtype='float32'"):
        Roxxel(str(tmp_path / "b.rox")).write([np.arange(4, dtype=np.uint16), np.zeros(4, np.float32)])
    assert not os.path.exists(tmp_path / "a.rox") and not os.path.exists(tmp_path / "b.rox")


def test_eos_separators_tokenizers_and_vocabularies_refuse_float_data(tmp_path):
    docs = _docs(np.dtype(np.float32))
    for kwargs in ({"separator": 0}, {"separator": b"\n\n"}, {"eos_id": 3}):
        with pytest.raises(ValueError, match="no end-of-document token: drop separator="):
            Roxxel(str(tmp_path / "a.rox")).write(docs, **kwargs)
    with pytest.raises(ValueError, match="not a token stream.*drop vocab_size/eos_id/tokenizer"):
        DatasetWriter(str(tmp_path / "d" / "dataset.json"), dtype="float32", vocab_size=100)


def test_info_and_cat_show_float_data(tmp_path):
    path = str(tmp_path / "x.rox")
    Roxxel(path).write([np.array([0.5, -1.25, 3.0], np.float16), np.array([2.0], np.float16)])
    result = CliRunner().invoke(main, ["info", path])
    assert result.exit_code == 0, result.output
    assert "float16" in result.output and "values" in result.output
    result = CliRunner().invoke(main, ["cat", path, "0"])
    assert result.exit_code == 0 and result.output.split() == ["0.5", "-1.25", "3.0"]
    result = CliRunner().invoke(main, ["cat", path, "0", "--tokenizer", "tok.json"])
    assert result.exit_code == 1 and "float16 arrays, not tokens: nothing to decode; drop --tokenizer" in result.output


@pytest.mark.parametrize("dtype", FLOATS, ids=IDS)
def test_streaming_gives_windows_of_the_float_values_in_their_dtype_or_a_requested_float_one(tmp_path, dtype):
    path = str(tmp_path / "x.rox")
    Roxxel(path).write([np.arange(256, dtype=np.float32).astype(dtype)])  # integers are exact in all three
    curriculum = Curriculum(Roxxel(path), [Phase(steps=4, global_batch_size=4, seq_len=8)], chunk_tokens=8)
    batches = list(curriculum.stream(seed=1, to_device=False, prefetch_size=0))
    assert len(batches) == 4
    rows = np.concatenate(batches)
    assert rows.dtype == dtype and rows.shape == (16, 8)
    values = rows.astype(np.float32)
    # one chunk per row: 8 consecutive values starting at a multiple of 8, no two rows alike
    np.testing.assert_array_equal(values - values[:, :1], np.tile(np.arange(8, dtype=np.float32), (16, 1)))
    assert np.all(values[:, 0] % 8 == 0) and len(set(values[:, 0].tolist())) == 16
    cast = np.concatenate(list(curriculum.stream(seed=1, dtype=jnp.float32, to_device=False, prefetch_size=0)))
    assert cast.dtype == np.float32
    np.testing.assert_array_equal(cast, values)
    on_device = next(iter(curriculum.stream(seed=1, prefetch_size=0)))
    assert on_device.dtype == dtype and on_device.shape == (4, 8)


def test_token_only_streaming_features_refuse_float_data(tmp_path):
    floats = str(tmp_path / "f.rox")
    tokens = str(tmp_path / "t.rox")
    Roxxel(floats).write([np.arange(256, dtype=np.float32)])
    Roxxel(tokens).write([np.arange(256, dtype=np.uint16)])
    phase = [Phase(steps=2, global_batch_size=2, seq_len=8)]
    curriculum = Curriculum(Roxxel(floats), phase, chunk_tokens=8)
    with pytest.raises(
        ValueError, match="outputs='documents' needs token data.*holds float32 arrays.*outputs='tokens'"
    ):
        curriculum.stream(seed=0, outputs="documents", to_device=False)
    with pytest.raises(ValueError, match="dtype int32 would truncate float data.*leave dtype unset"):
        curriculum.stream(seed=0, dtype=np.int32, to_device=False)
    with pytest.raises(ValueError, match="vocab_size=300 checks token ids.*drop vocab_size"):
        Curriculum(Roxxel(floats), phase, chunk_tokens=8, vocab_size=300)
    for primary, mixed in ((floats, tokens), (tokens, floats)):
        with pytest.raises(DtypeMismatchError, match="holds float32 arrays and .* holds token ids"):
            Curriculum(
                {"primary": Roxxel(primary), "other": Roxxel(mixed)},
                [Phase(steps=2, global_batch_size=2, seq_len=8, weights={"primary": 1, "other": 1})],
                chunk_tokens=8,
            )


BITS = {2: np.uint16, 4: np.uint32}  # an unsigned token dtype of each float's width: the same bytes


@pytest.mark.parametrize("dtype", FLOATS, ids=IDS)
def test_float_batches_on_the_batched_read_path_are_the_stored_bytes_and_block_checked(tmp_path, dtype):
    """Streamed float rows are gathered like token rows (one read per row, across shards):
    the same dataset stored as floats and as unsigned ids of the same bits gives the same
    bytes batch for batch; a damaged block in a later shard stops the stream with its name."""
    rng = np.random.default_rng(3)
    docs = [rng.standard_normal(1000).astype(np.float32).astype(dtype) for _ in range(40)]
    shard_bytes = 20_000 * dtype.itemsize  # several shards, two 64 KiB blocks each for float32
    Roxxel(str(tmp_path / "f")).write(docs, max_shard_bytes=shard_bytes)
    Roxxel(str(tmp_path / "u")).write([d.view(BITS[dtype.itemsize]) for d in docs], max_shard_bytes=shard_bytes)

    def batches(name, **kw):
        phase = Phase(steps=20, global_batch_size=8, seq_len=128)
        curriculum = Curriculum(Roxxel(str(tmp_path / name)), [phase], chunk_tokens=256)
        return list(curriculum.stream(seed=5, to_device=False, prefetch_size=0, **kw))

    floats, ids = batches("f"), batches("u", dtype=BITS[dtype.itemsize])
    assert Roxxel(str(tmp_path / "f")).num_shards > 1
    assert len(floats) == len(ids) == 20
    for f, u in zip(floats, ids):
        assert f.dtype == dtype and f.view(BITS[dtype.itemsize]).tobytes() == u.tobytes()

    last = Roxxel(str(tmp_path / "f")).shard_paths[-1]
    shard = open_shard(last)
    with open(last, "r+b") as f:
        f.seek(shard.data_offset + 5)
        b = f.read(1)
        f.seek(shard.data_offset + 5)
        f.write(bytes([b[0] ^ 0x40]))
    with pytest.raises(BlockChecksumError, match="token block 0 "):
        batches("f")
