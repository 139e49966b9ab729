"""``roxxel-worker [--] CMD [ARGS...]``: the container entrypoint of a Roxxel worker.

Used as the command of every pod that ``roxxel-launch`` renders and by its local
backend, so that the same code path runs on a laptop and on a pod. It

1. sets ``PYTHONUNBUFFERED=1`` for the child unless already set (logs reach
   ``kubectl logs`` as they are written);
2. logs the process identity that :func:`roxxel.distributed.detect` finds, without
   initialising JAX (an inconsistent environment is logged as a warning; the
   training code's :func:`roxxel.distributed.initialize` raises the error);
3. starts ``CMD`` as a child in the worker's own process group, forwards SIGTERM,
   SIGINT, SIGHUP and SIGUSR1 to it, and waits;
4. as a container's PID 1, reaps orphaned processes (which would otherwise stay
   zombies);
5. exits with the child's code (see :mod:`roxxel.exit_codes`): a normal exit code
   passes through unchanged (``0`` done, ``42`` preempted after a complete
   checkpoint, anything else a failure) and a child killed by signal ``N`` gives
   ``128 + N``, so a trainer stopped by SIGTERM stays 143 and is not mistaken for
   success. Kubernetes sends SIGTERM to PID 1 only, so an entrypoint that does not
   forward it (or that loses the exit code) turns every preemption into a hang
   until SIGKILL, or into a failure.

Exit codes of the worker itself: 2 for a usage error; 78 (the configuration-error code)
when ``CMD`` is not found or cannot be executed, where a POSIX shell would give 127/126,
or runs ``python SCRIPT`` with no such SCRIPT, where Python would exit 2 (checked before
starting it; ``-c`` / ``-m`` are not checked):
the same image fails the same way on every attempt, so the job fails at once instead of
spending its gang restarts on a typo.

With ``ROXXEL_LOG_FORMAT=json`` (the job spec's ``log_format``, json on Kubernetes) its
lines are JSON objects with ``severity``, ``message``, ``time`` and ``process_index``, which
Cloud Logging reads (see :mod:`roxxel.log_format`); otherwise ``TIME LOGGER LEVEL: MESSAGE``.

On Linux the worker waits with ``sigwaitinfo``, which tells who sent a signal: a
signal that the terminal generated (Ctrl-C, hang-up; ``si_code == SI_KERNEL``) has
already reached the child when it shares the worker's process group, so it is not
sent a second time. Where ``sigwaitinfo`` is missing (macOS), plain signal handlers
forward every signal.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence

from roxxel import exit_codes, log_format
from roxxel.contract import (  # re-exported
    ENV_CONFIG_ERROR_FILE,
    ENV_MAX_RESTART_ATTEMPT,
    ENV_RESTART_ATTEMPT,
    ENV_TERMINATION_GRACE,
    GRACE_MARGIN_S,
)
from roxxel.distributed import detect

__all__ = [
    "ENV_MAX_RESTART_ATTEMPT",
    "ENV_RESTART_ATTEMPT",
    "FORWARDED_SIGNALS",
    "USAGE",
    "main",
    "prepare_env",
    "restart_budget_problem",
    "run",
]

logger = logging.getLogger("roxxel.worker")

FORWARDED_SIGNALS: tuple[signal.Signals, ...] = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGUSR1,
)
"""Signals passed on to the child."""

USAGE = "usage: roxxel-worker [--] CMD [ARGS...]"

_HELP = f"""{USAGE}

Run CMD as the Roxxel worker process: forward SIGTERM, SIGINT, SIGHUP and SIGUSR1
to it and exit with its exit code (128+N if signal N killed it; {exit_codes.PREEMPTED_EXIT_CODE} means
preempted after a complete checkpoint). Use -- before a CMD that starts with '-'.
"""

# si_code of a signal the kernel generated itself, e.g. from a terminal (Linux
# <asm-generic/siginfo.h>); Python's signal module does not name it.
_SI_KERNEL = 0x80


class _UsageError(Exception):
    pass


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``roxxel-worker`` and ``python -m roxxel.worker``.

    Args:
        argv: the arguments after the program name; default ``sys.argv[1:]``.

    Returns:
        The exit code: the child's (``128 + N`` if signal ``N`` killed it), 2 for a
        usage error, :data:`~roxxel.exit_codes.CONFIG_ERROR_EXIT_CODE` (78) if the command
        cannot be started (not found, not executable) or failed with an uncaught
        :class:`~roxxel.exit_codes.ConfigurationError`, 0 for ``--help``.
    """
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        cmd = _parse_args(args)
    except _UsageError as err:
        sys.stderr.write(f"roxxel-worker: error: {err}\n{USAGE}\n")
        return exit_codes.USAGE_ERROR
    if not cmd:
        sys.stdout.write(_HELP)
        return exit_codes.SUCCESS
    if log_format.install():  # ROXXEL_LOG_FORMAT=json: one JSON object a line, for Cloud Logging
        logger.setLevel(logging.INFO)
    elif not logging.getLogger().handlers:
        logging.basicConfig(
            stream=sys.stderr,
            level=logging.INFO,
            format="%(asctime)s %(name)s %(levelname)s: %(message)s",
        )
    problem = restart_budget_problem(os.environ)
    if problem:
        log_format.write_line(sys.stderr, logging.ERROR, f"roxxel-worker: {problem}")
        return exit_codes.CONFIG_ERROR_EXIT_CODE
    env = prepare_env(os.environ)
    _log_identity(env)
    try:
        scratch = tempfile.TemporaryDirectory(prefix="roxxel-worker-")
    except OSError as err:  # no writable temporary directory: the command runs, its errors stay its own
        logger.warning("no configuration-error report (%s): an uncaught ConfigurationError exits as it is", err)
        return run(cmd, env)
    with scratch:
        env[ENV_CONFIG_ERROR_FILE] = report = os.path.join(scratch.name, "configuration-error")
        return _configuration_error(run(cmd, env), report)


def _configuration_error(code: int, report: str) -> int:
    """:data:`~roxxel.exit_codes.CONFIG_ERROR_EXIT_CODE` for a child that failed with an uncaught
    :class:`~roxxel.exit_codes.ConfigurationError` (it wrote ``report``), else ``code``."""
    if code in (exit_codes.SUCCESS, exit_codes.PREEMPTED_EXIT_CODE):
        return code
    try:
        with open(report, encoding="utf-8") as f:
            what = f.read().strip()
    except OSError:
        return code
    logger.error(
        "configuration error (exit code %d, not restarted; the command exited with %d): %s",
        exit_codes.CONFIG_ERROR_EXIT_CODE,
        code,
        what,
    )
    return exit_codes.CONFIG_ERROR_EXIT_CODE


def restart_budget_problem(environ: Mapping[str, str]) -> str | None:
    """Why this pod must not start its command: its gang restart is beyond the budget.

    The JobSet restarts the gang for free on preemptions and evictions; the launcher bounds
    those restarts by giving each pod its restart attempt and the last one allowed. A pod
    of a later attempt exits with :data:`~roxxel.exit_codes.CONFIG_ERROR_EXIT_CODE`, which
    the rendered failure policy turns into a failed JobSet.

    Args:
        environ: the worker's environment (both variables unset: no budget, None).

    Returns:
        None to go on, else a one-line message.
    """
    attempt, last = environ.get(ENV_RESTART_ATTEMPT), environ.get(ENV_MAX_RESTART_ATTEMPT)
    if not attempt or not last or not attempt.isdigit() or not last.isdigit():
        return None
    if int(attempt) <= int(last):
        return None
    return (
        f"gang restart {attempt} is beyond the job's budget of {last} restarts (max_restarts + "
        f"max_preemptions): not starting the command (exit {exit_codes.CONFIG_ERROR_EXIT_CODE}, "
        "which fails the JobSet); find out why it keeps being preempted or evicted, then "
        "resume or resubmit it"
    )


def _parse_args(args: list[str]) -> list[str]:
    """Return the command to run, ``[]`` for ``--help``; raise :class:`_UsageError`."""
    if args and args[0] in ("-h", "--help"):
        return []
    if args and args[0] == "--":
        args = args[1:]
    elif args and args[0].startswith("-"):
        raise _UsageError(f"unknown option {args[0]!r} (put -- before a command that starts with '-')")
    if not args:
        raise _UsageError("missing command to run")
    return args


def prepare_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The child's environment: a copy of ``environ`` with ``PYTHONUNBUFFERED=1`` unless set.

    Args:
        environ: the worker's environment.

    Returns:
        A new dict; ``environ`` is not modified.
    """
    env = dict(environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _log_identity(env: Mapping[str, str]) -> None:
    try:
        detected = detect(env)
    except ValueError as err:
        logger.warning("inconsistent distributed environment; roxxel.distributed.initialize() will fail with: %s", err)
        return
    logger.info(
        "process %d of %d (source=%s, coordinator=%s)",
        detected.process_id,
        detected.num_processes,
        detected.source,
        detected.coordinator_address,
    )


def run(cmd: Sequence[str], env: Mapping[str, str] | None = None) -> int:
    """Run ``cmd`` as a child, forward :data:`FORWARDED_SIGNALS` to it, wait for it.

    Must be called from the main thread of a process with no other threads (it
    changes the signal mask and signal dispositions while it runs, and restores them).

    Args:
        cmd: program and arguments; the program is looked up on ``env``'s ``PATH``.
        env: the child's environment; default: the worker's.

    Returns:
        The child's exit code as :func:`roxxel.exit_codes.from_returncode` gives it,
        or 78 if the command is not found / cannot be executed.
    """
    if hasattr(signal, "sigwaitinfo"):
        return _run_sigwaitinfo(list(cmd), env)
    return _run_with_handlers(list(cmd), env)


def _run_sigwaitinfo(cmd: list[str], env: Mapping[str, str] | None) -> int:
    # Block the signals and collect them synchronously: no handler races, and siginfo
    # tells terminal-generated signals apart. The child gets the original mask back.
    watched = {*FORWARDED_SIGNALS, signal.SIGCHLD}
    previous_chld = signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # SIG_IGN would auto-reap the child
    previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, watched)
    try:
        proc = _spawn(cmd, env, lambda: signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask))
        if isinstance(proc, int):
            return proc
        # As a container's PID 1 the worker inherits every orphaned process: reap them.
        is_init = os.getpid() == 1
        bound = _bound_after_sigterm(os.environ if env is None else env)
        deadline: float | None = None  # set by the first SIGTERM when the pod's grace period is known
        while proc.poll() is None:
            if deadline is None:
                info: signal.struct_siginfo | None = signal.sigwaitinfo(watched)
            else:
                info = signal.sigtimedwait(watched, max(0.0, deadline - time.monotonic()))
            if info is None:
                return _kill_after_grace(proc, bound)
            if info.si_signo != signal.SIGCHLD:
                _forward(proc, info.si_signo, from_terminal=info.si_code == _SI_KERNEL)
                if info.si_signo == signal.SIGTERM and bound is not None and deadline is None:
                    deadline = time.monotonic() + bound
            elif is_init:
                _reap_orphans(proc)
        return _finish(proc)
    finally:
        # Signals that arrived after the child ended must not hit the worker when unblocked.
        newly_blocked = watched - set(previous_mask)
        while (late := signal.sigtimedwait(newly_blocked, 0)) is not None:
            if late.si_signo != signal.SIGCHLD:
                logger.info("child already exited; not forwarding %s", signal.Signals(late.si_signo).name)
        signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
        signal.signal(signal.SIGCHLD, previous_chld)


def _bound_after_sigterm(env: Mapping[str, str]) -> float | None:
    """Seconds the command may take to exit after SIGTERM: the pod's grace period
    (``ROXXEL_TERMINATION_GRACE_S``) less :data:`~roxxel.contract.GRACE_MARGIN_S` (a quarter of
    a shorter one, at least 1 s left); None when unset."""
    text = env.get(ENV_TERMINATION_GRACE)
    if not text:
        return None
    try:
        grace = float(text)
    except ValueError:
        logger.warning(
            "%s=%r is not a number of seconds: no bound on the command's exit after SIGTERM",
            ENV_TERMINATION_GRACE,
            text,
        )
        return None
    return max(1.0, grace - min(GRACE_MARGIN_S, grace / 4))


def _kill_after_grace(proc: subprocess.Popen[bytes], bound: float | None) -> int:
    """The command outlived its grace period after SIGTERM (e.g. blocked in a collective whose
    peer is gone, so the agreed step is never reached): kill it before the kubelet does, say so
    in one line, and exit as a SIGTERM without a checkpoint (143)."""
    logger.warning(
        "the command (pid %d) did not exit within %.0f s of SIGTERM, just inside the pod's grace "
        "period: a process blocked in a collective cannot reach the agreed step; killing it (SIGKILL)",
        proc.pid,
        bound or 0,
    )
    proc.kill()
    proc.wait()
    code = exit_codes.SIGNAL_EXIT_BASE + signal.SIGTERM
    logger.warning("child pid %d killed after SIGTERM; exiting with %d: %s", proc.pid, code, exit_codes.describe(code))
    return code


def _reap_orphans(proc: subprocess.Popen[bytes]) -> None:
    """Collect every exited child; keep ``proc``'s status on ``proc`` if it is among them."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:  # no children left at all
            return
        if pid == 0:
            return
        if pid == proc.pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
        else:
            logger.debug("reaped orphaned process %d", pid)


def _run_with_handlers(cmd: list[str], env: Mapping[str, str] | None) -> int:
    child: list[subprocess.Popen[bytes]] = []
    pending: list[int] = []

    def handler(signo: int, _frame: object) -> None:
        if child:
            _forward(child[0], signo, from_terminal=False)
        else:
            pending.append(signo)

    previous = {signo: signal.signal(signo, handler) for signo in FORWARDED_SIGNALS}
    try:
        proc = _spawn(cmd, env, None)
        if isinstance(proc, int):
            return proc
        child.append(proc)
        for signo in pending:
            _forward(proc, signo, from_terminal=False)
        proc.wait()
        return _finish(proc)
    finally:
        for signo, old in previous.items():
            signal.signal(signo, old)


def _spawn(
    cmd: list[str], env: Mapping[str, str] | None, preexec_fn: Callable[[], object] | None
) -> subprocess.Popen[bytes] | int:
    """Start ``cmd``; on failure log why and return the shell's exit code for it."""
    logger.info("starting %s", shlex.join(cmd))
    script = _python_script(cmd)
    if script is not None and not os.path.exists(script):  # a file, or a directory or zip with __main__.py
        # Python would exit 2 ("can't open file"), a code a pod failure policy retries.
        return _cannot_start(cmd[0], f"can't open file {script!r} (relative to {os.getcwd()}): no such file")
    try:
        proc = subprocess.Popen(cmd, env=env, preexec_fn=preexec_fn)
    except FileNotFoundError:
        search_path = (env if env is not None else os.environ).get("PATH")
        resolved = cmd[0] if os.sep in cmd[0] else shutil.which(cmd[0], path=search_path)
        if resolved is not None and os.path.exists(resolved):
            return _cannot_start(cmd[0], "cannot execute: its #! interpreter was not found")
        return _cannot_start(cmd[0], "command not found")
    except OSError as err:  # EACCES, ENOEXEC, ...: exists but cannot run
        return _cannot_start(cmd[0], f"cannot execute: {err.strerror or err}")
    logger.debug("child pid %d", proc.pid)
    return proc


# Python's options that take a value (`python -W error x.py`); -c and -m name no script.
_PYTHON_VALUE_OPTIONS = {"-W", "-X", "--check-hash-based-pycs"}


def _python_script(cmd: list[str]) -> str | None:
    """The script ``cmd`` runs when it is ``python [options] SCRIPT ...``, else None
    (``python -m pkg``, ``python -c ...``, ``python -`` and other programs run no script file)."""
    if not re.fullmatch(r"python[0-9.]*", os.path.basename(cmd[0])):
        return None
    args = iter(cmd[1:])
    for arg in args:
        if arg == "--":
            return next(args, None)
        if arg == "-":  # the script comes from stdin
            return None
        if not arg.startswith("-"):
            return arg
        if arg in _PYTHON_VALUE_OPTIONS:
            next(args, None)
        elif not arg.startswith("--") and ("c" in arg or "m" in arg):  # -c, -m, combined (-uc): no script
            return None
    return None


def _cannot_start(program: str, why: str) -> int:
    """Log why ``program`` cannot start and return the configuration-error exit code: the
    same image fails the same way on every attempt, so restarting the gang cannot help
    (where a shell would exit 126/127, which a pod failure policy counts as a retryable
    failure)."""
    logger.error(
        "%s: %s; exit %d: a configuration error, not restarted (check the job's command)",
        program,
        why,
        exit_codes.CONFIG_ERROR_EXIT_CODE,
    )
    return exit_codes.CONFIG_ERROR_EXIT_CODE


def _forward(proc: subprocess.Popen[bytes], signo: int, *, from_terminal: bool) -> None:
    name = signal.Signals(signo).name
    if from_terminal and _same_process_group(proc.pid):
        logger.info("%s came from the terminal, which sent it to pid %d too; not forwarding", name, proc.pid)
        return
    logger.info("forwarding %s to pid %d", name, proc.pid)
    proc.send_signal(signo)  # a no-op once the child has been reaped


def _same_process_group(pid: int) -> bool:
    try:
        return os.getpgid(pid) == os.getpgrp()
    except ProcessLookupError:  # already exited: nothing to deliver either way
        return True


def _finish(proc: subprocess.Popen[bytes]) -> int:
    code = exit_codes.from_returncode(proc.returncode)
    level = logging.INFO if code in (exit_codes.SUCCESS, exit_codes.PREEMPTED_EXIT_CODE) else logging.WARNING
    logger.log(level, "child pid %d exited with %d: %s", proc.pid, code, exit_codes.describe(code))
    return code


if __name__ == "__main__":
    raise SystemExit(main())
