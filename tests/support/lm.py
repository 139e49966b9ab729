"""A tiny byte-level language model and data for trainer tests (real text: Python's own json package)."""

import os
import sysconfig

import jax.numpy as jnp
import optax
from flax import nnx

from roxxel import Curriculum, Phase, Roxxel
from roxxel.pack import pack

VOCAB = 257


class TinyLM(nnx.Module):
    """Embedding -> MLP -> logits: predicts the next byte from the current one."""

    def __init__(self, rngs: nnx.Rngs, width: int = 32):
        self.embed = nnx.Embed(VOCAB, width, rngs=rngs)
        self.hidden = nnx.Linear(width, width, rngs=rngs)
        self.out = nnx.Linear(width, VOCAB, rngs=rngs)

    def __call__(self, tokens):
        return self.out(nnx.relu(self.hidden(self.embed(tokens))))


class NoisyLM(nnx.Module):
    """:class:`TinyLM` with BatchNorm and dropout after its hidden layer, sowing its hidden
    activations (``nnx.Intermediate``): the state every Flax model's step must carry."""

    def __init__(self, rngs: nnx.Rngs, width: int = 32, vocab: int = VOCAB, rate: float = 0.2):
        self.embed = nnx.Embed(vocab, width, rngs=rngs)
        self.hidden = nnx.Linear(width, width, rngs=rngs)
        self.norm = nnx.BatchNorm(width, rngs=rngs)
        self.drop = nnx.Dropout(rate, rngs=rngs)
        self.out = nnx.Linear(width, vocab, rngs=rngs)

    def __call__(self, tokens):
        h = nnx.relu(self.hidden(self.embed(tokens)))
        self.sow(nnx.Intermediate, "activations", h)  # the old way (flax 0.12 deprecates it): users' models do
        b, s, w = h.shape
        return self.out(self.drop(self.norm(h.reshape(b * s, w)).reshape(b, s, w)))


def loss_fn(model, batch):
    logits = model(batch[:, :-1])
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, batch[:, 1:]).mean()
    return loss, {"perplexity": jnp.exp(loss)}


def make_dataset(path: str) -> Roxxel:
    if not os.path.exists(os.path.join(path, "dataset.json")):
        pack([os.path.join(sysconfig.get_paths()["stdlib"], "json")], path, include=["*.py"])
    return Roxxel(path)


def make_curriculum(ds: Roxxel) -> Curriculum:
    return Curriculum(
        ds,
        [Phase(steps=6, global_batch_size=4, seq_len=32), Phase(steps=6, global_batch_size=2, seq_len=64)],
        chunk_tokens=256,
    )


def make_model(seed: int = 0, lr: float = 3e-3):
    model = TinyLM(nnx.Rngs(seed))
    return model, nnx.Optimizer(model, optax.adam(lr), wrt=nnx.Param)
