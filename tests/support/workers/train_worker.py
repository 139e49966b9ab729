"""One process of a multi-process Trainer run (launched by test_trainer_multiprocess.py).

argv: coordinator process_id num_processes data_dir run_dir log_dir stop_at_step(or -1) params_out(or -) init_seed
[save_interval_steps (default 100)]
Processes other than 0 initialise with another seed: the Trainer must start them all from process 0's values.
"""

import os
import sys

import jax
import numpy as np
from flax import nnx

coordinator, pid, nproc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
data, run_dir, log_dir, stop, params_out = sys.argv[4], sys.argv[5], sys.argv[6], int(sys.argv[7]), sys.argv[8]
init_seed = int(sys.argv[9]) + 100 * pid
save_interval_steps = int(sys.argv[10]) if len(sys.argv) > 10 else 100
if nproc > 1:
    jax.distributed.initialize(
        coordinator, num_processes=nproc, process_id=pid, initialization_timeout=60, heartbeat_timeout_seconds=30
    )

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/
from support.lm import loss_fn, make_curriculum, make_dataset, make_model  # noqa: E402

from roxxel.train import Cadence, Checkpointer, Logger, Trainer  # noqa: E402

model, opt = make_model(seed=init_seed)
cur = make_curriculum(make_dataset(data))
ckpt = Checkpointer(f"{run_dir}/checkpoints", model, opt, fingerprint=cur.describe())
trainer = Trainer(
    model,
    opt,
    cur,
    loss_fn,
    checkpointer=ckpt,
    logger=Logger(f"{log_dir}-{pid}"),
    cadence=Cadence(log_every=1, save_interval_steps=save_interval_steps),
)
trainer.run(stop_at_step=stop if stop >= 0 else None)
if params_out != "-":
    from jax.experimental import multihost_utils

    flat = {
        "/".join(map(str, k)): np.asarray(multihost_utils.process_allgather(v, tiled=True))
        for k, v in nnx.to_flat_state(nnx.state(model, nnx.Param))
    }
    if pid == 0:
        np.savez(params_out, **flat)
if nproc > 1:
    jax.distributed.shutdown()
