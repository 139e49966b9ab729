"""Checkpointer: how long ``save()`` blocks the caller, against a synchronous save; restore time.

State: an NNX model of four ``nnx.Linear(2048, 2048)`` layers (16.8 M float32 parameters,
67 MB) and its ``optax.adam`` optimizer (two moments of the same size): ~201 MB in all.
Storage, each measured in the same run:
  * local  - a fresh temporary directory on the local disk;
  * gs://  - ``gs://BUCKET/prefix`` on gcp-storage-emulator (in memory), started by this
             script as a subprocess on a free loopback port through the tests' wrapper
             ``tests/support/gcs_emulator.py`` and stopped at the end. The emulator is a
             single-threaded Python HTTP server: its numbers measure Roxxel + Orbax +
             TensorStore against a slow server, not real GCS throughput.

Rows (milliseconds, best of 3 after one unmeasured warm-up save per saver; device arrays
are ready before every timer starts; every save is a new step, none is deleted meanwhile):
  * orbax sync save       - the baseline: an Orbax ``CheckpointManager`` with
                            ``enable_async_checkpointing=False`` saving the same composite
                            (``StandardSave`` of the state's pure dict + a ``JsonSave``),
                            from the call until the step is committed;
  * Checkpointer save+wait - ``Checkpointer.save()`` then ``wait_until_finished()``:
                            the same work done asynchronously, until the step is committed;
  * Checkpointer save()   - how long ``Checkpointer.save()`` blocks the caller (until it
                            returns; the write continues in the background). Target: <= 10%
                            of the baseline;
  * orbax restore         - Orbax ``StandardRestore`` of the baseline's step into the same
                            abstract target (shapes, dtypes, current shardings);
  * Checkpointer.restore() - into a fresh model and optimizer (other initial values),
                            including reading the ``run`` record and the fingerprint check.
After the first restore the state is checked to be bitwise equal to what was saved.

Machine where the numbers in the report were taken: 2 CPU cores shared with other jobs,
JAX CPU backend (one device), local disk, the emulator in a subprocess on the same cores.
On the CPU backend Orbax's device-to-host step is free: ``np.asarray`` of a CPU array is a
zero-copy view (a real copy of 200 MB would cost about as much as the local save), so the
blocking part of ``save()`` is Orbax's bookkeeping only. On GPU/TPU it also holds the real
device-to-host transfer (~200 MB at the link's speed). Run to run noise on a shared machine
is large (the per-run times are printed under each table). The run takes under a minute.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))  # the tests' support package
import support.gcs_emulator as emulator_wrapper  # noqa: E402  (the tests' patched emulator)

BUCKET = "roxxel-bench"
LAYERS, WIDTH = 4, 2048
REPEATS = 3


def main() -> None:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    work = tempfile.mkdtemp(prefix="roxxel-bench-ckpt-")
    try:
        emulator, url = emulator_wrapper.start(os.path.join(work, "emulator.log"), BUCKET)
    except RuntimeError as e:
        sys.exit(str(e))
    try:
        # TensorStore (arrays) and gcsfs (epath: directories, JSON, listing) read these;
        # set before they are imported.
        os.environ.update(emulator_wrapper.client_env(url))
        run(work)
    finally:
        emulator_wrapper.stop(emulator)
        shutil.rmtree(work, ignore_errors=True)


def run(work: str) -> None:
    import logging

    import jax
    import numpy as np
    import optax
    import orbax.checkpoint as ocp
    from flax import nnx

    sys.path.insert(0, str(HERE))
    from _table import print_table

    from roxxel.train.checkpoint.checkpointer import RUN_ITEM, STATE_ITEM, Checkpointer
    from roxxel.train.checkpoint.restoring import abstract_leaf

    for name in ("absl", "gcsfs", "google.auth"):  # warnings on every credentials probe of the emulator
        logging.getLogger(name).setLevel(logging.ERROR)

    class Model(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            self.layers = nnx.List([nnx.Linear(WIDTH, WIDTH, rngs=rngs) for _ in range(LAYERS)])

        def __call__(self, x):
            for layer in self.layers:
                x = nnx.relu(layer(x))
            return x

    def build(seed: int):
        model = Model(nnx.Rngs(seed))
        optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
        # Random moments: Orbax compresses (zstd), so zero or constant moments would
        # shrink the checkpoint to the parameters; random data is what training leaves.
        opt_state = nnx.state(optimizer, nnx.optimizer.OptState)
        leaves, treedef = jax.tree.flatten(opt_state)
        keys = jax.random.split(jax.random.key(seed), len(leaves))
        leaves = [jax.random.normal(k, x.shape, x.dtype) if x.ndim else x for k, x in zip(keys, leaves)]
        nnx.update(optimizer, jax.tree.unflatten(treedef, leaves))
        jax.block_until_ready(nnx.state((model, optimizer)))
        return model, optimizer

    def pure(model, optimizer):
        return {"model": nnx.to_pure_dict(nnx.state(model)), "optimizer": nnx.to_pure_dict(nnx.state(optimizer))}

    model, optimizer = build(0)
    saved = jax.tree.map(np.asarray, pure(model, optimizer))
    nbytes = sum(x.nbytes for x in jax.tree.leaves(saved))
    fresh_model, fresh_optimizer = build(1)

    def best(times: list[float]) -> float:
        return min(times) * 1e3

    def bench(label: str, root: str) -> None:
        # Baseline: Orbax, synchronous, the same composite the Checkpointer writes.
        sync = ocp.CheckpointManager(
            f"{root}/orbax-sync",
            options=ocp.CheckpointManagerOptions(
                enable_async_checkpointing=False, create=True, max_to_keep=REPEATS + 1
            ),
        )
        sync_times = []
        for step in range(REPEATS + 1):  # step 0 warms up (threads, connections) and is not counted
            state = pure(model, optimizer)
            jax.block_until_ready(state)
            t0 = time.perf_counter()
            sync.save(
                step,
                args=ocp.args.Composite(
                    **{STATE_ITEM: ocp.args.StandardSave(state), RUN_ITEM: ocp.args.JsonSave({"step": step})}
                ),
            )
            sync_times.append(time.perf_counter() - t0)
        del sync_times[0]

        # The Checkpointer: how long save() blocks, and until the step is committed.
        block_times, total_times = [], []
        with Checkpointer(f"{root}/roxxel", model, optimizer, max_to_keep=REPEATS + 1, keep_best=False) as ckpt:
            for step in range(REPEATS + 1):  # step 0: warm-up, not counted
                jax.block_until_ready(nnx.state((model, optimizer)))
                t0 = time.perf_counter()
                assert ckpt.save(step, {"loss": 1.0})
                t1 = time.perf_counter()
                ckpt.wait_until_finished()
                t2 = time.perf_counter()
                block_times.append(t1 - t0)
                total_times.append(t2 - t0)
        del block_times[0], total_times[0]

        # Restores: plain Orbax from the baseline's checkpoint, then the Checkpointer
        # into a fresh model and optimizer.
        target = jax.tree.map(abstract_leaf, pure(fresh_model, fresh_optimizer))
        orbax_restore_times = []
        for _ in range(REPEATS):
            t0 = time.perf_counter()
            out = sync.restore(REPEATS, args=ocp.args.Composite(**{STATE_ITEM: ocp.args.StandardRestore(target)}))
            jax.block_until_ready(out[STATE_ITEM])
            orbax_restore_times.append(time.perf_counter() - t0)
        del out
        sync.close()

        restore_times = []
        with Checkpointer(f"{root}/roxxel", fresh_model, fresh_optimizer) as ckpt:
            # The constructor starts Orbax's clean-up of half-written steps in a thread that
            # only the first save() joins (not restore(), not close()): wait for it, so that
            # it neither overlaps the timed restores nor outlives the emulator.
            cleanup = getattr(ckpt.manager, "_cleanup_tmp_directory_future", None)
            if cleanup is not None:
                cleanup.result()
            for i in range(REPEATS):
                t0 = time.perf_counter()
                step = ckpt.restore()
                jax.block_until_ready(nnx.state((fresh_model, fresh_optimizer)))
                restore_times.append(time.perf_counter() - t0)
                if i == 0:
                    assert step == REPEATS, step
                    got = jax.tree.map(np.asarray, pure(fresh_model, fresh_optimizer))
                    equal = jax.tree.map(lambda a, b: a.dtype == b.dtype and np.array_equal(a, b), saved, got)
                    assert all(jax.tree.leaves(equal)), f"{label}: the restored state differs from the saved one"

        baseline = "orbax sync save"
        rows = [
            (baseline, best(sync_times)),
            ("Checkpointer save+wait", best(total_times)),
            ("Checkpointer save()", best(block_times)),
        ]
        print_table(
            f"save, {label}: {nbytes / 1e6:.0f} MB state, time in ms (best of {REPEATS})",
            rows,
            "ms",
            baseline,
            higher_is_better=False,
        )
        share = best(block_times) / best(sync_times)
        print(
            f"save() blocks the caller for {share:.1%} of a synchronous save "
            f"(target <= 10%: {'met' if share <= 0.10 else 'MISSED'})"
        )
        print(f"  all runs, ms: sync {_ms(sync_times)}; save() {_ms(block_times)}; save+wait {_ms(total_times)}")
        print()
        rows = [("orbax restore", best(orbax_restore_times)), ("Checkpointer.restore()", best(restore_times))]
        print_table(
            f"restore, {label}: {nbytes / 1e6:.0f} MB state into a fresh model, time in ms (best of {REPEATS})",
            rows,
            "ms",
            "orbax restore",
            higher_is_better=False,
        )
        print(f"  all runs, ms: orbax {_ms(orbax_restore_times)}; Checkpointer {_ms(restore_times)}")
        print()

    print(
        f"jax {jax.__version__} ({jax.default_backend()}, {jax.device_count()} device), "
        f"orbax-checkpoint {ocp.__version__}, {os.cpu_count()} CPUs\n"
    )
    bench("local directory", os.path.join(work, "local"))
    bench("gs:// (emulator)", f"gs://{BUCKET}/bench")


def _ms(times: list[float]) -> str:
    return " ".join(f"{t * 1e3:.0f}" for t in times)


if __name__ == "__main__":
    main()
