"""One process of a checkpoint test run (spawned by tests/train/test_checkpoint*.py).

    python tests/support/workers/ckpt_worker.py MODE --dir DIR [--coordinator HOST:PORT --nproc N --pid I] ...

Modes (every process of a run gets the same arguments but its own --pid):

- ``train``: build the model (seed --seed) spread over all devices, take --steps adam
  steps saving each; process 0 writes the gathered final state to --ref (.npz).
- ``restore``: build the model with another seed, restore the latest step and compare
  the gathered state bitwise with --ref.
- ``preempt``: restore the latest step, then train, checking for preemption every step
  (the save interval is too large to save otherwise); on :class:`Preempted` process 0
  writes the gathered state to --ref and the exception exits the process with
  PREEMPTED_EXIT_CODE. With --sigterm-at, process --sigterm-pid signals itself in that
  window (after initialize, or after the restore) before any preemption check.
- ``restore-grown``: build the model plus a new layer ``l3`` (another seed), restore the
  latest step with ``partial=True``; compare ``l1``/``l2`` bitwise with --ref and report
  the restore plan and whether ``l3`` kept its initial values.
- ``kill-loop``: one process; a bigger state gets ``+1`` per step and is saved every
  step, forever (the test SIGKILLs it in the middle of a save).

Each process prints ``RESULT <json>`` (``kill-loop``: ``started <step>`` per save).
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import os
import signal
import sys
import time

import numpy as np


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["train", "restore", "restore-grown", "preempt", "kill-loop"])
    p.add_argument("--dir", required=True)
    p.add_argument("--coordinator")
    p.add_argument("--nproc", type=int, default=1)
    p.add_argument("--pid", type=int, default=0)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ref")
    p.add_argument("--ready", help="write <ready>.<pid> once training runs")
    p.add_argument(
        "--max-steps", type=int, default=5000, help="preempt: the step the loop ends at without a preemption"
    )
    p.add_argument(
        "--sigterm-at",
        choices=["initialized", "restored"],
        help="preempt: process --sigterm-pid sends itself SIGTERM right after jax.distributed.initialize "
        "(before the restore) or right after the restore (before the first check)",
    )
    p.add_argument("--sigterm-pid", type=int, default=0)
    return p.parse_args()


def quiet_logs() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s: %(message)s")
    logging.getLogger("roxxel").setLevel(logging.INFO)
    for name in ("gcsfs", "google", "absl"):
        logging.getLogger(name).setLevel(logging.ERROR)


def result(**fields) -> None:
    print("RESULT " + json.dumps(fields), flush=True)


def main() -> int:
    args = parse()
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # debugging a hang: kill -USR1 <pid>
    quiet_logs()
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/
    from support.processes import join_job

    join_job(args.coordinator, args.nproc, args.pid)

    def sigterm_self(window: str) -> None:
        if args.sigterm_at == window and args.pid == args.sigterm_pid:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.5)  # let JAX's notifier thread see it before the next call

    sigterm_self("initialized")
    import jax
    import jax.numpy as jnp
    from flax import nnx

    import support.ckpt as common  # tests/ on sys.path: the shared helpers
    from roxxel.train.checkpoint import Checkpointer, Preempted

    def kernel_sharding(ms) -> dict:
        k = ms.model.l1.kernel.get_value()
        return {"spec": str(k.sharding.spec), "devices": len(k.sharding.device_set)}

    mesh = common.mesh()
    x = common.inputs(common.MODEL_DIMS, mesh)

    if args.mode == "train":
        ms = common.build(common.MODEL_DIMS, args.seed)
        with Checkpointer(args.dir, state=ms, fingerprint=common.FINGERPRINT, max_to_keep=2) as ckpt:
            for step in range(1, args.steps + 1):
                loss = float(common.train_step(ms.model, ms.optimizer, x))
                ckpt.save(step, {"loss": loss}, tokens_consumed=step * 32)
        ref = common.flat_host(ms)
        if jax.process_index() == 0 and args.ref:
            np.savez(args.ref, **ref)
        result(
            pid=jax.process_index(), steps=ckpt.all_steps(), sharding=kernel_sharding(ms), devices=jax.device_count()
        )
        return 0

    if args.mode == "restore":
        ms = common.build(common.MODEL_DIMS, args.seed + 1000)
        with Checkpointer(args.dir, state=ms, fingerprint=common.FINGERPRINT) as ckpt:
            step = ckpt.restore()
            run = ckpt.restored_run or {}
        got = common.flat_host(ms)
        ref = dict(np.load(args.ref))
        result(
            pid=jax.process_index(),
            step=step,
            model_state_step=ms.step,
            tokens=run.get("tokens_consumed"),
            saved_process_count=run.get("process_count"),
            mismatched=common.mismatches(got, ref),
            compared=len(ref),
            sharding=kernel_sharding(ms),
            devices=jax.device_count(),
        )
        return 0

    if args.mode == "restore-grown":
        ms = common.build(common.MODEL_DIMS, args.seed + 1000, shard=False)
        ms.model.l3 = nnx.Linear(common.MODEL_DIMS[-1], common.MODEL_DIMS[0], rngs=nnx.Rngs(7))
        ms.optimizer = nnx.Optimizer(ms.model, common.optax.adam(1e-2), wrt=nnx.Param)
        state = ms.nnx_state()  # spread every array (l3 and the new optimizer's too) over all devices
        nnx.replace_by_pure_dict(state, jax.tree.map(lambda a: common.to_global(a, mesh), nnx.to_pure_dict(state)))
        ms.update(state)
        initial_l3 = {k: v for k, v in common.flat_host(ms).items() if k.startswith("model/l3/")}
        with Checkpointer(args.dir, state=ms, fingerprint=common.FINGERPRINT) as ckpt:
            step = ckpt.restore(partial=True)
            plan = ckpt.restore_plan
        got = common.flat_host(ms)
        ref = {k: v for k, v in np.load(args.ref).items() if k.startswith(("model/l1/", "model/l2/"))}
        result(
            pid=jax.process_index(),
            step=step,
            mismatched=common.mismatches({k: got[k] for k in ref}, ref),
            compared=len(ref),
            l3_changed=common.mismatches({k: got[k] for k in initial_l3}, initial_l3),
            new=plan.new if plan else None,
            optimizer_restored=plan.optimizer_restored if plan else None,
            sharding=kernel_sharding(ms),
        )
        return 0

    if args.mode == "preempt":
        ms = common.build(common.MODEL_DIMS, args.seed)
        with Checkpointer(args.dir, state=ms, fingerprint=common.FINGERPRINT, save_interval_steps=100000) as ckpt:
            step = ckpt.restore()
            sigterm_self("restored")
            if args.ready:
                with open(f"{args.ready}.{args.pid}", "w") as f:
                    f.write(str(os.getpid()))
            try:
                while step < args.max_steps:
                    ckpt.save_and_exit_if_preempted(step, tokens_consumed=step * 32)
                    loss = float(common.train_step(ms.model, ms.optimizer, x))
                    step += 1
                    ckpt.save(step, {"loss": loss}, tokens_consumed=step * 32)
                    time.sleep(0.02)
            except Preempted as stop:
                ref = common.flat_host(ms)  # every process is here, at the same step
                if jax.process_index() == 0 and args.ref:
                    np.savez(args.ref, **ref)
                result(pid=jax.process_index(), preempted_at=stop.step, code=stop.code, steps=ckpt.all_steps())
                raise
        result(pid=jax.process_index(), preempted_at=None, step=step)
        return 0

    if args.mode == "kill-loop":
        ms = common.build(common.BIG_DIMS, args.seed)

        @jax.jit
        def plus_one(tree):
            return jax.tree.map(lambda a: a + jnp.ones((), a.dtype), tree)

        state = ms.nnx_state()
        with Checkpointer(args.dir, state=ms, max_to_keep=2, keep_best=False) as ckpt:
            step = 0
            while True:
                nnx.replace_by_pure_dict(state, plus_one(nnx.to_pure_dict(state)))
                ms.update(state)
                step += 1
                ckpt.save(step)
                print(f"started {step}", flush=True)
    return 2


if __name__ == "__main__":
    sys.exit(main())
