"""One process of a sharded-training run through the Trainer (spawned by tests/train/test_train_sharded.py).

    python sharded_train.py '<json>'

The JSON: ``coordinator``, ``pid``, ``nproc``, ``data`` (dataset dir), ``run`` (run dir),
``mesh`` (axis sizes in order, e.g. ``{"fsdp": 2, "tensor": 2}``), ``init`` (``"sharded"``:
:func:`roxxel.train.sharded_state`; ``"eager"``: built on every host, placed by the Trainer),
``seed`` (model init seed; ``"eager"`` adds ``100 * pid`` so replicas start apart),
``data_seed`` (the Trainer's seed), ``stop`` (stop_at_step or -1), ``out`` (.npz of the final
gathered parameters written by process 0, or ``null``), ``width`` (model width).
``dropout`` (rate of a dropout layer, 0: none) and ``grad_accum`` (the Trainer's
``grad_accum_steps``). ``data``, ``data_seed`` and ``width`` may be lists: each process's value (processes that disagree),
``sigterm_at`` / ``sigterm_pid`` (that process gets SIGTERM after that step).
Prints ``RESULT <json>``: each parameter's spec and the bytes of it this process holds, and
the last metrics. Exits 42 at a preemption, 78 at a configuration error (``roxxel-worker``'s
contract, here by hand).
"""

from __future__ import annotations

import json
import os
import signal
import sys

import jax

args = json.loads(sys.argv[1])
if args["nproc"] > 1:
    jax.distributed.initialize(
        args["coordinator"],
        num_processes=args["nproc"],
        process_id=args["pid"],
        initialization_timeout=60,
        heartbeat_timeout_seconds=30,
    )

import numpy as np  # noqa: E402
import optax  # noqa: E402
from flax import nnx  # noqa: E402
from jax.sharding import Mesh  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/
from support.lm import make_dataset  # noqa: E402

from roxxel import Curriculum, Phase  # noqa: E402
from roxxel.exit_codes import ConfigurationError  # noqa: E402
from roxxel.train import Cadence, Callback, Checkpointer, DataOptions, LoopOptions, Trainer, sharded_state  # noqa: E402

VOCAB = 260  # 257 byte-level ids, padded to divide over 4 devices
AXIS_RULES = [("vocab", "tensor"), ("embed", "fsdp"), ("mlp", "tensor")]


class ShardedLM(nnx.Module):
    """Embedding -> MLP -> logits, every matrix sharded: FSDP over ``embed``, tensor over ``mlp``/``vocab``."""

    def __init__(self, rngs: nnx.Rngs, width: int, dropout: float = 0.0):
        normal, lecun = nnx.initializers.normal(0.02), nnx.initializers.lecun_normal()
        self.embed = nnx.Embed(
            VOCAB, width, embedding_init=nnx.with_partitioning(normal, ("vocab", "embed")), rngs=rngs
        )
        self.hidden = nnx.Linear(
            width, 4 * width, kernel_init=nnx.with_partitioning(lecun, ("embed", "mlp")), rngs=rngs
        )
        self.out = nnx.Linear(4 * width, VOCAB, kernel_init=nnx.with_partitioning(lecun, ("mlp", "vocab")), rngs=rngs)
        self.dropout = nnx.Dropout(dropout, rngs=rngs) if dropout else None  # its RNG state is checkpointed

    def __call__(self, tokens):
        hidden = nnx.relu(self.hidden(self.embed(tokens)))
        return self.out(self.dropout(hidden) if self.dropout else hidden)


def loss_fn(model, batch):
    logits = model(batch[:, :-1])
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch[:, 1:]).mean()


def make(seed: int, width: int):
    model = ShardedLM(nnx.Rngs(seed), width, args.get("dropout", 0.0))
    return model, nnx.Optimizer(model, optax.adam(3e-3), wrt=nnx.Param)


class SigtermAt(Callback):
    """This process receives SIGTERM (a preemption notice) once it has finished ``step``."""

    def __init__(self, step: int):
        self.step = step

    def on_batch_end(self, step, loss) -> None:
        if step == self.step:
            os.kill(os.getpid(), signal.SIGTERM)


def mine(value):
    """``value``, or this process's entry of it when it is a list."""
    return value[args["pid"]] if isinstance(value, list) else value


def main() -> int:
    pid = args["pid"]
    mesh = Mesh(np.array(jax.devices()).reshape(tuple(args["mesh"].values())), tuple(args["mesh"]))
    width = mine(args.get("width", 32))
    if args["init"] == "sharded":
        model, opt = sharded_state(lambda: make(args["seed"], width), mesh, axis_rules=AXIS_RULES)
    else:
        with nnx.use_eager_sharding(False):
            model, opt = make(args["seed"] + 100 * pid, width)
    cur = Curriculum(
        make_dataset(mine(args["data"])),
        [Phase(steps=6, global_batch_size=8, seq_len=32), Phase(steps=4, global_batch_size=4, seq_len=64)],
        chunk_tokens=256,
    )
    ckpt = Checkpointer(f"{args['run']}/checkpoints", model, opt, fingerprint=cur.describe())
    trainer = Trainer(
        model,
        opt,
        cur,
        loss_fn,
        checkpointer=ckpt,
        mesh=mesh,
        axis_rules=AXIS_RULES,
        cadence=Cadence(log_every=1, save_interval_steps=args.get("save_interval_steps", 4)),
        data=DataOptions(seed=mine(args.get("data_seed", 42))),
        loop=LoopOptions(grad_accum_steps=args.get("grad_accum", 1), watchdog=None),
        callbacks=[SigtermAt(args["sigterm_at"])]
        if args.get("sigterm_at") and pid == args.get("sigterm_pid", 0)
        else [],
    )
    last = trainer.run(stop_at_step=None if args["stop"] < 0 else args["stop"])
    params = nnx.to_flat_state(nnx.state(model, nnx.Param))
    result = {
        "specs": {"/".join(map(str, k)): str(v.get_value().sharding.spec) for k, v in params},
        "local_bytes": {
            "/".join(map(str, k)): sum(s.data.nbytes for s in v.get_value().addressable_shards) for k, v in params
        },
        "loss": last.get("loss"),
        "step": trainer.state.step,
    }
    if args.get("out"):
        from jax.experimental import multihost_utils

        flat = {
            "/".join(map(str, k)): np.asarray(multihost_utils.process_allgather(v.get_value(), tiled=True))
            for k, v in nnx.to_flat_state(nnx.state((model, opt)))
            if not jax.dtypes.issubdtype(v.get_value().dtype, jax.dtypes.prng_key)
        }
        if pid == 0:
            np.savez(args["out"], **flat)
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    try:
        code = main()
    except ConfigurationError as e:
        print(f"configuration error: {e}", file=sys.stderr, flush=True)
        os._exit(78)
    except SystemExit as e:  # Preempted: 42 after the save
        sys.stdout.flush()
        os._exit(e.code if isinstance(e.code, int) else 1)
    if args["nproc"] > 1:
        jax.distributed.shutdown()
    sys.exit(code)
