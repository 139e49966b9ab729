"""A progress watchdog: a process whose steps stop finishing ends the job instead of hanging it.

A worker stuck while alive (a main thread blocked in Python, a collective waiting for a
stuck peer, a save that never completes) holds the whole gang: every pod is Running, so
neither Kubernetes nor JobSet can notice. Each process therefore runs a daemon thread that
knows what the process is doing and since when; when that takes longer than its bound,
the thread writes one line (process, last step, what it waits in), then the Python stacks
of every thread (``faulthandler``), and ends the process with
:data:`~roxxel.contract.STALLED_EXIT_CODE` (43), which the rendered failure policies count
as an ordinary failure: a counted gang restart that resumes from the last checkpoint. The
peers, blocked in the step's collective, stop finishing steps too and usually do the same
(unless the stuck process's exit breaks their collective first), so the log holds their
stacks as well. Process 0 hosts JAX's coordination service, and a peer whose coordinator is
gone aborts at once (SIGABRT, no stacks): so when process 0's watchdog fires in a
multi-process job it writes its stacks, then lingers :func:`coordinator_linger_s` before
exiting, long enough for peers whose bounds end in the same window (the stuck worker among
them) to write theirs and exit 43 themselves.

Bounds (seconds, :class:`WatchdogBounds`):

- a step: ``max(step_floor_s, step_multiple * median)`` of the step times seen so far
  (the first step of each phase, which compiles, is not in the median);
- a restore, then the stream's set-up and the first step; the first step of each later
  phase (it compiles): ``first_step_s``;
- an evaluation: ``eval_s``; a checkpoint save or the wait for one: ``save_s``.

The defaults are minutes, and the step bound scales with the measured median, so a
healthy run on a loaded machine (steps 10x slower than at the start) stays under it.

The Trainer's watchdog listens to its loop events (:mod:`roxxel.train.sections`): a section
beginning sets the bound of the work in progress, a step ending is progress. A program with
its own loop gets the same watchdog with one call per step (:func:`watch_loop`)::

    with watch_loop() as watchdog:  # ROXXEL_WATCHDOG's bounds, in a job only
        for step in range(start, total):
            state, loss = train_step(state, next(batches))
            watchdog.progress(step + 1)
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import faulthandler
import functools
import json
import logging
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping

from roxxel.contract import ENV_CONFIG_ERROR_FILE, ENV_WATCHDOG, STALLED_EXIT_CODE
from roxxel.exit_codes import ConfigTypeError, ConfigValueError
from roxxel.log_format import write_line
from roxxel.train.sections import COMPILE, EVAL, PREEMPTION_SAVE, RESTORE, SAVE, STEP, Section

log = logging.getLogger("roxxel.train")


MAX_BOUND_S = 365 * 86400.0
"""The largest bound: past it (or infinite) the watching thread's timers overflow."""


@dataclasses.dataclass(frozen=True)
class WatchdogBounds:
    """How long each activity may go without progress, in seconds.

    Attributes:
        step_floor_s: a step may always take this long (default 600).
        step_multiple: ... or this many times the median step time (default 20).
        first_step_s: the first step of a phase, with the restore and compilation before it (default 1800).
        eval_s: one evaluation (default 1800).
        save_s: starting a checkpoint save, or waiting for one to complete (default 1800).
        poll_s: how often the watchdog looks (default 1).

    Raises:
        ValueError: a bound that is not a positive number.
    """

    step_floor_s: float = 600.0
    step_multiple: float = 20.0
    first_step_s: float = 1800.0
    eval_s: float = 1800.0
    save_s: float = 1800.0
    poll_s: float = 1.0

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_BOUND_S:
                raise ValueError(
                    f"WatchdogBounds.{field.name} must be a positive number of seconds up to "
                    f"{MAX_BOUND_S:.0f} (a year), got {value!r}"
                )


DEFAULT_BOUNDS = WatchdogBounds()
"""The bounds a Trainer uses unless told otherwise."""


def bounds_from_env(environ: Mapping[str, str] | None = None) -> WatchdogBounds | None:
    """The bounds ``ROXXEL_WATCHDOG`` asks for (the job spec's ``watchdog`` section): a JSON
    object of :class:`WatchdogBounds` fields over the defaults, ``off`` for none; unset or
    empty: :data:`DEFAULT_BOUNDS`.

    Raises:
        ConfigValueError: not JSON, an unknown field, or a bound that is not a positive number
            (exit 78 under ``roxxel-worker``: every attempt would read the same).
    """
    text = (os.environ if environ is None else environ).get(ENV_WATCHDOG, "").strip()
    if not text:
        return DEFAULT_BOUNDS
    if text.lower() == "off":
        return None
    try:
        given = json.loads(text)
    except ValueError as err:
        raise ConfigValueError(
            f'{ENV_WATCHDOG}={text!r} is not JSON ({err}); give e.g. {{"step_floor_s": 300}} or off'
        ) from None
    names = {field.name for field in dataclasses.fields(WatchdogBounds)}
    if not isinstance(given, dict) or set(given) - names:
        raise ConfigValueError(f"{ENV_WATCHDOG}={text!r}: expected an object of {', '.join(sorted(names))}")
    try:
        return dataclasses.replace(DEFAULT_BOUNDS, **given)
    except ValueError as err:
        raise ConfigValueError(f"{ENV_WATCHDOG}: {err}") from None


_BOUNDED = {
    RESTORE: ("restoring the latest checkpoint", "first_step_s"),
    COMPILE: ("running step {step}, the first of its phase (compiling)", "first_step_s"),
    SAVE: ("saving step {step} (or waiting for a save to complete)", "save_s"),
    PREEMPTION_SAVE: ("saving the preemption checkpoint of step {step}", "save_s"),
    EVAL: ("evaluating at step {step}", "eval_s"),
}
"""The sections with a bound of their own: what the message says they were doing, and which
:class:`WatchdogBounds` field bounds them."""


def in_a_job() -> bool:
    """Whether this process is part of a job the watchdog guards: a ``jax.distributed`` gang,
    or a command ``roxxel-worker`` runs (it sets ``ROXXEL_CONFIG_ERROR_FILE`` for its child).
    Outside a job (a notebook paused in a debugger) nothing is ended."""
    import jax  # here: the module itself loads no JAX

    return jax.process_count() > 1 or bool(os.environ.get(ENV_CONFIG_ERROR_FILE))


def chosen_bounds(watchdog: WatchdogBounds | None) -> WatchdogBounds | None:
    """The bounds to use: ``watchdog`` as given, or, left at :data:`DEFAULT_BOUNDS`, what
    ``ROXXEL_WATCHDOG`` says (:func:`bounds_from_env`); None: no watchdog.

    Raises:
        ConfigTypeError: not a :class:`WatchdogBounds` or None.
        ConfigValueError: a bad ``ROXXEL_WATCHDOG``.
    """
    if watchdog is not None and not isinstance(watchdog, WatchdogBounds):
        raise ConfigTypeError(f"watchdog must be a WatchdogBounds or None, got {type(watchdog).__name__}")
    return bounds_from_env() if watchdog is DEFAULT_BOUNDS else watchdog


def coordinator_linger_s(bounds: WatchdogBounds, process_index: int, process_count: int) -> float:
    """How long a firing watchdog waits after its stacks before exiting, in seconds: 0, except
    on process 0 of a multi-process job, which hosts JAX's coordination service (the
    ``jax.distributed`` convention): there two polls and 5 s, so a peer that passes its own
    bound a moment later writes its stacks instead of aborting when the service goes."""
    return 2 * bounds.poll_s + 5.0 if process_index == 0 and process_count > 1 else 0.0


def _stall(message: str, linger_s: float = 0.0) -> None:
    """The default reaction: the line, every thread's stack, ``linger_s`` seconds for the peers
    (see :func:`coordinator_linger_s`), then exit 43 (a blocked main thread would never run
    ``sys.exit``)."""
    write_line(sys.stderr, logging.ERROR, f"roxxel: {message}; the stacks of this process's threads follow")
    sys.stderr.flush()
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    sys.stderr.flush()
    log.error("%s", message)
    for handler in logging.getLogger().handlers + logging.getLogger("roxxel").handlers:
        with contextlib.suppress(Exception):
            handler.flush()
    if linger_s > 0:
        write_line(sys.stderr, logging.ERROR, f"roxxel: process 0 hosts the coordinator: exiting in {linger_s:.0f} s")
        sys.stderr.flush()
        time.sleep(linger_s)
    os._exit(STALLED_EXIT_CODE)


class ProgressWatchdog:
    """Watches one process's training progress (see the module docstring).

    Args:
        bounds: the bounds; ``WatchdogBounds()`` for the defaults.
        process_index: named in the message (``jax.process_index()``).
        process_count: ``jax.process_count()``; with ``process_index`` it sets how long the
            default reaction lingers (:func:`coordinator_linger_s`).
        on_stall: called once with the message when a bound is passed (default: write the
            stacks and exit with 43); tests give their own.
        clock: seconds, monotonic (tests give a fake one).
    """

    def __init__(
        self,
        bounds: WatchdogBounds,
        *,
        process_index: int = 0,
        process_count: int = 1,
        on_stall: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.bounds = bounds
        self.process_index = process_index
        linger_s = coordinator_linger_s(bounds, process_index, process_count)
        self._on_stall = on_stall or functools.partial(_stall, linger_s=linger_s)
        self._clock = clock
        self._lock = threading.Lock()
        self._durations: collections.deque[float] = collections.deque(maxlen=101)
        self._what = "restoring, setting up the stream and compiling the first step"
        self._since = clock()
        self._bound = bounds.first_step_s
        self._last_step: int | None = None
        self._fired = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> ProgressWatchdog:
        """Start the watching thread (a daemon); returns self."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="roxxel-watchdog", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching (idempotent)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def first_step(self, phase: int) -> None:
        """The next step is the first of ``phase`` (it compiles): bounded by ``first_step_s``."""
        self._set(f"running the first step of phase {phase} (compiling)", self.bounds.first_step_s)

    def step_done(self, step: int, *, timed: bool = True) -> None:
        """Step ``step`` finished; ``timed=False`` keeps its time out of the median (a compile)."""
        now = self._clock()
        with self._lock:
            if timed and self._what == "running a step":
                self._durations.append(now - self._since)
            self._last_step = step
        self._set("running a step", self.step_bound())

    def step_bound(self) -> float:
        """The current bound of one step, in seconds."""
        with self._lock:
            median = statistics.median(self._durations) if self._durations else 0.0
        return max(self.bounds.step_floor_s, self.bounds.step_multiple * median)

    @contextlib.contextmanager
    def during(self, what: str, bound_s: float) -> Iterator[None]:
        """Bound an activity other than a step (an evaluation, a save) by ``bound_s``; the step
        bound starts afresh after it."""
        self._set(what, bound_s)
        try:
            yield
        finally:
            self._set("running a step", self.step_bound())

    # -- a listener of the loop's sections (roxxel.train.sections) ---------------------------

    def section_began(self, name: str, step: int) -> None:
        """A section begins: a restore, a compile, a save or an evaluation gets its own bound;
        a batch wait and a step are parts of a step (bounded from the last step's end)."""
        bounded = _BOUNDED.get(name)
        if bounded is not None:
            what, bound = bounded
            self._set(what.format(step=step), getattr(self.bounds, bound))

    def on_section(self, event: Section) -> None:
        """A section ended: a step (a compile: kept out of the median) is progress; after a
        restore come the stream's set-up and the first step (``first_step_s``); after a save
        or an evaluation the step bound starts afresh."""
        if event.name == STEP:
            self.step_done(event.step)
        elif event.name == COMPILE:
            self.step_done(event.step, timed=False)
        elif event.name == RESTORE:
            self._set("setting up the data stream and compiling the first step", self.bounds.first_step_s)
        elif event.name in _BOUNDED:
            self._set("running a step", self.step_bound())

    def check(self) -> str | None:
        """The stall message if the current activity is past its bound (once), else None."""
        now = self._clock()
        with self._lock:
            if self._fired or now - self._since <= self._bound:
                return None
            self._fired = True
            after = "before its first step" if self._last_step is None else f"after step {self._last_step}"
            return (
                f"watchdog: process {self.process_index} made no progress for {now - self._since:.0f} s "
                f"(bound {self._bound:.0f} s) while {self._what}, {after}: a stuck worker, a peer stuck or "
                f"gone, or storage that does not answer; exiting with {STALLED_EXIT_CODE} for a gang restart"
            )

    def _set(self, what: str, bound_s: float) -> None:
        with self._lock:
            self._what, self._since, self._bound = what, self._clock(), bound_s

    def _watch(self) -> None:
        while not self._stop.wait(self.bounds.poll_s):
            message = self.check()
            if message is not None:
                self._on_stall(message)
                return


class LoopWatch:
    """What :func:`watch_loop` yields: the progress calls of a loop the Trainer does not run.
    Without a watchdog (off, or not in a job) every call costs nothing and does nothing.

    Attributes:
        watchdog: the running :class:`ProgressWatchdog`, or None.
    """

    def __init__(self, watchdog: ProgressWatchdog | None) -> None:
        self.watchdog = watchdog
        self._compiled = False

    def progress(self, step: int) -> None:
        """Step ``step`` finished (call it once per step, after the step's result is known or
        its work dispatched); the first call ends the compiling first step (``first_step_s``),
        the later ones are bounded by the step bound."""
        if self.watchdog is not None:
            self.watchdog.step_done(step, timed=self._compiled)
            self._compiled = True

    def during(self, what: str, bound: str = "save_s") -> contextlib.AbstractContextManager[None]:
        """Bound ``what`` (e.g. ``"saving step 100"``) by the :class:`WatchdogBounds` field
        ``bound`` (``"save_s"``, ``"eval_s"``, ``"first_step_s"``) instead of the step bound.

        Raises:
            ValueError: ``bound`` is no field of :class:`WatchdogBounds`.
        """
        if bound not in {field.name for field in dataclasses.fields(WatchdogBounds)} - {"poll_s", "step_multiple"}:
            raise ValueError(f"bound must be save_s, eval_s, first_step_s or step_floor_s, got {bound!r}")
        if self.watchdog is None:
            return contextlib.nullcontext()
        return self.watchdog.during(what, getattr(self.watchdog.bounds, bound))


@contextlib.contextmanager
def watch_loop(bounds: WatchdogBounds | None = DEFAULT_BOUNDS) -> Iterator[LoopWatch]:
    """The Trainer's progress watchdog for a program with its own training loop.

    Inside the ``with`` block a daemon thread ends the process with 43 and every thread's
    stack when the work before the first :meth:`LoopWatch.progress` call takes longer than
    ``first_step_s`` or a later step longer than the step bound (see the module docstring);
    ``roxxel-worker`` passes the exit code on and the job's failure policy restarts the gang.
    It runs in a job only (:func:`in_a_job`), like the Trainer's.

    Args:
        bounds: the bounds; left at :data:`DEFAULT_BOUNDS`, ``ROXXEL_WATCHDOG`` (the job spec's
            ``watchdog`` section) may change them or turn the watchdog off; None: off.

    Raises:
        ConfigTypeError, ConfigValueError: bad bounds, or a bad ``ROXXEL_WATCHDOG`` (exit 78
            under ``roxxel-worker``).
    """
    chosen = chosen_bounds(bounds)
    watchdog = None
    if chosen is not None and in_a_job():
        import jax

        watchdog = ProgressWatchdog(
            chosen, process_index=jax.process_index(), process_count=jax.process_count()
        ).start()
    try:
        yield LoopWatch(watchdog)
    finally:
        if watchdog is not None:
            watchdog.stop()
