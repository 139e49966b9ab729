"""A plain ``python train.py``-style Trainer run for the signal and error tests.

argv: data_dir run_dir mode. mode "long": many steps, each printing "STEP n" (the test
interrupts it), 0.3 s each; mode "raise": the loss_fn raises RuntimeError("loss_fn exploded") when traced.
"""

import os
import sys
import time

import jax
from jax.experimental import io_callback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/
from support.lm import loss_fn, make_dataset, make_model  # noqa: E402

from roxxel import Curriculum, Phase  # noqa: E402
from roxxel.train import Cadence, Trainer  # noqa: E402

data, run_dir, mode = sys.argv[1], sys.argv[2], sys.argv[3]


def announce(step):
    print(f"STEP {int(step)}", flush=True)
    time.sleep(0.3)  # a slow step: a second Ctrl-C lands while the preemption save is still pending
    return step


def long_loss(model, batch):
    loss, aux = loss_fn(model, batch)
    io_callback(announce, jax.ShapeDtypeStruct((), jax.numpy.int32), 0, ordered=True)
    return loss, aux


def raising_loss(model, batch):
    raise RuntimeError("loss_fn exploded")


cur = Curriculum(
    make_dataset(data), [Phase(steps=100000, global_batch_size=2, seq_len=16)], chunk_tokens=256, repeat=True
)
Trainer(
    *make_model(),
    cur,
    long_loss if mode == "long" else raising_loss,
    save_path=run_dir,
    cadence=Cadence(log_every=1000, save_interval_steps=100000),
).run()
