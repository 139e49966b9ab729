"""The compiled train step: loss unpacking, (weighted) gradient accumulation with ``lax.scan``, optimizer update.

Readable top to bottom: split the model into the optimizer's parameters, sown values
(``nnx.Intermediate``, set aside) and the rest (RNG keys and counts, BatchNorm statistics,
...); take gradients of the user's loss with respect to the parameters on a *copy* of the
model merged inside the gradient function (summed over micro-batches by a scan, so compile
time does not grow with their number; the scan carries the rest, so each micro-batch draws
fresh dropout masks and sees the statistics the previous one left); write back what the loss
changed in the rest; update.

The pattern is MaxText's NNX train step (``maxtext_utils_nnx``: ``nnx.merge(..., copy=True)``
inside ``jax.value_and_grad``, non-parameter state returned as aux and written back with
``nnx.update``) and its ``gradient_accumulation.py`` (sum ``loss * weight``, the weights and
the gradients over micro-batches, divide once; accumulators pinned to the parameters'
shardings). Merging uncopied, flax's default since 0.11.2 (flax issue #5050), makes the
forward pass mutate Variables of the outer trace: any ``nnx.Dropout``, ``nnx.BatchNorm`` or
``sow`` then fails with ``TraceContextError``.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
from flax import nnx

from roxxel.exit_codes import ConfigTypeError

WEIGHT = "weight"  # the key under which a loss_fn returns the weight of its loss


class LossParts(NamedTuple):
    """What a ``loss_fn`` returned, taken apart by :func:`split_loss`.

    Attributes:
        loss: the scalar to differentiate (any float dtype).
        weight: ``None`` for an unweighted loss, else the scalar weight of ``loss`` as float32
            (the denominator of its mean, e.g. the number of valid targets).
        aux: the other scalar entries, by name (non-scalar entries are dropped).
    """

    loss: jax.Array
    weight: jax.Array | None
    aux: dict[str, jax.Array]


def split_loss(out: Any) -> LossParts:
    """The scalar loss, its weight and the aux metrics of what a ``loss_fn`` returned.

    Accepted: a scalar; ``(loss, aux)`` where aux is a dict of scalars or a scalar (logged as
    ``"aux"``); a dict holding ``"loss"`` (the other entries are aux). In either dict, the
    entry ``"weight"`` is not aux but the weight of the loss: ``loss`` is the weighted mean
    over this (micro-)batch and ``weight`` its denominator (e.g. ``loss_mask.sum()``). With a
    weight, gradient accumulation weighs each micro-batch by it (see :func:`make_train_step`).

    Raises:
        ConfigTypeError (a ``TypeError``): anything else, a loss that is not a scalar, or a
            weight that is not a real scalar.
    """
    if isinstance(out, dict):
        if "loss" not in out:
            raise ConfigTypeError(f"a loss_fn that returns a dict must include 'loss'; got keys {sorted(out)}")
        loss, aux = out["loss"], {k: v for k, v in out.items() if k != "loss"}
    elif isinstance(out, (tuple, list)):
        if len(out) != 2:
            raise ConfigTypeError(f"a loss_fn that returns a tuple must return (loss, aux), got {len(out)} items")
        loss, aux = out
        aux = dict(aux) if isinstance(aux, dict) else {"aux": aux}
    else:
        loss, aux = out, {}
    if jnp.ndim(loss) != 0:
        raise ConfigTypeError(f"the loss must be a scalar, got shape {jnp.shape(loss)}")
    weight = aux.pop(WEIGHT, None)
    if weight is not None:
        try:
            dtype = jnp.result_type(weight)
        except TypeError:
            dtype = None
        real = dtype is not None and (jnp.issubdtype(dtype, jnp.integer) or jnp.issubdtype(dtype, jnp.floating))
        if not real or jnp.ndim(weight) != 0:
            raise ConfigTypeError(
                f"the loss_fn's 'weight' must be a real scalar, the denominator of its mean loss "
                f"(e.g. loss_mask.sum()), got {dtype or type(weight).__name__} of shape {jnp.shape(weight)}; "
                "sum it to one number, or rename the entry if it is a metric to log"
            )
        weight = jax.lax.stop_gradient(jnp.asarray(weight, jnp.float32))
    return LossParts(loss, weight, {k: v for k, v in aux.items() if jnp.ndim(v) == 0})


def unpack_loss(out: Any) -> tuple[jax.Array, dict[str, jax.Array]]:
    """The scalar loss and aux metrics of what a ``loss_fn`` returned (:func:`split_loss`
    without the weight, which is never aux).

    Raises:
        ConfigTypeError (a ``TypeError``): as :func:`split_loss`.
    """
    parts = split_loss(out)
    return parts.loss, parts.aux


def _micro_batches(batch: Any, accum: int) -> Any:
    """``(B, ...)`` → ``(accum, B // accum, ...)`` taking every ``accum``-th row, so that each
    device's rows stay on that device (rows are sharded in contiguous blocks)."""

    def split(x):
        x = x.reshape((x.shape[0] // accum, accum) + x.shape[1:])
        return jnp.swapaxes(x, 0, 1)

    return jax.tree.map(split, batch)


def param_shardings(model: nnx.Module, optimizer: nnx.Optimizer) -> list[jax.sharding.Sharding]:
    """The shardings of the arrays the optimizer trains, in the order of
    ``jax.tree.leaves(nnx.state(model, optimizer.wrt))``: what :func:`make_train_step`'s
    ``param_shardings`` takes, read once from the placed model (not per step)."""
    return [x.sharding for x in jax.tree.leaves(nnx.state(model, optimizer.wrt))]


def _pinned(tree: Any, shardings: Sequence[jax.sharding.Sharding] | None) -> Any:
    """``tree``'s arrays constrained to ``shardings`` (leaf order), or ``tree`` when there are none."""
    if shardings is None:
        return tree
    leaves, treedef = jax.tree.flatten(tree)
    if len(leaves) != len(shardings):
        raise ConfigTypeError(
            f"param_shardings has {len(shardings)} shardings for {len(leaves)} trained arrays; "
            "build it from this model with roxxel.train.step.param_shardings(model, optimizer)"
        )
    return jax.tree.unflatten(treedef, [jax.lax.with_sharding_constraint(x, s) for x, s in zip(leaves, shardings)])


def _weighted_mean(values: jax.Array, weights: jax.Array, total: jax.Array) -> jax.Array:
    """``sum(values * weights) / total`` over the micro-batch axis, counting only micro-batches of
    positive weight (a weight-0 micro-batch's loss may be NaN, e.g. ``0 / 0``); 0 when ``total`` is 0."""
    values = values.astype(jnp.float32)
    summed = jnp.where(weights > 0, values * weights, 0.0).sum()
    return jnp.where(total > 0, summed / jnp.where(total > 0, total, 1.0), 0.0)


def make_train_step(
    loss_fn: Callable,
    grad_accum_steps: int = 1,
    *,
    param_shardings: Sequence[jax.sharding.Sharding] | None = None,
) -> Callable:
    """An ``nnx.jit`` function ``(model, optimizer, batch) -> (loss, aux)`` that updates in place.

    The model may hold any NNX state besides the parameters: RNG streams (``nnx.Rngs``,
    ``nnx.Dropout``; their keys and counts are ``nnx.RngState`` variables, so a checkpoint of
    the model holds them and a resumed run draws the same masks), BatchNorm statistics, sown
    values. The loss runs on a copy of the model merged inside the gradient function; what
    it changes outside the parameters (RNG counts, batch statistics) is written back to
    ``model`` after the step. What it sows (``nnx.Intermediate``) is discarded after each
    call, so the state's structure is the same before and after (``nnx.cached_partial``,
    with which the Trainer binds the step, requires that); values sown before the step are
    left as they were. Any other change of the model's structure (a new attribute holding
    an array) raises ``ConfigTypeError``.

    With ``grad_accum_steps = k > 1`` the batch (every leaf's leading axis ``B``, divisible
    by ``k``) is split into ``k`` micro-batches of every ``k``-th row, run in turn by a
    ``lax.scan`` that carries the summed gradients (pinned to ``param_shardings``) and the
    non-parameter state (so each micro-batch draws fresh dropout masks):

    - an unweighted loss (no ``"weight"``, see :func:`split_loss`): the gradient, the loss
      and each aux value are the plain means over the micro-batches, as before weights;
    - a weighted loss (``{"loss": mean, "weight": w, ...}``): the loss, the gradient and each
      aux value are the weighted means ``sum(x_i * w_i) / sum(w_i)``: summed over
      micro-batches, divided once (MaxText's ``gradient_accumulation``). For a loss that
      averages over valid targets with ``w_i`` their number, this is the whole batch's loss
      and gradient to float rounding, whatever the split of targets between micro-batches
      (for a deterministic model: dropout and BatchNorm in train mode see other rows per
      micro-batch). A micro-batch of weight 0 contributes nothing (its loss may be NaN).

    Across processes nothing else is needed: the step is one SPMD program over the global
    batch, so the sums are global sums.

    A step whose total weight is 0 (no valid target anywhere in the global batch) returns
    loss 0 and aux 0, and the optimizer updates with zero gradients (its step count
    advances; Adam's momentum still moves the parameters, SGD leaves them).

    Args:
        loss_fn: ``loss_fn(model, batch)`` returning what :func:`split_loss` accepts.
        grad_accum_steps: micro-batches per step, ``k >= 1``.
        param_shardings: with ``k > 1``, the shardings of the trained arrays
            (:func:`param_shardings`); the accumulated gradients are constrained to them
            (unconstrained, XLA may give the sum another layout, e.g. lose an FSDP axis).
            ``None``: not constrained.

    Returns:
        ``step(model, optimizer, batch) -> (loss, aux)``: ``loss`` a float32 scalar (the
        loss's own dtype without accumulation), ``aux`` a dict of scalars.
    """
    accum = int(grad_accum_steps)
    if accum < 1:
        raise ConfigTypeError(f"grad_accum_steps must be >= 1, got {grad_accum_steps}")
    shardings = list(param_shardings) if param_shardings is not None else None

    def train_step(model: nnx.Module, optimizer: nnx.Optimizer, batch: Any):
        graphdef, params, *others = nnx.split(model, optimizer.wrt, nnx.Intermediate, ...)
        sown, rest = others  # three filters: the trained parameters, sown values, everything else

        def compute(params, rest, micro, scaled: bool):
            # A copy: the forward pass mutates (RNG counts, batch stats) Variables of this trace only.
            m = nnx.merge(graphdef, params, sown, rest, copy=True)
            parts = split_loss(loss_fn(m, micro))
            nnx.pop(m, nnx.Intermediate)  # what this call sowed (and any earlier values) goes
            _, _, *after = nnx.split(m, optimizer.wrt, ...)
            (new_rest,) = after
            if str(jax.tree.structure(new_rest)) != str(jax.tree.structure(rest)):
                raise ConfigTypeError(
                    "the loss_fn changed the model's structure (it added or removed a variable outside "
                    "nnx.Intermediate); keep new state in variables created in __init__, or return it as aux"
                )
            value = parts.loss
            if scaled and parts.weight is not None:  # d(loss * w) = w * d(loss): w is a constant
                value = parts.loss * parts.weight.astype(parts.loss.dtype)
            return value, (parts, new_rest)

        if accum == 1:
            grad_fn = jax.value_and_grad(functools.partial(compute, scaled=False), has_aux=True)
            (_, (parts, rest)), grads = grad_fn(params, rest, batch)
            loss, aux = parts.loss, parts.aux
            if parts.weight is not None:  # weight 0: nothing to learn from; loss 0, not NaN
                live = parts.weight > 0
                grads = jax.tree.map(lambda g: jnp.where(live, g, jnp.zeros_like(g)), grads)
                loss = jnp.where(live, loss, jnp.zeros_like(loss))
                aux = {k: jnp.where(live, v, jnp.zeros_like(v)) for k, v in aux.items()}
        else:
            grad_fn = jax.value_and_grad(functools.partial(compute, scaled=True), has_aux=True)

            def body(carry, micro):
                acc, rest = carry
                (_, (parts, rest)), g = grad_fn(params, rest, micro)
                if parts.weight is not None:  # a weight-0 micro-batch's gradient may be NaN: drop it
                    live = parts.weight > 0
                    g = jax.tree.map(lambda x: jnp.where(live, x, jnp.zeros_like(x)), g)
                acc = _pinned(jax.tree.map(jnp.add, acc, g), shardings)
                weight = jnp.float32(1.0) if parts.weight is None else parts.weight
                return (acc, rest), (parts.loss, weight, parts.aux)

            zeros = _pinned(jax.tree.map(jnp.zeros_like, params), shardings)
            (grads, rest), (losses, weights, auxes) = jax.lax.scan(body, (zeros, rest), _micro_batches(batch, accum))
            total = weights.sum()
            denominator = jnp.where(total > 0, total, 1.0)
            grads = jax.tree.map(lambda g: jnp.where(total > 0, g / denominator.astype(g.dtype), 0), grads)
            loss = _weighted_mean(losses, weights, total)
            aux = {k: _weighted_mean(v, weights, total) for k, v in auxes.items()}
        nnx.update(model, rest)
        optimizer.update(model, grads)
        return loss, aux

    return nnx.jit(train_step)
