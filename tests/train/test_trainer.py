"""The Trainer on real text: loss falls, exact resume (also across a phase boundary), NaN guard, outputs."""

import jax
import numpy as np
import optax
import pytest
from flax import nnx

from roxxel import Curriculum, Phase
from roxxel.train import Cadence, Checkpointer, DataOptions, LoopOptions, NaNLossError, Trainer
from roxxel.train.logger import read_metrics
from roxxel.train.step import unpack_loss

from support.lm import loss_fn, make_curriculum, make_dataset, make_model
from support.paths import WORKERS


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    return make_dataset(str(tmp_path_factory.mktemp("data") / "json-py"))


def params_of(model):
    return {"/".join(map(str, k)): np.asarray(v) for k, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}


@pytest.mark.slow
def test_loss_falls_on_real_text(ds, tmp_path):
    model, opt = make_model(lr=1e-2)
    cur = Curriculum(ds, [Phase(steps=60, global_batch_size=8, seq_len=64)], chunk_tokens=256)
    Trainer(
        model, opt, cur, loss_fn, save_path=str(tmp_path), cadence=Cadence(log_every=10, save_interval_steps=1000)
    ).run()
    loss = [v for _, v in read_metrics(str(tmp_path))["loss"]]
    assert loss[0] > 4.5 and loss[-1] < loss[0] - 1.5, loss  # ln(257) = 5.55 at the start
    assert "perplexity" in read_metrics(str(tmp_path))


@pytest.mark.slow
@pytest.mark.parametrize("stop", [4, 6, 9])  # inside phase 0, at the boundary, inside phase 1
def test_resume_equals_uninterrupted(ds, tmp_path, stop):
    cur = make_curriculum(ds)
    model, opt = make_model()
    Trainer(
        model,
        opt,
        cur,
        loss_fn,
        save_path=str(tmp_path / "full"),
        cadence=Cadence(log_every=1, save_interval_steps=100),
    ).run()
    want = params_of(model)
    model, opt = make_model()
    Trainer(
        model, opt, cur, loss_fn, save_path=str(tmp_path / "cut"), cadence=Cadence(log_every=1, save_interval_steps=100)
    ).run(stop_at_step=stop)
    model, opt = make_model(seed=7)  # another init: only the checkpoint can make it equal
    Trainer(
        model, opt, cur, loss_fn, save_path=str(tmp_path / "cut"), cadence=Cadence(log_every=1, save_interval_steps=100)
    ).run()
    got = params_of(model)
    assert got.keys() == want.keys()
    for k in want:
        assert np.array_equal(got[k], want[k]), k
    full, cut = read_metrics(str(tmp_path / "full"))["loss"], read_metrics(str(tmp_path / "cut"))["loss"]
    assert cut == full  # the same loss at every step
    log = (tmp_path / "cut" / "roxxel_system.log").read_text()  # the phase line says where it resumed
    assert (f"(resuming at step {stop})" in log) == (stop != 6), log  # 6: phase 1 starts afresh


def test_nan_raises_at_next_log_step_with_traceback_in_log(ds, tmp_path):
    model = make_model()[0]
    lr = lambda count: jax.numpy.where(count >= 3, jax.numpy.nan, 1e-3)  # parameters turn NaN after step 3
    opt = nnx.Optimizer(model, optax.sgd(lr), wrt=nnx.Param)
    cur = Curriculum(ds, [Phase(steps=20, global_batch_size=4, seq_len=32)], chunk_tokens=256)
    with pytest.raises(ValueError, match="loss is nan at step 5"):
        Trainer(
            model, opt, cur, loss_fn, save_path=str(tmp_path), cadence=Cadence(log_every=5, save_interval_steps=100)
        ).run()
    log = (tmp_path / "roxxel_system.log").read_text()
    assert "Traceback" in log and "NaNLossError" in log
    assert issubclass(NaNLossError, ValueError)


@pytest.mark.slow
def test_grad_accumulation_matches_one_big_step(ds, tmp_path):
    cur = Curriculum(ds, [Phase(steps=3, global_batch_size=8, seq_len=32)], chunk_tokens=256)
    runs = []
    for accum in (1, 4):
        model, opt = make_model(lr=0.0)  # lr 0: compare the loss of identical parameters
        out = Trainer(
            model,
            opt,
            cur,
            loss_fn,
            cadence=Cadence(log_every=1, save_interval_steps=100),
            loop=LoopOptions(grad_accum_steps=accum),
        ).run()
        runs.append(out["loss"])
    assert runs[0] == pytest.approx(runs[1], rel=1e-5)
    with pytest.raises(ValueError, match="phase 0: global_batch_size 8 does not divide into 3 micro-batches"):
        Trainer(*make_model(), cur, loss_fn, loop=LoopOptions(grad_accum_steps=3))


@pytest.mark.slow
def test_loss_forms_and_eval(ds, tmp_path):
    cur = Curriculum(ds, [Phase(steps=4, global_batch_size=2, seq_len=16)], chunk_tokens=256)
    for form in (lambda m, b: loss_fn(m, b)[0], lambda m, b: {"loss": loss_fn(m, b)[0], "extra": 1.0}):
        Trainer(*make_model(), cur, form, cadence=Cadence(log_every=2, save_interval_steps=100)).run()
    evals = []
    out = Trainer(
        *make_model(),
        cur,
        loss_fn,
        cadence=Cadence(log_every=2, save_interval_steps=100, eval_every=2),
        eval_fn=lambda state: evals.append(state.step) or 1.25,
    ).run()
    assert evals == [2, 4] and out["eval_loss"] == 1.25
    with pytest.raises(TypeError, match="must include 'loss'"):
        unpack_loss({"nll": 1.0})


def test_changed_curriculum_is_refused_on_resume(ds, tmp_path):
    cur = make_curriculum(ds)
    Trainer(*make_model(), cur, loss_fn, save_path=str(tmp_path), cadence=Cadence(save_interval_steps=100)).run(
        stop_at_step=3
    )
    # phase 0 held the 3 batches already taken: changing it is refused (a later phase may change)
    changed = Curriculum(
        ds,
        [Phase(steps=6, global_batch_size=2, seq_len=32), Phase(steps=6, global_batch_size=4, seq_len=64)],
        chunk_tokens=256,
    )
    with pytest.raises(ValueError, match=r"phases\[0\]\.batch_size: 4 -> 2"):
        Trainer(*make_model(), changed, loss_fn, save_path=str(tmp_path)).run()


def test_documents_outputs_reach_the_loss(ds, tmp_path):
    seen = {}

    def doc_loss(model, batch):
        seen.update({k: v.shape for k, v in batch.items()})
        return loss_fn(model, batch["tokens"])

    cur = Curriculum(ds, [Phase(steps=2, global_batch_size=2, seq_len=16)], chunk_tokens=256)
    Trainer(
        *make_model(), cur, doc_loss, cadence=Cadence(save_interval_steps=100), data=DataOptions(outputs="documents")
    ).run()
    assert set(seen) == {"tokens", "segment_ids", "positions", "loss_mask"}


def test_checkpointer_is_the_one_passed(ds, tmp_path):
    model, opt = make_model()
    ckpt = Checkpointer(str(tmp_path / "ck"), model, opt)
    cur = Curriculum(ds, [Phase(steps=3, global_batch_size=2, seq_len=16)], chunk_tokens=256)
    Trainer(model, opt, cur, loss_fn, checkpointer=ckpt, cadence=Cadence(save_interval_steps=2)).run()
    assert sorted(int(p.name) for p in (tmp_path / "ck").iterdir() if p.name.isdigit()) == [2, 3]


@pytest.mark.slow
def test_with_partitioning_annotations_shard_parameters(tmp_path):
    """Parameters follow nnx.with_partitioning (the rest stay replicated) on a 2-device mesh."""
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=2")
    out = subprocess.run(
        [sys.executable, str(WORKERS / "sharded_model.py"), str(tmp_path / "data")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["devices"] == 2
    assert result["specs"]["hidden/kernel"] == "P(None, 'data')"
    assert result["specs"]["out/kernel"] == "P()"
    assert result["adam_mu_spec"] == "P(None, 'data')"  # optimizer state follows its parameter
    assert result["loss"] < 5.0


def test_object_storage_save_path_needs_a_local_logger(ds):
    cur = Curriculum(ds, [Phase(steps=1, global_batch_size=2, seq_len=16)], chunk_tokens=256)
    with pytest.raises(ValueError, match="object storage, but logs are local files"):
        Trainer(*make_model(), cur, loss_fn, save_path="gs://bucket/run")


def test_a_finished_run_started_again_logs_its_last_evaluation_once(ds, tmp_path):
    """Found in session 8: the rerun restores the last step, trains nothing and evaluates that
    step again; its metrics file then held the same eval row twice."""
    cur = Curriculum(ds, [Phase(steps=4, global_batch_size=2, seq_len=16)], chunk_tokens=256)
    outs = [
        Trainer(
            *make_model(),
            cur,
            loss_fn,
            save_path=str(tmp_path),
            cadence=Cadence(log_every=2, save_interval_steps=100, eval_every=100),
            eval_fn=lambda state: 1.25,
        ).run()
        for _ in range(2)
    ]
    assert outs[0]["eval_loss"] == outs[1]["eval_loss"] == 1.25
    assert outs[1]["loss"] == outs[0]["loss"]  # the rerun returns what the run logged last, as run() promises
    rows = [r.split(",") for r in (tmp_path / "roxxel_metrics.csv").read_text().splitlines()]
    col = rows[0].index("eval_loss")
    assert [(r[0], r[col]) for r in rows[1:] if r[col]] == [("4", "1.25")]
