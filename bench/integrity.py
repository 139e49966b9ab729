"""Cost of the per-block CRC-32 checks on the read path: checks on next to off, same run, same page cache.

Each block of 64 KiB of token data is checked the first time a process reads it, so
the cost is paid once per block per process: the first epoch pays it, later epochs
only look up the map of checked blocks. Rows:
  * read path       - ``gather_into`` of every chunk of the dataset in a shuffled order
                      (what the streamer issues), first and second epoch;
  * stream          - host rows of ``Curriculum.stream`` (``to_device=False``) for one epoch.
"check off" is ``Roxxel(path, check_blocks=False)``, the baseline of each table. Each
measurement is the best of ``REPEATS`` fresh opens (a fresh open forgets the checked blocks).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _table import print_table  # noqa: E402

from roxxel import Curriculum, Phase, Roxxel  # noqa: E402
from roxxel.data import reader  # noqa: E402
from roxxel.format import DatasetWriter  # noqa: E402

TOKENS = 32_000_000  # 64 MB of uint16, held in the page cache
CHUNK = 16_384
REPEATS = 3


def write(path: str) -> None:
    rng = np.random.default_rng(0)
    with DatasetWriter(os.path.join(path, "dataset.json"), vocab_size=50_001, eos_id=50_000, dtype="uint16") as w:
        for start in range(0, TOKENS, 1_000_000):
            w.add_document(rng.integers(0, 50_000, 1_000_000, dtype=np.uint16))


def read_epochs(path: str, check: bool) -> tuple[float, float]:
    """Seconds for the first and the second shuffled pass over every chunk."""
    ds = Roxxel(path, check_blocks=check).open()
    n = ds.num_tokens // CHUNK
    starts = np.random.default_rng(1).permutation(n).astype(np.int64) * CHUNK
    out = np.empty(16 * CHUNK, ds.dtype)
    times = []
    for _ in range(2):
        t0 = time.perf_counter()
        for i in range(0, n - 15, 16):
            reader.gather_into(ds, out, starts[i : i + 16], np.full(16, CHUNK, np.int64))
        times.append(time.perf_counter() - t0)
    ds.close()
    return times[0], times[1]


def stream_epoch(path: str, check: bool) -> float:
    ds = Roxxel(path, check_blocks=check)
    c = Curriculum(ds, [Phase(global_batch_size=16, seq_len=2048)])
    t0 = time.perf_counter()
    for _ in c.stream(seed=0, to_device=False, prefetch_size=0):
        pass
    return time.perf_counter() - t0


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="roxxel-bench-integrity-") as work:
        write(work)
        Roxxel(work).read_into(np.empty(TOKENS, np.uint16), 0)  # warm the page cache for both
        first = {True: [], False: []}
        second = {True: [], False: []}
        stream = {True: [], False: []}
        for _ in range(REPEATS):
            for check in (False, True):  # interleaved, so drift hits both alike
                a, b = read_epochs(work, check)
                first[check].append(a)
                second[check].append(b)
                stream[check].append(stream_epoch(work, check))
        mtok = TOKENS / 1e6
        for title, data in (
            ("read path, first epoch (every block checked once)", first),
            ("read path, second epoch (blocks already checked)", second),
            ("stream host rows 16x2048, one epoch", stream),
        ):
            rows = [("check off", mtok / min(data[False])), ("check on", mtok / min(data[True]))]
            print_table(f"{title}: {TOKENS:,} uint16 tokens, chunks of {CHUNK}", rows, "Mtok/s", "check off")
            print()


if __name__ == "__main__":
    main()
