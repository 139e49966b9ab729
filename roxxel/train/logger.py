"""Rank-0 run logger: stdout, a timestamped system log, a metrics CSV and TensorBoard.

In a multi-host job every process runs the same training loop, so every process calls
the logger; only process 0 writes anything, and on the others each method validates its
arguments and returns. Writing happens on a background thread fed by a queue, so the
training loop never waits on a disk, a network file system or a terminal.

Files written in ``log_dir`` (the original Roxxel's names):

``roxxel_system.log``
    One line per message, ``<ISO-8601 local time with offset> <LEVEL> <text>``; an
    exception adds its full traceback under an ``ERROR`` line.
``roxxel_metrics.csv``
    Wide format: header ``step,wall_time,<metric>,...``, one row per
    :meth:`Logger.log_metrics_summary` call. ``wall_time`` is Unix time in seconds.
    Metric columns appear in the order the keys were first logged; a cell is empty
    where that metric was not logged at that step. When a new key appears, the whole
    file is rewritten under a temporary name with the wider header (old rows padded
    with empty cells) and renamed over the old one, so a reader sees either the old
    or the new file, never a mix. That rewrite costs O(file size) but happens only
    when the set of keys grows (e.g. the first eval step). Values are written with
    ``repr(float)``, which round-trips exactly (``nan`` and ``inf`` included). A
    resumed run appends to the existing file; :func:`read_metrics` keeps the last
    value written for a repeated step. :meth:`Logger.start_from` (the Trainer calls it
    after its restore) first drops the rows of the steps the run will log again, and
    moves an earlier run's file aside when the run starts at step 0.
``tensorboard/<run name>/``
    TensorBoard event files (``tensorboardX.SummaryWriter``), one scalar per metric, in one
    run named ``run_name=``, else by the job (``ROXXEL_RUN_NAME``), else by ``log_dir``, so
    ``tensorboard --logdir LOG_DIR/tensorboard`` lists it by that name; its tags are grouped
    as ``train/`` (the loss, the learning rate, the model's own metrics), ``eval/`` (``eval_X``
    as ``eval/X``) and ``system/`` (throughput, step and compile times, the straggler report); a
    key that holds a ``/`` is its own tag. The CSV keeps the keys as logged.

Durability: after the queue empties, the writer hands its buffers to the OS, so data
survives a crash of the Python process soon after it is logged; :meth:`Logger.flush`
also fsyncs. :meth:`Logger.close` is registered with :mod:`atexit`, so an uncaught
exception or ``sys.exit`` still drains the queue. Nothing can drain it after
``SIGKILL``, ``os._exit`` or an unhandled ``SIGTERM`` (the Trainer handles ``SIGTERM``).

This module is the front (argument checks, rank 0, the queue and its writer thread); the
writing itself is :mod:`roxxel.train.log_outputs` (stdout, the system log, TensorBoard) and
:mod:`roxxel.train.metrics_file` (the metrics CSV, and :func:`read_metrics`).
"""

from __future__ import annotations

import atexit
import logging
import math
import numbers
import operator
import os
import queue
import sys
import threading
import time
import traceback
from collections.abc import Mapping
from typing import IO, Any, Literal

from roxxel import log_format
from roxxel.contract import ENV_RUN_NAME
from roxxel.train.log_outputs import DIAGNOSTIC_KEYS, LOSS_KEY, SYSTEM_LOG, TENSORBOARD_DIR, TOKENS_PER_SEC_KEY, Sink
from roxxel.train.metrics_file import FIXED_COLUMNS, METRICS_CSV, read_metrics

__all__ = [
    "DIAGNOSTIC_KEYS",
    "LOSS_KEY",
    "METRICS_CSV",
    "SYSTEM_LOG",
    "TENSORBOARD_DIR",
    "TOKENS_PER_SEC_KEY",
    "Logger",
    "read_metrics",
]

_LEVELS = {
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARNING": logging.WARNING,
    "ERROR": logging.ERROR,
    "CRITICAL": logging.CRITICAL,
}
_LEVEL_NAMES = {v: k for k, v in _LEVELS.items()}


class Logger:
    """Logs messages and metrics from process 0 of a (multi-host) JAX job.

    Use it as a context manager: an exception raised inside the ``with`` block is
    written with its traceback to the system log and to stderr, every queue is flushed
    to disk, and the exception propagates unchanged.

    Args:
        log_dir: directory for ``roxxel_system.log``, ``roxxel_metrics.csv`` and
            ``tensorboard/``; created on process 0 if missing. Never touched elsewhere.
        process_index: this process's index; default ``jax.process_index()`` when
            ``jax.distributed`` is initialised, else 0. (The default does not call into
            JAX otherwise, because that would initialise its backends before
            ``jax.distributed.initialize``: create the Logger after
            ``roxxel.distributed.initialize()``.)
        tensorboard: also write TensorBoard event files.
        run_name: the TensorBoard run's name (a directory under ``tensorboard/``); default
            the job's name from ``ROXXEL_RUN_NAME``, else the name of ``log_dir``.
        progress: ``True`` shows a tqdm progress bar (step/total, steps/s, loss,
            tokens/s, ETA) on ``stdout``; ``False`` prints one line per metrics call
            instead; ``None`` (default) chooses the bar when ``stdout`` is a terminal.
            With ``ROXXEL_LOG_FORMAT=json`` (Kubernetes' default) there is no bar, and each
            line is a JSON object with ``severity``, ``message``, ``time`` and
            ``process_index`` (see :mod:`roxxel.log_format`).
        verbose: print every metric on those lines. By default a line holds the loss,
            tokens/s (``tok/s``), the ETA and the row's other metrics that fit in 100
            columns, leaving out the Trainer's diagnostics (``DIAGNOSTIC_KEYS``: per-device
            rates, step and compile times, the straggler report, perplexities), which the
            metrics CSV and TensorBoard always hold.
        total_steps: the run's last step, for the bar and the ETA; see :meth:`init_pbar`.
        stdout: text stream for messages, metric lines and the bar; default ``sys.stdout``.

    Raises:
        TypeError: ``log_dir`` is not a path, or ``process_index``/``total_steps`` not an int.
        ValueError: ``process_index`` or ``total_steps`` is negative.
        OSError: ``log_dir`` or a log file cannot be created (process 0 only).
        RuntimeError: any method, after the writer thread failed (the first failure is
            the ``__cause__``), or after :meth:`close`.
    """

    def __init__(
        self,
        log_dir: str | os.PathLike[str],
        *,
        process_index: int | None = None,
        tensorboard: bool = True,
        progress: bool | None = None,
        total_steps: int | None = None,
        stdout: IO[str] | None = None,
        verbose: bool = False,
        run_name: str | None = None,
    ) -> None:
        if not isinstance(log_dir, (str, os.PathLike)):
            raise TypeError(f"log_dir must be a path, but got {type(log_dir).__name__}")
        self.log_dir = os.fspath(log_dir)
        if process_index is None:
            process_index = _default_process_index()
        self.process_index = _check_int("process_index", process_index, minimum=0)
        self.total_steps = None if total_steps is None else _check_int("total_steps", total_steps, minimum=0)
        self.is_rank_zero = self.process_index == 0
        self._closed = False
        self._close_lock = threading.Lock()
        self._error: BaseException | None = None
        if not self.is_rank_zero:
            return

        os.makedirs(self.log_dir, exist_ok=True)
        self._stdout = sys.stdout if stdout is None else stdout
        json_lines = log_format.is_json()
        if json_lines:  # a bar's redraws are no log lines
            progress = False
        if progress is None:
            isatty = getattr(self._stdout, "isatty", None)
            progress = bool(isatty()) if isatty is not None else False
        self._sink = Sink(
            self.log_dir,
            self._stdout,
            tensorboard=tensorboard,
            progress=bool(progress),
            total_steps=self.total_steps,
            verbose=bool(verbose),
            run_name=_run_name(self.log_dir, run_name),
            json_lines=json_lines,
            process_index=self.process_index,
        )
        self._queue: queue.SimpleQueue[tuple] = queue.SimpleQueue()
        # A daemon thread: the interpreter joins non-daemon threads *before* running
        # atexit handlers, so a non-daemon writer would hang exit; close() joins it.
        self._thread = threading.Thread(target=self._run, name="roxxel-logger", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def __repr__(self) -> str:
        return f"Logger(log_dir={self.log_dir!r}, process_index={self.process_index})"

    # -- public API ---------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (logging then raises ``RuntimeError``)."""
        return self._closed

    def log_message(self, msg: str, level: str | int | None = "INFO", *, echo: bool = True) -> None:
        """Queue ``msg`` for stdout and the system log (timestamped when queued).

        Args:
            msg: the text; may span several lines.
            level: ``"DEBUG"``, ``"INFO"``, ``"WARNING"``, ``"ERROR"``, ``"CRITICAL"``
                (any case), the matching :mod:`logging` constant, or ``None`` (INFO).
                Shown on stdout as a prefix unless it is INFO.
            echo: also print it to stdout; ``False`` writes the system log only (details
                such as a library's traceback that would flood the terminal).

        Raises:
            TypeError: ``msg`` is not a str.
            ValueError: unknown ``level``.
            RuntimeError: the logger is closed or its writer failed.
        """
        if not isinstance(msg, str):
            raise TypeError(f"msg must be a str, but got {type(msg).__name__}")
        name = _level_name(level)
        if self._usable():
            self._queue.put(("message", time.time(), name, msg, echo))

    def log_metrics_summary(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Queue one row of metrics for the CSV, TensorBoard and the progress display.

        Values are converted with ``float()`` on the writer thread, so a JAX array
        does not block the caller here; but converting it blocks the writer until the
        device has computed it, and keeps it alive until then. The Trainer passes
        values it has already fetched to the host at its log steps.

        Args:
            step: the global step, >= 0.
            metrics: metric name -> real scalar (Python, NumPy or 0-d/1-element JAX).
                Names must be non-empty, single-line, and not ``step`` or ``wall_time``.
                Tokens per second under ``"tokens_per_sec"`` and the loss under
                ``"loss"`` are shown by the progress display.

        Raises:
            TypeError: ``step`` is not an int, ``metrics`` not a mapping, a name not a
                str, or a value not a real scalar.
            ValueError: negative ``step`` or a reserved/empty/multi-line name.
            RuntimeError: the logger is closed or its writer failed.
        """
        step = _check_int("step", step, minimum=0)
        if not isinstance(metrics, Mapping):
            raise TypeError(f"metrics must be a mapping of name -> scalar, but got {type(metrics).__name__}")
        for key, value in metrics.items():
            _check_metric(key, value)
        if self._usable():
            self._queue.put(("metrics", time.time(), time.monotonic(), step, dict(metrics)))

    def init_pbar(self, total_steps: int, initial_step: int = 0) -> None:
        """Set the run's total steps and the step it starts from (after a restore).

        Sets up the progress bar when it is shown; otherwise feeds the ETA of the log lines.

        Raises:
            TypeError: not ints.
            ValueError: negative, or ``initial_step > total_steps``.
            RuntimeError: the logger is closed or its writer failed.
        """
        total_steps = _check_int("total_steps", total_steps, minimum=0)
        initial_step = _check_int("initial_step", initial_step, minimum=0)
        if initial_step > total_steps:
            raise ValueError(f"initial_step must be <= total_steps ({total_steps}), but got {initial_step}")
        self.total_steps = total_steps
        if self._usable():
            self._queue.put(("pbar", total_steps, initial_step))

    def start_from(self, step: int) -> None:
        """Declare the step this run starts from: 0, or the step of the checkpoint it restored.

        Metrics already in the run directory for steps after ``step`` were logged by an
        attempt whose progress was lost (it stopped after its last checkpoint); at step 0,
        every metric there is an earlier run's. This run logs those steps again, so they are
        superseded: in ``roxxel_metrics.csv`` their rows are dropped (an atomic rewrite),
        except that at step 0 the earlier run's file is kept whole under
        ``roxxel_metrics.earlier-<UTC time>.csv`` and a fresh one is started; TensorBoard is
        told to hide them (a ``SessionLog.START`` event, as ``tensorboardX``'s ``purge_step``
        writes). What was done is logged in one line. Rows of ``step`` itself stay: they
        describe the state the checkpoint holds; metrics logged again at ``step`` with the
        values already there (a finished run started again evaluates its last step once more)
        are not written a second time, to the CSV or TensorBoard.

        Raises:
            TypeError: not an int.
            ValueError: negative.
            RuntimeError: the logger is closed or its writer failed.
        """
        step = _check_int("step", step, minimum=0)
        if self._usable():
            self._queue.put(("start_from", step))

    def log_exception(self, exc: BaseException, *, echo: bool = True) -> None:
        """Queue ``exc`` with its traceback for the system log (as ERROR) and stderr.

        The traceback is formatted on the calling thread; writing happens on the writer.

        Args:
            exc: the exception.
            echo: also print the traceback to stderr. Pass ``False`` when the exception
                propagates and Python will print it anyway (so it is printed once).

        Raises:
            TypeError: ``exc`` is not an exception.
            RuntimeError: the logger is closed or its writer failed.
        """
        if not isinstance(exc, BaseException):
            raise TypeError(f"exc must be an exception, but got {type(exc).__name__}")
        if self._usable():
            text = "".join(traceback.format_exception(exc)).rstrip("\n")
            self._queue.put(("exception", time.time(), text, echo))

    def flush(self) -> None:
        """Block until everything queued so far is written and fsynced (TensorBoard: flushed).

        A no-op after :meth:`close` (which flushed) and on processes other than 0.

        Raises:
            RuntimeError: the writer failed (now or before).
        """
        if not self.is_rank_zero or self._closed:
            return
        self._raise_if_failed()
        self._wait_for_writer()
        self._raise_if_failed()

    def close(self) -> None:
        """Flush, stop the writer thread and close the files. Idempotent.

        Raises:
            RuntimeError: the writer failed at some point (raised once, by the close
                that stops it).
        """
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        if not self.is_rank_zero:
            return
        atexit.unregister(self.close)
        self._queue.put(("stop",))
        self._thread.join()
        self._raise_if_failed()

    def __enter__(self) -> Logger:
        return self

    def __exit__(self, exc_type, exc, tb) -> Literal[False]:
        if exc is None:
            self.close()
            return False
        if self.is_rank_zero and not self._closed and self._error is None:
            if isinstance(exc, SystemExit):
                code = exc.code
                self.log_message(f"exiting with code {code!r}", "INFO" if code in (0, None) else "WARNING")
            else:
                self.log_exception(exc)
        try:
            self.close()
        except RuntimeError as writer_error:
            # Keep the user's exception; attach ours instead of replacing it.
            exc.add_note(f"roxxel Logger also failed while flushing: {writer_error.__cause__!r}")
        return False

    # -- caller side -------------------------------------------------------------

    def _usable(self) -> bool:
        """False on processes other than 0; raises when closed or failed."""
        if not self.is_rank_zero:
            return False
        if self._closed:
            raise RuntimeError(f"{self!r} is closed")
        self._raise_if_failed()
        return True

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"roxxel Logger writer for {self.log_dir} failed: {self._error!r}") from self._error

    def _wait_for_writer(self) -> None:
        done = threading.Event()
        self._queue.put(("flush", done))
        while not done.wait(0.5):
            if not self._thread.is_alive():
                raise RuntimeError(f"roxxel Logger writer for {self.log_dir} has stopped")

    # -- writer thread -----------------------------------------------------------

    def _run(self) -> None:
        stop = False
        while not stop:
            item = self._queue.get()
            kind = item[0]
            try:
                if kind == "stop":
                    stop = True
                    self._sink.close()
                elif kind == "flush":
                    try:
                        self._sink.flush(durable=True)
                    finally:
                        item[1].set()
                else:
                    getattr(self._sink, kind)(*item[1:])
                    if self._queue.empty():
                        self._sink.flush(durable=False)
            except BaseException as err:  # recorded and re-raised on the caller's thread
                if self._error is None:
                    self._error = err


# -- validation and formatting ----------------------------------------------------------


def _run_name(log_dir: str, given: str | None) -> str:
    """The TensorBoard run's name: ``given``, else the job's (the same across restarts), else
    ``log_dir``'s own name; never a path (a ``/`` would make directories)."""
    name = given or os.environ.get(ENV_RUN_NAME) or os.path.basename(os.path.abspath(log_dir)) or "run"
    return name.replace(os.sep, "_")


def _default_process_index() -> int:
    import jax

    return jax.process_index() if jax.distributed.is_initialized() else 0


def _check_int(name: str, value: Any, *, minimum: int) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, but got {value!r}")
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, but got {type(value).__name__}") from None
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, but got {value}")
    return value


def _check_metric(key: Any, value: Any) -> None:
    if not isinstance(key, str):
        raise TypeError(f"metric names must be str, but got {type(key).__name__} {key!r}")
    if not key or "\n" in key or "\r" in key or key in FIXED_COLUMNS:
        raise ValueError(f"metric name must be non-empty, single-line and not one of {FIXED_COLUMNS}, but got {key!r}")
    if isinstance(value, numbers.Real):
        return
    shape = getattr(value, "shape", None)  # NumPy / JAX arrays: metadata only, no device sync
    if shape is not None and math.prod(shape) == 1 and hasattr(value, "__float__"):
        return
    raise TypeError(f"metric {key!r} must be a real scalar (Python, NumPy or JAX), but got {type(value).__name__}")


def _level_name(level: str | int | None) -> str:
    if level is None:
        return "INFO"
    if isinstance(level, str) and level.upper() in _LEVELS:
        return level.upper()
    if isinstance(level, int) and not isinstance(level, bool) and level in _LEVEL_NAMES:
        return _LEVEL_NAMES[level]
    raise ValueError(f"level must be one of {list(_LEVELS)} or a matching logging constant, but got {level!r}")
