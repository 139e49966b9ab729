"""A small decoder-only Transformer in Flax NNX whose attention never crosses a document boundary.

Documents are packed back to back in each row; the streamer's ``segment_ids`` say which
document each token belongs to and ``positions`` where it sits in it. A token attends
to earlier tokens of its own document only, and its position embedding restarts at
each document, so a packed row trains exactly like separate documents.

Every matrix names its dimensions with logical axes (``embed``, ``mlp``, ``heads``), which
:data:`AXIS_RULES` maps to the job's mesh axes: the same model trains replicated (the default
mesh has only ``data``) or sharded across hosts (a job spec's ``parallelism: {fsdp: 2,
tensor: 2}``), unchanged. The vocabulary dimension stays whole: 257 byte-level ids do not
divide over any axis.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import nnx

AXIS_RULES = [("embed", "fsdp"), ("mlp", "tensor"), ("heads", "tensor")]
"""Logical axis -> mesh axis (:mod:`roxxel.train.axis_rules`): the model's width over ``fsdp``,
the attention heads and the MLP's hidden units over ``tensor`` (Megatron's split). An axis the
mesh does not have leaves its dimension replicated."""

_EMBED_INIT = nnx.initializers.variance_scaling(1.0, "fan_in", "normal", out_axis=0)  # nnx.Embed's default
_KERNEL_INIT = nnx.initializers.lecun_normal()  # nnx.Linear's default


def _linear(rows: int, cols: int, axes: tuple, rngs: nnx.Rngs) -> nnx.Linear:
    """A bias-free ``nnx.Linear`` whose kernel ``(rows, cols)`` is annotated with ``axes``."""
    return nnx.Linear(rows, cols, use_bias=False, kernel_init=nnx.with_partitioning(_KERNEL_INIT, axes), rngs=rngs)


def _embed(count: int, width: int, rngs: nnx.Rngs) -> nnx.Embed:
    """An ``nnx.Embed`` whose table ``(count, width)`` is split over ``embed`` only."""
    return nnx.Embed(count, width, embedding_init=nnx.with_partitioning(_EMBED_INIT, (None, "embed")), rngs=rngs)


class Block(nnx.Module):
    """Pre-norm attention + MLP.

    Few parameter arrays: the attention's query, key and value projections are one kernel and
    the projections have no biases (as in PaLM and LLaMA). On a CPU pod every parameter array
    is its own all-reduce between the processes (XLA's CPU collectives reduce a tuple one
    array at a time over gloo, ~0.8 ms each), so 8 arrays per block instead of 16 take about
    a quarter off each step of the main job.
    """

    def __init__(self, width: int, heads: int, rngs: nnx.Rngs):
        self.heads = heads
        self.norm1 = nnx.LayerNorm(width, rngs=rngs)
        self.qkv = _linear(width, 3 * width, ("embed", "heads"), rngs)
        self.out = _linear(width, width, ("heads", "embed"), rngs)
        self.norm2 = nnx.LayerNorm(width, rngs=rngs)
        self.up = _linear(width, 4 * width, ("embed", "mlp"), rngs)
        self.down = _linear(4 * width, width, ("mlp", "embed"), rngs)

    def __call__(self, x, mask):
        batch, seq, width = x.shape
        qkv = self.qkv(self.norm1(x)).reshape(batch, seq, 3, self.heads, width // self.heads)
        attended = jax.nn.dot_product_attention(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], mask=mask)
        x = x + self.out(attended.reshape(batch, seq, width))
        return x + self.down(nnx.gelu(self.up(self.norm2(x))))


class DecoderLM(nnx.Module):
    """Tokens ``(batch, seq)`` int → logits ``(batch, seq, vocab)`` float32.

    Args:
        vocab: number of token ids: the dataset's ``vocab_size`` (1,024 for the main job's BPE;
            257 for byte-level tokens with EOS).
        width, depth, heads: model size.
        max_len: longest document position embedded (positions beyond it are clipped).
    """

    def __init__(
        self, vocab: int = 257, width: int = 128, depth: int = 2, heads: int = 4, max_len: int = 512, *, rngs: nnx.Rngs
    ):
        self.max_len = max_len
        self.embed = _embed(vocab, width, rngs)
        self.pos = _embed(max_len, width, rngs)
        self.blocks = nnx.List([Block(width, heads, rngs) for _ in range(depth)])
        self.norm = nnx.LayerNorm(width, rngs=rngs)
        self.head = _linear(width, vocab, ("embed", None), rngs)

    def __call__(self, tokens, segment_ids=None, positions=None):
        seq = tokens.shape[1]
        if segment_ids is None:
            segment_ids = jnp.ones_like(tokens)
        if positions is None:
            positions = jnp.broadcast_to(jnp.arange(seq), tokens.shape)
        causal = jnp.tril(jnp.ones((seq, seq), bool))
        same_doc = segment_ids[:, :, None] == segment_ids[:, None, :]
        mask = (causal[None] & same_doc)[:, None]  # (batch, 1 head axis, query, key)
        x = self.embed(tokens) + self.pos(jnp.minimum(positions, self.max_len - 1))
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x)).astype(jnp.float32)


def lm_loss(model: DecoderLM, batch: dict) -> tuple[jax.Array, dict]:
    """Next-token cross-entropy over valid targets (``loss_mask``), its weight, and perplexity.

    Args:
        batch: the streamer's ``outputs="documents"`` dict of int32 ``(batch, seq)`` arrays.

    Returns:
        ``(loss, {"weight": n, "perplexity": exp(loss)})``: ``loss`` the float32 mean over the
        ``n`` valid targets (0 when there are none), ``n`` a float32 scalar. The Trainer's step
        takes ``"weight"`` as the loss's weight, not as a metric: with ``grad_accum_steps``,
        micro-batches count by their number of targets, so the update and the logged loss are
        the whole batch's (``roxxel.train.step.make_train_step``).
    """
    logits = model(batch["tokens"], batch["segment_ids"], batch["positions"])
    losses = optax.softmax_cross_entropy_with_integer_labels(logits[:, :-1], batch["tokens"][:, 1:])
    mask = batch["loss_mask"][:, :-1].astype(jnp.float32)
    count = mask.sum()
    loss = (losses * mask).sum() / jnp.maximum(count, 1.0)
    return loss, {"weight": count, "perplexity": jnp.exp(loss)}
