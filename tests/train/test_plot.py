"""roxxel.train.plot: the metrics PNG and the `roxxel plot` command."""

import io
import math
import struct

import pytest
from click.testing import CliRunner

from roxxel.train.logger import METRICS_CSV, Logger
from roxxel.train.plot import DEFAULT_PNG, panels, plot_command, plot_run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def run_dir(tmp_path):
    run = tmp_path / "run"
    with Logger(run, process_index=0, tensorboard=False, stdout=io.StringIO()) as lg:
        for step in range(0, 201, 10):
            metrics = {"loss": 3.0 * math.exp(-step / 80) + 0.5, "tokens_per_sec": 1.0e5 + 10 * step}
            if step % 50 == 0:
                metrics["eval_loss"] = metrics["loss"] + 0.1
            lg.log_metrics_summary(step, metrics)
    return run


def _assert_png(path):
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > 1024


def _png_height(path):
    return struct.unpack(">I", path.read_bytes()[20:24])[0]  # the IHDR chunk: width, then height


# The columns of a 2-process Trainer run with an eval_fn and a learning-rate schedule, as the main job logs.
TRAINER_COLUMNS = [
    "loss",
    "tokens_per_sec",
    "tokens_per_sec_per_device",
    "step_time_s",
    "learning_rate",
    "perplexity",
    "host_time_s_median",
    "host_time_s_max",
    "slowest_process",
    "compile_time_s",
    "eval_loss",
    "eval_perplexity",
]


def test_default_panels_are_loss_with_eval_loss_throughput_and_learning_rate():
    """Issue 51: the PNG was one panel per column (11 for the main job: slowest_process as a
    zig-zag, eval_loss nine panels below loss)."""
    assert panels(TRAINER_COLUMNS) == [["loss", "eval_loss"], ["tokens_per_sec"], ["learning_rate"]]
    assert panels(["loss", "tokens_per_sec"]) == [["loss"], ["tokens_per_sec"]]
    assert panels(["accuracy", "recall"]) == [["accuracy"], ["recall"]]  # none of them: every metric
    # On request, one panel per name in its order, eval_X on X's panel when X is drawn too.
    assert panels(TRAINER_COLUMNS, ["eval_loss", "step_time_s", "loss", "eval_perplexity"]) == [
        ["loss", "eval_loss"],
        ["step_time_s"],
        ["eval_perplexity"],
    ]


def test_default_png_has_three_panels_whatever_the_run_logged(tmp_path):
    run = tmp_path / "run"
    with Logger(run, process_index=0, tensorboard=False, stdout=io.StringIO()) as lg:
        for step in range(0, 101, 10):
            lg.log_metrics_summary(step, {name: 1.0 + step / 100 for name in TRAINER_COLUMNS if name[:5] != "eval_"})
            if step % 50 == 0:
                lg.log_metrics_summary(step, {"eval_loss": 2.0, "eval_perplexity": 7.4})
    plot_run(run, baseline=2.4)
    plot_run(run, tmp_path / "all.png", metrics=TRAINER_COLUMNS)
    assert _png_height(run / DEFAULT_PNG) == 820  # 1 + 2.4 inches a panel, 100 dpi: 3 panels
    assert _png_height(tmp_path / "all.png") == 100 + 240 * 10  # eval_X share X's panels: 10


def test_plot_run_writes_a_png_beside_the_csv(run_dir):
    out = plot_run(run_dir)
    assert out == str(run_dir / DEFAULT_PNG)
    _assert_png(run_dir / DEFAULT_PNG)


def test_plot_run_selected_metrics_and_output(run_dir, tmp_path):
    out = plot_run(run_dir / METRICS_CSV, output=tmp_path / "loss.png", metrics=["eval_loss", "loss"])
    _assert_png(tmp_path / "loss.png")
    assert out == str(tmp_path / "loss.png")
    with pytest.raises(ValueError, match="no metric 'perplexity'"):
        plot_run(run_dir, metrics=["loss", "perplexity"])


def test_plot_errors_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path / METRICS_CSV)):
        plot_run(tmp_path)
    (tmp_path / METRICS_CSV).write_text("")
    with pytest.raises(ValueError, match=f"{METRICS_CSV} is empty"):
        plot_run(tmp_path)
    (tmp_path / METRICS_CSV).write_text("step,wall_time,loss\n")
    with pytest.raises(ValueError, match=f"{METRICS_CSV} has no metric rows"):
        plot_run(tmp_path)
    assert not (tmp_path / DEFAULT_PNG).exists()


def test_cli_plot(run_dir, tmp_path):
    out = tmp_path / "m.png"
    result = CliRunner().invoke(plot_command, [str(run_dir), "-o", str(out), "--metrics", "loss,eval_loss"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == str(out)
    _assert_png(out)
    result = CliRunner().invoke(plot_command, [str(run_dir), "-o", str(out), "--metrics", "all", "--baseline", "2"])
    assert result.exit_code == 0, result.output
    assert _png_height(out) == 100 + 240 * 2  # loss with eval_loss, tokens_per_sec


def test_cli_plot_missing_csv(tmp_path):
    result = CliRunner().invoke(plot_command, [str(tmp_path)])
    assert result.exit_code == 1
    assert f"roxxel: error: no metrics file {tmp_path / METRICS_CSV}" in result.output
