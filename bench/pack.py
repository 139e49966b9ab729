"""Pack throughput: byte-level ``roxxel pack`` of many files against a bare read + write of the same bytes.

Input: the ``.py`` files of the Python standard library (real text on every machine), found by
each pack itself (the directory walk is part of packing). Baselines, measured in the same
run on a warm page cache, in interleaved rounds (order rotated each round):
  * plain read      - open and read every file (the floor for any packer);
  * read + write    - read every file (the list given) and write its bytes widened to uint16
                      with a 2-byte separator after each, i.e. the pack's token bytes (its header,
                      index and checksums add 0.05%), with no checksum, hash, fsync or rename:
                      what packing costs in bare I/O (the target's base);
  * walk + read + write - the same, finding the files itself as the pack does (with the
                      pack's own directory walk): the fair base for a pack of a directory;
  * read + write + fsync - read + write, then one fsync of the file: the bare cost of bytes
                      that survive a crash, which a pack (atomic, durable) cannot go below.
Every method writes a fresh file (or dataset) each time, removed outside the timed part, so
none pays for truncating the last one. Roxxel is measured with ``--jobs 1`` (a reader thread,
the writing thread, a checksum thread) and with ``--jobs`` one per CPU (which byte-level packing
of text files ignores: the same threads; the row shows that asking for a pool costs nothing).
Each figure is the rate over a window of at least ``--seconds`` of timed work; MB/s counts
input bytes. A second table gives the process CPU time per pass (all threads): on a shared
machine the wall-clock ratio follows it. Integrity features stay on: block checksums, the
shard's SHA-256, fsync and atomic renames.

Everything is measured in two places (``--places``):
  * memory - a tmpfs (``/dev/shm``): writing is a copy into memory and an fsync costs
    nothing, so the table shows what the software costs against the bare copy. The
    target is read here: pack >= 0.8x read + write.
  * disk - the temporary directory. A pack makes its shards durable before it names them,
    so it cannot end before the disk has taken every byte; ``read + write + fsync`` is that
    floor, and the disk's write speed sets how far it lies below a bare read + write (whose
    bytes are still in the page cache when its window ends).
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


def timed_window(run, window: float, nbytes: int, cpu: list[float]) -> float:
    """Call ``run(k)`` (k = 0, 1, ...) until its timed total reaches ``window`` seconds; bytes per second.

    ``run`` returns the seconds its timed part took (cleanup outside it is not counted) and
    the process CPU seconds of that part; the mean CPU per call is appended to ``cpu``.
    """
    spent, used, k = 0.0, 0.0, 0
    while spent < window:
        wall, proc = run(k)
        spent, used, k = spent + wall, used + proc, k + 1
    cpu.append(used / k)
    return k * nbytes / spent


def timed(fn) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of ``fn()``."""
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def walk(top: str) -> list[str]:
    """The files a pack of ``top`` takes, found by the pack's own walk (so neither side gains from it)."""
    return list(iter_input_files([top], INCLUDE, EXCLUDE))


PLACES = {"memory": "/dev/shm", "disk": tempfile.gettempdir()}


def measure(place: str, top: str, files: list[str], total: int, args: argparse.Namespace) -> None:
    """The tables and targets of one place (see the module docstring), writing under ``top``."""
    jobs = os.cpu_count() or 1
    work = tempfile.mkdtemp(prefix="roxxel-bench-", dir=top)
    stdlib = sysconfig.get_paths()["stdlib"]
    separator = np.uint16(256).tobytes()

    def plain_read(_k: int) -> tuple[float, float]:
        def run():
            for f in files:
                with open(f, "rb") as fh:
                    fh.read()

        return timed(run)

    def read_write(sync: bool = False, find: bool = False):
        def run(k: int) -> tuple[float, float]:
            path = os.path.join(work, f"flat-{sync:d}{find:d}-{k}.bin")

            def copy():
                with open(path, "wb") as out:
                    for f in walk(stdlib) if find else files:
                        with open(f, "rb") as fh:
                            out.write(np.frombuffer(fh.read(), np.uint8).astype(np.uint16).tobytes())
                        out.write(separator)
                    if sync:
                        out.flush()
                        os.fsync(out.fileno())

            spent = timed(copy)
            os.remove(path)
            return spent

        return run

    def roxxel_pack(n_jobs: int):
        def run(k: int) -> tuple[float, float]:
            out = os.path.join(work, f"ds-{n_jobs}-{k}")
            spent = timed(lambda: pack([stdlib], out, include=INCLUDE, exclude=EXCLUDE, jobs=n_jobs))
            shutil.rmtree(out)
            return spent

        return run

    durable = place != "memory"  # on a tmpfs an fsync is a no-op: the row would repeat read + write
    methods = {"plain read": plain_read, "read + write": read_write(), "walk + read + write": read_write(find=True)}
    if durable:
        methods["read + write + fsync"] = read_write(sync=True)
    methods["roxxel pack --jobs 1"] = roxxel_pack(1)
    if jobs > 1:
        methods[f"roxxel pack --jobs {jobs}"] = roxxel_pack(jobs)
    cpu: dict[str, list[float]] = {n: [] for n in methods}
    try:
        plain_read(0)  # warm the page cache for every method alike
        samples = interleaved(
            {n: (lambda w, fn=fn, n=n: timed_window(fn, w, total, cpu[n])) for n, fn in methods.items()},
            args.rounds,
            args.seconds,
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    title = f"pack to {place} ({top}): {len(files)} files, {total / 1e6:.1f} MB of stdlib .py, byte-level tokens"
    bases = ["read + write", "walk + read + write"] + (["read + write + fsync"] if durable else [])
    print_samples(title, samples, "MB/s", bases, scale=1e-6, note=f"{args.seconds:g} s windows; {load_average()}")
    print()
    print_samples(
        f"process CPU time per pass (all threads), {place}", cpu, "CPU ms", bases[:2], scale=1e3, higher_is_better=False
    )
    print()
    m = {n: median(v) for n, v in samples.items()}
    best = max(v for n, v in m.items() if n.startswith("roxxel"))
    if durable:
        record(
            f"pack vs read + write ({place}: disk-bound)", f"{best / m['read + write']:.2f}x", "(for reference)", None
        )
        record(
            f"pack vs read + write + fsync ({place}: the floor)",
            f"{best / m['read + write + fsync']:.2f}x",
            "(for reference)",
            None,
        )
    else:
        record(
            f"pack vs read + write ({place})",
            f"{best / m['read + write']:.2f}x",
            ">= 0.8x",
            best >= 0.8 * m["read + write"],
        )
        record(
            f"pack vs walk + read + write ({place})", f"{best / m['walk + read + write']:.2f}x", "(for reference)", None
        )


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--seconds", type=float, default=2.0, help="timed work per figure (default 2 s)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    p.add_argument(
        "--places",
        nargs="+",
        choices=list(PLACES),
        default=list(PLACES),
        help="where the outputs are written (default: both)",
    )
    args = p.parse_args()
    files = walk(sysconfig.get_paths()["stdlib"])
    total = sum(os.path.getsize(f) for f in files)
    print(f"machine: {load_average()} at start\n")
    for place in args.places:
        top = PLACES[place]
        if not os.path.isdir(top) or shutil.disk_usage(top).free < 8 * total:
            print(f"{place}: skipped, {top} is missing or has less than {8 * total / 1e6:.0f} MB free\n")
            continue
        measure(place, top, files, total, args)


if __name__ == "__main__":
    main()
