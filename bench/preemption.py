"""Preemption: seconds from SIGTERM to a complete agreed save, against a periodic save of the same state.

Two ``jax.distributed`` processes on loopback (CPU devices, one per process) hold an MLP of
``DIMS`` and its adam optimizer, every array split over both processes (``support.ckpt``),
with random moments (Orbax compresses; zero moments would shrink the checkpoint): about
1.2 GB of state, 0.6 GB per process. Each process first saves step 1 as a periodic save
(``Checkpointer.save`` + ``wait_until_finished``: the baseline), then runs 0.1 s steps
calling ``save_and_exit_if_preempted``; this script sends SIGTERM to process 1 and measures
until the last process has its agreed step complete (the notice reaches the other process
through JAX's preemption sync; the save starts at the next step both check). Storage, each
in the same run: the local disk, and gs:// on gcp-storage-emulator (in memory, a
single-threaded Python server: it measures Roxxel + Orbax + TensorStore against a slow
server, not GCS).

Rows (seconds, lower is better):
  * periodic save        - the baseline: the same state, saved and waited for, no notice;
  * SIGTERM -> saved     - from the signal to the complete agreed checkpoint;
and the checkpointer's own figure (``save_s`` of ``roxxel_preemption.json``: from the agreed
step to the complete save), which ``roxxel-launch validate`` compares with the grace period.

Usage: python bench/preemption.py [--dims 8192 8192 4096] [--only local|gs]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))  # the tests' support package
BUCKET = "roxxel-bench"
DIMS = (8192, 8192, 4096)
STEP_S = 0.1


def worker(coordinator: str, pid: int, directory: str, out: str, dims: tuple[int, ...]) -> None:
    import jax

    jax.distributed.initialize(coordinator, num_processes=2, process_id=pid, initialization_timeout=120)
    from support.ckpt import build

    from roxxel.train.checkpoint import Checkpointer, Preempted

    ms = build(dims, 0)
    state = ms.nnx_state()
    leaves, treedef = jax.tree.flatten(state)
    keys = jax.random.split(jax.random.key(1), len(leaves))

    def noise(key, x):  # random values in the array's own sharding (each process makes its part)
        return jax.jit(lambda k: jax.random.normal(k, x.shape, x.dtype), out_shardings=x.sharding)(key)

    leaves = [noise(k, x) if x.ndim and x.dtype.kind == "f" else x for k, x in zip(keys, leaves)]
    ms.update(jax.tree.unflatten(treedef, leaves))
    jax.block_until_ready(ms.nnx_state())
    result: dict = {}
    with Checkpointer(directory, state=ms, save_interval_steps=10**6, max_to_keep=None, keep_best=False) as ckpt:
        started = time.monotonic()
        ckpt.save(1, force=True)
        ckpt.wait_until_finished()
        result["periodic_s"] = time.monotonic() - started
        Path(f"{out}.ready").write_text("")
        try:
            for step in range(2, 10**6):
                ckpt.save_and_exit_if_preempted(step)
                time.sleep(STEP_S)
        except Preempted:
            result["saved_at"] = time.time()
    Path(out).write_text(json.dumps(result))
    if "saved_at" in result:
        sys.exit(42)  # what an uncaught Preempted does


def one(storage: str, directory: str, work: str, env: dict, dims: tuple[int, ...]) -> dict:
    from support.net import free_port

    coordinator = f"127.0.0.1:{free_port()}"
    outs = [os.path.join(work, f"{storage}-{i}.json") for i in range(2)]
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", coordinator, str(i), directory, outs[i], "--dims", *map(str, dims)],
            env=env,
        )
        for i in range(2)
    ]
    try:
        deadline = time.monotonic() + 1800
        while not all(os.path.exists(f"{o}.ready") for o in outs):
            if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
                raise SystemExit(f"{storage}: a worker ended before its periodic save")
            time.sleep(0.05)
        time.sleep(1.0)  # a few steps in
        killed = time.time()
        procs[1].send_signal(signal.SIGTERM)
        codes = [p.wait(timeout=1800) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    if codes != [42, 42]:
        raise SystemExit(f"{storage}: workers exited with {codes}, not 42")
    results = [json.loads(Path(o).read_text()) for o in outs]
    record = json.loads(_read(directory, "roxxel_preemption.json"))
    return {
        "periodic": max(r["periodic_s"] for r in results),
        "sigterm": max(r["saved_at"] for r in results) - killed,
        "recorded": record["save_s"],
        "gib": record["state_bytes"] / 2**30,
    }


def _read(directory: str, name: str) -> str:
    from etils import epath

    return (epath.Path(directory) / name).read_text()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", nargs=4, metavar=("COORDINATOR", "PID", "DIR", "OUT"))
    parser.add_argument("--dims", type=int, nargs="+", default=list(DIMS))
    parser.add_argument("--only", choices=("local", "gs"))
    args = parser.parse_args()
    dims = tuple(args.dims)
    if args.worker:
        coordinator, pid, directory, out = args.worker
        return worker(coordinator, int(pid), directory, out, dims)

    import support.gcs_emulator as emulator_wrapper

    sys.path.insert(0, str(HERE))
    from _measure import load_average
    from _table import print_table

    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROXXEL_", "JAX_"))}
    env.update(JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(HERE.parent / "tests"))
    work = tempfile.mkdtemp(prefix="roxxel-bench-preempt-")
    emulator = None
    try:
        rows: dict[str, dict] = {}
        if args.only in (None, "local"):
            rows["local disk"] = one("local", os.path.join(work, "ckpt"), work, env, dims)
        if args.only in (None, "gs"):
            emulator, url = emulator_wrapper.start(os.path.join(work, "emulator.log"), BUCKET)
            os.environ.update(emulator_wrapper.client_env(url))
            rows["gs:// (emulator)"] = one(
                "gs", f"gs://{BUCKET}/preempt", work, {**env, **emulator_wrapper.client_env(url)}, dims
            )
        for storage, r in rows.items():
            print_table(
                f"{storage}: {r['gib']:.2f} GiB of state on 2 processes ({load_average()})",
                [
                    ("periodic save", r["periodic"]),
                    ("SIGTERM -> saved", r["sigterm"]),
                    ("recorded save_s", r["recorded"]),
                ],
                "s",
                "periodic save",
                higher_is_better=False,
            )
            print()
    finally:
        if emulator is not None:
            emulator_wrapper.stop(emulator)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
