"""Reads into a dtype that cannot hold every token id are refused, never wrapped.

A new user read byte-level data (ids 0..256) into an int8 array: EOS 256 came back as 0
and the largest id read was 126, with no error. Every read path checks the same rule
(Dataset.check_out_dtype), and a Stream checks it before its first batch.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from roxxel import Curriculum, Phase, Roxxel
from roxxel.data import reader
from roxxel.format import DtypeMismatchError


@pytest.fixture
def byte_level(tmp_path):
    path = str(tmp_path / "bytes")
    Roxxel(path).write(["a first text", "a second one"] * 8, tokenizer="bytes")  # vocab 257, EOS 256
    return Roxxel(path)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_every_read_refuses_a_dtype_that_cannot_hold_the_ids(byte_level, dtype):
    ds = byte_level
    assert (ds.vocab_size, ds.eos_id) == (257, 256)
    reads = {
        "read_into": lambda: ds.read_into(np.empty(8, dtype), 0),
        "gather_into": lambda: reader.gather_into(ds, np.empty(8, dtype), np.array([0, 10]), np.array([4, 4])),
        "gather_rows": lambda: reader.gather_rows(ds, np.empty((2, 4), dtype), np.array([0, 10])),
    }
    for name, read in reads.items():
        with pytest.raises(DtypeMismatchError, match=f"dtype {np.dtype(dtype).name} cannot hold token ids up to 256"):
            read()
    with pytest.raises(DtypeMismatchError, match="cannot hold token ids up to 256"):
        Curriculum(ds, [Phase(steps=2, global_batch_size=2, seq_len=8)]).stream(dtype=dtype, mesh=None)


@pytest.mark.parametrize(
    "dtype",
    [np.int16, np.uint16, np.int32, np.float32, np.float16, ml_dtypes.bfloat16],
    ids=["int16", "uint16", "int32", "float32", "float16", "bfloat16"],
)
def test_a_dtype_that_holds_the_ids_reads_them_exactly(byte_level, dtype):
    ds = byte_level
    want = ds.read(0, 40).astype(np.int64)
    assert want.max() == 256
    assert (ds.read_into(np.empty(40, dtype), 0).astype(np.int64) == want).all()


def test_a_float_dtype_must_represent_every_id_exactly(tmp_path):
    path = str(tmp_path / "large")
    Roxxel(path).write([np.array([1, 2049, 69_999])], vocab_size=70_000)
    ds = Roxxel(path)
    with pytest.raises(DtypeMismatchError, match="dtype float16 cannot hold token ids up to 69999"):
        ds.read_into(np.empty(3, np.float16), 0)  # 2049 would round to 2048
    assert ds.read_into(np.empty(3, np.float32), 0).tolist() == [1, 2049, 69_999]
