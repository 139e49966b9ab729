"""The compiled train step: models with RNG streams, batch statistics and sown values; weighted
gradient accumulation that equals the whole batch; what a loss_fn may return."""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from roxxel.exit_codes import ConfigTypeError
from roxxel.sharding import default_mesh
from roxxel.train import sharded_state
from roxxel.train.step import make_train_step, split_loss, unpack_loss

from support import lm
from support.paths import WORKERS

VOCAB = 31
# The models sow the old way (flax 0.12 deprecates Module.sow outside nnx.capture): users' models still do.
pytestmark = pytest.mark.filterwarnings("ignore:Using 'Module.sow:DeprecationWarning")


def noisy_lm(rngs: nnx.Rngs) -> lm.NoisyLM:
    """support.lm's NoisyLM over this file's vocabulary, narrower, with more dropout."""
    return lm.NoisyLM(rngs, width=16, vocab=VOCAB, rate=0.3)


def masked_loss(model, batch, weighted=True):
    """Mean cross-entropy over the targets whose loss_mask is set (examples/lm/model.py's form)."""
    logits = model(batch["tokens"][:, :-1])
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, batch["tokens"][:, 1:])
    mask = batch["loss_mask"][:, 1:].astype(jnp.float32)
    loss = (losses * mask).sum() / mask.sum()  # NaN where nothing is valid: the step must not use it
    out = {"loss": loss, "first_logit": (logits[..., 0] * mask).sum() / mask.sum()}
    return {**out, "weight": mask.sum()} if weighted else out


def ragged_batch(rows=8, seq=17, seed=0, valid=None):
    """Rows with very different numbers of valid targets (1 to seq - 1, or ``valid``)."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, VOCAB, (rows, seq), dtype=np.int32)
    lengths = rng.integers(1, seq, rows) if valid is None else np.asarray(valid)
    mask = np.arange(seq)[None, :] <= lengths[:, None]
    return {"tokens": jnp.asarray(tokens), "loss_mask": jnp.asarray(mask.astype(np.int32))}


def params_of(model):
    return {"/".join(map(str, k)): np.asarray(v) for k, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}


def one_step(loss, batch, accum, lr=1.0, train=False):
    """The parameters after one SGD step (lr 1: the update is the gradient) and the step's loss, aux."""
    model = noisy_lm(nnx.Rngs(0))
    if not train:
        model.eval()  # dropout and batch statistics differ per micro-batch in train mode
    opt = nnx.Optimizer(model, optax.sgd(lr), wrt=nnx.Param)
    out, aux = make_train_step(loss, accum)(model, opt, batch)
    return params_of(model), float(out), {k: float(v) for k, v in aux.items()}


def max_update_diff(a, b, start):
    return max(float(np.abs((a[k] - start[k]) - (b[k] - start[k])).max()) for k in a)


def test_dropout_batchnorm_and_sown_values_train_with_and_without_accumulation():
    """Failed with TraceContextError ("Cannot mutate BatchStat from a different trace level"): the
    step merged the model uncopied inside jax.value_and_grad (flax #5050)."""
    batch = ragged_batch()
    for accum in (1, 2, 4):
        model = noisy_lm(nnx.Rngs(0))
        stats = np.asarray(model.norm.mean[...])
        opt = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
        step = nnx.cached_partial(make_train_step(masked_loss, accum), model, opt)  # as the Trainer binds it
        losses = [float(step(batch)[0]) for _ in range(3)]
        assert all(np.isfinite(losses)) and losses[0] != losses[1]
        assert int(model.drop.rngs.count[...]) == 3 * accum  # one fresh mask per micro-batch, written back
        assert not np.array_equal(np.asarray(model.norm.mean[...]), stats)  # batch statistics moved
        assert not nnx.state(model, nnx.Intermediate)  # sown values are not kept
        assert int(opt.step[...]) == 3


def test_each_micro_batch_draws_its_own_dropout_mask():
    """Two identical micro-batches: the same mask would give the same loss twice; the carry gives another."""
    model = noisy_lm(nnx.Rngs(0))
    model.norm.use_running_average = True  # dropout alone differs between the micro-batches
    opt = nnx.Optimizer(model, optax.sgd(0.0), wrt=nnx.Param)
    seen = []
    batch = ragged_batch(rows=1, valid=[16])
    twice = jax.tree.map(lambda x: jnp.concatenate([x, x]), batch)

    def loss(m, b):
        out = masked_loss(m, b)
        jax.debug.callback(lambda v: seen.append(float(v)), out["loss"])
        return out

    make_train_step(loss, 2)(model, opt, twice)
    jax.effects_barrier()
    assert len(seen) == 2 and seen[0] != seen[1]


def test_values_sown_before_the_step_are_left_alone():
    model = noisy_lm(nnx.Rngs(0))
    model(ragged_batch()["tokens"])  # e.g. an evaluation outside the step sowed once
    before = jax.tree.map(np.asarray, nnx.state(model, nnx.Intermediate))
    opt = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)
    step = nnx.cached_partial(make_train_step(masked_loss, 2), model, opt)
    step(ragged_batch())
    step(ragged_batch())
    after = nnx.state(model, nnx.Intermediate)
    assert jax.tree.structure(after) == jax.tree.structure(before)
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(after)))


def test_masked_loss_accumulation_equals_the_whole_batch():
    """Update and loss of grad_accum_steps=4 equal one step on the whole batch to float tolerance;
    the unweighted form of the same loss (each micro-batch's mean counted equally) does not."""
    batch = ragged_batch()
    start = params_of(noisy_lm(nnx.Rngs(0)))
    whole, whole_loss, whole_aux = one_step(masked_loss, batch, 1)
    for accum in (2, 4, 8):
        got, loss, aux = one_step(masked_loss, batch, accum)
        assert loss == pytest.approx(whole_loss, rel=1e-6, abs=1e-7), accum
        assert aux["first_logit"] == pytest.approx(whole_aux["first_logit"], rel=1e-5, abs=1e-6)
        assert "weight" not in aux
        assert max_update_diff(got, whole, start) < 1e-6, accum
    plain = lambda m, b: masked_loss(m, b, weighted=False)  # noqa: E731
    got, loss, _ = one_step(plain, batch, 4)
    same, same_loss, _ = one_step(plain, batch, 1)
    assert same_loss == whole_loss and max_update_diff(same, whole, start) == 0.0  # no accumulation: the same step
    assert abs(loss - whole_loss) > 1e-3 and max_update_diff(got, whole, start) > 1e-3  # mean of means


def test_a_micro_batch_without_valid_targets_counts_for_nothing():
    batch = ragged_batch(rows=4, valid=[5, 0, 9, 16])  # micro-batch 1 (row 1) has no target: its loss is 0/0
    start = params_of(noisy_lm(nnx.Rngs(0)))
    whole, whole_loss, _ = one_step(masked_loss, batch, 1)
    got, loss, _ = one_step(masked_loss, batch, 4)
    assert np.isfinite(loss) and loss == pytest.approx(whole_loss, rel=1e-6)
    assert max_update_diff(got, whole, start) < 1e-6


@pytest.mark.parametrize("accum", [1, 2])
def test_a_step_with_no_valid_target_has_loss_zero_and_zero_gradients(accum):
    batch = ragged_batch(rows=2, valid=[0, 0])
    start = params_of(noisy_lm(nnx.Rngs(0)))
    got, loss, aux = one_step(masked_loss, batch, accum)
    assert loss == 0.0 and aux == {"first_logit": 0.0}
    assert max_update_diff(got, start, start) == 0.0  # SGD of a zero gradient: unchanged, not NaN


def test_what_a_loss_fn_may_return():
    one = jnp.float32(2.0)
    assert split_loss(one) == (one, None, {})
    parts = split_loss({"loss": one, "weight": jnp.int32(7), "acc": one, "per_row": jnp.ones(3)})
    assert float(parts.weight) == 7.0 and parts.weight.dtype == jnp.float32 and set(parts.aux) == {"acc"}
    parts = split_loss((one, {"weight": 3, "acc": one}))  # the tuple form's aux may carry the weight too
    assert float(parts.weight) == 3.0 and set(parts.aux) == {"acc"}
    assert unpack_loss({"loss": one, "weight": 2.0}) == (one, {})
    with pytest.raises(ConfigTypeError, match=r"'weight' must be a real scalar.*loss_mask.sum\(\).*shape \(2, 3\)"):
        split_loss({"loss": one, "weight": jnp.ones((2, 3))})
    with pytest.raises(ConfigTypeError, match="'weight' must be a real scalar"):
        split_loss({"loss": one, "weight": "many"})
    with pytest.raises(ConfigTypeError, match="must include 'loss'"):
        split_loss({"weight": one})


def test_a_non_scalar_weight_is_refused_when_the_step_is_traced():
    model = noisy_lm(nnx.Rngs(0))
    opt = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)
    per_row = lambda m, b: {**masked_loss(m, b), "weight": b["loss_mask"].sum(axis=1)}  # noqa: E731
    with pytest.raises(ConfigTypeError, match="sum it to one number"):
        make_train_step(per_row, 2)(model, opt, ragged_batch())


def test_a_loss_fn_that_adds_state_to_the_model_is_named():
    model = noisy_lm(nnx.Rngs(0))
    opt = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)

    def adds(m, b):
        m.seen = nnx.BatchStat(jnp.zeros(()))
        return masked_loss(m, b)

    with pytest.raises(ConfigTypeError, match="changed the model's structure"):
        make_train_step(adds, 2)(model, opt, ragged_batch())


def test_weighted_accumulation_on_a_two_device_mesh(tmp_path):
    """The same equality with the batch over 2 devices and a kernel sharded over them; the summed
    gradients are pinned to the parameters' shardings."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=2")
    out = subprocess.run(
        [sys.executable, str(WORKERS / "weighted_accum.py")], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["devices"] == 2
    assert result["loss_diff"] < 1e-6 and result["update_diff"] < 1e-6, result
    assert result["unweighted_update_diff"] > 1e-3, result
    assert result["kernel_spec"] == "P(None, 'data')", result
    assert result["pinned_in_hlo"], result


def test_the_example_lm_loss_accumulates_to_the_whole_batch():
    """examples/lm/model.py's lm_loss returns its weight (the number of valid targets)."""
    import importlib.util

    from support.paths import REPO

    spec = importlib.util.spec_from_file_location("example_lm_model", REPO / "examples/lm/model.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    batch = ragged_batch(rows=4, seq=12)
    batch = {
        "tokens": batch["tokens"],
        "segment_ids": jnp.ones_like(batch["tokens"]),
        "positions": jnp.broadcast_to(jnp.arange(12), batch["tokens"].shape),
        "loss_mask": batch["loss_mask"][:, ::-1],  # valid from the start: lm_loss masks targets by [:, :-1]
    }
    runs = []
    for accum in (1, 4):
        # Built as the example builds it: born on the mesh through its axis rules.
        model = sharded_state(
            lambda: example.DecoderLM(VOCAB, width=16, depth=1, heads=2, max_len=16, rngs=nnx.Rngs(0)),
            default_mesh(),
            axis_rules=example.AXIS_RULES,
        )
        opt = nnx.Optimizer(model, optax.sgd(1.0), wrt=nnx.Param)
        loss, aux = make_train_step(example.lm_loss, accum)(model, opt, batch)
        runs.append((float(loss), params_of(model)))
        assert set(aux) == {"perplexity"}
    (loss1, p1), (loss4, p4) = runs
    assert loss4 == pytest.approx(loss1, rel=1e-6)
    assert max(float(np.abs(p1[k] - p4[k]).max()) for k in p1) < 1e-6
