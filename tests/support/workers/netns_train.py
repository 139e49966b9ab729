"""A short multi-process training run for the network-namespace tests (tests/launcher/local/test_netns.py).

Run by ``roxxel-launch submit --local [--netns]`` as ``roxxel-worker -- python netns_train.py
DATA PARAMS_OUT STEPS CHECKPOINT_EVERY STEP_SLEEP``: it joins the pod through
``roxxel.distributed.initialize()`` (the pod's own environment under ``--netns``), trains the
tiny LM of ``support/lm.py`` for STEPS steps of one phase with checkpoints every CHECKPOINT_EVERY
steps in ``$ROXXEL_CHECKPOINT_DIR`` (restoring the latest one first), sleeps STEP_SLEEP
seconds after each step of a run that started from scratch (so that a test can act
mid-training; a resumed attempt runs at full speed) and writes the final parameters to
PARAMS_OUT (process 0).

Faults of a run that started from scratch, for the liveness tests (tests/launcher/local/test_liveness.py):
``STALL_PID`` / ``STALL_AT``: that process blocks its main thread in Python after step STALL_AT
(alive, its JAX heartbeat too). ``SLOW_PID`` / ``SLOW_S``: that process takes SLOW_S seconds
more for every step (a straggler). ``SIGTERM_PID`` / ``SIGTERM_WINDOW``: that process sends
itself SIGTERM inside the first evaluation (``eval``: the run then evaluates every 3 steps)
or right after the first periodic save started (``save``: the save still being written).

Every process prints one ``host:`` line: its hostname, the addresses its hostname and the
coordinator's name resolve to, and at the end the bytes its ``eth0`` sent (``-`` on
loopback), so a test can check that the traffic went over the namespaces' links.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time

import roxxel.distributed as rd

data, params_out, steps, every, pause = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
info = rd.initialize()

import numpy as np  # noqa: E402  (after initialize, as a training program would)
from flax import nnx  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/
from support.lm import loss_fn, make_dataset, make_model  # noqa: E402

from roxxel import Curriculum, Phase  # noqa: E402
from roxxel.train import Cadence, Callback, Checkpointer, Logger, Trainer  # noqa: E402


def _resolve(name: str) -> str:
    return ",".join(sorted({a[4][0] for a in socket.getaddrinfo(name, None, socket.AF_INET)}))


def _tx_bytes() -> str:
    try:
        with open("/sys/class/net/eth0/statistics/tx_bytes") as f:
            return f.read().strip()
    except OSError:
        return "-"


class PacedLogger(Logger):
    """Sleeps after each logged step of a fresh run: the test needs time to cut a host off
    mid-training (only the first attempt is cut)."""

    paced = True

    def log_metrics_summary(self, step, metrics):
        super().log_metrics_summary(step, metrics)
        if self.paced:
            time.sleep(pause)
            if str(info.process_id) == os.environ.get("STALL_PID") and step == int(os.environ["STALL_AT"]):
                print(f"BLOCKING at step {step}", flush=True)
                time.sleep(3600)  # the main thread blocked; the process and JAX's heartbeat stay alive
        if str(info.process_id) == os.environ.get("SLOW_PID"):
            time.sleep(float(os.environ["SLOW_S"]))


def notice(window: str) -> None:
    """SIGTERM to this process in ``window`` of a run started from scratch, if the test asked."""
    if (
        PacedLogger.paced
        and os.environ.get("SIGTERM_WINDOW") == window
        and os.environ.get("SIGTERM_PID") == str(info.process_id)
    ):
        print(f"SIGTERM in window {window}", flush=True)
        os.kill(os.getpid(), signal.SIGTERM)


class SaveNotice(Callback):
    def on_checkpoint(self, step, directory):
        notice("save")


def evaluate(model):
    notice("eval")
    return {"zero": 0.0}


host = socket.gethostname()
coordinator = (info.coordinator_address or "").rpartition(":")[0]
print(
    f"host: process {info.process_id} hostname={host} address={_resolve(host)} "
    f"coordinator={coordinator}={_resolve(coordinator) if coordinator else '-'}",
    flush=True,
)

model, opt = make_model(seed=0)
curriculum = Curriculum(make_dataset(data), [Phase(steps=steps, global_batch_size=4, seq_len=32)], chunk_tokens=256)
checkpointer = Checkpointer(os.environ["ROXXEL_CHECKPOINT_DIR"], model, opt, fingerprint=curriculum.describe())
PacedLogger.paced = checkpointer.latest_step() is None
logger = PacedLogger(
    os.path.join(os.environ["ROXXEL_CHECKPOINT_DIR"], "..", f"logs-{info.process_id}"),
    total_steps=curriculum.total_steps,
    verbose=True,  # test_netns reads step_time_s from the lines
)
eval_window = os.environ.get("SIGTERM_WINDOW") == "eval"
Trainer(
    model,
    opt,
    curriculum,
    loss_fn,
    checkpointer=checkpointer,
    logger=logger,
    eval_fn=evaluate if eval_window else None,
    cadence=Cadence(log_every=1, save_interval_steps=every, eval_every=3 if eval_window else 500),
    callbacks=[SaveNotice()],
).run()

flat = {
    "/".join(map(str, k)): np.asarray(multihost_utils.process_allgather(v, tiled=True))
    for k, v in nnx.to_flat_state(nnx.state(model, nnx.Param))
}
if info.process_id == 0:
    np.savez(params_out, **flat)
print(f"host: process {info.process_id} eth0_tx_bytes={_tx_bytes()}", flush=True)
rd.shutdown()
