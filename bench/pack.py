"""Pack throughput: byte-level ``roxxel pack`` of many files against a bare read + write of the same bytes.

Input: the ``.py`` files of the Python standard library (real text on every machine), found by
each pack itself (the directory walk is part of packing). Baselines, measured in the same
run on a warm page cache, in interleaved rounds (order rotated each round):
  * plain read      - open and read every file (the floor for any packer);
  * read + write    - read every file and write its bytes widened to uint16 (no EOS, checksum,
                      index, fsync or rename): what packing costs in bare I/O (the target's base);
  * read + write + fsync - the same, then one fsync of the file: the bare cost of bytes that
                      survive a crash, which a pack (atomic, durable) cannot go below.
Roxxel is measured with ``--jobs 1`` (one reader thread) and with one process per CPU. Each
figure is the rate over a window of at least ``--seconds`` of timed work (removing the
previous output is not timed); MB/s counts input bytes. Integrity features stay on: block
checksums, the shard's SHA-256, fsync and atomic renames.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import sysconfig
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _measure import interleaved, load_average, median, record  # noqa: E402
from _table import print_samples  # noqa: E402

from roxxel.pack import iter_input_files, pack  # noqa: E402

INCLUDE, EXCLUDE = ["*.py"], ["*/site-packages/*"]


def timed_window(run, window: float, nbytes: int) -> float:
    """Call ``run(k)`` (k = 0, 1, ...) until its timed total reaches ``window`` seconds; bytes per second.

    ``run`` returns the seconds its timed part took (cleanup outside it is not counted).
    """
    spent, k = 0.0, 0
    while spent < window:
        spent += run(k)
        k += 1
    return k * nbytes / spent


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=2.0, help="timed work per figure (default 2 s)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    args = p.parse_args()
    stdlib = sysconfig.get_paths()["stdlib"]
    files = list(iter_input_files([stdlib], INCLUDE, EXCLUDE))
    total = sum(os.path.getsize(f) for f in files)
    jobs = os.cpu_count() or 1
    work = tempfile.mkdtemp(prefix="roxxel-bench-")
    print(f"machine: {load_average()} at start")

    def plain_read(_k: int) -> float:
        t0 = time.perf_counter()
        for f in files:
            with open(f, "rb") as fh:
                fh.read()
        return time.perf_counter() - t0

    def read_write(sync: bool):
        def run(_k: int) -> float:
            t0 = time.perf_counter()
            with open(os.path.join(work, "flat.bin"), "wb") as out:
                for f in files:
                    with open(f, "rb") as fh:
                        out.write(np.frombuffer(fh.read(), np.uint8).astype(np.uint16).tobytes())
                if sync:
                    out.flush()
                    os.fsync(out.fileno())
            return time.perf_counter() - t0
        return run

    def roxxel_pack(n_jobs: int):
        def run(k: int) -> float:
            out = os.path.join(work, f"ds-{n_jobs}-{k}")
            t0 = time.perf_counter()
            pack([stdlib], out, include=INCLUDE, exclude=EXCLUDE, jobs=n_jobs)
            spent = time.perf_counter() - t0
            shutil.rmtree(out)
            return spent
        return run

    methods = {"plain read": plain_read, "read + write": read_write(False), "read + write + fsync": read_write(True),
               "roxxel pack --jobs 1": roxxel_pack(1)}
    if jobs > 1:
        methods[f"roxxel pack --jobs {jobs}"] = roxxel_pack(jobs)
    try:
        plain_read(0)  # warm the page cache for every method alike
        samples = interleaved({n: (lambda w, fn=fn: timed_window(fn, w, total)) for n, fn in methods.items()},
                              args.rounds, args.seconds)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print_samples(f"pack: {len(files)} files, {total / 1e6:.1f} MB of stdlib .py, byte-level tokens", samples, "MB/s",
                  ["read + write", "read + write + fsync"], scale=1e-6, note=f"{args.seconds:g} s windows; {load_average()}")
    m = {n: median(v) for n, v in samples.items()}
    best = max(v for n, v in m.items() if n.startswith("roxxel"))
    record("pack vs read + write", f"{best / m['read + write']:.2f}x", ">= 0.8x", best >= 0.8 * m["read + write"])
    record("pack vs read + write + fsync", f"{best / m['read + write + fsync']:.2f}x", "(for reference)", None)


if __name__ == "__main__":
    main()
