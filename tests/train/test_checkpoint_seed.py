"""The Trainer's seed is in every checkpoint's fingerprint, also a user-built Checkpointer's.

Before the fix only the Checkpointer the Trainer built itself recorded ``"seed"``; one built
by the user (``Checkpointer(dir, model, opt, fingerprint=cur.describe())``, as
examples/lm/train.py does) did not, and a resume with another ``seed`` went on silently on
another data order.
"""

from __future__ import annotations

import json
import logging

import pytest

import support.ckpt as common
from roxxel import Curriculum, Phase
from roxxel.exit_codes import ConfigValueError
from roxxel.train import RunMismatchError, Trainer
from roxxel.train.checkpoint import Checkpointer

from support.lm import loss_fn, make_dataset, make_model


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    return make_dataset(str(tmp_path_factory.mktemp("data") / "json-py"))


def _cur(ds, steps):
    return Curriculum(ds, [Phase(steps=steps, global_batch_size=2, seq_len=16)], chunk_tokens=256)


def _train(ds, path, steps, **kw):
    model, opt = make_model()
    cur = _cur(ds, steps)
    with Checkpointer(str(path), model, opt, fingerprint=cur.describe()) as ckpt:
        Trainer(model, opt, cur, loss_fn, checkpointer=ckpt, save_interval_steps=2, **kw).run()
        return ckpt


@pytest.mark.slow
def test_a_user_built_checkpointer_refuses_a_resume_with_another_seed(ds, tmp_path):
    _train(ds, tmp_path / "ck", 2, seed=1)
    run = json.loads((tmp_path / "ck" / "2" / "run" / "metadata").read_text())
    assert run["fingerprint"]["seed"] == 1
    with pytest.raises(RunMismatchError, match=r"seed: 1 -> 2") as info:
        _train(ds, tmp_path / "ck", 4, seed=2)
    assert "resume with seed=1" in str(info.value)
    ckpt = _train(ds, tmp_path / "ck", 4, seed=1)  # the same seed resumes
    assert ckpt.restored_run["step"] == 2 and ckpt.all_steps()[-1] == 4


def test_a_step_saved_without_a_seed_still_resumes(tmp_path, caplog):
    ms = common.build()
    with Checkpointer(tmp_path / "ck", state=ms, fingerprint=common.FINGERPRINT) as ckpt:  # as before the fix
        ckpt.save(3)
    with Checkpointer(tmp_path / "ck", state=common.build(seed=1), fingerprint=common.FINGERPRINT) as ckpt:
        ckpt.record_seed(7)
        with caplog.at_level(logging.WARNING, logger="roxxel.checkpoint"):
            assert ckpt.restore() == 3
        assert ckpt.run_changes == ["seed: not recorded in the checkpoint, now 7"]
        ckpt.save(4)
    run = json.loads((tmp_path / "ck" / "4" / "run" / "metadata").read_text())
    assert run["fingerprint"]["seed"] == 7
    assert "seed: not recorded in the checkpoint, now 7" in caplog.text


def test_a_fingerprint_with_another_seed_is_a_configuration_error(tmp_path):
    with Checkpointer(tmp_path / "ck", state=common.build(), fingerprint={"seed": 3}) as ckpt:
        ckpt.record_seed(3)  # the same: nothing to do
        with pytest.raises(ConfigValueError, match=r"seed 3 but the run's seed is 4"):
            ckpt.record_seed(4)
        with pytest.raises(TypeError):
            ckpt.record_seed("4")


def test_a_checkpointer_without_fingerprint_records_the_seed_and_refuses_another(tmp_path):
    with Checkpointer(tmp_path / "ck", state=common.build()) as ckpt:
        ckpt.record_seed(1)
        ckpt.save(1)
    with Checkpointer(tmp_path / "ck", state=common.build(seed=1)) as ckpt:
        ckpt.record_seed(2)
        with pytest.raises(RunMismatchError, match=r"seed: 1 -> 2"):
            ckpt.restore()
