"""Streaming: throughput, host RAM, and time to the first batch after a far resume.

Baselines, each measured in this run on the same machine and page cache:
  * memcpy          - copying the same number of token bytes out of the memory map in
                      large sequential slices (the ceiling for any loader);
  * nanoGPT memmap  - random windows of a flat np.memmap, stacked (nanoGPT's get_batch);
  * roxxel 0.9.14   - the original Roxxel, installed by this script into
                      bench/.cache/roxxel-0.9.14 when the registry has it.
Roxxel rows are shuffled chunks with full resume determinism; the baselines have less.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _table import print_table  # noqa: E402

from roxxel import Curriculum, Phase, Roxxel  # noqa: E402
from roxxel.format import DatasetWriter  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ORIGINAL_DIR = os.path.join(HERE, ".cache", "roxxel-0.9.14")
BATCH, SEQ = 32, 1024
STEPS = 60


def write_tokens(path: str, n_tokens: int, seed: int = 0, dtype="uint16", doc=50_000) -> Roxxel:
    rng = np.random.default_rng(seed)
    hi = 50_000 if dtype == "uint16" else 250
    with DatasetWriter(os.path.join(path, "dataset.json"), dtype=dtype, vocab_size=hi + 1, eos_id=hi) as w:
        for start in range(0, n_tokens, doc):
            w.add_document(rng.integers(0, hi, size=min(doc, n_tokens - start), dtype=dtype))
    return Roxxel(path)


def original_available() -> bool:
    if os.path.isdir(os.path.join(ORIGINAL_DIR, "roxxel")):
        return True
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", ORIGINAL_DIR,
                        "roxxel==0.9.14"], capture_output=True, text=True)
    return r.returncode == 0


def run_original(code: str) -> dict:
    """Run code against the original package (its import name is also `roxxel`) in a subprocess."""
    env = dict(os.environ, PYTHONPATH=ORIGINAL_DIR, JAX_PLATFORMS="cpu")
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                       cwd=tempfile.gettempdir(), timeout=900)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def throughput(work: str, use_original: bool) -> list[tuple[str, float]]:
    ds = write_tokens(os.path.join(work, "tp"), 40_000_000)
    tokens = STEPS * BATCH * SEQ
    flat = ds.read(0, ds.num_tokens)  # zero-copy view of the single shard
    out = np.empty(BATCH * SEQ, np.uint16)

    t0 = time.perf_counter()
    for s in range(STEPS):
        a = (s * BATCH * SEQ) % (len(flat) - len(out))
        np.copyto(out, flat[a:a + len(out)])
    memcpy = tokens / (time.perf_counter() - t0)

    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    for _ in range(STEPS):
        ix = rng.integers(0, len(flat) - SEQ - 1, BATCH)
        np.stack([flat[i:i + SEQ].astype(np.int64) for i in ix])
    nanogpt = tokens / (time.perf_counter() - t0)

    c = Curriculum(ds, [Phase(steps=STEPS, batch_size=BATCH, seq_len=SEQ)])
    stream = c.stream(seed=0, to_device=False, prefetch_size=0)
    t0 = time.perf_counter()
    for _ in stream:
        pass
    host = tokens / (time.perf_counter() - t0)
    stream = c.stream(seed=0, prefetch_size=4)
    next(stream)
    t0 = time.perf_counter()
    for _ in stream:
        pass
    device = (STEPS - 1) * BATCH * SEQ / (time.perf_counter() - t0)
    rows = [("memcpy", memcpy), ("nanoGPT memmap", nanogpt), ("roxxel host rows", host), ("roxxel jax.Array", device)]
    if use_original:
        res = run_original(f"""
            import json, time, numpy as np
            from roxxel import Roxxel
            rng = np.random.default_rng(0)
            r = Roxxel("{work}/orig_tp.rox")
            r.write((rng.integers(0, 50000, 50000, dtype=np.int32) for _ in range(800)), block_size=4096)
            r = Roxxel("{work}/orig_tp.rox"); r.open()
            s = r.stream(seq_len={SEQ}, batch_size={BATCH}, seed=0, total_steps={STEPS}, prefetch_size=4)
            next(s); t0 = time.perf_counter(); n = 0
            for b in s: n += 1
            print(json.dumps({{"tps": n * {BATCH * SEQ} / (time.perf_counter() - t0)}}))
        """)
        rows.append(("roxxel 0.9.14 jax.Array", res["tps"]))
    return rows


_RSS_CHILD = """
import sys, psutil, numpy as np
from roxxel import Curriculum, Phase, Roxxel
ds = Roxxel(sys.argv[1]); proc = psutil.Process()
c = Curriculum(ds, [Phase(batch_size=16, seq_len=2048)], chunk_tokens=4096)
base = proc.memory_info().rss; peak = base
for batch in c.stream(seed=0, to_device=False, prefetch_size=2):
    peak = max(peak, proc.memory_info().rss)
print((peak - base) / 2**20)
"""


def rss(work: str) -> list[tuple[str, float]]:
    rows = []
    for label, n in (("streaming 100 MB", 50_000_000), ("streaming 1 GB (10x)", 500_000_000)):
        path = os.path.join(work, f"rss{n}")
        write_tokens(path, n, doc=5_000_000)
        r = subprocess.run([sys.executable, "-c", _RSS_CHILD, path], capture_output=True, text=True, check=True)
        rows.append((label, float(r.stdout.strip().splitlines()[-1])))
    return rows


def first_batch(work: str, use_original: bool) -> list[tuple[str, float]]:
    """Resume at step 10**6 of 3 phases over 3 blended datasets (batch 1 x 4 tokens, uint8)."""
    paths = []
    for i in range(3):
        p = os.path.join(work, f"mix{i}")
        write_tokens(p, 8_000_000, seed=i, dtype="uint8", doc=1_000_000)
        paths.append(p)
    weights = {"self": 0.5, "b": 0.3, "c": 0.2}
    t0 = time.perf_counter()
    a, b, c = (Roxxel(p) for p in paths)
    cur = Curriculum(a, [Phase(steps=300_000, batch_size=1, seq_len=4, weights=weights),
                         Phase(steps=300_000, batch_size=2, seq_len=2, weights=weights),
                         Phase(batch_size=1, seq_len=4, weights=weights)], {"b": b, "c": c})
    next(cur.stream(start_step=10**6, seed=0, to_device=False, prefetch_size=0))
    ours = (time.perf_counter() - t0) * 1e3
    rows = [("roxxel", ours)]
    if use_original:
        for i, p in enumerate(paths):  # the same bytes, in the original format
            data = Roxxel(p).read(0, Roxxel(p).num_tokens)
            np.save(os.path.join(work, f"orig{i}.npy"), data)
        res = run_original(f"""
            import json, time, numpy as np
            from roxxel import Roxxel
            ds = []
            for i in range(3):
                r = Roxxel("{work}/orig_mix%d.rox" % i)
                r.write(iter([np.load("{work}/orig%d.npy" % i)]), block_size=4096)
                ds.append(Roxxel("{work}/orig_mix%d.rox" % i)); ds[-1].open()
            t0 = time.perf_counter()
            s = ds[0].stream(seq_len=4, batch_size=1, seed=0, start_step=10**6,
                             completed_phases=[(300000, 1, 4), (300000, 2, 2)],
                             mix_datasets={{"b": ds[1], "c": ds[2]}}, weights={json.dumps(weights)}, prefetch_size=0)
            next(s)
            print(json.dumps({{"ms": (time.perf_counter() - t0) * 1e3}}))
        """)
        rows.append(("roxxel 0.9.14", res["ms"]))
    return rows


def main() -> None:
    use_original = original_available()
    if not use_original:
        print("roxxel 0.9.14 could not be installed from the registry: its rows are left out")
    with tempfile.TemporaryDirectory(prefix="roxxel-bench-") as work:
        print_table(f"stream throughput: {STEPS} steps of {BATCH}x{SEQ} uint16 tokens, one process, CPU",
                    [(n, v / 1e6) for n, v in throughput(work, use_original)], "Mtok/s", "memcpy")
        print()
        rows = rss(work)
        print_table("host RSS growth while streaming (flat means O(1) in dataset size)", rows, "MiB",
                    rows[0][0], higher_is_better=False)
        print()
        print_table("time to the first batch at start_step=10**6 (3 datasets, 3 phases; target <= 5 ms)",
                    first_batch(work, use_original), "ms", "roxxel", higher_is_better=False)


if __name__ == "__main__":
    main()
