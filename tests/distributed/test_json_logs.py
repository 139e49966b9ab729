"""JSON log lines (ROXXEL_LOG_FORMAT=json) parse and keep their severities: roxxel-worker's
error and warning, a training progress line as INFO, a traceback inside one message.

The fields are those Cloud Logging reads from a JSON line (special JSON fields of structured
logging, https://cloud.google.com/logging/docs/structured-logging#special-payload-fields):
``severity`` (a LogSeverity name), ``message`` and ``time`` (RFC 3339)."""

from __future__ import annotations

import datetime
import io
import json
import logging
import os
import subprocess
import sys

import pytest

from roxxel import log_format
from roxxel.contract import ENV_LOG_FORMAT, ENV_MAX_RESTART_ATTEMPT, ENV_PROCESS_ID, ENV_RESTART_ATTEMPT
from roxxel.train import Logger

WORKER = [sys.executable, "-m", "roxxel.worker", "--"]
SEVERITIES = {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}


def _entries(text: str) -> list[dict]:
    """Every line of ``text`` as a JSON object with Cloud Logging's fields (fails on any other line)."""
    entries = []
    for line in text.splitlines():
        entry = json.loads(line)
        assert entry["severity"] in SEVERITIES, line
        assert isinstance(entry["message"], str), line
        datetime.datetime.fromisoformat(entry["time"].replace("Z", "+00:00"))  # RFC 3339
        assert "process_index" in entry, line
        entries.append(entry)
    return entries


def _worker(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, ENV_LOG_FORMAT: "json", ENV_PROCESS_ID: "0", **env}
    for name in (ENV_RESTART_ATTEMPT, ENV_MAX_RESTART_ATTEMPT):
        if name not in env:
            environ.pop(name, None)
    return subprocess.run(WORKER + args, capture_output=True, text=True, env=environ, timeout=120)


def test_worker_warning_for_a_failed_child_is_json():
    result = _worker([sys.executable, "-c", "import sys; sys.exit(3)"])
    assert result.returncode == 3
    entries = _entries(result.stderr)
    exited = [e for e in entries if "exited with 3" in e["message"]]
    assert [e["severity"] for e in exited] == ["WARNING"]
    assert exited[0]["logger"] == "roxxel.worker"


def test_worker_error_beyond_the_restart_budget_is_json():
    result = _worker(["true"], **{ENV_RESTART_ATTEMPT: "5", ENV_MAX_RESTART_ATTEMPT: "4"})
    assert result.returncode == 78
    (entry,) = _entries(result.stderr)
    assert entry["severity"] == "ERROR"
    assert "beyond the job's budget" in entry["message"]


def test_an_uncaught_traceback_stays_in_one_message():
    """A training program that imports roxxel: its traceback is one CRITICAL entry, not one
    ERROR entry per line; the worker's own lines stay JSON."""
    code = "import roxxel, logging\nlogging.getLogger('roxxel.train').warning('careful')\nraise ValueError('boom')"
    result = _worker([sys.executable, "-c", code])
    assert result.returncode == 1
    entries = _entries(result.stderr)
    (warning,) = [e for e in entries if e["message"] == "careful"]
    assert warning["severity"] == "WARNING" and warning["process_index"] == 0
    (crash,) = [e for e in entries if "ValueError: boom" in e["message"]]
    assert crash["severity"] == "CRITICAL"
    assert crash["message"].startswith("Traceback (most recent call last):")
    assert crash["message"].endswith("ValueError: boom")


def test_logger_lines_are_json_with_severities(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(ENV_LOG_FORMAT, "json")
    out = io.StringIO()
    logger = Logger(str(tmp_path), process_index=0, tensorboard=False, progress=True, total_steps=10, stdout=out)
    logger.log_metrics_summary(3, {"loss": 2.5})
    logger.log_message("disk is filling", level="warning")
    logger.log_message("halfway")
    try:
        raise RuntimeError("bad batch")
    except RuntimeError as err:
        logger.log_exception(err)
    logger.close()
    progress, warning, info = _entries(out.getvalue())  # no progress bar: only JSON lines
    assert progress["severity"] == "INFO" and progress["message"].startswith("step 3/10")
    assert "loss=2.5" in progress["message"] and progress["process_index"] == 0
    assert (warning["severity"], warning["message"]) == ("WARNING", "disk is filling")
    assert (info["severity"], info["message"]) == ("INFO", "halfway")
    (error,) = _entries(capsys.readouterr().err)
    assert error["severity"] == "ERROR"
    assert "Traceback" in error["message"] and error["message"].endswith("RuntimeError: bad batch")


def test_logger_lines_stay_text_without_the_switch(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_LOG_FORMAT, raising=False)
    out = io.StringIO()
    logger = Logger(str(tmp_path), process_index=0, tensorboard=False, progress=False, stdout=out)
    logger.log_metrics_summary(1, {"loss": 1.0})
    logger.log_message("careful", level="warning")
    logger.close()
    assert out.getvalue().splitlines() == ["step 1  loss=1", "WARNING: careful"]


@pytest.mark.parametrize(
    ("level", "name"),
    [
        (logging.DEBUG, "DEBUG"),
        (logging.INFO, "INFO"),
        (logging.WARNING, "WARNING"),
        (logging.ERROR, "ERROR"),
        (logging.CRITICAL, "CRITICAL"),
        ("warn", "WARNING"),
        ("Error", "ERROR"),
    ],
)
def test_severity_names_are_cloud_loggings(level, name):
    assert log_format.severity(level) == name


def test_formatter_keeps_an_exception_in_the_message():
    try:
        raise KeyError("x")
    except KeyError:
        record = logging.getLogger("roxxel.checkpoint").makeRecord(
            "roxxel.checkpoint", logging.ERROR, __file__, 1, "save failed: %s", ("step 7",), sys.exc_info()
        )
    entry = json.loads(log_format.JsonFormatter(process_index=2).format(record))
    assert entry["severity"] == "ERROR" and entry["process_index"] == 2 and entry["logger"] == "roxxel.checkpoint"
    assert entry["message"].startswith("save failed: step 7\nTraceback") and entry["message"].endswith("KeyError: 'x'")


def test_as_text_shows_json_lines_as_text_and_passes_others_through():
    line = log_format.json_line("ERROR", "it broke\nhere", process_index=1, wall=0.0, logger="roxxel.worker")
    assert log_format.as_text(line) == "1970-01-01T00:00:00.000000Z ERROR [process 1] it broke\nhere"
    info = log_format.json_line("INFO", "step 3", process_index=0, wall=0.0)
    assert log_format.as_text(info) == "1970-01-01T00:00:00.000000Z [process 0] step 3"
    for other in ("plain text", "{not json}", '{"no": "message"}', "[1, 2]"):
        assert log_format.as_text(other) == other
