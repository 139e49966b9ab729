"""Trainer overhead: steps/s of ``Trainer.run()`` against a hand-written ``nnx.jit`` loop.

Both train the same model from the same initial parameters on the same batches (the
baseline's batches are taken from the same curriculum stream up front, so it pays
nothing for data). The Trainer adds streaming with prefetch, the preemption check,
bounded dispatch, logging and the NaN guard. Target: ratio >= 0.97.

The progress watchdog runs in jobs only (several processes, or under ``roxxel-worker``), so
its one call per step is measured directly against the step time of the same run: target
cost < 1%. So are the loop's sections (``roxxel.train.sections``: a batch wait and a step
per step), told to the watchdog, to the Trainer's timed steps (the callbacks' window), to
the straggler report and to a :class:`~roxxel.train.callbacks.Goodput` report: target cost
< 1%. In one process the straggler report gathers nothing; across processes it adds one
all-gather of one number per logging window (``bench/stragglers.py``).

``--baseline-tree DIR`` also times the Trainer of another source tree (a directory holding a
``roxxel`` package, e.g. ``git archive HEAD~1 roxxel | tar -x -C DIR``, plus the built
``roxxel/format/_mapread*.so``) against this one: each in its own process, interleaved,
``--rounds`` times, on the same dataset. Target: this tree's steps/s >= 0.97x the baseline's
(a change to the loop costs no step time).

Usage: python bench/trainer.py [--baseline-tree DIR] [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import jax
import numpy as np
import optax
from flax import nnx

sys.path.insert(0, os.path.dirname(__file__))
from _measure import load_average, median, record, spread  # noqa: E402
from _table import print_table  # noqa: E402

from roxxel import Curriculum, Phase, Roxxel  # noqa: E402
from roxxel.train import Cadence, Trainer  # noqa: E402

STEPS, BATCH, SEQ, WIDTH, VOCAB = 60, 16, 128, 384, 257
REPEATS = 3
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


def curriculum(data: str) -> Curriculum:
    return Curriculum(Roxxel(data), [Phase(steps=STEPS, global_batch_size=BATCH, seq_len=SEQ)])


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="bench/trainer.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline-tree", metavar="DIR", help="a source tree whose Trainer to time against this one")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the tree comparison (default 5)")
    parser.add_argument("--time-trainer", metavar="DATA", help=argparse.SUPPRESS)  # a tree comparison's process
    args = parser.parse_args(argv)
    if args.time_trainer:
        print(
            json.dumps(
                {
                    "roxxel": roxxel_file(),
                    "steps_per_s": max(trainer(curriculum(args.time_trainer)) for _ in range(REPEATS)),
                }
            )
        )
        return
    if args.baseline_tree and not os.path.isdir(os.path.join(args.baseline_tree, "roxxel")):
        raise SystemExit(f"--baseline-tree {args.baseline_tree}: no roxxel package there; give a source tree's root")
    with tempfile.TemporaryDirectory() as work:
        rng = np.random.default_rng(0)
        Roxxel(f"{work}/ds").write([rng.integers(0, 256, 5000) for _ in range(400)], tokenizer="bytes")
        cur = curriculum(f"{work}/ds")
        batches = list(cur.stream(seed=42, prefetch_size=0))
        hw, tr = [], []
        for _ in range(REPEATS):  # interleaved, best of each: the machine is shared
            hw.append(hand_written(batches))
            tr.append(trainer(cur))
        if args.baseline_tree:
            compare_trees(f"{work}/ds", os.path.abspath(args.baseline_tree), args.rounds)
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
    print(
        f"sections per step (watchdog, timed steps, stragglers, goodput): {per_step * 1e6:.2f} us = "
        f"{share * 100:.4f}% of the step"
    )
    record("sections cost per step", f"{share * 100:.4f}%", "< 1% of the step time", share < 0.01)


def roxxel_file() -> str:
    import roxxel

    return os.path.abspath(roxxel.__file__)


def compare_trees(data: str, baseline: str, rounds: int) -> None:
    """Time this tree's Trainer and ``baseline``'s, each in a fresh process (best of
    :data:`REPEATS` runs), alternating which goes first; print the median and spread of the
    rounds and the ratio of medians."""
    trees = {"this tree": ROOT, "baseline tree": baseline}
    samples: dict[str, list[float]] = {name: [] for name in trees}
    for r in range(rounds):
        for name in list(trees)[r % 2 :] + list(trees)[: r % 2]:
            samples[name].append(_time_tree(trees[name], data))
    meds = {name: median(v) for name, v in samples.items()}
    ratio = meds["this tree"] / meds["baseline tree"]
    best = max(samples["this tree"]) / max(samples["baseline tree"])
    print(f"\nTrainer step rate, this tree ({ROOT}) vs baseline tree ({baseline}): {rounds} interleaved rounds")
    for name, values in samples.items():
        rates = " ".join(f"{v:.2f}" for v in values)
        print(
            f"{name:<14} median {meds[name]:7.2f} best {max(values):7.2f} steps/s  spread {spread(values):>9}  "
            f"rounds: {rates}"
        )
    print(f"this tree / baseline: {ratio:.3f}x steps/s by medians (step time {1 / ratio:.3f}x), {best:.3f}x by bests")
    record("Trainer steps/s vs the baseline tree", f"{ratio:.3f}x", ">= 0.97x", ratio >= 0.97)


def _time_tree(tree: str, data: str) -> float:
    """Steps/s of the Trainer of ``tree`` (its ``roxxel`` first on the path), in a new process."""
    env = dict(os.environ, PYTHONPATH=tree)
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--time-trainer", data], env=env, capture_output=True, text=True
    )
    if out.returncode != 0:
        raise SystemExit(f"timing the Trainer of {tree} failed:\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if not result["roxxel"].startswith(os.path.join(tree, "roxxel") + os.sep):
        raise SystemExit(f"the process for {tree} imported {result['roxxel']}; is roxxel installed non-editable?")
    return result["steps_per_s"]


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
    with the watchdog (its thread not started), the Trainer's timed steps, the straggler
    report and a Goodput report listening."""
    from roxxel.train.callbacks import Goodput
    from roxxel.train.sections import DATA_WAIT, STEP, LoopSections, TimedSteps
    from roxxel.train.stragglers import StragglerReport
    from roxxel.train.watchdog import ProgressWatchdog, WatchdogBounds

    wd, report, timed, stragglers = ProgressWatchdog(WatchdogBounds()), Goodput(), TimedSteps(), StragglerReport()
    sections = LoopSections(
        [wd.on_section, timed.observe, stragglers.on_section, report.on_section], [wd.section_began]
    )
    t0 = time.perf_counter()
    for step in range(1, steps + 1):
        sections.end(DATA_WAIT, step, sections.begin(DATA_WAIT, step))
        sections.end(STEP, step, sections.begin(STEP, step))
    return (time.perf_counter() - t0) / steps


if __name__ == "__main__":
    main(sys.argv[1:])
