"""Host RAM stays flat while reading through a dataset larger than the RSS budget."""

import gc

import numpy as np
import psutil
import pytest

from roxxel import Roxxel
from roxxel.format import DatasetWriter

MiB = 1 << 20


@pytest.mark.slow
def test_reading_2gb_keeps_rss_within_64mib(tmp_path):
    chunk = 16 * MiB  # tokens per document (32 MiB of uint16)
    n_docs = 64  # 64 x 32 MiB = 2 GiB of token data
    with DatasetWriter(str(tmp_path / "dataset.json"), vocab_size=65536, shard_size=512 * MiB) as w:
        block = (np.arange(chunk, dtype=np.uint32) % 65536).astype(np.uint16)
        for i in range(n_docs):
            block[0] = i
            w.add_document(block)
    del block
    gc.collect()
    proc = psutil.Process()
    baseline = proc.memory_info().rss
    ds = Roxxel(str(tmp_path))
    assert ds.nbytes > 2 * 1024 * MiB
    peak = 0
    step = 4 * MiB
    total = 0
    for start in range(0, ds.num_tokens, step):  # zero-copy views, touched page by page
        view = ds.read(start, min(start + step, ds.num_tokens))
        total += int(view[::4096].astype(np.int64).sum()) + int(view[-1])
        peak = max(peak, proc.memory_info().rss)
    out = np.empty(3 * MiB + 17, np.int32)
    for start in range(0, ds.num_tokens - len(out), 5 * MiB):  # copies across shard boundaries
        ds.read_into(out, start)
        peak = max(peak, proc.memory_info().rss)
    assert total > 0
    assert ds.read(0, 1)[0] == 0 and ds[63][0] == 63
    assert peak - baseline < 64 * MiB, f"RSS grew by {(peak - baseline) / MiB:.1f} MiB"
