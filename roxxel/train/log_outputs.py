"""Where the :class:`~roxxel.train.Logger`'s writer thread puts what it is given: stdout (a
progress bar or one short line per logged step, with an ETA), the timestamped system log, the
metrics CSV (:mod:`roxxel.train.metrics_file`) and TensorBoard event files.

With ``ROXXEL_LOG_FORMAT=json`` (the Logger's ``json_lines``) each stdout and stderr line is one
JSON object with ``severity`` (a step's line INFO, a message its level, a traceback ERROR with
the whole traceback in ``message``), ``message``, ``time`` and ``process_index``, as Cloud
Logging reads them (:mod:`roxxel.log_format`), and there is no progress bar."""

from __future__ import annotations

import datetime
import itertools
import math
import os
import sys
import time
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tqdm import tqdm

from roxxel.log_format import json_line
from roxxel.train.metrics_file import METRICS_CSV, MetricsCsv

__all__ = [
    "DIAGNOSTIC_KEYS",
    "LINE_WIDTH",
    "LOSS_KEY",
    "SYSTEM_KEYS",
    "SYSTEM_PREFIXES",
    "SYSTEM_LOG",
    "TENSORBOARD_DIR",
    "TOKENS_PER_SEC_KEY",
    "Sink",
    "tensorboard_tag",
]

SYSTEM_LOG = "roxxel_system.log"
TENSORBOARD_DIR = "tensorboard"

#: Metric keys the progress display and stdout lines single out.
LOSS_KEY = "loss"
TOKENS_PER_SEC_KEY = "tokens_per_sec"

#: The Trainer's diagnostics (its Throughput callback, LearningRate, the straggler report, perplexity
#: as exp(loss)): in the metrics CSV and TensorBoard, on a stdout line only with ``verbose=True``.
DIAGNOSTIC_KEYS = frozenset(
    {
        "tokens_per_sec_per_device",
        "step_time_s",
        "compile_time_s",
        "model_tflops_per_device",
        "mfu",
        "learning_rate",
        "host_time_s_median",
        "host_time_s_max",
        "slowest_process",
    }
)

#: The most columns a stdout metrics line takes (without ``verbose``): metrics that would pass it are
#: left out, the loss and tokens/s first in line.
LINE_WIDTH = 100

_EVENT_FILES = itertools.count()  # TensorBoard event files this process opened (see Sink)


class Sink:
    """Everything the writer thread touches; used from that thread only."""

    def __init__(
        self,
        log_dir: str,
        stdout: IO[str],
        *,
        tensorboard: bool,
        progress: bool,
        total_steps: int | None,
        verbose: bool = False,
        run_name: str = "run",
        json_lines: bool = False,
        process_index: int = 0,
    ) -> None:
        self._stdout = stdout
        # ROXXEL_LOG_FORMAT=json: each stdout / stderr line one JSON object (roxxel.log_format), no bar.
        self._json = json_lines
        self._process_index = process_index
        self._verbose = verbose
        self._progress = progress
        self._total = total_steps
        self._bar: tqdm | None = None
        self._rate_origin: tuple[int, float] | None = None  # (step, monotonic time) for the ETA
        self._system = open(os.path.join(log_dir, SYSTEM_LOG), "a", encoding="utf-8")
        self._csv = MetricsCsv(os.path.join(log_dir, METRICS_CSV))
        self._tb = None
        if tensorboard:
            from tensorboardX import SummaryWriter

            # tensorboardX names its file by the second and the host only, and truncates a file of that
            # name: a second Logger on the same directory within a second (a quick restart, a test)
            # erased the first one's events. The process id and a count make every name new; the
            # time in nanoseconds first, zero-padded, keeps names of one second in the order they were opened:
            # TensorBoard reads a run's files in name order, and a restart's purge of the steps it
            # logs again works only if its file comes after the first one's (a bare count put a
            # tenth file, ".10", before a ninth, ".9").
            # One directory per run: TensorBoard names a run by its directory under --logdir
            # (event files right in tensorboard/ made a run named '.').
            self._tb = SummaryWriter(
                os.path.join(log_dir, TENSORBOARD_DIR, run_name),
                flush_secs=30,
                filename_suffix=f".{time.time_ns():020d}.{os.getpid()}.{next(_EVENT_FILES):06d}",
            )

    # queue item handlers

    def message(self, wall: float, level: str, msg: str, echo: bool = True) -> None:
        self._system.write(f"{_timestamp(wall)} {level} {msg}\n")
        if echo:
            self._print(msg if level == "INFO" or self._json else f"{level}: {msg}", self._stdout, level, wall)

    def exception(self, wall: float, text: str, echo: bool = True) -> None:
        self._system.write(f"{_timestamp(wall)} ERROR uncaught exception\n{text}\n")
        if echo:
            self._print(text, sys.stderr, "ERROR", wall)

    def pbar(self, total_steps: int, initial_step: int) -> None:
        self._total = total_steps
        if not self._progress:
            return
        if self._bar is None:
            self._open_bar(initial_step)
        else:
            self._bar.total = total_steps
            self._bar.n = initial_step
            self._bar.refresh()

    def start_from(self, step: int) -> None:
        note = self._csv.start_from(step)
        if note:
            self.message(time.time(), "INFO" if step else "WARNING", note)
        if self._tb is not None:
            from tensorboardX.proto.event_pb2 import Event, SessionLog

            # TensorBoard hides the events of this step and later logged before it (a resume keeps its own step's).
            purge = step + 1 if step else 0
            self._tb.file_writer.add_event(Event(step=purge, session_log=SessionLog(status=SessionLog.START)))

    def metrics(self, wall: float, mono: float, step: int, raw: dict[str, Any]) -> None:
        values = {key: float(value) for key, value in raw.items()}
        if self._csv.write(step, wall, values) and self._tb is not None:
            for key, value in values.items():
                self._tb.add_scalar(tensorboard_tag(key), value, global_step=step, walltime=wall)
        if self._progress:
            bar = self._bar if self._bar is not None else self._open_bar(step)
            postfix = {}
            if LOSS_KEY in values:
                postfix[LOSS_KEY] = f"{values[LOSS_KEY]:.4g}"
            if TOKENS_PER_SEC_KEY in values:
                postfix["tok/s"] = _short(values[TOKENS_PER_SEC_KEY])
            bar.set_postfix(postfix, refresh=False)
            if step >= bar.n:
                bar.update(step - bar.n)  # tqdm's rate and ETA; redraws at most every 0.1 s
            else:
                bar.n = step
                bar.refresh()
        else:
            self._print(self._metrics_line(step, mono, values), self._stdout, "INFO", wall)

    # helpers

    def _open_bar(self, initial_step: int) -> tqdm:
        from tqdm import tqdm

        self._bar = tqdm(
            total=self._total, initial=initial_step, file=self._stdout, unit="step", dynamic_ncols=True, desc="train"
        )
        return self._bar

    def _metrics_line(self, step: int, mono: float, values: dict[str, float]) -> str:
        head = f"step {step}" if self._total is None else f"step {step}/{self._total}"
        tail = []
        if self._rate_origin is None or step < self._rate_origin[0]:
            self._rate_origin = (step, mono)
        origin_step, origin_time = self._rate_origin
        if self._total is not None and step > origin_step and mono > origin_time:
            rate = (step - origin_step) / (mono - origin_time)
            tail.append(f"eta={datetime.timedelta(seconds=round(max(self._total - step, 0) / rate))}")
        if self._verbose:
            return "  ".join([head] + [f"{key}={_short(value)}" for key, value in values.items()] + tail)
        # The loss and tokens/s first, then what is not a diagnostic, as long as the line stays short.
        shown = sorted((key for key in values if not _diagnostic(key)), key=_first)
        parts = [head]
        width = len(head) + sum(len(t) + 2 for t in tail)
        for key in shown:
            part = f"{_LABELS.get(key, key)}={_short(values[key])}"
            if width + 2 + len(part) > LINE_WIDTH:
                continue
            parts.append(part)
            width += 2 + len(part)
        return "  ".join(parts + tail)

    def _print(self, text: str, stream: IO[str], level: str = "INFO", wall: float | None = None) -> None:
        if self._json:
            text = json_line(level, text, process_index=self._process_index, wall=wall)
        if self._bar is not None:
            self._bar.write(text, file=stream)  # keeps the bar below the text
        else:
            stream.write(text + "\n")

    def flush(self, *, durable: bool) -> None:
        self._system.flush()
        self._csv.flush()
        self._stdout.flush()
        if durable:
            os.fsync(self._system.fileno())
            self._csv.fsync()
            if self._tb is not None:
                self._tb.flush()

    def close(self) -> None:
        try:
            self.flush(durable=True)
        finally:
            if self._bar is not None:
                self._bar.close()
            self._system.close()
            self._csv.close()
            if self._tb is not None:
                self._tb.close()


_FIRST_KEYS = (LOSS_KEY, TOKENS_PER_SEC_KEY)
_LABELS = {TOKENS_PER_SEC_KEY: "tok/s"}  # as the progress bar says it


#: Logged keys TensorBoard shows under ``system/``: how fast and how evenly the job runs.
SYSTEM_KEYS = (DIAGNOSTIC_KEYS - {"learning_rate"}) | {TOKENS_PER_SEC_KEY}
#: Key prefixes of the same kind: the goodput report's (``roxxel.train.callbacks.goodput``).
SYSTEM_PREFIXES = ("goodput", "badput_")


def tensorboard_tag(key: str) -> str:
    """The TensorBoard tag of metric ``key``: ``eval_X`` as ``eval/X``, throughput, timings and
    goodput (``SYSTEM_KEYS``, ``SYSTEM_PREFIXES``) under ``system/``, the rest (loss, learning
    rate, the model's own) under ``train/``; a key with a ``/`` is kept as the caller grouped it."""
    if "/" in key:
        return key
    if key.startswith("eval_") and len(key) > len("eval_"):
        return f"eval/{key[len('eval_') :]}"
    return f"system/{key}" if key in SYSTEM_KEYS or key.startswith(SYSTEM_PREFIXES) else f"train/{key}"


def _first(key: str) -> int:
    return _FIRST_KEYS.index(key) if key in _FIRST_KEYS else len(_FIRST_KEYS)


def _diagnostic(key: str) -> bool:
    return (
        key in DIAGNOSTIC_KEYS or key.startswith(SYSTEM_PREFIXES) or key == "perplexity" or key.endswith("_perplexity")
    )


def _timestamp(wall: float) -> str:
    return datetime.datetime.fromtimestamp(wall).astimezone().isoformat(timespec="milliseconds")


def _short(value: float) -> str:
    if math.isfinite(value) and abs(value) >= 1e4:
        return f"{value / 1e6:.2f}M" if abs(value) >= 1e6 else f"{value / 1e3:.1f}k"
    return f"{value:.4g}"
