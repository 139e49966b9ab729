"""The Trainer's and the stream's set-up errors are configuration errors (exit 78 under
roxxel-worker, no gang restart): every attempt would hit them again. They stay ValueError /
TypeError for callers that catch those."""

import pytest

from roxxel import Curriculum, Phase
from roxxel.exit_codes import ConfigurationError
from roxxel.train import Cadence, LoopOptions, Trainer
from support.lm import loss_fn, make_dataset, make_model


@pytest.fixture(scope="module")
def cur(tmp_path_factory):
    return Curriculum(
        make_dataset(str(tmp_path_factory.mktemp("d") / "data")),
        [Phase(steps=2, global_batch_size=2, seq_len=16)],
        chunk_tokens=256,
    )


@pytest.mark.parametrize(
    "options, kind",
    [
        (lambda: {"cadence": Cadence(log_every=0)}, ValueError),
        (lambda: {"loop": LoopOptions(watchdog=5)}, TypeError),
        (lambda: {"loop": {"watchdog": None}}, TypeError),
    ],
)
def test_bad_trainer_arguments_are_configuration_errors(cur, options, kind):
    model, opt = make_model()
    with pytest.raises(kind) as err:
        Trainer(model, opt, cur, loss_fn, **options())
    assert isinstance(err.value, ConfigurationError)


def test_a_bad_stream_argument_is_a_configuration_error(cur):
    with pytest.raises(ValueError) as err:
        cur.stream(prefetch_size=-1)
    assert isinstance(err.value, ConfigurationError)
