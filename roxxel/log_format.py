"""Log lines that Cloud Logging understands: one JSON object a line, or plain text.

``ROXXEL_LOG_FORMAT=json`` (:data:`roxxel.contract.ENV_LOG_FORMAT`; the job spec's
``log_format``, on by default for Kubernetes backends) makes ``roxxel-worker``, the Trainer's
:class:`~roxxel.train.Logger` lines on stdout and roxxel's :mod:`logging` (``roxxel.distributed``,
``roxxel.train``, ``roxxel.checkpoint``, ...) write each line as a JSON object::

    {"severity": "ERROR", "message": "...", "time": "2026-01-02T03:04:05.678Z",
     "process_index": 0, "logger": "roxxel.worker"}

GKE's logging agent parses a container's JSON lines into structured log entries and reads
these special fields (Cloud Logging, "Structured logging", special JSON fields:
https://cloud.google.com/logging/docs/structured-logging#special-payload-fields):
``severity`` becomes the entry's severity (one of Cloud Logging's ``LogSeverity`` names:
DEBUG, INFO, WARNING, ERROR, CRITICAL; a line on stderr without it counts as ERROR, one on
stdout as INFO), ``message`` its text (what the Logs Explorer shows, and Error Reporting reads
a Python traceback from when it is in it), ``time`` its timestamp (RFC 3339). Other fields
(``process_index``, ``logger``) stay in ``jsonPayload``, so that a log-based alert can key on
``severity>=ERROR`` and ``jsonPayload.process_index``. A traceback stays inside ``message``
(one entry, newlines escaped), instead of one ERROR entry per line of it.

``text`` (the default, and ``roxxel-launch submit --local``'s) keeps the lines as they were.
``roxxel-launch logs`` shows JSON lines as text again (:func:`as_text`).

Dependency-free (standard library and :mod:`roxxel.contract`), like the contract: the worker
reads it before anything else.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import sys
import traceback
from collections.abc import Mapping
from typing import IO, Any

from roxxel.contract import ENV_JOB_COMPLETION_INDEX, ENV_LOG_FORMAT, ENV_PROCESS_ID

__all__ = ["JsonFormatter", "as_text", "install", "is_json", "json_line", "severity", "write_line"]

_SEVERITIES = ((logging.CRITICAL, "CRITICAL"), (logging.ERROR, "ERROR"), (logging.WARNING, "WARNING"))
_INSTALLED = "_roxxel_json_handler"


def is_json(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``environ`` (default ``os.environ``) asks for JSON lines (``ROXXEL_LOG_FORMAT=json``)."""
    env = os.environ if environ is None else environ
    return env.get(ENV_LOG_FORMAT, "").strip().lower() == "json"


def severity(level: int | str) -> str:
    """Cloud Logging's severity name of a :mod:`logging` level (a number, or a name such as
    ``"warn"``): DEBUG, INFO, WARNING, ERROR or CRITICAL."""
    if isinstance(level, str):
        name = level.strip().upper()
        level = {"WARN": logging.WARNING, "FATAL": logging.CRITICAL}.get(name, logging.getLevelName(name))
        if not isinstance(level, int):
            return "DEFAULT"
    for floor, name in _SEVERITIES:
        if level >= floor:
            return name
    return "INFO" if level >= logging.INFO else "DEBUG"


def _process_index(environ: Mapping[str, str]) -> int | None:
    """This process's index as the environment says it, without loading the distributed stack
    (roxxel.distributed's detection first, then the raw variables); None when unknown."""
    try:
        from roxxel.distributed.detection import detect

        return detect(environ).process_id
    except Exception:  # noqa: BLE001 - a log line never fails over its process index
        pass
    for name in (ENV_PROCESS_ID, ENV_JOB_COMPLETION_INDEX):
        text = environ.get(name, "").strip()
        if text.isdigit():
            return int(text)
    return None


def _time(wall: float) -> str:
    moment = datetime.datetime.fromtimestamp(wall, tz=datetime.timezone.utc)
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def json_line(
    level: int | str, message: str, *, process_index: int | None, wall: float | None = None, **fields: Any
) -> str:
    """One JSON object (no newline) with ``severity``, ``message``, ``time`` and ``process_index``,
    then ``fields``.

    Args:
        level: a :mod:`logging` level or its name.
        message: the text, newlines and all (a traceback stays in it).
        process_index: the JAX process index; None when unknown (written as null).
        wall: the time (``time.time()``); default now.
        fields: more fields (e.g. ``logger``).
    """
    import time

    entry = {
        "severity": severity(level),
        "message": message,
        "time": _time(time.time() if wall is None else wall),
        "process_index": process_index,
    }
    entry.update(fields)
    return json.dumps(entry, default=str)


class JsonFormatter(logging.Formatter):
    """A :class:`logging.Formatter` writing each record as :func:`json_line` (``logger`` the
    record's name; its traceback and stack inside ``message``)."""

    def __init__(self, process_index: int | None = None, environ: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self._process_index = process_index
        self._environ = os.environ if environ is None else environ
        self._looked_up = process_index is not None

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.exc_info:
            if not record.exc_text:
                record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            message = f"{message}\n{record.exc_text}"
        if record.stack_info:
            message = f"{message}\n{self.formatStack(record.stack_info)}"
        if not self._looked_up:
            self._process_index = _process_index(self._environ)
            self._looked_up = True
        return json_line(
            record.levelno, message, process_index=self._process_index, wall=record.created, logger=record.name
        )


def write_line(stream: IO[str], level: int | str, text: str, *, environ: Mapping[str, str] | None = None) -> None:
    """Write ``text`` to ``stream`` as one line: a :func:`json_line` when ``environ`` asks for
    JSON, else as it is."""
    env = os.environ if environ is None else environ
    if is_json(env):
        text = json_line(level, text, process_index=_process_index(env))
    stream.write(text + "\n")


def as_text(line: str) -> str:
    """A log line as a person reads it: a JSON line with ``message`` becomes ``TIME SEVERITY
    [process N] MESSAGE`` (INFO without its severity); any other line is returned unchanged."""
    stripped = line.strip()
    if not (stripped.startswith("{") and stripped.endswith("}")):
        return line
    try:
        entry = json.loads(stripped)
    except ValueError:
        return line
    if not isinstance(entry, dict) or not isinstance(entry.get("message"), str):
        return line
    parts = []
    if isinstance(entry.get("time"), str):
        parts.append(entry["time"])
    level = entry.get("severity")
    if isinstance(level, str) and level not in ("INFO", "DEFAULT"):
        parts.append(level)
    index = entry.get("process_index")
    if isinstance(index, int):
        parts.append(f"[process {index}]")
    parts.append(entry["message"])
    return " ".join(parts)


def _json_excepthook(kind, value, tb) -> None:
    text = "".join(traceback.format_exception(kind, value, tb)).rstrip("\n")
    try:
        write_line(sys.stderr, logging.CRITICAL, text)
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - fall back to Python's own report
        sys.__excepthook__(kind, value, tb)


def install(environ: Mapping[str, str] | None = None) -> bool:
    """With ``ROXXEL_LOG_FORMAT=json`` in ``environ`` (default ``os.environ``): log roxxel's
    records and an uncaught exception's traceback as JSON lines on stderr. Adds a
    :class:`JsonFormatter` handler to the root logger unless it has a handler already (a
    program's own logging set-up is left alone), lets ``roxxel``'s INFO records through, and
    replaces Python's default ``sys.excepthook``. Idempotent; does nothing for text.

    Returns:
        Whether JSON lines are on.
    """
    env = os.environ if environ is None else environ
    if not is_json(env):
        return False
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonFormatter(environ=env))
        setattr(handler, _INSTALLED, True)
        root.addHandler(handler)
        package = logging.getLogger("roxxel")
        if package.level == logging.NOTSET:
            package.setLevel(logging.INFO)
    if sys.excepthook is sys.__excepthook__:
        sys.excepthook = _json_excepthook
    return True
