"""Exit codes shared by Roxxel's trainer, its container entrypoint and the launcher.

The convention, for a training process (and for ``roxxel-worker``, which passes its
child's code through unchanged):

- ``0`` (:data:`SUCCESS`): training finished; do not restart.
- ``42`` (:data:`PREEMPTED_EXIT_CODE`): stopped on request (SIGTERM: preemption,
  maintenance, eviction) *after* a complete checkpoint was written; restart me and
  I resume from it. 42 is outside the ranges that shells and runtimes give their
  own meanings (1-2 errors/usage, 126-127 exec failures, 128+N death by signal N),
  so a restart policy can match it exactly, e.g. a Job ``podFailurePolicy`` rule
  with ``onExitCodes: {operator: In, values: [42]}``.
- ``43`` (:data:`STALLED_EXIT_CODE`): the progress watchdog found no step (evaluation,
  save) finishing within its bound and ended the process after writing every thread's
  stack (:mod:`roxxel.train.watchdog`): a stuck worker or peer. An ordinary failure for
  the failure policies: a counted gang restart that resumes from the last checkpoint.
- ``78`` (:data:`CONFIG_ERROR_EXIT_CODE`): a deterministic configuration error found
  before the first step (global batch not divisible by the process count, a missing
  dataset, a spec that does not match the checkpoint): restarting cannot help, so the
  launcher fails the job at once (a ``podFailurePolicy`` ``FailJob`` rule plus a JobSet
  ``FailJobSet`` rule; the local backend does not restart). 78 is ``EX_CONFIG`` of BSD's
  ``sysexits.h`` ("configuration error").
- anything else: a failure. By the shell convention ``128 + N`` means "killed by
  signal N" (143 = SIGTERM without a checkpoint, 137 = SIGKILL, e.g. out of
  memory); Kubernetes treats these as failures too, so a preemption that did not
  finish a checkpoint still restarts the JobSet but counts against its
  ``maxRestarts``, unless its failure policy matches the disruption.

Codes ``roxxel-worker`` produces itself: :data:`USAGE_ERROR` for a bad command line (the
shell's convention) and :data:`CONFIG_ERROR_EXIT_CODE` when the command cannot be started
(not found, not executable: a shell's 127/126), since every attempt would fail alike, or
when the command failed with an uncaught :class:`ConfigurationError` (Roxxel's errors that
no restart can mend: a checkpoint of another run or model, a batch that does not split over
the devices, datasets of different tokenizers). The child reports one through the file
named by ``ROXXEL_CONFIG_ERROR_FILE``, which ``import roxxel`` watches for, so a training
script needs no code for it.
"""

from __future__ import annotations

import signal
import sys
from typing import NoReturn

# The codes themselves are part of the launcher/worker contract (dependency-free module).
from roxxel.contract import (
    CONFIG_ERROR_EXIT_CODE,
    PREEMPTED_EXIT_CODE,
    SIGNAL_EXIT_BASE,
    STALLED_EXIT_CODE,
    SUCCESS,
    USAGE_ERROR,
)

__all__ = [
    "CONFIG_ERROR_EXIT_CODE",
    "ConfigurationError",
    "ConfigTypeError",
    "ConfigValueError",
    "report_configuration_errors",
    "exit_config_error",
    "PREEMPTED_EXIT_CODE",
    "STALLED_EXIT_CODE",
    "SIGNAL_EXIT_BASE",
    "SUCCESS",
    "USAGE_ERROR",
    "describe",
    "from_returncode",
]


class ConfigurationError(Exception):
    """Base of the errors that every restart would hit again (a mix-in beside ``ValueError`` & co.).

    Uncaught in a process that ``roxxel-worker`` started, it makes the worker exit with
    :data:`CONFIG_ERROR_EXIT_CODE`, so the launcher fails the job at once instead of
    restarting it (see :func:`report_configuration_errors`).
    """


class ConfigValueError(ConfigurationError, ValueError):
    """A bad value in the training program's set-up (a Trainer or Stream argument, the data
    against the model): a ``ValueError`` that every restart would hit again (exit 78)."""


class ConfigTypeError(ConfigurationError, TypeError):
    """A wrong type in the training program's set-up (a loss_fn's return value, a missing
    optimizer): a ``TypeError`` that every restart would hit again (exit 78)."""


def report_configuration_errors(path: str) -> None:
    """Record an uncaught :class:`ConfigurationError` in ``path`` (its type and message, one
    line), then report the exception as before. Installed (as ``sys.excepthook``) by
    ``import roxxel`` when ``ROXXEL_CONFIG_ERROR_FILE`` names ``path``."""
    previous = sys.excepthook

    def hook(kind, value, tb):
        if isinstance(value, ConfigurationError):
            try:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(f"{kind.__name__}: {' '.join(str(value).split())}\n")
            except OSError:
                pass  # the worker then passes the child's own exit code on
        previous(kind, value, tb)

    sys.excepthook = hook


def exit_config_error(message: str) -> NoReturn:
    """Print a configuration error to stderr and exit with :data:`CONFIG_ERROR_EXIT_CODE`.

    For errors found before the first step that every restart would hit again: a bad
    global batch for the process count, a missing dataset, a spec the checkpoint does not
    match. The message is the last line of the pod's (or local worker's) log.

    Args:
        message: what is wrong and how to fix it, one line.

    Raises:
        SystemExit: always, with code 78.
    """
    print(
        f"configuration error (exit code {CONFIG_ERROR_EXIT_CODE}, not restarted): {message}",
        file=sys.stderr,
        flush=True,
    )
    raise SystemExit(CONFIG_ERROR_EXIT_CODE)


def from_returncode(returncode: int) -> int:
    """Turn a :attr:`subprocess.Popen.returncode` into a shell-style exit code.

    Args:
        returncode: the child's exit status, or ``-N`` if signal ``N`` killed it.

    Returns:
        ``returncode`` unchanged when >= 0, else ``128 + N`` (so SIGTERM gives 143).
    """
    return returncode if returncode >= 0 else SIGNAL_EXIT_BASE - returncode


def describe(code: int) -> str:
    """A short human-readable meaning of a shell-style exit code, for logs.

    Args:
        code: an exit code as :func:`from_returncode` returns it.

    Returns:
        E.g. ``"done"``, ``"preempted after a complete checkpoint (restart to resume)"``,
        ``"killed by SIGTERM"``, ``"failed"``.
    """
    if code == SUCCESS:
        return "done"
    if code == PREEMPTED_EXIT_CODE:
        return "preempted after a complete checkpoint (restart to resume)"
    if code == STALLED_EXIT_CODE:
        return "stalled: no progress within the watchdog's bound (stacks in the log; restarted)"
    if code == CONFIG_ERROR_EXIT_CODE:
        return "configuration error (not restarted: fix the job and submit again)"
    signum = code - SIGNAL_EXIT_BASE
    if signum > 0 and signum in signal.valid_signals():
        name = signal.Signals(signum).name if signum in set(signal.Signals) else f"signal {signum}"
        return f"killed by {name}"
    return "failed"
