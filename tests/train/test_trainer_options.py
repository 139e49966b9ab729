"""The Trainer's option objects (roxxel/train/options.py, roxxel/train/cadence.py): their checks,
the Checkpointer's cadence, and the flat keywords of before, which still work and warn once."""

from __future__ import annotations

import inspect
import warnings

import numpy as np
import pytest

from roxxel.deprecation import RoxxelDeprecationWarning
from roxxel.exit_codes import ConfigurationError
from roxxel.train import Cadence, Checkpointer, DataOptions, LoopOptions, RestoreOptions, Trainer
from roxxel.train.callbacks import LearningRate, Profile, Throughput
from roxxel.train.watchdog import WatchdogBounds
from support.lm import loss_fn, make_curriculum, make_dataset, make_model


@pytest.fixture(scope="module")
def cur(tmp_path_factory):
    return make_curriculum(make_dataset(str(tmp_path_factory.mktemp("data") / "json-py")))


@pytest.mark.parametrize(
    "kind, values, error, words",
    [
        (Cadence, {"log_every": 0}, ValueError, "Cadence.log_every must be a positive int, got 0"),
        (Cadence, {"eval_every": 2.5}, ValueError, "Cadence.eval_every must be a positive int"),
        (Cadence, {"save_interval_steps": True}, ValueError, "Cadence.save_interval_steps must be a positive int"),
        (Cadence, {"max_to_keep": 0}, ValueError, "or None for keeping every step, got 0"),
        (DataOptions, {"seed": "7"}, TypeError, "DataOptions.seed must be an int, got '7'"),
        (DataOptions, {"outputs": "words"}, ValueError, "DataOptions.outputs must be one of"),
        (DataOptions, {"prefetch_size": -1}, ValueError, "DataOptions.prefetch_size must be an int >= 0"),
        (RestoreOptions, {"partial": 1}, TypeError, "RestoreOptions.partial must be True or False, got 1"),
        (RestoreOptions, {"allow_changed_run": "yes"}, TypeError, "RestoreOptions.allow_changed_run"),
        (LoopOptions, {"grad_accum_steps": 0}, ValueError, "LoopOptions.grad_accum_steps must be a positive int"),
        (LoopOptions, {"async_queue_depth": -2}, ValueError, "LoopOptions.async_queue_depth"),
        (LoopOptions, {"handle_sigint": None}, TypeError, "LoopOptions.handle_sigint must be True or False"),
        (LoopOptions, {"watchdog": 5}, TypeError, "LoopOptions.watchdog must be a WatchdogBounds or None"),
    ],
)
def test_an_option_refuses_a_bad_value_naming_its_field(kind, values, error, words):
    with pytest.raises(error, match=words.replace("(", r"\(")) as err:
        kind(**values)
    assert isinstance(err.value, ConfigurationError)  # exit 78 under roxxel-worker: every restart would fail alike
    assert "\n" not in str(err.value)


def test_the_options_are_frozen_and_default_as_the_trainer_did():
    cadence = Cadence()
    assert (cadence.log_every, cadence.eval_every, cadence.save_interval_steps, cadence.max_to_keep) == (
        100,
        500,
        None,
        3,
    )
    with pytest.raises(AttributeError):
        cadence.log_every = 5  # type: ignore[misc]
    assert DataOptions() == DataOptions(seed=42, outputs="tokens", prefetch_size=2, data_sharding=None)
    assert LoopOptions().grad_accum_steps == 1 and LoopOptions().handle_sigint is True
    seed = DataOptions(seed=np.int64(3)).seed  # a NumPy integer, as the run identity always took it
    assert seed == 3 and type(seed) is int


def test_the_signature_is_short_with_curriculum_and_loss_fn_required(cur):
    named = [p for p in inspect.signature(Trainer).parameters.values() if p.kind != p.VAR_KEYWORD]
    assert len(named) <= 16, [p.name for p in named]
    assert [p.name for p in named[:4]] == ["model", "optimizer", "curriculum", "loss_fn"]
    with pytest.raises(TypeError, match="Trainer needs loss_fn"):
        Trainer(*make_model(), cur)


def test_options_reach_the_trainer_without_a_warning(cur, tmp_path):
    bounds = WatchdogBounds(step_floor_s=9)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trainer = Trainer(
            *make_model(),
            cur,
            loss_fn,
            save_path=str(tmp_path / "run"),
            cadence=Cadence(log_every=3, eval_every=6, save_interval_steps=4, max_to_keep=2),
            data=DataOptions(seed=5, prefetch_size=0),
            restore=RestoreOptions(partial=True),
            loop=LoopOptions(async_queue_depth=3, handle_sigint=False, watchdog=bounds),
        )
    try:
        assert (trainer.log_every, trainer.eval_every, trainer.save_interval_steps) == (3, 6, 4)
        assert (trainer.seed, trainer.prefetch_size, trainer.partial_restore) == (5, 0, True)
        assert (trainer.async_queue_depth, trainer.handle_sigint, trainer.watchdog_bounds) == (3, False, bounds)
        # the checkpointer it builds takes the same cadence
        assert (trainer.checkpointer.save_interval_steps, trainer.checkpointer.max_to_keep) == (4, 2)
    finally:
        trainer.checkpointer.close()
        trainer.logger.close()


def _one_deprecation(call):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = call()
    assert len(caught) == 1, [str(w.message) for w in caught]
    assert caught[0].category is RoxxelDeprecationWarning
    assert caught[0].filename == __file__  # points at the caller's line, not into roxxel
    return result, str(caught[0].message)


@pytest.mark.parametrize(
    "old, check, instead",
    [
        (
            {"eval_every": 7, "log_every": 3, "max_to_keep": 5},
            lambda t: (t.eval_every, t.log_every, t.cadence.max_to_keep) == (7, 3, 5),
            "eval_every=, log_every=, max_to_keep= is deprecated, "
            "use cadence=Cadence(eval_every=..., log_every=..., max_to_keep=...)",
        ),
        (
            {"seed": 9, "prefetch_size": 0, "outputs": "tokens"},
            lambda t: (t.seed, t.prefetch_size, t.outputs) == (9, 0, "tokens"),
            "use data=DataOptions(seed=..., prefetch_size=..., outputs=...)",
        ),
        (
            {"partial_restore": 1, "allow_changed_run": True},  # any truthy value, as before
            lambda t: t.partial_restore is True and t.restore_options.allow_changed_run is True,
            "partial_restore=, allow_changed_run= is deprecated, use restore=RestoreOptions(partial=..., allow_changed_run=...)",
        ),
        (
            {"grad_accum_steps": None, "handle_sigint": False, "watchdog": None, "async_queue_depth": 4},
            lambda t: (
                (t.grad_accum_steps, t.handle_sigint, t.watchdog_bounds, t.async_queue_depth) == (1, False, None, 4)
            ),
            "use loop=LoopOptions(grad_accum_steps=..., handle_sigint=..., watchdog=..., async_queue_depth=...)",
        ),
        (
            {"learning_rate": 1e-3, "num_params": 10, "peak_flops_per_device": 1e12},
            lambda t: (
                any(isinstance(c, LearningRate) for c in t.callbacks)
                and [c.flops_per_token for c in t.callbacks if isinstance(c, Throughput)] == [60.0]
            ),
            "use callbacks=[LearningRate(...), Throughput(...)]",
        ),
        (
            {"profile_steps": (2, 3), "eval_every": 4},
            lambda t: [(c.first, c.last) for c in t.callbacks if isinstance(c, Profile)] == [(2, 3)],
            "use cadence=Cadence(eval_every=...) and callbacks=[Profile(steps, os.path.join(save_path, 'profile'))]",
        ),
    ],
    ids=["cadence", "data", "restore", "loop", "callbacks", "profile"],
)
def test_the_flat_keywords_still_work_and_warn_once(cur, tmp_path, old, check, instead):
    trainer, message = _one_deprecation(lambda: Trainer(*make_model(), cur, loss_fn, save_path=str(tmp_path), **old))
    try:
        assert check(trainer)
        assert message.startswith("Trainer: ") and instead in message, message
    finally:
        trainer.checkpointer.close()
        trainer.logger.close()


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"eval_every": 5, "cadence": Cadence()}, r"eval_every= and cadence= both given.*cadence=Cadence\(eval_every="),
        ({"partial_restore": True, "restore": RestoreOptions()}, r"partial_restore= and restore= both given.*partial="),
        ({"watchdog": None, "loop": LoopOptions()}, "watchdog= and loop= both given"),
        ({"seed": 1, "data": DataOptions()}, "seed= and data= both given"),
        ({"cadence": {"log_every": 5}}, r"cadence= must be a Cadence, got dict"),
        ({"log_evry": 5}, r"Trainer.__init__\(\) got an unexpected keyword argument 'log_evry'"),
    ],
)
def test_a_keyword_given_twice_or_unknown_is_a_type_error(cur, kwargs, words):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # refused before any warning
        with pytest.raises(TypeError, match=words) as err:
            Trainer(*make_model(), cur, loss_fn, **kwargs)
    assert isinstance(err.value, ConfigurationError)


def test_a_shortcut_beside_its_callback_is_refused(cur):
    with pytest.raises(ValueError, match="learning_rate and a LearningRate in callbacks= both given"):
        with pytest.warns(RoxxelDeprecationWarning, match=r"callbacks=\[LearningRate"):
            Trainer(*make_model(), cur, loss_fn, learning_rate=0.1, callbacks=[LearningRate(0.1)])


def test_the_checkpointer_takes_the_cadence(tmp_path):
    model, opt = make_model()
    with Checkpointer(str(tmp_path / "a"), model, opt, cadence=Cadence(save_interval_steps=4, max_to_keep=2)) as ckpt:
        assert (ckpt.save_interval_steps, ckpt.max_to_keep) == (4, 2)
    with Checkpointer(str(tmp_path / "b"), model, opt, cadence=Cadence(max_to_keep=None)) as ckpt:
        assert (ckpt.save_interval_steps, ckpt.max_to_keep) == (1, None)  # None: every step save() is called with
    with Checkpointer(str(tmp_path / "c"), model, opt) as ckpt:
        assert (ckpt.save_interval_steps, ckpt.max_to_keep) == (1, 3)  # its own defaults, as before
    with pytest.raises(TypeError, match=r"max_to_keep= and cadence= both given; set it in the Cadence only"):
        Checkpointer(str(tmp_path / "d"), model, opt, max_to_keep=3, cadence=Cadence())
    with pytest.raises(TypeError, match="cadence= must be a Cadence, got int"):
        Checkpointer(str(tmp_path / "e"), model, opt, cadence=4)
