"""Dropout and BatchNorm through the Trainer: their RNG streams and batch statistics live in the
model's NNX state, are checkpointed with it, and a resumed run is bitwise the uninterrupted one."""

import jax
import numpy as np
import optax
import pytest
from flax import nnx

from roxxel import Curriculum, Phase
from roxxel.train import Cadence, LoopOptions, Trainer
from roxxel.train.logger import read_metrics

from support.lm import NoisyLM, loss_fn, make_dataset

# The models sow the old way (flax 0.12 deprecates Module.sow outside nnx.capture): users' models still do.
pytestmark = pytest.mark.filterwarnings("ignore:Using 'Module.sow:DeprecationWarning")


def make_model(seed: int = 0):
    model = NoisyLM(nnx.Rngs(seed))
    return model, nnx.Optimizer(model, optax.adam(3e-3), wrt=nnx.Param)


def state_of(model):
    """Every array of the model's state on the host (RNG keys as their raw data)."""

    def host(x):
        return np.asarray(jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x)

    return {"/".join(map(str, k)): host(v.get_value()) for k, v in nnx.to_flat_state(nnx.state(model))}


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    return make_dataset(str(tmp_path_factory.mktemp("data") / "json-py"))


@pytest.mark.parametrize("accum", [1, 2])
def test_dropout_and_batchnorm_resume_bitwise(ds, tmp_path, accum):
    """Failed at step 1 before (TraceContextError: the step mutated Variables of an outer trace)."""
    cur = Curriculum(ds, [Phase(steps=6, global_batch_size=4, seq_len=32)], chunk_tokens=256)
    kw = dict(cadence=Cadence(log_every=1, save_interval_steps=100), loop=LoopOptions(grad_accum_steps=accum))
    model, opt = make_model()
    Trainer(model, opt, cur, loss_fn, save_path=str(tmp_path / "full"), **kw).run()
    want = state_of(model)
    assert int(want["drop/rngs/count"]) == 6 * accum  # one dropout mask per micro-batch
    Trainer(*make_model(), cur, loss_fn, save_path=str(tmp_path / "cut"), **kw).run(stop_at_step=3)
    model, opt = make_model(seed=7)  # another init and other RNG keys: only the checkpoint can make it equal
    Trainer(model, opt, cur, loss_fn, save_path=str(tmp_path / "cut"), **kw).run()
    got = state_of(model)
    assert got.keys() == want.keys()
    assert {k for k in want if "rngs" in k} >= {"drop/rngs/key", "drop/rngs/count"}
    assert "norm/mean" in want and "norm/var" in want
    for k in want:
        assert np.array_equal(got[k], want[k]), k
    full, cut = read_metrics(str(tmp_path / "full"))["loss"], read_metrics(str(tmp_path / "cut"))["loss"]
    assert cut == full  # the same loss at every step
