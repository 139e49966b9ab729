"""Out-of-range token ids are named before the first step (roxxel.train.vocabulary), not left to
turn the loss NaN. Real Trainer on real packed data."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from roxxel import Curriculum, Phase, Roxxel
from roxxel.exit_codes import ConfigurationError
from roxxel.train import LoopOptions, Trainer
from roxxel.train.vocabulary import VocabularyError, check_embeddings


class Tiny(nnx.Module):
    def __init__(self, vocab, positions=16):
        self.embed = nnx.Embed(vocab, 8, rngs=nnx.Rngs(0))
        self.pos = nnx.Embed(positions, 8, rngs=nnx.Rngs(2))  # a position table: not the vocabulary's
        self.out = nnx.Linear(8, vocab, rngs=nnx.Rngs(1))

    def __call__(self, x):
        return self.out(self.embed(x) + self.pos(jnp.arange(x.shape[-1])))


def _loss(model, batch):
    logits = model(batch[:, :-1])
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch[:, 1:]).mean(), {}


def test_a_model_smaller_than_the_datas_vocabulary_is_refused_with_both_numbers(tmp_path):
    """Before: 256 embeddings for 600 ids trained into 'loss is nan ... lower the learning rate'."""
    Roxxel(str(tmp_path / "d")).write([np.arange(2000) % 600] * 4, vocab_size=600, eos_id=599, dtype="uint16")
    cur = Curriculum(Roxxel(str(tmp_path / "d")), [Phase(steps=2, global_batch_size=2, seq_len=16)], chunk_tokens=256)
    model = Tiny(256)
    opt = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)
    with pytest.raises(VocabularyError) as err:
        Trainer(model, opt, cur, _loss, loop=LoopOptions(watchdog=None)).run()
    message = str(err.value)
    assert "token ids up to 599 (vocab_size 600)" in message and "table, embed, has num_embeddings=256" in message
    assert isinstance(err.value, ConfigurationError)  # 78 under roxxel-worker: no restart


def test_a_large_enough_table_and_undeclared_vocabularies_pass():
    """Position tables (smaller than the vocabulary) are not held against it: the main job's
    64-row position table was refused against its 1024-id vocabulary (fresh-clone CI run)."""
    check_embeddings(Tiny(1024, positions=64), 1024, "dataset 'primary'")
    check_embeddings(Tiny(10), None, "dataset 'primary'")
