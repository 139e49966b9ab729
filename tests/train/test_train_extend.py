"""Extending a run: changes to batches still to come are allowed and exact; changes to the past are refused.

Real Trainer runs on real text with real Orbax checkpoints: a run saved at step N and resumed
under the new plan must end bitwise equal to an uninterrupted run of the new plan.
"""

import numpy as np
import pytest
from flax import nnx

from roxxel import Curriculum, Phase
from roxxel.data.identity import classify_changes
from roxxel.train import Cadence, DataOptions, RunMismatchError, Trainer
from roxxel.train.logger import read_metrics

from support.lm import loss_fn, make_dataset, make_model


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    return make_dataset(str(tmp_path_factory.mktemp("data") / "json-py"))


def _cur(ds, *phases):
    return Curriculum(ds, [Phase(steps=s, global_batch_size=b, seq_len=t) for s, b, t in phases], chunk_tokens=256)


def _params(model):
    return {"/".join(map(str, k)): np.asarray(v) for k, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}


def _train(cur, path, init_seed=0, **kw):
    model, opt = make_model(seed=init_seed)
    Trainer(
        model, opt, cur, loss_fn, save_path=str(path), cadence=Cadence(log_every=1, save_interval_steps=100), **kw
    ).run()
    return _params(model)


@pytest.mark.slow
@pytest.mark.parametrize(
    "new_plan",
    [
        ((6, 4, 32),),  # the last phase extended from 4 to 6 steps
        ((4, 4, 32), (3, 2, 64)),  # a phase appended after the saved step
    ],
)
def test_extended_run_equals_an_uninterrupted_run_of_the_new_plan(ds, tmp_path, caplog, new_plan):
    want = _train(_cur(ds, *new_plan), tmp_path / "ref")
    _train(_cur(ds, (4, 4, 32)), tmp_path / "run")  # the original plan, trained to its end
    with caplog.at_level("WARNING", logger="roxxel.checkpoint"):
        got = _train(_cur(ds, *new_plan), tmp_path / "run", init_seed=7)  # another init: only the checkpoint counts
    assert "leave the batches before it as they were" in caplog.text
    system_log = (tmp_path / "run" / "roxxel_system.log").read_text()  # the run's own log says it too
    assert "step 4 was saved by a run with another curriculum: " in system_log, system_log
    for k in want:
        assert np.array_equal(got[k], want[k]), k
    assert read_metrics(str(tmp_path / "run"))["loss"] == read_metrics(str(tmp_path / "ref"))["loss"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "changed, line",
    [
        (((3, 4, 32), (3, 2, 64)), "phases[0].steps: 4 -> 3"),  # shortened before the saved step
        (((4, 2, 32),), "phases[0].batch_size: 4 -> 2"),
    ],
)
def test_changes_to_batches_already_taken_are_refused_with_the_diff(ds, tmp_path, changed, line):
    _train(_cur(ds, (4, 4, 32)), tmp_path / "run")
    with pytest.raises(RunMismatchError) as info:
        _train(_cur(ds, *changed), tmp_path / "run")
    assert line in str(info.value) and "allow_changed_run=True" in str(info.value)


@pytest.mark.slow
def test_another_shuffle_seed_is_refused(ds, tmp_path):
    _train(_cur(ds, (2, 4, 32)), tmp_path / "run")
    with pytest.raises(RunMismatchError, match=r"seed: 42 -> 5"):
        _train(_cur(ds, (4, 4, 32)), tmp_path / "run", data=DataOptions(seed=5))


def test_classify_changes_by_past_and_future():
    saved = {
        "datasets": {"self": "a"},
        "chunk_tokens": 256,
        "repeat": False,
        "phases": [{"steps": 5, "batch_size": 4}, {"steps": 5, "batch_size": 8}, {"steps": 5, "batch_size": 8}],
    }

    def with_phases(*phases, **top):
        return {**saved, **top, "phases": [dict(steps=s, batch_size=b) for s, b in phases]}

    # step 7 lies in phase 1: phase 1 may grow, phase 2 may change, phase 0 may not
    allowed, refused = classify_changes(saved, with_phases((5, 4), (9, 8), (2, 16), (3, 8)), 7)
    assert refused == [] and len(allowed) == 4, allowed
    assert allowed[0].startswith("phases[1].steps: 5 -> 9")
    assert any(a.startswith("phases[3]: added") for a in allowed)
    _, refused = classify_changes(saved, with_phases((6, 4), (4, 8)), 7)
    assert refused == ["phases[0].steps: 5 -> 6"]
    _, refused = classify_changes(saved, with_phases((5, 4), (1, 8)), 7)  # ends before step 7
    assert refused == ["phases[1].steps: 5 -> 1"]
    _, refused = classify_changes(saved, with_phases((5, 4), (5, 8), (5, 8), chunk_tokens=512), 7)
    assert refused == ["chunk_tokens: 256 -> 512"]


def test_a_changed_data_order_is_refused_also_against_a_checkpoint_that_recorded_none():
    """A checkpoint made before data_order_version existed, or with the default order (left out),
    counts as version 1 / order "chunks": resuming it under another order or algorithm version
    is refused, naming both (before: a key the checkpoint lacked was allowed as 'not recorded')."""
    from roxxel.data.curriculum import ORDER_VERSIONS

    old = {"datasets": {"self": "a"}, "chunk_tokens": 256, "repeat": False, "phases": [{"steps": 5, "batch_size": 4}]}
    current = {**old, "data_order_version": ORDER_VERSIONS["consecutive"]}
    assert classify_changes(old, current, 3) == ([], [])
    assert classify_changes(old, {**current, "order": "documents"}, 3)[1] == ['order: "chunks" -> "documents"']
    assert classify_changes(old, {**current, "data_order_version": 2}, 3)[1] == ["data_order_version: 1 -> 2"]
    assert classify_changes({**current, "order": "documents"}, current, 3)[1] == ['order: "documents" -> "chunks"']


def test_describe_records_the_data_order_version(ds):
    """The last version that changed the curriculum's own batches: independent rows 2, under
    repeat 3 (an epoch dealt as if none followed it), consecutive rows 1."""
    from roxxel.data.curriculum import DATA_ORDER_VERSION

    phases = [Phase(steps=2, global_batch_size=4, seq_len=32)]
    assert _cur(ds, (2, 4, 32)).describe()["data_order_version"] == 2
    assert (
        Curriculum(ds, phases, chunk_tokens=256, repeat=True).describe()["data_order_version"]
        == DATA_ORDER_VERSION
        == 3
    )
    assert (
        Curriculum(ds, phases, chunk_tokens=256, repeat=True, batch_rows="consecutive").describe()["data_order_version"]
        == 1
    )
