"""The Trainer's seed is in every checkpoint's fingerprint, also a user-built Checkpointer's
(``roxxel.data.identity.with_seed``, handed to ``Checkpointer.use_fingerprint``).

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
from roxxel.data.identity import with_seed
from roxxel.exit_codes import ConfigValueError
from roxxel.train import Cadence, DataOptions, RunMismatchError, Trainer
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
        Trainer(model, opt, cur, loss_fn, checkpointer=ckpt, cadence=Cadence(save_interval_steps=2), **kw).run()
        return ckpt


@pytest.mark.slow
def test_a_user_built_checkpointer_refuses_a_resume_with_another_seed(ds, tmp_path):
    _train(ds, tmp_path / "ck", 2, data=DataOptions(seed=1))
    run = json.loads((tmp_path / "ck" / "2" / "run" / "metadata").read_text())
    assert run["fingerprint"]["seed"] == 1
    with pytest.raises(RunMismatchError, match=r"seed: 1 -> 2") as info:
        _train(ds, tmp_path / "ck", 4, data=DataOptions(seed=2))
    assert "resume with seed=1" in str(info.value)
    ckpt = _train(ds, tmp_path / "ck", 4, data=DataOptions(seed=1))  # the same seed resumes
    assert ckpt.restored_run["step"] == 2 and ckpt.all_steps()[-1] == 4


def test_a_step_saved_without_a_seed_still_resumes(tmp_path, caplog):
    ms = common.build()
    with Checkpointer(tmp_path / "ck", state=ms, fingerprint=common.FINGERPRINT) as ckpt:  # as before the fix
        ckpt.save(3)
    with Checkpointer(tmp_path / "ck", state=common.build(seed=1), fingerprint=common.FINGERPRINT) as ckpt:
        ckpt.use_fingerprint(with_seed(ckpt.fingerprint, 7))
        with caplog.at_level(logging.WARNING, logger="roxxel.checkpoint"):
            assert ckpt.restore() == 3
        assert ckpt.run_changes == ["seed: not recorded in the checkpoint, now 7"]
        ckpt.save(4)
    run = json.loads((tmp_path / "ck" / "4" / "run" / "metadata").read_text())
    assert run["fingerprint"]["seed"] == 7
    assert "seed: not recorded in the checkpoint, now 7" in caplog.text


def test_a_fingerprint_with_another_seed_is_a_configuration_error(tmp_path):
    with Checkpointer(tmp_path / "ck", state=common.build(), fingerprint={"seed": 3}) as ckpt:
        ckpt.use_fingerprint(with_seed(ckpt.fingerprint, 3))  # the same: nothing to do
        with pytest.raises(ConfigValueError, match=r"seed 3 but the run's seed is 4"):
            with_seed(ckpt.fingerprint, 4)
        with pytest.raises(TypeError):
            with_seed(ckpt.fingerprint, "4")


def test_a_checkpointer_without_fingerprint_records_the_seed_and_refuses_another(tmp_path):
    with Checkpointer(tmp_path / "ck", state=common.build()) as ckpt:
        ckpt.use_fingerprint(with_seed(ckpt.fingerprint, 1))
        ckpt.save(1)
    with Checkpointer(tmp_path / "ck", state=common.build(seed=1)) as ckpt:
        ckpt.use_fingerprint(with_seed(ckpt.fingerprint, 2))
        with pytest.raises(RunMismatchError, match=r"seed: 1 -> 2"):
            ckpt.restore()


def test_a_fingerprint_cannot_change_after_the_restore_compared_it(tmp_path):
    with Checkpointer(tmp_path / "ck", state=common.build(), fingerprint={"seed": 1}) as ckpt:
        ckpt.save(1)
    with Checkpointer(tmp_path / "ck", state=common.build(seed=1), fingerprint={"seed": 1}) as ckpt:
        assert ckpt.restore() == 1
        ckpt.use_fingerprint(with_seed(ckpt.fingerprint, 1))  # the same: nothing to do
        with pytest.raises(ConfigValueError, match=r"changed after the checkpointer restored a step \(x: added 2\)"):
            ckpt.use_fingerprint({"seed": 1, "x": 2})


def test_a_user_built_checkpointer_judges_a_curriculum_by_what_the_data_allows(ds, tmp_path):
    """Outside the Trainer: ``fingerprint=curriculum.describe()`` (or ``identity(seed)``) carries
    the data's judge, so lengthening the phase that holds the step resumes; a plain copy of
    the description is compared by plain equality."""
    with Checkpointer(tmp_path / "ck", state=common.build(), fingerprint=_cur(ds, 4).describe()) as ckpt:
        ckpt.save(2)
    for fingerprint in (_cur(ds, 6).describe(), _cur(ds, 6).identity(seed=0)):
        with Checkpointer(tmp_path / "ck", state=common.build(seed=1), fingerprint=fingerprint) as ckpt:
            assert ckpt.restore() == 2
            assert "phases[0].steps: 4 -> 6 (the phase holding step 2 changes length)" in ckpt.run_changes
    with Checkpointer(tmp_path / "ck", state=common.build(seed=1), fingerprint=dict(_cur(ds, 6).identity(0))) as ckpt:
        with pytest.raises(RunMismatchError, match=r"phases\[0\]\.steps: 4 -> 6"):
            ckpt.restore()


def test_a_fingerprint_may_carry_its_own_judge(tmp_path):
    class Lenient(dict):
        def judge(self, saved, current, step):
            return ["anything goes"], [], ""

    with Checkpointer(tmp_path / "ck", state=common.build(), fingerprint={"v": 1}) as ckpt:
        ckpt.save(1)
    with Checkpointer(tmp_path / "ck", state=common.build(seed=1), fingerprint=Lenient(v=2)) as ckpt:
        assert ckpt.restore() == 1
        assert ckpt.run_changes == ["anything goes"]
        assert ckpt.fingerprint == {"v": 2} and type(ckpt.fingerprint) is dict  # stored as plain JSON
