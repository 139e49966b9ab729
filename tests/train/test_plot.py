"""roxxel.train.plot: the metrics PNG and the `roxxel plot` command."""

import io
import math

import pytest
from click.testing import CliRunner

from roxxel.train.logger import METRICS_CSV, Logger
from roxxel.train.plot import DEFAULT_PNG, plot_command, plot_run

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


def test_cli_plot_missing_csv(tmp_path):
    result = CliRunner().invoke(plot_command, [str(tmp_path)])
    assert result.exit_code == 1
    assert f"roxxel: error: no metrics file {tmp_path / METRICS_CSV}" in result.output
