"""The read seam (#52): an open dataset's shard table and each shard's public read handle are
enough to read its tokens, and the reads through them are the dataset's own."""

import os

import numpy as np
import pytest

from roxxel import Roxxel
from roxxel.data import reader
from roxxel.data.dataset import RowRuns as RowRunsFromDataset
from roxxel.data.reader import RowRuns as RowRunsFromReader
from roxxel.data.shard_table import RowRuns


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    path = tmp_path_factory.mktemp("table") / "d"
    docs = [(np.arange(i * 1000, (i + 1) * 1000) % 60000).astype(np.int64) for i in range(40)]
    Roxxel(str(path)).write(docs, vocab_size=65536, dtype="uint16", max_shard_bytes=2 * 9_000)
    return Roxxel(str(path))


def test_the_table_places_every_shard_in_the_dataset(ds):
    table = ds.shard_table
    assert len(table) == ds.num_shards > 3
    assert table.offsets.dtype == np.int64 and table.offsets.shape == (ds.num_shards + 1,)
    assert table.offsets[0] == 0 and table.num_tokens == ds.num_tokens
    assert table.sizes.tolist() == [table.shard(i).num_tokens for i in range(len(table))]
    assert table.dtype == ds.dtype


def test_the_read_handle_reads_what_the_dataset_reads(ds):
    """A reader outside the format package reads a shard's bytes with data_offset and descriptor()."""
    table = ds.shard_table
    for i in (0, len(table) - 1):
        shard = table.shard(i)
        size = table.dtype.itemsize
        raw = os.pread(shard.descriptor(), 100 * size, shard.data_offset + 50 * size)
        start = int(table.offsets[i]) + 50
        assert np.frombuffer(raw, table.dtype).tolist() == ds.read(start, start + 100).tolist()
        assert shard.block_checks is not None and shard.block_checks.block_bytes > 0
        assert shard.file_identity is not None and shard.file_identity[2] == shard.nbytes
        assert shard.with_descriptor(os.fstat).st_size == shard.nbytes


def test_copies_are_counted_on_the_dataset(ds):
    fresh = Roxxel(ds.filepath)
    assert fresh.bytes_read == 0  # (before it opens)
    fresh.read_into(np.empty(10, np.int32), 5)
    reader.gather_rows(fresh, np.empty((3, 8), np.int32), np.array([0, 100, 20_000]))
    assert fresh.bytes_read == (10 + 24) * 2
    fresh.bytes_read = 0
    assert fresh.shard_table.bytes_read == 0


def test_row_runs_keep_their_names():
    assert RowRunsFromDataset is RowRunsFromReader is RowRuns
