"""The compiled train step: loss unpacking, gradient accumulation with ``lax.scan``, optimizer update.

Readable top to bottom: split the model into the optimizer's parameters and the rest,
take gradients of the user's loss with respect to the parameters (summed over
micro-batches by a scan, so compile time does not grow with their number), write back
whatever the loss changed in the rest (e.g. RNG counters), update.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
from flax import nnx

from roxxel.exit_codes import ConfigTypeError


def unpack_loss(out: Any) -> tuple[jax.Array, dict[str, jax.Array]]:
    """The scalar loss and aux metrics of what a ``loss_fn`` returned.

    Accepted: a scalar; ``(loss, aux)`` where aux is a dict of scalars or a scalar
    (logged as ``"aux"``); a dict holding ``"loss"`` (the other entries are aux).

    Raises:
        TypeError: anything else, or a loss that is not a scalar.
    """
    if isinstance(out, dict):
        if "loss" not in out:
            raise ConfigTypeError(f"a loss_fn that returns a dict must include 'loss'; got keys {sorted(out)}")
        loss, aux = out["loss"], {k: v for k, v in out.items() if k != "loss"}
    elif isinstance(out, (tuple, list)):
        if len(out) != 2:
            raise ConfigTypeError(f"a loss_fn that returns a tuple must return (loss, aux), got {len(out)} items")
        loss, aux = out
        aux = aux if isinstance(aux, dict) else {"aux": aux}
    else:
        loss, aux = out, {}
    if jnp.ndim(loss) != 0:
        raise ConfigTypeError(f"the loss must be a scalar, got shape {jnp.shape(loss)}")
    return loss, {k: v for k, v in aux.items() if jnp.ndim(v) == 0}


def _micro_batches(batch: Any, accum: int) -> Any:
    """``(B, ...)`` → ``(accum, B // accum, ...)`` taking every ``accum``-th row, so that each
    device's rows stay on that device (rows are sharded in contiguous blocks)."""

    def split(x):
        x = x.reshape((x.shape[0] // accum, accum) + x.shape[1:])
        return jnp.swapaxes(x, 0, 1)

    return jax.tree.map(split, batch)


def make_train_step(loss_fn: Callable, grad_accum_steps: int = 1) -> Callable:
    """An ``nnx.jit`` function ``(model, optimizer, batch) -> (loss, aux)`` that updates in place.

    The Trainer binds it to its model and optimizer with ``nnx.cached_partial``: the loss_fn may
    change no attribute of the model that outlives the call (``nnx.pop`` what it sows).
    """

    def train_step(model: nnx.Module, optimizer: nnx.Optimizer, batch: Any):
        graphdef, params, *others = nnx.split(model, optimizer.wrt, ...)
        (rest,) = others  # two filters: the trained parameters, then everything else

        def compute(params, rest, micro):
            m = nnx.merge(graphdef, params, rest)
            loss, aux = unpack_loss(loss_fn(m, micro))
            _, _, new_rest = nnx.split(m, optimizer.wrt, ...)
            return loss, (aux, new_rest)

        grad_fn = jax.value_and_grad(compute, has_aux=True)
        if grad_accum_steps == 1:
            (loss, (aux, rest)), grads = grad_fn(params, rest, batch)
        else:

            def body(carry, micro):
                acc, rest = carry
                (loss, (aux, rest)), g = grad_fn(params, rest, micro)
                return (jax.tree.map(jnp.add, acc, g), rest), (loss, aux)

            zeros = jax.tree.map(jnp.zeros_like, params)
            (grads, rest), (losses, auxes) = jax.lax.scan(body, (zeros, rest), _micro_batches(batch, grad_accum_steps))
            grads = jax.tree.map(lambda g: g / grad_accum_steps, grads)
            loss, aux = losses.mean(), jax.tree.map(jnp.mean, auxes)
        nnx.update(model, rest)
        optimizer.update(model, grads)
        return loss, aux

    return nnx.jit(train_step)
