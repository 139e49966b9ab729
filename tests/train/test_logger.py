"""roxxel.train.logger: rank-0-only writing, the metrics CSV, crash flushing, TensorBoard."""

import csv
import io
import itertools
import os
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from roxxel.train import log_outputs
from roxxel.train.log_outputs import LINE_WIDTH
from roxxel.train.logger import METRICS_CSV, SYSTEM_LOG, TENSORBOARD_DIR, Logger, read_metrics

from support import paths

REPO = str(paths.REPO)


def _logger(path, **kw):
    kw.setdefault("process_index", 0)
    kw.setdefault("stdout", io.StringIO())
    kw.setdefault("tensorboard", False)
    return Logger(path, **kw)


def _csv_rows(run):
    with open(run / METRICS_CSV, newline="") as f:
        return list(csv.reader(f))


def test_other_processes_create_nothing_but_still_validate(tmp_path, capsys):
    run = tmp_path / "run"
    with Logger(run, process_index=1) as lg:
        lg.log_message("hello")
        lg.log_metrics_summary(1, {"loss": 1.0})
        lg.log_exception(ValueError("x"))
        lg.init_pbar(10)
        lg.flush()
        with pytest.raises(ValueError, match="step must be >= 0"):
            lg.log_metrics_summary(-1, {"loss": 1.0})
        with pytest.raises(TypeError, match="real scalar"):
            lg.log_metrics_summary(1, {"loss": "low"})
        with pytest.raises(ValueError, match="level"):
            lg.log_message("x", level="LOUD")
    with pytest.raises(KeyError):
        with Logger(run, process_index=3):
            raise KeyError("boom")
    assert not run.exists()
    assert capsys.readouterr() == ("", "")


def test_default_process_index_is_zero_without_jax_distributed(tmp_path):
    with Logger(tmp_path, tensorboard=False, stdout=io.StringIO()) as lg:
        assert lg.process_index == 0 and lg.is_rank_zero


def test_csv_contents_after_flush(tmp_path):
    import jax.numpy as jnp

    lg = _logger(tmp_path)
    lg.log_metrics_summary(10, {"loss": 2.5, "tokens_per_sec": np.float32(1000.0)})
    lg.log_metrics_summary(20, {"loss": jnp.float32(1.25), "tokens_per_sec": np.int64(1100)})
    lg.flush()
    rows = _csv_rows(tmp_path)
    assert rows[0] == ["step", "wall_time", "loss", "tokens_per_sec"]
    assert [r[0] for r in rows[1:]] == ["10", "20"]
    assert [r[2:] for r in rows[1:]] == [["2.5", "1000.0"], ["1.25", "1100.0"]]
    assert all(float(r[1]) > 1e9 for r in rows[1:])  # Unix seconds
    assert read_metrics(tmp_path) == {"loss": [(10, 2.5), (20, 1.25)], "tokens_per_sec": [(10, 1000.0), (20, 1100.0)]}
    lg.close()


def test_header_grows_when_new_keys_appear(tmp_path):
    with _logger(tmp_path) as lg:
        lg.log_metrics_summary(1, {"loss": 3.0})
        lg.log_metrics_summary(2, {"loss": 2.0, "eval_loss": 2.5})
        lg.log_metrics_summary(3, {"grad_norm": float("nan"), "loss": 1.0})
    rows = _csv_rows(tmp_path)
    assert rows[0] == ["step", "wall_time", "loss", "eval_loss", "grad_norm"]
    assert [r[:1] + r[2:] for r in rows[1:]] == [["1", "3.0", "", ""], ["2", "2.0", "2.5", ""], ["3", "1.0", "", "nan"]]
    got = read_metrics(tmp_path)
    assert got["loss"] == [(1, 3.0), (2, 2.0), (3, 1.0)] and got["eval_loss"] == [(2, 2.5)]
    assert np.isnan(got["grad_norm"][0][1])
    assert sorted(os.listdir(tmp_path)) == [METRICS_CSV, SYSTEM_LOG]  # no temporary file left


def test_resumed_run_appends_and_last_value_wins(tmp_path):
    with _logger(tmp_path) as lg:
        lg.log_metrics_summary(1, {"loss": 3.0})
        lg.log_metrics_summary(2, {"loss": 2.0})
    with _logger(tmp_path) as lg:  # restored from the checkpoint at step 1
        lg.log_metrics_summary(2, {"loss": 2.1, "eval_loss": 2.2})
        lg.log_metrics_summary(3, {"loss": 1.0})
    assert _csv_rows(tmp_path)[0] == ["step", "wall_time", "loss", "eval_loss"]
    assert read_metrics(tmp_path) == {"loss": [(1, 3.0), (2, 2.1), (3, 1.0)], "eval_loss": [(2, 2.2)]}


def test_exception_in_with_block_is_logged_flushed_and_reraised(tmp_path, capsys):
    def failing_step():
        raise RuntimeError("device out of memory")

    with pytest.raises(RuntimeError, match="device out of memory"):
        with _logger(tmp_path) as lg:
            lg.log_message("starting")
            lg.log_metrics_summary(5, {"loss": 0.5})
            failing_step()
    log = (tmp_path / SYSTEM_LOG).read_text()
    assert " INFO starting\n" in log
    assert " ERROR " in log and "Traceback (most recent call last)" in log
    assert "in failing_step" in log and "RuntimeError: device out of memory" in log
    assert read_metrics(tmp_path) == {"loss": [(5, 0.5)]}
    assert "RuntimeError: device out of memory" in capsys.readouterr().err
    with pytest.raises(RuntimeError, match="closed"):
        lg.log_message("after")
    lg.close()  # idempotent
    lg.flush()  # no-op once closed


def test_system_exit_in_with_block_is_logged_as_a_message(tmp_path):
    with pytest.raises(SystemExit):
        with _logger(tmp_path):
            sys.exit(2)
    assert "WARNING exiting with code 2" in (tmp_path / SYSTEM_LOG).read_text()


@pytest.mark.slow
@pytest.mark.parametrize("ending", ["raise RuntimeError('crash')", "sys.exit(3)"])
def test_crash_without_close_still_flushes_at_exit(tmp_path, ending):
    script = textwrap.dedent(f"""
        import sys
        from roxxel.train.logger import Logger
        lg = Logger(sys.argv[1], process_index=0)
        for step in range(1, 201):
            lg.log_metrics_summary(step, {{"loss": 1.0 / step}})
        lg.log_message("last words")
        {ending}
    """)
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.returncode != 0
    assert "last words" in proc.stdout
    metrics = read_metrics(tmp_path)
    assert [s for s, _ in metrics["loss"]] == list(range(1, 201))
    assert "INFO last words" in (tmp_path / SYSTEM_LOG).read_text()
    assert _tb_scalars(tmp_path)["train/loss"][-1] == (200, pytest.approx(1 / 200))


def _tb_scalars(run):
    """Parse the TFRecord event files of every TensorBoard run: {tag: [(step, value), ...]}."""
    from tensorboardX.proto import event_pb2

    out = {}
    for path in sorted((run / TENSORBOARD_DIR).rglob("events.out.tfevents.*")):
        data = path.read_bytes()
        pos = 0
        while pos < len(data):
            (length,) = struct.unpack("<Q", data[pos : pos + 8])
            event = event_pb2.Event.FromString(data[pos + 12 : pos + 12 + length])
            pos += 12 + length + 4
            for v in event.summary.value:
                out.setdefault(v.tag, []).append((event.step, v.simple_value))
    return out


def test_tensorboard_event_file(tmp_path, monkeypatch):
    """One run named by the log directory (not '.'), tags grouped as train/, eval/, system/;
    the CSV keeps the keys as logged."""
    monkeypatch.delenv("ROXXEL_RUN_NAME", raising=False)
    run = tmp_path / "demo"
    with _logger(run, tensorboard=True) as lg:
        lg.log_metrics_summary(1, {"loss": 2.0, "eval_loss": 3.0, "learning_rate": 0.1, "tokens_per_sec": 9.0})
        lg.log_metrics_summary(2, {"loss": 1.5, "step_time_s": 0.5, "mine/grad_norm": 4.0})
    assert os.listdir(run / TENSORBOARD_DIR) == ["demo"]
    files = os.listdir(run / TENSORBOARD_DIR / "demo")
    assert len(files) == 1 and files[0].startswith("events.out.tfevents.")
    assert _tb_scalars(run) == {
        "train/loss": [(1, 2.0), (2, 1.5)],
        "eval/loss": [(1, 3.0)],
        "train/learning_rate": [(1, pytest.approx(0.1))],
        "system/tokens_per_sec": [(1, 9.0)],
        "system/step_time_s": [(2, 0.5)],
        "mine/grad_norm": [(2, 4.0)],
    }
    assert _csv_rows(run)[0][2:] == [
        "loss",
        "eval_loss",
        "learning_rate",
        "tokens_per_sec",
        "step_time_s",
        "mine/grad_norm",
    ]


def test_tensorboard_lists_the_run_by_the_jobs_name(tmp_path, monkeypatch):
    """TensorBoard's own run list (EventMultiplexer): the job's name from ROXXEL_RUN_NAME, or
    run_name=; before, the event files lay in tensorboard/ itself and the run was named '.'."""
    multiplexer = pytest.importorskip("tensorboard.backend.event_processing.plugin_event_multiplexer")
    monkeypatch.setenv("ROXXEL_RUN_NAME", "lm")
    with _logger(tmp_path / "outputs", tensorboard=True) as lg:
        lg.log_metrics_summary(1, {"loss": 2.0})
    with _logger(tmp_path / "outputs", tensorboard=True, run_name="lm-lr-3e-4") as lg:
        lg.log_metrics_summary(1, {"loss": 2.5})
    mux = multiplexer.EventMultiplexer().AddRunsFromDirectory(str(tmp_path / "outputs" / TENSORBOARD_DIR))
    mux.Reload()
    assert sorted(mux.Runs()) == ["lm", "lm-lr-3e-4"]
    assert [e.step for e in mux.Tensors("lm", "train/loss")] == [1]


def test_stdout_lines_when_not_a_terminal(tmp_path):
    out = io.StringIO()
    with _logger(tmp_path, stdout=out, total_steps=100) as lg:
        lg.log_message("hello")
        lg.log_message("careful", level="warning")
        lg.log_metrics_summary(10, {"loss": 2.34567, "tokens_per_sec": 123456.0})
        lg.log_metrics_summary(20, {"loss": 2.0})
    lines = out.getvalue().splitlines()
    assert lines[:3] == ["hello", "WARNING: careful", "step 10/100  loss=2.346  tok/s=123.5k"]
    assert lines[3].startswith("step 20/100  loss=2  eta=")
    assert "\r" not in out.getvalue()  # no progress bar


# A row of a 2-process Trainer run, as the main job logged it (~230 columns when printed whole).
TRAINER_ROW = {
    "loss": 5.563,
    "tokens_per_sec": 11700.0,
    "tokens_per_sec_per_device": 2931.0,
    "step_time_s": 0.1747,
    "learning_rate": 0.01,
    "accuracy": 0.25,
    "perplexity": 260.7,
    "host_time_s_median": 0.129,
    "host_time_s_max": 0.155,
    "slowest_process": 0.0,
    "compile_time_s": 4.716,
}


def test_stdout_line_is_short_and_verbose_prints_everything(tmp_path):
    out = io.StringIO()
    with _logger(tmp_path / "short", stdout=out, total_steps=100000) as lg:
        lg.log_metrics_summary(40, TRAINER_ROW)
        lg.log_metrics_summary(60, {"tokens_per_sec": 1.0, "loss": 2.0})  # the loss first, whatever the order
        lg.log_metrics_summary(80, {"eval_loss": 4.376, "eval_perplexity": 79.51})
        lg.log_metrics_summary(99999, {f"metric_{i}": float(i) for i in range(20)})
    lines = out.getvalue().splitlines()
    assert lines[0] == "step 40/100000  loss=5.563  tok/s=11.7k  accuracy=0.25"
    assert lines[1].startswith("step 60/100000  loss=2  tok/s=1  eta=")
    assert lines[2].startswith("step 80/100000  eval_loss=4.376  eta=")
    assert lines[3].startswith("step 99999/100000  metric_0=0  metric_1=1") and lines[3].endswith("eta=0:00:00")
    assert all(len(line) <= LINE_WIDTH for line in lines), [len(line) for line in lines]
    assert len(lines[3]) > LINE_WIDTH - 12  # filled, then cut at a whole metric
    assert set(read_metrics(tmp_path / "short")) == set(TRAINER_ROW) | {"eval_loss", "eval_perplexity"} | {
        f"metric_{i}" for i in range(20)
    }  # the file keeps every metric

    out = io.StringIO()
    with _logger(tmp_path / "verbose", stdout=out, total_steps=100, verbose=True) as lg:
        lg.log_metrics_summary(40, TRAINER_ROW)
    line = out.getvalue().strip()
    assert line.startswith("step 40/100  loss=5.563  tokens_per_sec=11.7k  tokens_per_sec_per_device=2931")
    assert line.endswith("slowest_process=0  compile_time_s=4.716")


def test_progress_bar_when_forced(tmp_path):
    out = io.StringIO()
    with _logger(tmp_path, stdout=out, progress=True) as lg:
        lg.init_pbar(100, initial_step=5)
        lg.log_message("above the bar")
        lg.log_metrics_summary(50, {"loss": 1.5, "tokens_per_sec": 2.5e6})
    text = out.getvalue()
    assert "above the bar\n" in text
    assert "50/100" in text and "loss=1.5" in text and "tok/s=2.50M" in text
    assert "step 50" not in text  # the bar replaces the log lines


def test_argument_errors(tmp_path):
    lg = _logger(tmp_path)
    with pytest.raises(ValueError, match="'step'"):
        lg.log_metrics_summary(1, {"step": 1.0})
    with pytest.raises(TypeError, match="mapping"):
        lg.log_metrics_summary(1, [("loss", 1.0)])
    with pytest.raises(TypeError, match="step must be an int"):
        lg.log_metrics_summary(1.5, {"loss": 1.0})
    with pytest.raises(TypeError, match="real scalar"):
        lg.log_metrics_summary(1, {"loss": np.zeros(3)})
    with pytest.raises(TypeError, match="exception"):
        lg.log_exception("not an exception")
    with pytest.raises(ValueError, match="initial_step"):
        lg.init_pbar(10, initial_step=11)
    with pytest.raises(TypeError, match="log_dir"):
        Logger(None, process_index=1)
    lg.close()


def test_writer_failure_is_raised_not_swallowed(tmp_path):
    class Bad:
        shape = ()

        def __float__(self):
            raise ArithmeticError("cannot convert")

    lg = _logger(tmp_path)
    lg.log_metrics_summary(1, {"loss": Bad()})
    with pytest.raises(RuntimeError, match="writer") as info:
        lg.flush()
    assert isinstance(info.value.__cause__, ArithmeticError)
    with pytest.raises(RuntimeError, match="writer"):
        lg.log_message("next")
    with pytest.raises(RuntimeError, match="writer"):
        lg.close()


def test_read_metrics_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match=METRICS_CSV):
        read_metrics(tmp_path)
    (tmp_path / METRICS_CSV).write_text("")
    with pytest.raises(ValueError, match="empty"):
        read_metrics(tmp_path)
    (tmp_path / METRICS_CSV).write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not a roxxel metrics file"):
        read_metrics(tmp_path / METRICS_CSV)
    (tmp_path / METRICS_CSV).write_text("step,wall_time,loss\n1,0.0,x\n")
    with pytest.raises(ValueError, match="line 2"):
        read_metrics(tmp_path)


def test_a_run_from_step_0_moves_an_earlier_runs_metrics_aside(tmp_path):
    """A new run in a run directory that holds another run's metrics (no checkpoint restored)
    appended to them: read_metrics and the plot mixed the two runs, and nothing said so."""
    with _logger(tmp_path) as lg:
        for step in range(1, 6):
            lg.log_metrics_summary(step, {"loss": 10.0 + step, "eval_loss": 1.0})
    out = io.StringIO()
    with _logger(tmp_path, stdout=out) as lg:
        lg.start_from(0)
        for step in (1, 2):
            lg.log_metrics_summary(step, {"loss": float(step)})
    assert read_metrics(tmp_path) == {"loss": [(1, 1.0), (2, 2.0)]}
    aside = [n for n in os.listdir(tmp_path) if n.startswith("roxxel_metrics.earlier-")]
    assert len(aside) == 1 and read_metrics(tmp_path / aside[0])["loss"] == [(s, 10.0 + s) for s in range(1, 6)]
    assert f"moved them to {tmp_path / aside[0]}" in out.getvalue() and "WARNING" in out.getvalue()


def test_runs_from_step_0_within_one_second_each_keep_the_earlier_file(tmp_path):
    """The aside name has a one-second stamp: a second restart within the second replaced the first's file."""
    for run in range(3):
        with _logger(tmp_path) as lg:
            lg.start_from(0)
            lg.log_metrics_summary(1, {"loss": float(run)})
    aside = sorted(n for n in os.listdir(tmp_path) if n.startswith("roxxel_metrics.earlier-"))
    assert sorted(read_metrics(tmp_path / n)["loss"][0][1] for n in aside) == [0.0, 1.0]
    assert read_metrics(tmp_path)["loss"] == [(1, 2.0)]


def test_a_resume_drops_only_the_rows_after_its_checkpoint(tmp_path):
    with _logger(tmp_path) as lg:
        for step in range(1, 9):
            lg.log_metrics_summary(step, {"loss": float(step)})
    with _logger(tmp_path) as lg:
        lg.start_from(5)  # restored the checkpoint of step 5: steps 6-8 are trained (and logged) again
        lg.log_metrics_summary(6, {"loss": 60.0})
    assert read_metrics(tmp_path)["loss"] == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0), (5, 5.0), (6, 60.0)]
    assert "dropped 3 rows of metrics (steps 6-8)" in (tmp_path / SYSTEM_LOG).read_text()
    with _logger(tmp_path) as lg:  # nothing after the step: the file is left as it is
        before = (tmp_path / METRICS_CSV).read_bytes()
        lg.start_from(6)
    assert (tmp_path / METRICS_CSV).read_bytes() == before and not any(
        n.startswith("roxxel_metrics.earlier") for n in os.listdir(tmp_path)
    )


@pytest.mark.parametrize("start", [0, 5])
def test_tensorboard_hides_what_a_restart_logs_again(tmp_path, start, monkeypatch):
    """TensorBoard's own reader (EventAccumulator) shows each step once, the new run's value after ``start``.

    The process has opened 9 event files before (a count of 9, then 10: the restart's file
    sorted first by name and TensorBoard read it first, showing the old steps after the new
    ones; seen in a full run of tests/train)."""
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    monkeypatch.setattr(log_outputs, "_EVENT_FILES", itertools.count(9))
    with _logger(tmp_path, tensorboard=True) as lg:
        for step in range(1, 9):
            lg.log_metrics_summary(step, {"loss": float(step)})
    with _logger(tmp_path, tensorboard=True) as lg:
        lg.start_from(start)
        for step in range(start + 1, start + 3):
            lg.log_metrics_summary(step, {"loss": 100.0 + step})
    run = tmp_path / TENSORBOARD_DIR / tmp_path.name  # one run: the restart writes into it
    assert os.listdir(tmp_path / TENSORBOARD_DIR) == [tmp_path.name]
    assert len(os.listdir(run)) == 2  # one file per Logger, even within one second
    acc = accumulator.EventAccumulator(str(run))
    acc.Reload()
    shown = [(e.step, e.value) for e in acc.Scalars("train/loss")]
    kept = [(s, float(s)) for s in range(1, start + 1)]
    assert shown == kept + [(s, 100.0 + s) for s in range(start + 1, start + 3)]


def test_metrics_repeated_at_the_restored_step_are_written_once(tmp_path):
    """A finished run started again restores its last step and evaluates it once more: the
    same eval row appeared twice at that step. Other values there are a new measurement, kept."""
    with _logger(tmp_path) as lg:
        for step in range(1, 6):
            lg.log_metrics_summary(step, {"loss": float(step)})
        lg.log_metrics_summary(5, {"eval_loss": 0.5})
    with _logger(tmp_path) as lg:
        lg.start_from(5)
        lg.log_metrics_summary(5, {"eval_loss": 0.5})  # the same: not written again
        lg.log_metrics_summary(4, {"eval_loss": 0.5})  # another step: written
    rows = (tmp_path / METRICS_CSV).read_text().splitlines()
    assert [r.split(",")[0] for r in rows[1:]] == ["1", "2", "3", "4", "5", "5", "4"]
    with _logger(tmp_path) as lg:
        lg.start_from(5)
        lg.log_metrics_summary(5, {"eval_loss": 0.25})  # a different value: a new measurement
    assert read_metrics(tmp_path)["eval_loss"] == [(4, 0.5), (5, 0.25)]
    assert len((tmp_path / METRICS_CSV).read_text().splitlines()) == 9
