"""Restoring across model changes (``Checkpointer.restore(partial=True)``, ``Trainer(restore=RestoreOptions(partial=True))``).

Real Orbax writes on a local disk. The original Roxxel promised that "model definition
changes do not break older saved weights"; here that is explicit, logged and checked.
"""

from __future__ import annotations

import json
import logging

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from roxxel import Curriculum, Phase, Roxxel
from roxxel.train import Cadence, RestoreOptions, Trainer
from roxxel.train.checkpoint import CheckpointCorruptError, Checkpointer, ModelChangeError


class One(nnx.Module):
    def __init__(self, rngs: nnx.Rngs, hidden: int = 3) -> None:
        self.l1 = nnx.Linear(4, hidden, rngs=rngs)

    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        return self.l1(x)


class Two(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.l1 = nnx.Linear(4, 3, rngs=rngs)
        self.l2 = nnx.Linear(3, 2, rngs=rngs)

    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        return self.l2(nnx.relu(self.l1(x)))


def _trained(model: nnx.Module, tx: optax.GradientTransformation) -> nnx.Optimizer:
    """An optimizer over ``model`` after two real updates (so moments and counts are not initial)."""
    opt = nnx.Optimizer(model, tx, wrt=nnx.Param)
    x = jnp.linspace(-1.0, 1.0, 8, dtype=jnp.float32).reshape(2, 4)
    for _ in range(2):
        grads = nnx.grad(lambda m: jnp.mean(m(x) ** 2))(model)
        opt.update(model, grads)
    return opt


def _save(path, model: nnx.Module, opt: nnx.Optimizer | None, step: int = 5) -> None:
    with Checkpointer(path, model, opt) as ckpt:
        ckpt.save(step, {"loss": 1.0}, force=True)


def _host(x) -> np.ndarray:
    return np.asarray(x[...])


def test_a_model_that_adds_a_layer_restores_the_old_one_and_keeps_the_new_ones_initial_values(tmp_path, caplog):
    old = One(nnx.Rngs(0))
    _save(tmp_path, old, _trained(old, optax.adam(1e-2)))

    new = Two(nnx.Rngs(1))
    opt = nnx.Optimizer(new, optax.adam(1e-2), wrt=nnx.Param)
    l2_initial = _host(new.l2.kernel).copy()
    with Checkpointer(tmp_path, new, opt) as ckpt:
        # The default stays strict: one line naming what changed and the fix; nothing loaded.
        with pytest.raises(ModelChangeError, match=r"model changed.*'model/l2/bias'.*partial=True") as err:
            ckpt.restore()
        assert err.value.array == "model/l2/bias" and err.value.saved is None
        assert not np.array_equal(_host(new.l1.kernel), _host(old.l1.kernel))

        with caplog.at_level(logging.INFO, logger="roxxel.checkpoint"):
            assert ckpt.restore(partial=True) == 5
        ckpt.save(6, {"loss": 0.5}, force=True)  # the manager still saves after a partial restore
        ckpt.wait_until_finished()
        assert 6 in ckpt.all_steps()
    np.testing.assert_array_equal(_host(new.l1.kernel), _host(old.l1.kernel))
    np.testing.assert_array_equal(_host(new.l1.bias), _host(old.l1.bias))
    np.testing.assert_array_equal(_host(new.l2.kernel), l2_initial)
    plan = ckpt.restore_plan
    assert plan is not None
    assert plan.restored == ["model/l1/bias", "model/l1/kernel"]
    assert plan.new[:2] == ["model/l2/bias", "model/l2/kernel"]
    assert plan.dropped == []
    # Adam's state has moments for l2 now: its structure changed, so it is re-initialised whole.
    assert plan.optimizer_restored is False
    assert int(_host(opt.step)) == 0
    assert not np.any(_host(opt.opt_state[0].mu["l1"]["kernel"]))
    text = caplog.text
    assert "into a changed model" in text and "new: model/l2/kernel" in text
    assert "optimizer state re-initialised" in text


def test_a_model_that_removes_a_layer_reports_it_and_restores_the_optimizer_when_it_still_fits(tmp_path):
    old = Two(nnx.Rngs(0))
    _save(tmp_path, old, _trained(old, optax.sgd(0.1)))

    new = One(nnx.Rngs(1))
    opt = nnx.Optimizer(new, optax.sgd(0.1), wrt=nnx.Param)
    with Checkpointer(tmp_path, new, opt) as ckpt:
        with pytest.raises(
            ModelChangeError, match=r"the model changed \(2 arrays no longer in the model, e\.g\. 'model/l2/bias'\)"
        ):
            ckpt.restore()
        ckpt.restore(partial=True)
        plan = ckpt.restore_plan
    assert plan is not None
    assert plan.dropped == ["model/l2/bias", "model/l2/kernel"] and plan.new == []
    # SGD keeps no per-parameter state: the optimizer's arrays still match, so they are restored.
    assert plan.optimizer_restored is True and "optimizer/step" in plan.restored
    assert int(_host(opt.step)) == 2
    np.testing.assert_array_equal(_host(new.l1.kernel), _host(old.l1.kernel))


def test_a_changed_shape_is_an_error_naming_the_array_and_both_shapes(tmp_path):
    old = One(nnx.Rngs(0), hidden=3)
    _save(tmp_path, old, None)
    new = One(nnx.Rngs(1), hidden=5)
    before = _host(new.l1.kernel).copy()
    with Checkpointer(tmp_path, new) as ckpt:
        for partial in (False, True):
            with pytest.raises(ModelChangeError) as err:
                ckpt.restore(partial=partial)
            message = str(err.value)
            assert "'model/l1/bias'" in message and "shape (3,) float32" in message and "shape (5,) float32" in message
            assert "\n" not in message
            assert err.value.saved == ((3,), "float32") and err.value.current == ((5,), "float32")
    np.testing.assert_array_equal(_host(new.l1.kernel), before)


def test_a_changed_dtype_is_an_error_too(tmp_path):
    old = One(nnx.Rngs(0))
    _save(tmp_path, old, None)
    new = nnx.Linear(4, 3, param_dtype=jnp.bfloat16, rngs=nnx.Rngs(1))
    holder = nnx.Module()
    holder.l1 = new
    with Checkpointer(tmp_path, holder) as ckpt:
        with pytest.raises(ModelChangeError, match=r"'model/l1/bias' is shape \(3,\) float32 .* shape \(3,\) bfloat16"):
            ckpt.restore(partial=True)


def test_a_partial_restore_still_verifies_the_checksums_of_what_it_reads(tmp_path):
    old = One(nnx.Rngs(0))
    _save(tmp_path, old, None)
    record = tmp_path / "5" / "run" / "metadata"
    run = json.loads(record.read_text())
    run["checksums"]["model/l1/kernel"] = "0" * 16
    record.write_text(json.dumps(run))
    with Checkpointer(tmp_path, Two(nnx.Rngs(1))) as ckpt:
        with pytest.raises(CheckpointCorruptError, match="'model/l1/kernel' does not match the checksum") as err:
            ckpt.restore(partial=True)
    assert err.value.array == "model/l1/kernel"


def test_a_model_alone_restores_from_a_training_checkpoint_without_partial(tmp_path):
    """Evaluation: the saved optimizer state is skipped, not counted as a model change."""
    old = One(nnx.Rngs(0))
    _save(tmp_path, old, _trained(old, optax.adam(1e-2)))
    new = One(nnx.Rngs(1))
    with Checkpointer(tmp_path, new) as ckpt:
        assert ckpt.restore() == 5
        assert ckpt.restore_plan is not None and ckpt.restore_plan.unchanged
    np.testing.assert_array_equal(_host(new.l1.kernel), _host(old.l1.kernel))


def test_rng_state_of_dropout_restores_through_the_partial_path(tmp_path):
    class Drop(nnx.Module):
        def __init__(self, rngs: nnx.Rngs, extra: bool) -> None:
            self.l1 = nnx.Linear(4, 3, rngs=rngs)
            self.drop = nnx.Dropout(0.1, rngs=rngs)
            self.l2 = nnx.Linear(3, 2, rngs=rngs) if extra else None

    old = Drop(nnx.Rngs(0), extra=False)
    _save(tmp_path, old, None)
    new = Drop(nnx.Rngs(7), extra=True)
    with Checkpointer(tmp_path, new) as ckpt:
        ckpt.restore(partial=True)
        assert ckpt.restore_plan is not None and "model/drop/rngs/key" in ckpt.restore_plan.restored
    saved_key, restored_key = (nnx.to_pure_dict(nnx.state(m))["drop"]["rngs"]["key"] for m in (old, new))
    np.testing.assert_array_equal(jax.random.key_data(saved_key), jax.random.key_data(restored_key))


class PerPosition(nnx.Module):
    """Maps each value of a row to a prediction of the next; ``extra`` adds a second layer."""

    def __init__(self, rngs: nnx.Rngs, extra: bool = False) -> None:
        self.l1 = nnx.Linear(1, 1, rngs=rngs)
        self.l2 = nnx.Linear(1, 1, rngs=rngs) if extra else None

    def __call__(self, x: jax.Array) -> jax.Array:
        y = self.l1(x[..., None])
        return (self.l2(y) if self.l2 is not None else y)[..., 0]


def _mse(model: nnx.Module, batch: jax.Array) -> jax.Array:
    pred = model(batch[:, :-1].astype(jnp.float32))
    return jnp.mean((pred - batch[:, 1:].astype(jnp.float32)) ** 2)


@pytest.mark.slow
def test_the_trainer_continues_a_run_with_a_grown_model_only_when_asked(tmp_path):
    data = str(tmp_path / "data.rox")
    Roxxel(data).write([np.random.default_rng(0).integers(0, 8, 4000).astype(np.uint16)])
    curriculum = Curriculum(Roxxel(data), [Phase(steps=8, global_batch_size=4, seq_len=16)], chunk_tokens=256)
    run = str(tmp_path / "run")

    def trainer(model: nnx.Module, **kwargs) -> Trainer:
        return Trainer(
            model=model,
            optimizer=nnx.Optimizer(model, optax.sgd(1e-3), wrt=nnx.Param),
            curriculum=curriculum,
            loss_fn=_mse,
            save_path=run,
            cadence=Cadence(save_interval_steps=4, log_every=4),
            **kwargs,
        )

    trainer(PerPosition(nnx.Rngs(0))).run(stop_at_step=4)
    with pytest.raises(ModelChangeError, match=r"restore=RestoreOptions\(partial=True\)"):
        trainer(PerPosition(nnx.Rngs(1), extra=True)).run()
    grown = trainer(PerPosition(nnx.Rngs(1), extra=True), restore=RestoreOptions(partial=True))
    grown.run()
    assert grown.state.step == 8
    log = (tmp_path / "run" / "roxxel_system.log").read_text()
    assert "restored into a changed model" in log and "new: model/l2/kernel" in log
