"""A misspelt keyword of an option object (Cadence, DataOptions, RestoreOptions, LoopOptions) or
of the Trainer's flat keywords is refused in one line that names the closest right one, where
Python's bare TypeError named none; one shared helper words them all (roxxel.train.cadence)."""

from __future__ import annotations

import dataclasses
import inspect
import pickle

import pytest

from roxxel.exit_codes import ConfigurationError
from roxxel.train import Cadence, DataOptions, LoopOptions, RestoreOptions
from roxxel.train.flat_keywords import resolve_options


@pytest.mark.parametrize(
    "kind, wrong, hint",
    [
        (Cadence, "log_evry", "did you mean `log_every`?"),
        (Cadence, "save_interval", "did you mean `save_interval_steps`?"),
        (DataOptions, "prefetch", "did you mean `prefetch_size`?"),
        (RestoreOptions, "allow_change_run", "did you mean `allow_changed_run`?"),
        (LoopOptions, "grad_acum_steps", "did you mean `grad_accum_steps`?"),
        (LoopOptions, "nothing_like_it", f"see help({LoopOptions.__name__})"),
    ],
)
def test_an_unknown_keyword_of_an_option_names_the_closest_field(kind, wrong, hint):
    with pytest.raises(TypeError) as err:
        kind(**{wrong: 1})
    assert str(err.value) == f"{kind.__name__}() got an unexpected keyword argument '{wrong}'; {hint}"
    assert isinstance(err.value, ConfigurationError)  # exit 78 under roxxel-worker, as Trainer's


@pytest.mark.parametrize(
    "wrong, hint",
    [
        ("log_evry", "did you mean cadence=Cadence(log_every=...)?"),
        ("checkpoint_evry", "did you mean cadence=Cadence(save_interval_steps=...)?"),
        ("cadense", "did you mean cadence=Cadence(...)?"),
        ("learning_rat", "did you mean callbacks=[LearningRate(...)]?"),
        ("nothing_like_it", "see help(Trainer)"),
    ],
)
def test_an_unknown_trainer_keyword_names_what_to_write_instead(wrong, hint):
    with pytest.raises(TypeError) as err:
        resolve_options({}, {wrong: 1})
    assert str(err.value) == f"Trainer.__init__() got an unexpected keyword argument '{wrong}'; {hint}"


def test_the_options_behave_as_dataclasses_still():
    assert list(inspect.signature(Cadence).parameters) == [
        "log_every",
        "eval_every",
        "save_interval_steps",
        "max_to_keep",
    ]
    assert Cadence(5) == Cadence(log_every=5) and dataclasses.replace(Cadence(), eval_every=7).eval_every == 7
    assert pickle.loads(pickle.dumps(LoopOptions(grad_accum_steps=2))) == LoopOptions(grad_accum_steps=2)
    with pytest.raises(TypeError, match="multiple values for argument 'log_every'"):
        Cadence(3, log_every=4)
    with pytest.raises(ValueError, match="Cadence.log_every must be a positive int"):  # the fields' own checks run
        Cadence(log_every=0)
