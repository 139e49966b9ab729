"""Pack throughput: byte-level ``roxxel pack`` against a plain read of the same files.

Input: the ``.py`` files of the Python standard library (real text on every machine).
Baselines, measured in the same run on a warm page cache:
  * plain read      - open and read every file (the floor for any packer);
  * read + write    - read every file and write its bytes widened to uint16 (no checksum,
                      no index): what packing costs in bare I/O.
MB/s counts input bytes.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _table import print_table  # noqa: E402

from roxxel.pack import iter_input_files, pack  # noqa: E402

REPEATS = 3


def best_of(fn) -> float:
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    stdlib = sysconfig.get_paths()["stdlib"]
    include, exclude = ["*.py"], ["*/site-packages/*"]
    files = list(iter_input_files([stdlib], include, exclude))
    total = sum(os.path.getsize(f) for f in files)
    work = tempfile.mkdtemp(prefix="roxxel-bench-")
    try:
        def plain_read():
            for f in files:
                with open(f, "rb") as fh:
                    fh.read()

        def read_write():
            with open(os.path.join(work, "flat.bin"), "wb") as out:
                for f in files:
                    with open(f, "rb") as fh:
                        out.write(np.frombuffer(fh.read(), np.uint8).astype(np.uint16).tobytes())

        runs = iter(range(10**6))

        def roxxel_pack():
            pack([stdlib], os.path.join(work, f"ds{next(runs)}"), include=include, exclude=exclude)

        plain_read()  # warm the page cache for every method alike
        rows = [(name, total / best_of(fn) / 1e6) for name, fn in
                [("plain read", plain_read), ("read + write", read_write), ("roxxel pack", roxxel_pack)]]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print_table(f"pack: {len(files)} files, {total / 1e6:.1f} MB of stdlib .py, byte-level tokens (best of {REPEATS})",
                rows, "MB/s", "plain read")


if __name__ == "__main__":
    main()
