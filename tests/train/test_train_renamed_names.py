"""One checkpoint cadence: ``Cadence(save_interval_steps=)`` (Orbax's name); the original's
``checkpoint_every`` still works and warns; two cadences that disagree are refused."""

import pytest

from roxxel.deprecation import RoxxelDeprecationWarning
from roxxel.train import Cadence, Checkpointer, Trainer

from support.lm import loss_fn, make_curriculum, make_dataset, make_model


@pytest.fixture(scope="module")
def cur(tmp_path_factory):
    return make_curriculum(make_dataset(str(tmp_path_factory.mktemp("data") / "json-py")))


def test_checkpoint_every_warns_and_means_save_interval_steps(cur):
    with pytest.warns(
        RoxxelDeprecationWarning,
        match=r"Trainer: checkpoint_every= is deprecated, use cadence=Cadence\(save_interval_steps=\.\.\.\)",
    ):
        trainer = Trainer(*make_model(), cur, loss_fn, checkpoint_every=7)
    assert trainer.save_interval_steps == 7
    assert Trainer(*make_model(), cur, loss_fn).save_interval_steps == 100
    with pytest.raises(ValueError, match="save_interval_steps=5 and its deprecated name checkpoint_every=7 disagree"):
        Trainer(*make_model(), cur, loss_fn, save_interval_steps=5, checkpoint_every=7)


def test_the_cadence_is_given_once(cur, tmp_path):
    model, opt = make_model()
    with Checkpointer(str(tmp_path / "ckpt"), model, opt, save_interval_steps=4) as ckpt:
        assert Trainer(model, opt, cur, loss_fn, checkpointer=ckpt).save_interval_steps == 4
        with pytest.raises(ValueError, match="save_interval_steps=6 but the checkpointer saves every 4 steps"):
            Trainer(model, opt, cur, loss_fn, checkpointer=ckpt, cadence=Cadence(save_interval_steps=6))
    trainer = Trainer(
        *make_model(), cur, loss_fn, save_path=str(tmp_path / "run"), cadence=Cadence(save_interval_steps=3)
    )
    assert trainer.checkpointer.save_interval_steps == 3  # the checkpointer it makes has the same cadence
    trainer.checkpointer.close()
    trainer.logger.close()


def test_options_are_keyword_only(cur):
    with pytest.raises(TypeError, match="positional"):
        Trainer(*make_model(), cur, loss_fn, "runs/x")
