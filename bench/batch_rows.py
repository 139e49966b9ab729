"""The main job's held-out loss with independent rows (the default) against consecutive rows.

``batch_rows="consecutive"`` takes a batch's rows as consecutive windows of the shuffled
stream: the main job's 32 x 64 batches over 256-token chunks are then 8 places of 4 adjacent
rows. ``"independent"`` reads every row from its own place (Megatron-LM and Grain draw rows
this way). Same model, steps, data and evaluation set; only the row order differs. Each
seed trains examples/lm/train.py once per order (one process, CPU), in this run, and the
table gives the final held-out loss (nats/token, 8 held-out batches) with the ratio of the
two orders per seed.

The data is made once by examples/lm/prepare.py under bench/.cache/lm-data.

Usage: python bench/batch_rows.py [--seeds 1,2,3] [--steps 350 150]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from _measure import load_average, record  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DATA = os.path.join(HERE, ".cache", "lm-data")
LOSS = re.compile(r"held-out loss ([0-9.]+) nats/token")


def prepare() -> None:
    if not all(os.path.exists(os.path.join(DATA, n, "dataset.json")) for n in ("code", "code-eval", "text")):
        subprocess.run(
            [sys.executable, os.path.join(REPO, "examples", "lm", "prepare.py"), DATA],
            check=True,
            env=dict(os.environ, JAX_PLATFORMS="cpu"),
        )


def held_out_loss(rows: str, seed: int, steps: list[int]) -> float:
    with tempfile.TemporaryDirectory() as run:
        cmd = [
            sys.executable,
            os.path.join(REPO, "examples", "lm", "train.py"),
            "--data",
            DATA,
            "--run-dir",
            run,
            "--run-name",
            f"rows-{rows}-{seed}",
            "--seed",
            str(seed),
            "--batch-rows",
            rows,
            "--steps",
            *map(str, steps),
            "--eval-every",
            str(sum(steps)),
            "--checkpoint-every",
            str(sum(steps)),
        ]
        out = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, JAX_PLATFORMS="cpu"))
    found = LOSS.search(out.stdout)
    if out.returncode or not found:
        raise SystemExit(
            f"train.py ({rows}, seed {seed}) failed with {out.returncode}:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"
        )
    return float(found.group(1))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 3])
    p.add_argument("--steps", type=int, nargs=2, default=[350, 150], metavar=("PHASE1", "PHASE2"))
    args, _ = p.parse_known_args()  # bench/run.py passes every script the same options
    prepare()
    losses: dict[str, list[float]] = {"independent": [], "consecutive": []}
    print(f"main job's held-out loss (nats/token) after {sum(args.steps)} steps; {load_average()}")
    print(f"{'seed':>4}  {'independent':>11}  {'consecutive':>11}  {'ratio':>6}")
    for seed in args.seeds:
        for rows in losses:  # interleaved: both orders of a seed run back to back
            losses[rows].append(held_out_loss(rows, seed, args.steps))
        a, b = losses["independent"][-1], losses["consecutive"][-1]
        print(f"{seed:>4}  {a:>11.4f}  {b:>11.4f}  {a / b:>6.3f}")
    ind, con = (statistics.mean(losses[k]) for k in ("independent", "consecutive"))
    spread = (
        max(abs(a - b) for a, b in zip(losses["independent"][1:], losses["independent"])) if len(args.seeds) > 1 else 0
    )
    print(
        f"{'mean':>4}  {ind:>11.4f}  {con:>11.4f}  {ind / con:>6.3f}   (seed-to-seed spread, independent: {spread:.4f})"
    )
    record(
        "main job's held-out loss, independent vs consecutive rows",
        f"{ind:.4f} vs {con:.4f} ({ind / con:.3f}x)",
        "report (lower is better)",
        None,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
