"""Trainer overhead: steps/s of ``Trainer.run()`` against a hand-written ``nnx.jit`` loop.

Both train the same model from the same initial parameters on the same batches (the
baseline's batches are taken from the same curriculum stream up front, so it pays
nothing for data). The Trainer adds streaming with prefetch, the preemption check,
bounded dispatch, logging and the NaN guard. Target: ratio >= 0.97.

The progress watchdog runs in jobs only (several processes, or under ``roxxel-worker``), so
its one call per step is measured directly against the step time of the same run: target
cost < 1%. So are the loop's sections (``roxxel.train.sections``: a batch wait and a step
per step), told to the watchdog and to a :class:`~roxxel.train.callbacks.Goodput` report:
target cost < 1%. In one process the straggler report gathers nothing; across processes it adds one
all-gather of one number per logging window.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

import jax
import numpy as np
import optax
from flax import nnx

sys.path.insert(0, os.path.dirname(__file__))
from _measure import load_average, record  # noqa: E402
from _table import print_table  # noqa: E402

from roxxel import Curriculum, Phase, Roxxel  # noqa: E402
from roxxel.train import Cadence, Trainer  # noqa: E402

STEPS, BATCH, SEQ, WIDTH, VOCAB = 60, 16, 128, 384, 257
REPEATS = 3


class MLPLM(nnx.Module):
    def __init__(self, rngs):
        self.embed = nnx.Embed(VOCAB, WIDTH, rngs=rngs)
        self.h1 = nnx.Linear(WIDTH, 4 * WIDTH, rngs=rngs)
        self.h2 = nnx.Linear(4 * WIDTH, WIDTH, rngs=rngs)
        self.out = nnx.Linear(WIDTH, VOCAB, rngs=rngs)

    def __call__(self, x):
        h = self.embed(x)
        return self.out(h + self.h2(nnx.gelu(self.h1(h))))


def loss_fn(model, batch):
    logits = model(batch[:, :-1])
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch[:, 1:]).mean()


def fresh():
    model = MLPLM(nnx.Rngs(0))
    return model, nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)


def hand_written(batches) -> float:
    model, opt = fresh()

    @nnx.jit
    def step(model, opt, batch):
        loss, grads = nnx.value_and_grad(loss_fn)(model, batch)
        opt.update(model, grads)
        return loss

    step(model, opt, batches[0]).block_until_ready()  # compile outside the timing
    t0 = time.perf_counter()
    for b in batches[1:]:
        loss = step(model, opt, b)
    loss.block_until_ready()
    return (len(batches) - 1) / (time.perf_counter() - t0)


def trainer(cur) -> float:
    model, opt = fresh()
    t = Trainer(model, opt, cur, loss_fn, cadence=Cadence(log_every=20, save_interval_steps=10**9))
    t.run(stop_at_step=1)  # compile outside the timing
    t0 = time.perf_counter()
    t.run()  # no checkpointer: all STEPS steps again, compiled
    jax.block_until_ready(nnx.state(model))
    return STEPS / (time.perf_counter() - t0)


def main() -> None:
    with tempfile.TemporaryDirectory() as work:
        rng = np.random.default_rng(0)
        Roxxel(f"{work}/ds").write([rng.integers(0, 256, 5000) for _ in range(400)], tokenizer="bytes")
        cur = Curriculum(Roxxel(f"{work}/ds"), [Phase(steps=STEPS, global_batch_size=BATCH, seq_len=SEQ)])
        batches = list(cur.stream(seed=42, prefetch_size=0))
        hw, tr = [], []
        for _ in range(REPEATS):  # interleaved, best of each: the machine is shared
            hw.append(hand_written(batches))
            tr.append(trainer(cur))
    print_table(
        f"trainer: {STEPS} steps of {BATCH}x{SEQ} tokens, MLP LM width {WIDTH}, "
        f"{jax.device_count()} CPU device(s), best of {REPEATS}, {load_average()}",
        [("hand-written nnx.jit loop", max(hw)), ("roxxel Trainer", max(tr))],
        "steps/s",
        "hand-written nnx.jit loop",
    )
    # What the watchdog adds to every step, measured directly: its per-step call against the step time.
    per_step = watchdog_cost_s()
    share = per_step * max(tr)
    print(f"watchdog per step: {per_step * 1e6:.2f} us = {share * 100:.4f}% of a {1e3 / max(tr):.1f} ms step")
    record("watchdog cost per step", f"{share * 100:.4f}%", "< 1% of the step time", share < 0.01)
    per_step = sections_cost_s()
    share = per_step * max(tr)
    print(f"sections per step (watchdog + goodput): {per_step * 1e6:.2f} us = {share * 100:.4f}% of the step")
    record("sections cost per step", f"{share * 100:.4f}%", "< 1% of the step time", share < 0.01)


def watchdog_cost_s(calls: int = 20000) -> float:
    """Seconds one ``step_done`` takes (the Trainer's one watchdog call per step; its thread
    wakes once a second and costs no step time)."""
    from roxxel.train.watchdog import ProgressWatchdog, WatchdogBounds

    wd = ProgressWatchdog(WatchdogBounds())
    t0 = time.perf_counter()
    for step in range(calls):
        wd.step_done(step)
    return (time.perf_counter() - t0) / calls


def sections_cost_s(steps: int = 20000) -> float:
    """Seconds the Trainer's two sections of one step (a batch wait, then the step) take,
    with the watchdog (its thread not started) and a Goodput report listening."""
    from roxxel.train.callbacks import Goodput
    from roxxel.train.sections import DATA_WAIT, STEP, LoopSections
    from roxxel.train.watchdog import ProgressWatchdog, WatchdogBounds

    wd, report = ProgressWatchdog(WatchdogBounds()), Goodput()
    sections = LoopSections([wd.on_section, report.on_section], [wd.section_began])
    t0 = time.perf_counter()
    for step in range(1, steps + 1):
        sections.end(DATA_WAIT, step, sections.begin(DATA_WAIT, step))
        sections.end(STEP, step, sections.begin(STEP, step))
    return (time.perf_counter() - t0) / steps


if __name__ == "__main__":
    main()
