"""The read path: throughput, prefetch, first batch after a far resume, and host memory.

Everything is measured in this run, on this machine and page cache, in interleaved rounds
of >= ``--seconds`` windows (medians and spreads; see ``_measure.py``). Shapes are real:
32 x 2048 shuffled rows of uint16 tokens delivered as int32. Block checks (format 1.1
CRC-32C) are ON in every roxxel figure unless the row says "checks off"; so is the check that a
shard's file has not changed since it was opened (one ``fstat`` per shard at most every 50 ms)
unless the row says "identity check off" (its baseline, same run).

Bounds and baselines:
  * memcpy            - copying the batch's token bytes out of the page-cached map in large
                        sequential slices (no loader can beat it);
  * u16->int32 cast   - the same copy with the cast to the delivered int32 (``np.copyto`` of
                        the uint16 slice into an int32 batch): the bound of any loader that
                        delivers int32 rows, which memcpy (no cast) is not;
  * pread per row     - one random 4 KiB ``pread`` per row of the batch, rows drawn over
                        the whole dataset (every shard, as the loader reads them): the floor
                        of a loader that makes one system call per row;
  * nanoGPT get_batch - nanoGPT's own shape: a fresh ``np.memmap`` per batch, random
                        windows, ``np.stack`` of int64 ``x`` and ``y``;
  * roxxel 0.9.14     - the original, installed by this script into a separate venv under
                        bench/.cache/ (it shares the import name) and called as its
                        documentation says (``Roxxel.stream(..., total_steps=...)``), two
                        ways: at its default prefetch (4 batches on a background thread) and
                        with ``prefetch_size=0`` (no thread: its documented way to disable
                        prefetching). Its stream yields only jax.Arrays (placed with
                        ``jax.make_array_from_process_local_data``); it has no host-batch
                        option. The ratios against the original take the faster of the two.
  * Grain             - Google's loader for JAX (grain 0.2.18), installed by this script into
                        its own directory under bench/.cache (never a dependency of roxxel),
                        in a child process, batches placed with ``jax.device_put``: its typical
                        pipeline (``MapDataset.source(windows).shuffle().repeat().batch(32)``,
                        a record per row, through ``to_iter_dataset()``) and its best case (a
                        source whose record is a whole batch: 32 random rows by one numpy fancy
                        index over the memory map) two ways: through its iterator
                        (``to_iter_dataset()`` with default ``ReadOptions``: 16 threads, a
                        buffer of 500) and synchronously (the same ``MapDataset`` indexed
                        directly, ``ds[i]``, in the caller's thread: no iterator, no threads).
                        The ratios against its best case take the faster of the two.

Usage: python bench/stream.py [--seconds 2] [--rounds 3] [--tokens 500e6] [--rss-gb 1,5]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _measure import interleaved, load_average, median, over_window, record  # noqa: E402
from _table import print_samples  # noqa: E402

from roxxel import Curriculum, Phase, Roxxel  # noqa: E402
from roxxel.format import DatasetWriter, open_shard  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CACHE = os.path.join(HERE, ".cache")
ORIGINAL_VENV = os.path.join(CACHE, "roxxel-0.9.14-venv")
GRAIN_DIR = os.path.join(CACHE, "grain-0.2.18")
BATCH, SEQ = 32, 2048
GRAIN_TYPICAL = "Grain, a record per row (typical), placed"
GRAIN_ITERATOR = "Grain, a record per batch (best case), iterator, placed"
GRAIN_SYNC = "Grain, a record per batch (best case), ds[i], placed"
ORIGINAL_DEFAULT = "roxxel 0.9.14 jax.Array (prefetch 4, default)"
ORIGINAL_NO_PREFETCH = "roxxel 0.9.14 jax.Array, prefetch_size=0"
TOKENS = BATCH * SEQ
VOCAB = 50_257


# ----------------------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------------------
def dataset(n_tokens: int, name: str = "tp", shard_bytes: int | None = None, document_tokens: int = 1 << 24) -> Roxxel:
    """A page-cacheable dataset of ``n_tokens`` uint16 tokens under bench/.cache (written once, reused).

    Its files are dropped from the page cache and read back in order before the figures, so
    every run starts from the same page-cache state, whatever earlier runs left: the kernel's
    readahead fills it with large folios. A first pass's page faults cost with that state: on
    this VM, mapping 64 KiB of a file cached in small folios (left by random reads) cost 4 us,
    10x its cost after a sequential read (bench/stream.py's first-pass rows depend on it).
    """
    path = os.path.join(CACHE, f"stream-{name}-{n_tokens}")
    if not os.path.exists(os.path.join(path, "dataset.json")):
        rng = np.random.default_rng(0)
        block = rng.integers(0, VOCAB - 1, document_tokens, dtype=np.uint16)
        sizes = {} if shard_bytes is None else {"shard_size": shard_bytes}
        with DatasetWriter(
            os.path.join(path, "dataset.json"), dtype="uint16", vocab_size=VOCAB, eos_id=VOCAB - 1, **sizes
        ) as w:
            for i, start in enumerate(range(0, n_tokens, len(block))):
                w.add_document(np.roll(block, i * 7919)[: min(len(block), n_tokens - start)])
    ds = Roxxel(path)
    for p in ds.shard_paths:  # into the page cache, the same way for every method and every run
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            while os.read(fd, 64 << 20):
                pass
        finally:
            os.close(fd)
    return ds


def many_shards(n_tokens: int) -> Roxxel:
    """The same tokens in 2 MiB shards of 1M-token documents: far more shards than stay open
    (``max_open_shards``, 256), as a multi-terabyte dataset has; every plan spans them all."""
    return dataset(n_tokens, "many2", shard_bytes=2 << 20, document_tokens=1 << 20)


def endless(ds, batch_rows="independent", **kw):  # the library's default order
    c = Curriculum(ds, [Phase(global_batch_size=BATCH, seq_len=SEQ)], repeat=True, batch_rows=batch_rows)
    return c.stream(0, 10**9, seed=0, **kw)


def places_per_batch(ds, batch_rows: str, steps: int = 200) -> float:
    """Median number of separate places a batch's rows are read from (rows that continue the
    previous row in the dataset count as one place), over the first ``steps`` steps."""
    reader = endless(ds, batch_rows, to_device=False, prefetch_size=0).reader
    plan = reader.curriculum.plan
    counts = []
    for step in range(steps):
        _, position, _ = plan.locate(np.arange(step * BATCH, (step + 1) * BATCH))
        _, starts, _ = reader.sources[0].pieces(position, SEQ)
        counts.append(1 + int((np.diff(np.sort(starts)) != SEQ).sum()))
    return float(np.median(counts))


# ----------------------------------------------------------------------------------------
# methods (each: window seconds -> tokens per second)
# ----------------------------------------------------------------------------------------
def sequential_copy(shard, dtype=None):
    """The batch's token bytes copied out of the page-cached map in large sequential slices,
    as stored (memcpy) or cast to ``dtype`` on the way (the cast-copy bound)."""
    flat = shard.tokens
    buf = np.empty(TOKENS, flat.dtype if dtype is None else dtype)
    pos = [0]

    def step():
        a = pos[0] = (pos[0] + TOKENS) % (len(flat) - TOKENS)
        np.copyto(buf, flat[a : a + TOKENS], casting="unsafe")
        return TOKENS

    return lambda w: over_window(step, w)


def pread_per_row(ds: Roxxel):
    """One ``pread`` of a row's bytes per row, at random rows of the whole dataset (every shard, as the loader reads)."""
    shards = [open_shard(p) for p in ds.shard_paths]
    fds = [os.open(s.path, os.O_RDONLY) for s in shards]
    sizes = np.array([s.num_tokens - SEQ for s in shards], np.int64)
    ends = np.cumsum(sizes)
    bases = np.array([s.data_offset for s in shards], np.int64)
    rng = np.random.default_rng(1)
    buf = np.empty((BATCH, SEQ), shards[0].dtype)
    rows = [memoryview(buf[i]).cast("B") for i in range(BATCH)]

    def step():
        t = rng.integers(0, int(ends[-1]), BATCH)
        which = np.searchsorted(ends, t, side="right")
        offsets = bases[which] + 2 * (t - (ends[which] - sizes[which]))
        for row, fd, o in zip(rows, which.tolist(), offsets.tolist()):
            os.preadv(fds[fd], [row], o)
        return TOKENS

    return lambda w: over_window(step, w)


def nanogpt(shard):
    """nanoGPT's train.py get_batch (numpy in place of torch.from_numpy), on the shard's token region."""
    rng = np.random.default_rng(2)

    def step():
        data = np.memmap(shard.path, dtype=np.uint16, mode="r", offset=shard.data_offset, shape=(shard.num_tokens,))
        ix = rng.integers(0, len(data) - SEQ - 1, BATCH)
        x = np.stack([data[i : i + SEQ].astype(np.int64) for i in ix])
        y = np.stack([data[i + 1 : i + 1 + SEQ].astype(np.int64) for i in ix])
        assert x.shape == y.shape
        return TOKENS

    return lambda w: over_window(step, w)


def stream_method(stream, step_seconds: float = 0.0, block=False):
    def step():
        batch = next(stream)
        if block:
            batch.block_until_ready()
        if step_seconds:
            time.sleep(step_seconds)  # the host waiting for the device's training step
        return TOKENS

    return lambda w: over_window(step, w)


def first_pass(path: str, check: bool, **kw):
    """Host rows over exactly one epoch from a fresh dataset object: every block read (and checked,
    or not) for the first time in this process and every page of its maps faulted in for the first
    time. The window is one epoch whatever ``--seconds`` says: a longer one would time later
    passes too (this row's figures before 2026-12-05 did, with 2 s windows over ~4 epochs)."""
    starts = iter(range(0, 10**9, 7919))

    def run(window):
        ds = Roxxel(path, check_blocks=check, **kw)
        epoch = ds.num_tokens // TOKENS
        c = Curriculum(ds, [Phase(global_batch_size=BATCH, seq_len=SEQ)], repeat=True)
        stream = c.stream(next(starts), 10**9, seed=0, to_device=False, prefetch_size=0)
        t0 = time.perf_counter()
        for _ in range(epoch):
            next(stream)
        return epoch * TOKENS / (time.perf_counter() - t0)

    return run


def warm(stream, ds):
    """``stream`` after one epoch: every block checked and (map reads) every page mapped, as in a long run."""
    for _ in range(ds.num_tokens // TOKENS + 1):
        next(stream)
    return stream


# ----------------------------------------------------------------------------------------
# the original roxxel 0.9.14, in its own venv
# ----------------------------------------------------------------------------------------
def original_python() -> str | None:
    """A venv holding roxxel 0.9.14 and, through a .pth, this environment's numpy/jax; None if pip cannot get it."""
    py = os.path.join(ORIGINAL_VENV, "bin", "python")
    if os.path.exists(os.path.join(ORIGINAL_VENV, "ok")):
        return py
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", ORIGINAL_VENV], check=True)
    site = subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    r = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", site, "roxxel==0.9.14"],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        print(f"roxxel 0.9.14 could not be installed ({r.stderr.strip()[-300:]}): its rows are left out")
        return None
    deps = os.path.dirname(os.path.dirname(np.__file__))  # numpy, jax, ... (a path line, not a site dir: no finders)
    with open(os.path.join(site, "zz-deps.pth"), "w") as f:
        f.write(deps + "\n")
    open(os.path.join(ORIGINAL_VENV, "ok"), "w").close()
    return py


def original_data(py: str, ds: Roxxel) -> str:
    """The same tokens in the original's format (its ``write``, 4 KiB blocks), written once."""
    path = os.path.join(CACHE, f"stream-original-{ds.num_tokens}.rox")
    if not os.path.exists(path + ".ok"):
        src = [(p, open_shard(p).data_offset, open_shard(p).num_tokens) for p in ds.shard_paths]
        run_original(
            py,
            f"""
            import json, numpy as np
            from roxxel import Roxxel, __file__ as where
            assert ".cache" in where, where  # the original package, not this checkout
            def chunks():
                for path, offset, n in {src!r}:
                    toks = np.memmap(path, np.uint16, "r", offset, (n,))
                    for a in range(0, n, 1 << 22):
                        yield np.array(toks[a:a + (1 << 22)])
            Roxxel({path!r}).write(chunks(), block_size=4096, dtype="uint16")
            print("{{}}")
        """,
        )
        open(path + ".ok", "w").close()
    return path


def run_original(py: str, code: str) -> dict:
    env = dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"))
    r = subprocess.run(
        [py, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, cwd=CACHE, timeout=1800
    )
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def original_method(py: str, path: str, prefetch_size: int | None = None):
    """jax.Array batches of the original, as documented: ``stream(..., total_steps=...)`` at its default
    prefetch (4 batches on a background thread), or with ``prefetch_size=`` given (0: no thread, its
    documented way to disable prefetching). Its stream yields only jax.Arrays (no host-batch option)."""
    rounds = iter(range(10**6))
    prefetch = "" if prefetch_size is None else f", prefetch_size={prefetch_size}"

    def run(window):
        res = run_original(
            py,
            f"""
            import json, time
            from roxxel import Roxxel
            r = Roxxel({path!r}); r.open()
            seed, busy, n = {next(rounds) * 1000}, 0.0, 0
            while busy < {window}:  # a new epoch's stream when one runs out; its set-up is not timed
                s = r.stream(seq_len={SEQ}, batch_size={BATCH}, seed=seed, total_steps=len(r) * 4096 // {2 * TOKENS}{prefetch})
                it = iter(s); next(it).block_until_ready(); seed += 1
                while busy < {window}:
                    t0 = time.perf_counter()
                    try:
                        next(it).block_until_ready()
                    except StopIteration:
                        break
                    busy += time.perf_counter() - t0; n += 1
                s.close()
            print(json.dumps({{"tps": n * {TOKENS} / busy}}))
        """,
        )
        return res["tps"]

    return run


# ----------------------------------------------------------------------------------------
# Grain, in a directory of its own
# ----------------------------------------------------------------------------------------
def grain_path() -> str | None:
    """A directory holding grain 0.2.18 and the dependencies this environment lacks; None if pip cannot get them."""
    if os.path.exists(os.path.join(GRAIN_DIR, "ok")):
        return GRAIN_DIR
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            GRAIN_DIR,
            "grain==0.2.18",
            "array-record>=0.8.1",
            "cloudpickle",
            "portpicker",
        ],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        print(f"grain 0.2.18 could not be installed ({r.stderr.strip()[-300:]}): its rows are left out")
        return None
    open(os.path.join(GRAIN_DIR, "ok"), "w").close()
    return GRAIN_DIR


_GRAIN_CHILD = """
import itertools, json, sys, time
sys.path.insert(0, {grain!r})
import grain, jax, numpy as np
data = np.memmap({path!r}, np.uint16, "r", {offset}, ({n},))
rows = len(data) // {seq}
sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])

class Windows:  # a record per row: what a Grain user writes
    def __len__(self):
        return rows
    def __getitem__(self, i):
        return np.asarray(data[i * {seq}:(i + 1) * {seq}], np.int32)

class Batches:  # Grain's best case: a record is a whole batch of independent random rows
    def __init__(self):
        self.table = data[:rows * {seq}].reshape(rows, {seq})
    def __len__(self):
        return 1 << 30
    def __getitem__(self, i):
        ix = np.random.default_rng(i).integers(0, rows, {batch})
        return self.table[ix].astype(np.int32)

mode = {mode!r}
ds = grain.MapDataset.source(Windows() if mode == "typical" else Batches())
if mode == "typical":
    ds = ds.shuffle(seed={seed}).repeat().batch({batch})
if mode == "sync":  # the MapDataset indexed directly, ds[i], in this thread: no iterator, no threads
    it = (ds[i] for i in itertools.count())
else:  # through its iterator, default ReadOptions (16 threads, a buffer of 500 elements)
    it = iter(ds.to_iter_dataset())
jax.device_put(next(it), sharding).block_until_ready()
busy, n = 0.0, 0
while busy < {window}:
    t0 = time.perf_counter()
    jax.device_put(next(it), sharding).block_until_ready()
    busy += time.perf_counter() - t0
    n += 1
print(json.dumps({{"tps": n * {batch} * {seq} / busy}}))
"""


def grain_method(where: str, shard, mode: str):
    """Grain's batches placed with ``jax.device_put``, in a child process: ``mode`` is "typical" (a record per
    row, shuffled, repeated, batched; through its iterator), "iterator" (a record per batch through its
    iterator) or "sync" (a record per batch, the ``MapDataset`` indexed directly in the caller's thread)."""
    rounds = iter(range(10**6))

    def run(window):
        code = _GRAIN_CHILD.format(
            grain=where,
            path=shard.path,
            offset=shard.data_offset,
            n=shard.num_tokens,
            seq=SEQ,
            batch=BATCH,
            mode=mode,
            seed=next(rounds),
            window=window,
        )
        r = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=1800,
            env=dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu")),
        )
        if r.returncode != 0:
            raise RuntimeError(r.stderr[-2000:])
        return json.loads(r.stdout.strip().splitlines()[-1])["tps"]

    return run


# ----------------------------------------------------------------------------------------
# tables
# ----------------------------------------------------------------------------------------
def throughput(ds: Roxxel, args, py: str | None) -> dict[str, list[float]]:
    import jax

    shard = open_shard(ds.shard_paths[0])
    path = ds.filepath
    checked = warm(endless(ds, to_device=False, prefetch_size=0), ds)
    unchecked = warm(endless(Roxxel(path, check_blocks=False), to_device=False, prefetch_size=0), ds)
    no_identity = Roxxel(path)
    no_identity.check_identity = False  # the file-changed check (one fstat per shard read) off: its baseline
    unidentified = warm(endless(no_identity, to_device=False, prefetch_size=0), ds)
    consecutive = warm(endless(ds, "consecutive", to_device=False, prefetch_size=0), ds)
    pread = warm(endless(Roxxel(path, mapped_bytes=0), to_device=False, prefetch_size=0), ds)
    many = many_shards(ds.num_tokens)
    spread = warm(endless(many, to_device=False, prefetch_size=0), many)
    methods = {
        "memcpy": sequential_copy(shard),
        "u16->int32 cast (bound)": sequential_copy(shard, np.int32),
        "pread per row": pread_per_row(ds),
        "nanoGPT get_batch": nanogpt(shard),
        "roxxel host rows": stream_method(checked),
        "roxxel host rows, consecutive rows": stream_method(consecutive),
        "roxxel host rows, checks off": stream_method(unchecked),
        "roxxel host rows, identity check off": stream_method(unidentified),
        "roxxel host rows, prefetch 2": stream_method(endless(ds, to_device=False, prefetch_size=2)),
        "roxxel host rows, pread (mapped_bytes=0)": stream_method(pread),
        f"roxxel host rows, {many.num_shards} shards of 2 MiB": stream_method(spread),
        "roxxel host rows, 1st pass": first_pass(path, True),
        "roxxel host rows, 1st pass, checks off": first_pass(path, False),
        "roxxel host rows, 1st pass, pread": first_pass(path, True, mapped_bytes=0),
        "roxxel jax.Array": stream_method(endless(ds, prefetch_size=0), block=True),
        "roxxel jax.Array, prefetch 2": stream_method(endless(ds, prefetch_size=2), block=True),
    }
    batch = np.zeros((BATCH, SEQ), np.int32)
    sharding = endless(ds, prefetch_size=0).sharding
    methods["place one batch (device_put)"] = lambda w: over_window(
        lambda: jax.device_put(batch, sharding).block_until_ready() is None and TOKENS or TOKENS, w
    )
    where = grain_path()
    if where:
        methods[GRAIN_TYPICAL] = grain_method(where, shard, "typical")
        methods[GRAIN_ITERATOR] = grain_method(where, shard, "iterator")
        methods[GRAIN_SYNC] = grain_method(where, shard, "sync")
    if py:
        original = original_data(py, ds)
        page_in(
            original
        )  # written in an earlier run: its pages may be gone, as roxxel's would be without the epoch above
        methods[ORIGINAL_DEFAULT] = original_method(py, original)
        methods[ORIGINAL_NO_PREFETCH] = original_method(py, original, prefetch_size=0)
    return interleaved(methods, args.rounds, args.seconds)


def page_in(path: str) -> None:
    """Read ``path`` once, so that every figure is of page-cached data (a cold round of random
    4 KiB reads from this VM's disk measured the original at 0.4 Mtok/s, against ~40 warm)."""
    with open(path, "rb", buffering=0) as f:
        while f.read(8 << 20):
            pass


def breakdown(ds: Roxxel, args) -> dict[str, list[float]]:
    """Microseconds per batch of each part of a host-rows batch (steady state: blocks checked), of the whole, and of placing it."""
    import jax

    from roxxel.data.placement import Placer
    from roxxel.data.reader import read_runs
    from roxxel.data.stream import empty_aligned

    stream = endless(ds, to_device=False, prefetch_size=0)
    no_identity = Roxxel(ds.filepath)
    no_identity.check_identity = False
    unidentified = endless(no_identity, to_device=False, prefetch_size=0)
    for _ in range(ds.num_tokens // TOKENS + 1):  # one epoch: every block checked
        next(stream)
        next(unidentified)
    reader, phase = stream.reader, stream.curriculum.resolved[0]
    steps = iter(range(10**6, 10**9, 64))
    plan = reader._plan_ahead(10**6, 0, BATCH, phase, None, 8)  # 8 steps: a lane's rows of one chunk
    starts, runs = plan.starts[:BATCH], reader._runs(plan, 0)
    staged = np.empty((8 * BATCH, SEQ), ds.dtype)
    read_runs(ds, staged, runs, 0)
    scratch = staged[:BATCH].copy()
    slots = plan.slots[0][:BATCH]
    shard = open_shard(ds.shard_paths[0])  # (kept alive: it owns the descriptor)
    fd, base = shard.descriptor(), shard.data_offset
    rows = [memoryview(scratch[i]).cast("B") for i in range(BATCH)]
    offsets = [base + 2 * (int(a) % (shard.num_tokens - SEQ)) for a in starts]
    sharding = endless(ds, prefetch_size=0).sharding
    placer = Placer(sharding)
    read = [ds.shard_table.shard(i) for i in dict.fromkeys(runs.shards)]  # what read_runs checks after its preads
    batch = empty_aligned((BATCH, SEQ), np.int32)
    mapped = reader._mapped(plan, 0, np.int32)  # the default path: a step's rows out of the maps
    placer(batch)
    per = {
        "whole batch (next(stream))": lambda: next(stream),
        "whole batch, identity check off": lambda: next(unidentified),
        "identity check of the shards a batch read": mapped.check_unchanged,
        "pread path: identity check of the shards a plan read": lambda: [s.check_unchanged() for s in read],
        "locate + cut into runs (per step of a 64-step plan)": lambda: (
            reader._plan_ahead(next(steps), 0, BATCH, phase, None, 64) and None
        ),
        "gather a step's rows from the maps, cast to int32 (native)": lambda: mapped.read(batch, 0),
        f"pread path: read 8 steps' runs ({len(runs.shards)} preads), per step": lambda: read_runs(ds, staged, runs, 0),
        "pread path: take a step's rows from them": lambda: staged[slots],
        "for reference: 32 preads, one per row": lambda: [os.preadv(fd, [r], o) for r, o in zip(rows, offsets)],
        "pread path: new aligned int32 batch + one cast": lambda: np.copyto(
            empty_aligned((BATCH, SEQ), np.int32), scratch
        ),
        "new aligned int32 batch": lambda: empty_aligned((BATCH, SEQ), np.int32),
        "pread path: vocab check (max of the stored ids)": lambda: scratch.max(),
        "place: Placer (direct batched_device_put)": lambda: placer(batch).block_until_ready(),
        "place: jax.device_put": lambda: jax.device_put(batch, sharding).block_until_ready(),
    }
    scale = {
        "locate + cut into runs (per step of a 64-step plan)": 64,
        f"pread path: read 8 steps' runs ({len(runs.shards)} preads), per step": 8,
    }
    methods = {
        k: (lambda f, k=k: lambda w: over_window(lambda: (f(), scale.get(k, 1))[1], w))(f) for k, f in per.items()
    }
    rates = interleaved(methods, args.rounds, args.seconds)
    return {k: [1e6 / r for r in v] for k, v in rates.items()}, len(mapped.shards)


def prefetch_with_step(ds: Roxxel, args) -> dict[str, list[float]]:
    step = args.step_ms / 1e3
    methods = {f"prefetch {p}": stream_method(endless(ds, to_device=False, prefetch_size=p), step) for p in (0, 1, 2)}
    return interleaved(methods, args.rounds, args.seconds)


def first_batch(args) -> tuple[dict[str, list[float]], float]:
    """Milliseconds from opening 3 datasets to the first batch at step 10**6 of 3 phases (32x2048 in the last)."""
    import jax

    from roxxel.data.blend import _pattern

    paths = [dataset(20_000_000, f"mix{i}").filepath for i in range(3)]
    weights = {"primary": 0.5, "b": 0.3, "c": 0.2}

    def once(to_device):
        _pattern.cache_clear()  # a resume runs in a fresh process: none of roxxel's caches is warm
        t0 = time.perf_counter()
        a, b, c = (Roxxel(p) for p in paths)
        cur = Curriculum(
            {"primary": a, "b": b, "c": c},
            [
                Phase(steps=400_000, global_batch_size=64, seq_len=1024, weights=weights),
                Phase(steps=400_000, global_batch_size=16, seq_len=4096, weights=weights),
                Phase(global_batch_size=BATCH, seq_len=SEQ, weights=weights),
            ],
            repeat=True,
        )
        s = cur.stream(10**6, 10**6 + 1, seed=0, to_device=to_device, prefetch_size=0)
        batch = next(s)
        if to_device:
            batch.block_until_ready()
        return (time.perf_counter() - t0) * 1e3

    once(True)  # imports and jax start-up are not part of a resume
    out = {"host rows": [], "jax.Array": []}
    for _ in range(max(5, args.rounds)):
        out["host rows"].append(once(False))
        out["jax.Array"].append(once(True))
    batch = np.zeros((BATCH, SEQ), np.int32)
    from roxxel.data.stream import default_sharding

    sharding = default_sharding()
    place = []
    for _ in range(20):
        t0 = time.perf_counter()
        jax.device_put(batch, sharding).block_until_ready()
        place.append((time.perf_counter() - t0) * 1e3)
    return out, median(place)


_FRESH_CHILD = """
import json, sys, time
from roxxel import Curriculum, Phase, Roxxel
import jax  # imported, not started: a resuming process starts its backend on the way to its first batch
t0 = time.perf_counter()
a, b, c = (Roxxel(p) for p in {paths!r})
w = {{"primary": 0.5, "b": 0.3, "c": 0.2}}
cur = Curriculum({{"primary": a, "b": b, "c": c}}, [Phase(steps=400_000, global_batch_size=64, seq_len=1024, weights=w),
                 Phase(steps=400_000, global_batch_size=16, seq_len=4096, weights=w),
                 Phase(global_batch_size={batch}, seq_len={seq}, weights=w)], repeat=True)
s = cur.stream(10**6, 10**6 + 1, seed=0, to_device=True, prefetch_size=0)
next(s).block_until_ready()
print(json.dumps({{"ms": (time.perf_counter() - t0) * 1e3}}))
"""


def first_batch_fresh(rounds: int) -> list[float]:
    """The jax.Array first batch at step 10**6 in a fresh process each time (its JAX backend
    starts on the way, as in a real resume; the imports are not timed)."""
    paths = [dataset(20_000_000, f"mix{i}").filepath for i in range(3)]
    out = []
    for _ in range(rounds):
        code = _FRESH_CHILD.format(paths=paths, batch=BATCH, seq=SEQ)
        r = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=600,
            env=dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu")),
        )
        if r.returncode != 0:
            raise RuntimeError(r.stderr[-2000:])
        out.append(json.loads(r.stdout.strip().splitlines()[-1])["ms"])
    return out


_RSS_CHILD = """
import json, sys
sys.path.insert(0, {bench!r})
from _measure import rss_anon_bytes
from roxxel import Curriculum, Phase, Roxxel
ds = Roxxel({path!r})
c = Curriculum(ds, [Phase(global_batch_size={batch}, seq_len={seq})])
s = c.stream(seed=0, to_device={to_device}, prefetch_size={prefetch})
n = 0
for b in s:
    n += 1
    if n == 50:
        base = peak = rss_anon_bytes()
    elif n > 50 and n % 10 == 0:
        peak = max(peak, rss_anon_bytes())
vm = [l for l in open("/proc/self/status") if l.startswith("VmRSS")][0].split()[1]
print(json.dumps({{"growth": (peak - base) / 2**20, "bytes": n * {batch} * {seq} * 2, "vmrss_mib": int(vm) / 1024}}))
"""


def rss(args) -> list[tuple[str, dict]]:
    rows = []
    for gb in args.rss_gb:
        ds = dataset(int(gb * 1e9 / 2), "rss")
        for to_device, prefetch in ((False, 0), (True, 2)):
            code = _RSS_CHILD.format(
                bench=HERE, path=ds.filepath, batch=BATCH, seq=SEQ, to_device=to_device, prefetch=prefetch
            )
            r = subprocess.run(
                [sys.executable, "-c", code],
                capture_output=True,
                text=True,
                timeout=3600,
                env=dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu")),
            )
            if r.returncode != 0:
                raise RuntimeError(r.stderr[-2000:])
            kind = "jax.Array, prefetch 2" if to_device else "host rows"
            rows.append((f"{gb:g} GB, {kind}", json.loads(r.stdout.strip().splitlines()[-1])))
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--seconds", type=float, default=2.0, help="window per figure (default 2 s)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    p.add_argument(
        "--tokens", type=float, default=500e6, help="tokens of the throughput dataset (default 500e6 = 1 GB)"
    )
    p.add_argument(
        "--rss-gb",
        type=lambda s: [float(x) for x in s.split(",")],
        default=[1.0, 5.0],
        help="dataset sizes in GB streamed for the host-memory table (default 1,5)",
    )
    p.add_argument("--step-ms", type=float, default=2.0, help="training step time in the prefetch table (default 2 ms)")
    p.add_argument(
        "--only",
        choices=["throughput", "breakdown", "prefetch", "first-batch", "rss"],
        action="append",
        help="run only these tables (repeatable)",
    )
    args = p.parse_args(argv)
    only = set(args.only or ["throughput", "breakdown", "prefetch", "first-batch", "rss"])
    os.makedirs(CACHE, exist_ok=True)
    print(f"machine: {load_average()} at start")
    if only & {"throughput", "breakdown", "prefetch"}:
        ds = dataset(int(args.tokens))
    if "throughput" in only:
        py = original_python()
        res = throughput(ds, args, py)
        m = {k: median(v) for k, v in res.items()}
        # each peer at its best: the faster of its measured ways is the baseline of the ratios
        original = max((ORIGINAL_DEFAULT, ORIGINAL_NO_PREFETCH), key=m.__getitem__) if py else None
        print_samples(
            f"read path, {BATCH}x{SEQ} shuffled uint16 -> int32, one process, page-cached, "
            f"{ds.num_tokens / 1e6:.0f}M tokens",
            res,
            "Mtok/s",
            ["u16->int32 cast (bound)", "pread per row"] + ([original] if original else []),
            scale=1e-6,
            note=f"{args.seconds:g} s windows; {load_average()}",
        )
        record(
            "host rows vs memcpy",
            f"{m['roxxel host rows'] / m['memcpy']:.2f}x",
            ">= 0.5x",
            m["roxxel host rows"] >= 0.5 * m["memcpy"],
        )
        bound = m["u16->int32 cast (bound)"]
        record(
            "host rows vs the u16->int32 cast-copy bound",
            f"{m['roxxel host rows'] / bound:.2f}x",
            ">= 0.5x",
            m["roxxel host rows"] >= 0.5 * bound,
        )
        record(
            "first pass vs steady (host rows)",
            f"{m['roxxel host rows, 1st pass'] / m['roxxel host rows']:.2f}x",
            ">= 0.9x",
            m["roxxel host rows, 1st pass"] >= 0.9 * m["roxxel host rows"],
        )
        record(
            "reads from the maps vs pread (host rows, steady)",
            f"{m['roxxel host rows'] / m['roxxel host rows, pread (mapped_bytes=0)']:.2f}x",
            "(reference)",
            None,
        )
        record(
            "reads from the maps vs pread (host rows, first pass)",
            f"{m['roxxel host rows, 1st pass'] / m['roxxel host rows, 1st pass, pread']:.2f}x",
            "(reference)",
            None,
        )
        spread = next(k for k in m if k.startswith("roxxel host rows, ") and k.endswith(" shards of 2 MiB"))
        record(
            f"{spread.split(', ')[1]} vs {ds.num_shards} shards (host rows, steady)",
            f"{m[spread] / m['roxxel host rows']:.2f}x",
            "(reference)",
            None,
        )
        record(
            "independent (default) vs consecutive rows (host rows, steady)",
            f"{m['roxxel host rows'] / m['roxxel host rows, consecutive rows']:.2f}x",
            ">= 0.9x",
            m["roxxel host rows"] >= 0.9 * m["roxxel host rows, consecutive rows"],
        )
        for rows in ("independent", "consecutive"):
            n = places_per_batch(ds, rows)
            record(
                f"places a batch is read from ({rows} rows)",
                f"{n:g} of {BATCH}",
                f">= {BATCH}" if rows == "independent" else "(reference)",
                n >= BATCH or rows != "independent",
            )
        record(
            "host rows vs pread per row (floor)",
            f"{m['roxxel host rows'] / m['pread per row']:.2f}x",
            ">= 1.0x",
            m["roxxel host rows"] >= m["pread per row"],
        )
        record(
            "checks on vs off (host rows, steady)",
            f"{m['roxxel host rows'] / m['roxxel host rows, checks off']:.2f}x",
            ">= 0.95x",
            m["roxxel host rows"] >= 0.95 * m["roxxel host rows, checks off"],
        )
        record(
            "identity check on vs off (host rows, steady)",
            f"{m['roxxel host rows'] / m['roxxel host rows, identity check off']:.3f}x",
            ">= 0.98x",
            m["roxxel host rows"] >= 0.98 * m["roxxel host rows, identity check off"],
        )
        record(
            "checks on vs off (first pass)",
            f"{m['roxxel host rows, 1st pass'] / m['roxxel host rows, 1st pass, checks off']:.2f}x",
            ">= 0.95x",
            m["roxxel host rows, 1st pass"] >= 0.95 * m["roxxel host rows, 1st pass, checks off"],
        )
        record(
            "host rows: prefetch 2 vs 0 (no step)",
            f"{m['roxxel host rows, prefetch 2'] / m['roxxel host rows']:.2f}x",
            ">= 1.0x (within noise)",
            m["roxxel host rows, prefetch 2"] >= 0.95 * m["roxxel host rows"],
        )
        best = max(m["roxxel jax.Array"], m["roxxel jax.Array, prefetch 2"])
        if GRAIN_TYPICAL in m:
            grain_typical = m[GRAIN_TYPICAL]
            grain_best = max(m[GRAIN_ITERATOR], m[GRAIN_SYNC])
            which = "ds[i]" if m[GRAIN_SYNC] >= m[GRAIN_ITERATOR] else "iterator"
            record(
                "jax.Array vs Grain's typical pipeline",
                f"{best / grain_typical:.1f}x",
                ">= 10x",
                best >= 10 * grain_typical,
            )
            record(
                f"jax.Array vs Grain's best case at its best ({which})",
                f"{best / grain_best:.2f}x",
                ">= 2x",
                best >= 2 * grain_best,
            )
            for name, how in ((GRAIN_ITERATOR, "through its iterator"), (GRAIN_SYNC, "ds[i], synchronous")):
                record(f"jax.Array vs Grain's best case, {how}", f"{best / m[name]:.2f}x", "(reference)", None)
        if original:
            ways = {ORIGINAL_DEFAULT: "default prefetch 4", ORIGINAL_NO_PREFETCH: "prefetch_size=0"}
            record(
                f"jax.Array vs roxxel 0.9.14 at its best ({ways[original]})",
                f"{best / m[original]:.2f}x",
                ">= 3x",
                best >= 3 * m[original],
            )
            for name, how in ways.items():
                record(f"jax.Array vs roxxel 0.9.14, {how}", f"{best / m[name]:.2f}x", "(reference)", None)
        print()
    if "breakdown" in only:
        res, shards = breakdown(ds, args)
        print_samples(
            "where the time of a host-rows batch goes (steady state, blocks checked)",
            res,
            "us/batch",
            ["whole batch (next(stream))"],
            higher_is_better=False,
            note=load_average(),
        )
        m = {k: median(v) for k, v in res.items()}
        share = m["identity check of the shards a batch read"] / m["whole batch (next(stream))"]
        record(
            f"identity check's share of a host-rows batch ({shards} shards read)", f"{share:.2%}", "< 2%", share < 0.02
        )
        print()
    if "prefetch" in only:
        res = prefetch_with_step(ds, args)
        print_samples(
            f"prefetch with a {args.step_ms:g} ms training step (host waits, as for a device), host rows",
            res,
            "steps/s",
            ["prefetch 0"],
            scale=1 / TOKENS,
            note=load_average(),
        )
        m = {k: median(v) for k, v in res.items()}
        record(
            "prefetch gain with a step",
            f"{m['prefetch 2'] / m['prefetch 0']:.2f}x",
            "> 1x",
            m["prefetch 2"] > m["prefetch 0"],
        )
        print()
    if "first-batch" in only:
        res, place = first_batch(args)
        res["jax.Array, fresh process"] = first_batch_fresh(max(3, args.rounds))
        print_samples(
            "first batch at step 10**6: 3 datasets, 3 phases, 32x2048 (opening included; the first two "
            "rows in this warm process, the third in a fresh one, its JAX start included)",
            {**res, "place one batch": [place]},
            "ms",
            ["host rows"],
            higher_is_better=False,
        )
        host, dev = median(res["host rows"]), median(res["jax.Array"])
        record("first batch at 10**6, host rows", f"{host:.2f} ms", "<= 5 ms", host <= 5)
        record(
            "first batch at 10**6, jax.Array minus one placement",
            f"{dev - place:.2f} ms",
            "<= 10 ms",
            dev - place <= 10,
        )
        print()
    if "rss" in only:
        rows = rss(args)
        width = max(len(n) for n, _ in rows)
        print(
            "host memory while streaming one epoch: RssAnon growth after the first 50 batches (VmRSS at the end "
            "counts mapped page cache, shown for reference)"
        )
        for name, r in rows:
            print(
                f"{name:<{width}}  streamed {r['bytes'] / 1e9:6.2f} GB  RssAnon +{r['growth']:6.2f} MiB  "
                f"VmRSS {r['vmrss_mib']:8.1f} MiB"
            )
        worst = max(r["growth"] for _, r in rows)
        record(
            f"RssAnon growth streaming {','.join(f'{g:g}' for g in args.rss_gb)} GB",
            f"{worst:.2f} MiB",
            "< 8 MiB",
            worst < 8,
        )
        print()
    print(f"machine: {load_average()} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
