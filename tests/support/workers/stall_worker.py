"""One process of a 2-process Trainer run whose process STALL_PID blocks its main thread in Python
at step STALL_STEP, or (STALL_STEP = 0) spends 0.15 s more host time than its peer on every step
(spawned by tests/train/test_watchdog.py).

argv: coordinator process_id num_processes data_dir run_dir stall_pid stall_step
"""

import os
import sys
import time

import logging

import jax

coordinator, pid, nproc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
data, run_dir, stall_pid, stall_step = sys.argv[4], sys.argv[5], int(sys.argv[6]), int(sys.argv[7])
jax.distributed.initialize(
    coordinator, num_processes=nproc, process_id=pid, initialization_timeout=60, heartbeat_timeout_seconds=100
)  # JAX's default: the watchdog must act first

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/
from support.lm import loss_fn, make_curriculum, make_dataset, make_model  # noqa: E402

from roxxel.train import Cadence, Callback, Checkpointer, LoopOptions, Trainer  # noqa: E402
from roxxel.train.watchdog import WatchdogBounds  # noqa: E402


class BlockMainThread(Callback):
    def on_step(self, step, metrics):
        if jax.process_index() == 0 and "host_time_s_max" in metrics:
            print(
                f"HOST {step} {metrics['host_time_s_median']:.3f} {metrics['host_time_s_max']:.3f} "
                f"{int(metrics['slowest_process'])}",
                flush=True,
            )
        if step == stall_step and jax.process_index() == stall_pid:
            print(f"BLOCKING at step {step}", flush=True)
            time.sleep(3600)  # the main thread blocked in Python; the process and JAX's heartbeat stay alive


logging.basicConfig(level=logging.WARNING, format="%(name)s %(levelname)s: %(message)s")
model, opt = make_model(seed=0)
cur = make_curriculum(make_dataset(data))
if stall_step == 0 and pid == stall_pid:  # a slow host: 0.15 s more to get each batch (a slow mount, a busy CPU)
    streams = cur.stream

    class SlowStream:
        def __init__(self, stream):
            self.stream, self.stop_step = stream, stream.stop_step

        def __enter__(self):
            self.stream.__enter__()
            return self

        def __exit__(self, *exc):
            return self.stream.__exit__(*exc)

        def __iter__(self):
            for batch in self.stream:
                time.sleep(0.15)
                yield batch

    cur.stream = lambda *args, **kwargs: SlowStream(streams(*args, **kwargs))
ckpt = Checkpointer(f"{run_dir}/checkpoints", model, opt, fingerprint=cur.describe())
Trainer(
    model,
    opt,
    cur,
    loss_fn,
    checkpointer=ckpt,
    cadence=Cadence(log_every=1, save_interval_steps=1000),
    loop=LoopOptions(watchdog=WatchdogBounds(step_floor_s=4, step_multiple=10, first_step_s=240, poll_s=0.25)),
    callbacks=[BlockMainThread()],
).run()
print("FINISHED", flush=True)
