"""The LM example's last step (the loss plot, the TensorBoard hint) degrades to a one-line note
when matplotlib or TensorBoard is missing: training is done by then, and a failed exit would make
the launcher restart a finished run (issue 19: the base install exited 1 at the plot)."""

import importlib.util
import sys

import pytest

from support.paths import REPO

_MATPLOTLIB = ("matplotlib", "matplotlib.backends", "matplotlib.backends.backend_agg", "matplotlib.figure")


@pytest.fixture(scope="module")
def train():
    spec = importlib.util.spec_from_file_location("lm_train_example", REPO / "examples/lm/train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def run_dir(tmp_path):
    from roxxel.train import Logger

    logger = Logger(tmp_path, tensorboard=False, progress=False)
    for step in (1, 2, 3):
        logger.log_metrics_summary(step, {"loss": 5.0 - step})
    logger.close()
    return str(tmp_path)


def test_without_matplotlib_or_tensorboard_the_end_is_a_note(train, run_dir, monkeypatch):
    for name in _MATPLOTLIB:
        monkeypatch.setitem(sys.modules, name, None)  # import matplotlib -> ImportError
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard"
                        else find_spec(name, *a))
    plot, board = train.optional_outputs(run_dir)
    assert plot.startswith("loss plot: not drawn (") and "matplotlib" in plot and "\n" not in plot
    assert board.startswith("TensorBoard logs: ") and "pip install tensorboard" in board


def test_with_matplotlib_the_end_names_the_plot(train, run_dir):
    pytest.importorskip("matplotlib")
    plot, _ = train.optional_outputs(run_dir)
    assert plot == f"loss plot: {run_dir}/roxxel_metrics.png"
