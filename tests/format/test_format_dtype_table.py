"""The shard dtype table (``roxxel.format.layout.SHARD_DTYPES``): every row round-trips through
write -> read, and what a dataset allows (an EOS id, vocabulary checks, decoding) follows the row.

Enumerates the table, so a new row is tested without a new test.
"""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from roxxel.cli import main
from roxxel.data.dataset import Dataset
from roxxel.format import DatasetWriter, DtypeMismatchError, open_shard
from roxxel.format.layout import (
    FLOAT_DTYPES,
    HEADER,
    SHARD_DTYPES,
    TOKEN_DTYPES,
    Kind,
    ShardDtype,
    dtype_for_code,
    normalize_dtype,
    shard_dtype,
)
from roxxel.tokenizers import ByteTokenizer

ROWS = pytest.mark.parametrize("row", SHARD_DTYPES, ids=[row.name for row in SHARD_DTYPES])
TEXT = [b"hello", b"world!"]


def _documents(row: ShardDtype) -> list[np.ndarray]:
    """Documents the row holds: the bytes of TEXT as ids, or float values (exact in every float dtype)."""
    if row.ids:
        return [np.frombuffer(t, np.uint8).astype(row.numpy) for t in TEXT]
    return [np.array([0.5, -1.25, 3.0], row.numpy), np.array([2.5], row.numpy)]


def _write(tmp_path, row: ShardDtype) -> str:
    """A dataset of the row's documents; token ids carry the byte tokenizer's identity and EOS,
    unless the row's ids are bytes without one."""
    tok = row.ids and not row.bytes_without_tokenizer
    opts = (
        dict(vocab_size=ByteTokenizer.vocab_size, eos_id=ByteTokenizer.eos_id, tokenizer=ByteTokenizer.identity)
        if tok
        else {}
    )
    with DatasetWriter(str(tmp_path / "ds" / "dataset.json"), dtype=row.name, **opts) as w:
        w.add_documents(_documents(row))
    return str(tmp_path / "ds")


@ROWS
def test_each_row_round_trips_through_write_and_read_with_its_header_code(tmp_path, row):
    path = _write(tmp_path, row)
    shard = open_shard(str(tmp_path / "ds" / "shard-00000.rox"))
    with open(shard.path, "rb") as f:
        code = HEADER.unpack(f.read(HEADER.size))[8]
    assert code == row.code and dtype_for_code(code) == row
    assert shard.dtype == row.numpy and shard.metadata["dtype"] == row.name
    ds = Dataset(path).open()
    assert ds.dtype == row.numpy and ds.num_documents == len(TEXT)
    eos = 1 if ds.eos_id is not None else 0
    for i, doc in enumerate(_documents(row)):
        assert ds[i][: len(ds[i]) - eos].tobytes() == doc.tobytes()
    ds.verify()


@ROWS
def test_an_eos_id_is_taken_exactly_where_the_row_allows_it(tmp_path, row):
    manifest = str(tmp_path / "dataset.json")
    if row.eos_allowed:
        with DatasetWriter(manifest, dtype=row.name, eos_id=1) as w:
            w.add_document(np.array([7], row.numpy))
        assert Dataset(str(tmp_path)).open()[0].tolist() == [7, 1]
    else:
        with pytest.raises(ValueError, match=f"{row.name} data is not a token stream"):
            DatasetWriter(manifest, dtype=row.name, eos_id=1)


@ROWS
def test_ids_are_checked_against_the_vocabulary_and_the_dtype_exactly_where_the_row_says(tmp_path, row):
    manifest = str(tmp_path / "dataset.json")
    if not row.vocab_checked:
        assert row.id_limit == 0
        with pytest.raises(ValueError, match="drop vocab_size/eos_id/tokenizer"):
            DatasetWriter(manifest, dtype=row.name, vocab_size=10)
        return
    with DatasetWriter(manifest, dtype=row.name, vocab_size=10) as w:
        w.add_document(np.array([9], np.int64))
        with pytest.raises(DtypeMismatchError, match=r"token 10 is outside \[0, 10\)"):
            w.add_document(np.array([10], np.int64))
    with DatasetWriter(str(tmp_path / "b" / "dataset.json"), dtype=row.name) as w:  # no vocabulary: the dtype's range
        w.add_document(np.array([row.id_limit - 1], np.int64))
        with pytest.raises(DtypeMismatchError, match=f"token {row.id_limit} is outside"):
            w.add_document(np.array([row.id_limit], np.int64))


@ROWS
def test_cat_decodes_exactly_the_rows_that_decode_and_prints_the_values_of_the_others(tmp_path, row):
    path = _write(tmp_path, row)
    result = CliRunner().invoke(main, ["cat", path, "1"])
    assert result.exit_code == 0, result.output
    if row.decodes:  # bytes without a tokenizer as they are; the others through the recorded tokenizer
        assert result.stdout_bytes == TEXT[1]
    else:
        assert [float(v) for v in result.output.split()] == [2.5]  # bfloat16 prints its own repr
    info = CliRunner().invoke(main, ["info", path])
    assert info.exit_code == 0 and ("tokens" if row.ids else "values") in info.output


@ROWS
def test_a_rows_aliases_are_written_as_it_and_its_legacy_names_read_as_it(tmp_path, row):
    for name in (row.name, *row.aliases):
        assert normalize_dtype(name) == row.numpy
    for name in row.legacy_names:  # an original ROXXEL02 shard: one 8-byte block, its end offset, the footer
        data = np.arange(8 // np.dtype(name).itemsize, dtype=name).tobytes()
        footer = np.array([1, 8], "<i8").tobytes() + name.encode().ljust(8, b"\0") + b"ROXXEL02"
        (tmp_path / "old.rox").write_bytes(data + np.array([8], "<i8").tobytes() + footer)
        assert Dataset(str(tmp_path / "old.rox")).open().dtype == row.numpy


def test_the_name_lists_and_kinds_come_from_the_table():
    assert TOKEN_DTYPES == tuple(r.name for r in SHARD_DTYPES if r.kind in (Kind.TOKEN_IDS, Kind.BYTES))
    assert FLOAT_DTYPES == tuple(r.name for r in SHARD_DTYPES if r.kind is Kind.FLOAT_ARRAYS)
    assert all(shard_dtype(r.numpy) is r for r in SHARD_DTYPES)
    with pytest.raises(ValueError, match="does not fit the header's 8 bytes"):
        ShardDtype("float8_e4m3fn", Kind.FLOAT_ARRAYS)


def test_an_original_float64_shard_outside_the_table_is_shown_as_values(tmp_path):
    """Only original-format shards hold a dtype outside the table; a float one is arrays, not ids."""
    data = np.array([0.5, 2.0], "<f8").tobytes()
    footer = np.array([1, 16], "<i8").tobytes() + b"float64\0" + b"ROXXEL02"
    path = tmp_path / "old.rox"
    path.write_bytes(data + np.array([16], "<i8").tobytes() + footer)
    assert not shard_dtype("float64").ids and shard_dtype("int32").ids
    result = CliRunner().invoke(main, ["cat", str(path), "0"])
    assert result.exit_code == 0 and result.output.split() == ["0.5", "2.0"]
    info = CliRunner().invoke(main, ["info", str(path)])
    assert info.exit_code == 0 and "values" in info.output
