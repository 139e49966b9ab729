"""Sharded state on the local pod: the memory a process holds, the Trainer's step, and the start-up.

The local pod of the docs and tests: two ``jax.distributed`` processes on loopback, 2 CPU
devices each (``--xla_force_host_platform_device_count=2``), 4 devices in all. The model is
an MLP of ``nnx.Linear(1024, 4096)`` / ``nnx.Linear(4096, 1024)`` blocks annotated with
logical axes (``embed``, ``mlp``), with ``optax.adam`` (parameters + two moments: ~96 MiB of
state a block). Its layout is the mesh's: ``fsdp=4`` shards every matrix over the 4 devices
(rule ``embed -> fsdp``); ``data=4`` leaves ``fsdp`` at size 1, so the same model is replicated.
Every row is a job of its own (2 fresh processes), one after another.

Tables:
  * memory a process holds, born sharded (``roxxel.train.sharded_state`` on ``fsdp=4``)
    against born replicated (the same on ``data=4``, the baseline): the bytes of its
    devices' shards (exact), its anonymous RSS after building minus before (``RssAnon``:
    what it holds), and its peak RSS while building minus its RSS before (``VmHWM``: with
    XLA's temporaries). On CPU the devices are host memory, so RSS sees the arrays. Close
    to 1/N, N = 4 devices, is the target for the shards and the held memory.
  * the Trainer's step, sharded (``fsdp=4``: all-gathers and reduce-scatters) against
    replicated (``data=4``: one all-reduce), median of the steps after the first two
    (compilation), each step waited for (``on_batch_end`` blocks on the loss); a smaller
    model (``--step-blocks``) so a step takes well under a second on 2 cores.
  * start-up of a ~1 GiB state, from nothing to the state on the mesh (sharded over
    ``fsdp=4``) and every process agreed, the slower process's time: the baseline is the
    path before #48 (the whole state built eagerly on every host, every array broadcast
    from process 0 with ``multihost_utils.broadcast_one_to_all``, then each process
    placing its devices' slices); against built eagerly and given to the Trainer's
    ``place_on_mesh`` (replicas compared by one all-gather of digests, nothing broadcast),
    and born sharded (``sharded_state``; ``place_on_mesh`` then moves nothing).

One run of each row (the start-up rows take seconds each; the machine's load is printed).
Default: 1 GiB state for memory and start-up, about 1 min 45 s on 2 cores (at load ~4;
peak ~4.5 GiB in each of the 2 processes, in the broadcast row); ``--quick``: 256 MiB and
fewer steps, about a minute.

    python bench/sharded_state.py [--quick] [--state-mib N] [--steps N]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WIDTH, HIDDEN = 1024, 4096
BLOCK_MIB = 3 * 2 * (WIDTH * HIDDEN + HIDDEN + WIDTH) * 4 / 2**20  # parameters + 2 Adam moments, float32
AXIS_RULES = [("embed", "fsdp"), ("mlp", "tensor")]  # no tensor axis here: mlp stays whole
MESHES = {"sharded": {"fsdp": 4}, "replicated": {"data": 4}}


# -- one process of a job --------------------------------------------------------------------


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field} line")


def worker(args: dict) -> None:
    import jax

    jax.distributed.initialize(args["coordinator"], num_processes=2, process_id=args["pid"], initialization_timeout=120)
    import numpy as np
    import optax
    from flax import nnx
    from jax.experimental import multihost_utils
    from jax.sharding import Mesh, NamedSharding

    from roxxel.train.state_placement import place_on_mesh, sharded_state, state_shardings

    class MLP(nnx.Module):
        def __init__(self, blocks: int, rngs: nnx.Rngs) -> None:
            init = nnx.initializers.lecun_normal()
            self.ups = nnx.List(
                [
                    nnx.Linear(WIDTH, HIDDEN, kernel_init=nnx.with_partitioning(init, ("embed", "mlp")), rngs=rngs)
                    for _ in range(blocks)
                ]
            )
            self.downs = nnx.List(
                [
                    nnx.Linear(HIDDEN, WIDTH, kernel_init=nnx.with_partitioning(init, ("mlp", "embed")), rngs=rngs)
                    for _ in range(blocks)
                ]
            )
            self.embed = nnx.Embed(257, WIDTH, rngs=rngs)

        def __call__(self, tokens):
            x = self.embed(tokens)
            for up, down in zip(self.ups, self.downs):
                x = x + down(nnx.relu(up(x)))
            return x @ self.embed.embedding[...].T

    def make(blocks: int):
        model = MLP(blocks, nnx.Rngs(0))
        return model, nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)

    def arrays(*objs):
        return [x for x in jax.tree.leaves(nnx.state(objs)) if isinstance(x, jax.Array)]

    shape = args["mesh"]
    mesh = Mesh(np.array(jax.devices()).reshape(tuple(shape.values())), tuple(shape))
    multihost_utils.sync_global_devices("start")  # both processes imported and initialised
    out: dict = {}
    if args["task"] == "step":
        return _steps(args, mesh, make, out)

    rss0, anon0 = _status("VmRSS"), _status("RssAnon")
    t0 = time.perf_counter()
    how = args["how"]
    if how == "sharded_state":
        model, opt = sharded_state(lambda: make(args["blocks"]), mesh, axis_rules=AXIS_RULES)
        place_on_mesh(mesh, model, opt, axis_rules=AXIS_RULES)  # what the Trainer does first: moves nothing
    elif how == "eager+place_on_mesh":
        with nnx.use_eager_sharding(False):
            model, opt = make(args["blocks"])
        place_on_mesh(mesh, model, opt, axis_rules=AXIS_RULES)  # digests compared, nothing broadcast
    elif how == "eager+broadcast":  # the Trainer's placement before #48 (roxxel/train/state_placement.py)
        with nnx.use_eager_sharding(False):
            model, opt = make(args["blocks"])
        for module in (model, opt):
            state = nnx.state(module)
            shardings = state_shardings(state, mesh, AXIS_RULES)
            host = multihost_utils.broadcast_one_to_all(jax.tree.map(np.asarray, state))

            def place(h, sharding: NamedSharding):
                return jax.make_array_from_callback(h.shape, sharding, lambda index: h[index])

            leaves, treedef = jax.tree.flatten(host)
            targets = jax.tree.leaves(shardings, is_leaf=lambda x: isinstance(x, NamedSharding))
            nnx.update(module, jax.tree.unflatten(treedef, [place(h, t) for h, t in zip(leaves, targets)]))
            del host, state
    else:
        raise ValueError(how)
    jax.block_until_ready(arrays(model, opt))
    multihost_utils.sync_global_devices("placed")  # every process done
    out["seconds"] = time.perf_counter() - t0
    out["peak_bytes"] = _status("VmHWM") - rss0
    out["held_bytes"] = _status("RssAnon") - anon0
    out["shard_bytes"] = sum(s.data.nbytes for a in arrays(model, opt) for s in a.addressable_shards)
    out["state_bytes"] = sum(a.nbytes for a in arrays(model, opt))
    out["max_shard_fraction"] = max(
        s.data.nbytes / a.nbytes for a in arrays(model, opt) if a.nbytes > 2**20 for s in a.addressable_shards
    )
    print("RESULT " + json.dumps(out), flush=True)


def _steps(args: dict, mesh, make, out: dict) -> None:
    import jax
    import optax

    from roxxel import Curriculum, Phase, Roxxel
    from roxxel.train import Cadence, Callback, LoopOptions, Trainer, sharded_state

    times: list[float] = []

    class Clock(Callback):
        def on_batch_end(self, step: int, loss) -> None:
            jax.block_until_ready(loss)  # the step is done, not only dispatched
            times.append(time.perf_counter())

    def loss_fn(model, batch):
        logits = model(batch[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch[:, 1:]).mean()

    model, opt = sharded_state(lambda: make(args["blocks"]), mesh, axis_rules=AXIS_RULES)
    curriculum = Curriculum(
        Roxxel(args["data"]), [Phase(steps=args["steps"], global_batch_size=8, seq_len=32)], chunk_tokens=256
    )
    trainer = Trainer(
        model,
        opt,
        curriculum,
        loss_fn,
        mesh=mesh,
        axis_rules=AXIS_RULES,
        cadence=Cadence(log_every=1000),
        loop=LoopOptions(watchdog=None),
        callbacks=[Clock()],
    )
    trainer.run()
    gaps = sorted(b - a for a, b in zip(times[2:], times[3:]))  # from the third step on: compiled
    out["step_s"] = gaps[len(gaps) // 2]
    out["steps_timed"] = len(gaps)
    out["state_bytes"] = sum(x.nbytes for x in jax.tree.leaves((model, opt)) if isinstance(x, jax.Array))
    print("RESULT " + json.dumps(out), flush=True)


# -- the driver ------------------------------------------------------------------------------


def _job(args: dict, work: str, name: str) -> list[dict]:
    """Run one 2-process job; each process's RESULT."""
    sys.path.insert(0, str(HERE.parent / "tests"))
    from support.net import free_port

    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROXXEL_", "JAX_", "TPU_"))}
    env.update(
        JAX_PLATFORMS="cpu",
        XLA_FLAGS="--xla_force_host_platform_device_count=2",
        TF_CPP_MIN_LOG_LEVEL="3",
        PYTHONUNBUFFERED="1",
    )
    coordinator = f"127.0.0.1:{free_port()}"
    procs, logs = [], []
    for pid in range(2):
        log = Path(work) / f"{name}-{pid}.log"
        with open(log, "w") as f:
            argv = [sys.executable, __file__, "--worker", json.dumps({**args, "coordinator": coordinator, "pid": pid})]
            procs.append(subprocess.Popen(argv, env=env, stdout=f, stderr=subprocess.STDOUT))
        logs.append(log)
    deadline = time.monotonic() + 600
    try:
        for p in procs:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    results = []
    for p, log in zip(procs, logs):
        text = log.read_text()
        lines = [line for line in text.splitlines() if line.startswith("RESULT ")]
        if p.returncode != 0 or not lines:
            raise SystemExit(f"{name}: a process exited with {p.returncode}:\n{text[-3000:]}")
        results.append(json.loads(lines[-1][7:]))
    return results


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        return worker(json.loads(sys.argv[2]))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="256 MiB state, fewer steps: about a minute")
    parser.add_argument("--state-mib", type=int, help="state size for memory and start-up (default 1024; quick 256)")
    parser.add_argument("--step-blocks", type=int, default=1, help="MLP blocks of the step-time model (default 1)")
    parser.add_argument("--steps", type=int, help="Trainer steps per layout (default 20; quick 10)")
    args, _ = parser.parse_known_args()
    state_mib = args.state_mib or (256 if args.quick else 1024)
    steps = args.steps or (10 if args.quick else 20)
    blocks = max(1, round(state_mib / BLOCK_MIB))

    sys.path.insert(0, str(HERE))
    from _measure import load_average, record
    from _table import print_table

    from roxxel.pack import pack

    mib = 2**20
    with tempfile.TemporaryDirectory(prefix="roxxel-bench-sharded-") as work:
        import sysconfig

        data = os.path.join(work, "data")
        pack([os.path.join(sysconfig.get_paths()["stdlib"], "json")], data, include=["*.py"])
        loads = [load_average()]

        memory: dict[str, list[dict]] = {}
        for layout in ("replicated", "sharded"):
            job = {"task": "build", "how": "sharded_state", "mesh": MESHES[layout], "blocks": blocks}
            memory[layout] = _job(job, work, f"memory-{layout}")
        loads.append(load_average())
        step: dict[str, list[dict]] = {}
        for layout in ("replicated", "sharded"):
            job = {"task": "step", "mesh": MESHES[layout], "blocks": args.step_blocks, "data": data, "steps": steps}
            step[layout] = _job(job, work, f"step-{layout}")
        loads.append(load_average())
        startup: dict[str, list[dict]] = {}
        for how in ("eager+broadcast", "eager+place_on_mesh", "sharded_state"):
            job = {"task": "build", "how": how, "mesh": MESHES["sharded"], "blocks": blocks}
            startup[how] = _job(job, work, f"startup-{how}")
        loads.append(load_average())

    import jax

    state_bytes = memory["sharded"][0]["state_bytes"]
    print(
        f"jax {jax.__version__}, 2 processes x 2 CPU devices on loopback; {'; '.join(loads)} (before/after each table)"
    )
    rows = {
        "born replicated (data=4)": memory["replicated"],
        "born sharded (fsdp=4)": memory["sharded"],
    }
    for column, key in (
        ("the devices' shards", "shard_bytes"),
        ("held (RssAnon after - before)", "held_bytes"),
        ("peak (VmHWM - RSS before)", "peak_bytes"),
    ):
        print_table(
            f"\nper-process memory of a {state_bytes / mib:.0f} MiB state: {column}, MiB (the larger process's)",
            [(name, max(r[key] for r in res) / mib) for name, res in rows.items()],
            "MiB",
            "born replicated (data=4)",
            higher_is_better=False,
        )
    held = max(r["held_bytes"] for r in memory["sharded"]) / max(r["held_bytes"] for r in memory["replicated"])
    shards = max(r["shard_bytes"] for r in memory["sharded"]) / max(r["shard_bytes"] for r in memory["replicated"])
    print(f"sharded / replicated: shards {shards:.3f}, held {held:.3f} (1/N = {1 / 4:.3f})")

    step_mib = step["sharded"][0]["state_bytes"] / mib
    print_table(
        f"\nTrainer step, {step_mib:.0f} MiB state, 8x32 tokens, median of {step['sharded'][0]['steps_timed']} "
        "steps after compilation (the slower process's), ms",
        [
            ("replicated (data=4)", max(r["step_s"] for r in step["replicated"]) * 1e3),
            ("sharded (fsdp=4)", max(r["step_s"] for r in step["sharded"]) * 1e3),
        ],
        "ms",
        "replicated (data=4)",
        higher_is_better=False,
    )
    step_ratio = max(r["step_s"] for r in step["sharded"]) / max(r["step_s"] for r in step["replicated"])

    start_mib = startup["sharded_state"][0]["state_bytes"] / mib
    print_table(
        f"\nstart-up of a {start_mib:.0f} MiB state onto fsdp=4, until every process holds its shards "
        "(the slower process's), s",
        [(how, max(r["seconds"] for r in res)) for how, res in startup.items()],
        "s",
        "eager+broadcast",
        higher_is_better=False,
    )
    print(
        "peak memory while starting (VmHWM - RSS before, the larger process's), MiB: "
        + "; ".join(f"{how} {max(r['peak_bytes'] for r in res) / mib:.0f}" for how, res in startup.items())
    )
    startup_ratio = max(r["seconds"] for r in startup["sharded_state"]) / max(
        r["seconds"] for r in startup["eager+broadcast"]
    )
    record("sharded state: per-process memory held vs replicated", f"{held:.2f}x", "~1/N = 0.25x", held <= 0.35)
    record("sharded Trainer step vs replicated (local pod)", f"{step_ratio:.2f}x", "- (reported)", None)
    record("start-up, born sharded vs broadcast", f"{startup_ratio:.2f}x", "< 1x", startup_ratio < 1)


if __name__ == "__main__":
    main()
