"""The Trainer's logged numbers: exact windows, perplexity of the mean loss, compile time apart,
learning rate, per-device throughput and MFU, the restore line, a profiler trace and callbacks.

Real Trainer runs on real text (Python's json package), real Orbax checkpoints, real log files.
"""

import glob
import math

import optax
import pytest
from flax import nnx

from roxxel import Curriculum, Phase
from roxxel.train import Cadence, Trainer
from roxxel.train.callbacks import LearningRate, Profile, Throughput
from roxxel.train.logger import read_metrics
from roxxel.train.trainer import Callback

from support.lm import TinyLM, loss_fn, make_dataset

SCHEDULE = optax.linear_schedule(1e-2, 1e-3, 12)


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    return make_dataset(str(tmp_path_factory.mktemp("data") / "json-py"))


class Recorder(Callback):
    def __init__(self):
        self.calls = []

    def on_step(self, step, metrics):
        self.calls.append(("step", step, dict(metrics)))

    def on_eval(self, step, results):
        self.calls.append(("eval", step, dict(results)))

    def on_checkpoint(self, step, directory):
        self.calls.append(("checkpoint", step, directory))


def _run(ds, path, stop=None, callbacks=(), **kw):
    model = TinyLM(nnx.Rngs(0))
    opt = nnx.Optimizer(model, optax.adam(SCHEDULE), wrt=nnx.Param)
    n_params = sum(x.size for x in jax_leaves(nnx.state(model, nnx.Param)))
    cur = Curriculum(ds, [Phase(steps=12, global_batch_size=4, seq_len=32)], chunk_tokens=256)
    trainer = Trainer(
        model,
        opt,
        cur,
        loss_fn,
        save_path=str(path),
        cadence=Cadence(log_every=4, save_interval_steps=3, eval_every=8),
        callbacks=[Throughput(num_params=n_params, peak_flops_per_device=1e12), LearningRate(SCHEDULE), *callbacks],
        **kw,
    )
    return trainer, trainer.run(stop_at_step=stop), n_params


def jax_leaves(tree):
    import jax

    return jax.tree.leaves(tree)


def test_logged_numbers_mean_what_the_docs_say(ds, tmp_path):
    rec = Recorder()
    profile = Profile((2, 3), str(tmp_path / "profile"))
    _, _, n_params = _run(ds, tmp_path, callbacks=[rec, profile], eval_fn=lambda state: 1.5)
    m = {k: dict(v) for k, v in read_metrics(str(tmp_path)).items()}
    assert sorted(m["loss"]) == [4, 8, 12]  # windows end at multiples of log_every only
    for step, loss in m["loss"].items():
        assert m["perplexity"][step] == pytest.approx(math.exp(loss), rel=1e-6)  # exp of the mean loss
        assert m["learning_rate"][step] == pytest.approx(float(SCHEDULE(step - 1)))
        per_device = m["tokens_per_sec_per_device"][step]
        assert m["tokens_per_sec"][step] == pytest.approx(per_device * len(__import__("jax").devices()))
        assert m["model_tflops_per_device"][step] == pytest.approx(per_device * 6 * n_params / 1e12)
        assert m["mfu"][step] == pytest.approx(m["model_tflops_per_device"][step])  # peak given as 1 TFLOP/s
    # the first window times steps 2..4 (3 steps of 4*32 tokens); compilation is reported apart
    assert set(m["compile_time_s"]) == {4} and m["compile_time_s"][4] > 0
    assert m["tokens_per_sec"][4] == pytest.approx(3 * 128 / (3 * m["step_time_s"][4]), rel=1e-6)
    log = open(tmp_path / "roxxel_system.log").read()
    assert "first step of phase 0 took" in log and "including compilation" in log
    # callbacks: one on_step per window with the logged values, evals and started checkpoints
    assert [c[1] for c in rec.calls if c[0] == "step"] == [4, 8, 12]
    assert [c[1] for c in rec.calls if c[0] == "eval"] == [8, 12]
    assert [c[1] for c in rec.calls if c[0] == "checkpoint"] == [3, 6, 9, 12]
    assert next(c[2] for c in rec.calls if c[0] == "step")["loss"] == m["loss"][4]
    # the profiler trace of steps 2..3, in the run directory, for TensorBoard
    assert glob.glob(str(tmp_path / "profile" / "plugins" / "profile" / "*" / "*.xplane.pb"))
    assert "profile of steps 2..3 written to" in log


@pytest.mark.slow
def test_a_resume_says_which_checkpoint_it_restored(ds, tmp_path):
    _run(ds, tmp_path, stop=6)
    _run(ds, tmp_path)
    log = open(tmp_path / "roxxel_system.log").read()
    assert f"restored step 6 from {tmp_path / 'checkpoints'} (saved at 20" in log
