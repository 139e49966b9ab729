"""The original Roxxel's Quick Start cookbook runs here as written, on tiny data it writes itself.

What differs from the original's text, and why (docs/original-api.md shows both side by side):
- its ``nnx.Linear(10, 5)`` cannot take rows of 127 (phase 1) and 511 (phase 2) values:
  the model here maps each value to the next one, so it fits every sequence length;
- 1000 + 500 steps of 16x128 and 4x512 tokens need 3 M tokens: here 6 + 3 steps, and
  checkpoint/log intervals that fall inside them.

Real Orbax checkpoints, real log files, in a temporary working directory.
"""

from __future__ import annotations

import csv
import os

import jax
import numpy as np
import optax
import pytest
from flax import nnx

from roxxel import Roxxel, Curriculum, Trainer  # as the original's Quick Start writes it
from roxxel.deprecation import RoxxelDeprecationWarning


class NextValue(nnx.Module):
    """The original's ``nnx.Linear(10, 5)`` cannot take rows of 127 values (nor 511 in phase 2):
    one ``nnx.Linear(1, 1)`` applied to every position fits any sequence length."""

    def __init__(self, rngs: nnx.Rngs) -> None:
        self.linear = nnx.Linear(1, 1, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.linear(x[..., None])[..., 0]


def _write_wiki_tokens(directory) -> None:
    """Three shards ``wiki_tokens_{0,1,2}.rox`` of small token ids (values the linear model can fit)."""
    rng = np.random.default_rng(0)
    for i in range(3):
        docs = [rng.integers(0, 8, 1000).astype(np.uint16) for _ in range(12)]  # 36,036 tokens: two 16 Ki chunks
        Roxxel(os.path.join(directory, f"wiki_tokens_{i}.rox")).write(docs, separator=9)


@pytest.mark.slow
def test_the_original_quick_start_runs_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write_wiki_tokens(".")

    # 1. Initialize Flax NNX model and optimizer
    model = NextValue(rngs=nnx.Rngs(42))  # the original: nnx.Linear(10, 5, rngs=nnx.Rngs(42)) (shapes do not fit)
    tx = optax.sgd(0.01)
    optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)

    # 2. Define the curriculum (here Phase 1: 6 steps, Phase 2: 3 steps; the original: 1000 and 500)
    phases = [
        {"steps": 6, "batch_size": 16, "seq_len": 128},
        {"steps": 3, "batch_size": 4, "seq_len": 512},
    ]
    with pytest.warns(RoxxelDeprecationWarning, match="primary_streamer is deprecated, use datasets"):  # as written
        curriculum = Curriculum(
            primary_streamer=Roxxel("./wiki_tokens_*.rox"),
            phases=phases,
        )

    # 3. Define the loss function (as written)
    def loss_fn(model, batch):
        logits = model(batch[:, :-1].astype(jax.numpy.float32))
        targets = batch[:, 1:].astype(jax.numpy.float32)
        return jax.numpy.mean((logits - targets) ** 2)

    # 4. Initialize the Trainer (as written, with intervals inside the 9 steps)
    with pytest.warns(
        RoxxelDeprecationWarning,
        match=r"checkpoint_every=, log_every= is deprecated, use cadence=Cadence\(save_interval_steps=\.\.\., log_every=",
    ):
        trainer = Trainer(
            model=model,
            optimizer=optimizer,
            curriculum=curriculum,
            loss_fn=loss_fn,
            save_path="./run_delta",
            checkpoint_every=3,
            log_every=2,
        )

    # 5. Run curriculum training
    metrics = trainer.run()

    assert curriculum.total_steps == 9 and trainer.state.step == 9
    assert np.isfinite(metrics["loss"])
    steps = sorted(int(p) for p in os.listdir("run_delta/checkpoints") if p.isdigit())
    assert steps and max(steps) == 9
    with open("run_delta/roxxel_metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    logged = [int(r["step"]) for r in rows]
    assert logged[0] == 2 and logged[-1] == 9, logged
    first, last = float(rows[0]["loss"]), float(rows[-1]["loss"])
    assert last < first, (first, last)  # it trains: the squared error falls
    assert os.path.getsize("run_delta/roxxel_system.log") > 0

    # Running the same script again resumes at the end: nothing left to train, same weights.
    kernel = np.asarray(model.linear.kernel[...]).copy()
    model2 = NextValue(rngs=nnx.Rngs(0))
    with pytest.warns(RoxxelDeprecationWarning, match="checkpoint_every=, log_every= is deprecated"):
        trainer2 = Trainer(
            model=model2,
            optimizer=nnx.Optimizer(model2, optax.sgd(0.01), wrt=nnx.Param),
            curriculum=curriculum,
            loss_fn=loss_fn,
            save_path="./run_delta",
            checkpoint_every=3,
            log_every=2,
        )
    trainer2.run()
    np.testing.assert_array_equal(np.asarray(model2.linear.kernel[...]), kernel)
