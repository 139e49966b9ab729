"""The supervisor of a local job: starts its workers, watches them, restarts them.

One supervisor process per running job starts the workers, watches them (every
:data:`POLL_SECONDS`), restarts them and writes ``status.json``. With
``LocalOptions(foreground=True)`` (the CLI's default) ``submit`` runs it inside the
calling process and echoes worker 0's output with the prefix ``[worker 0] ``; otherwise it is a detached process
(``python -m roxxel_launch.backends.local.supervisor supervise RUN_DIR``, in its own session, so
closing the terminal does not stop it).

Every worker runs in **its own process group**. A terminal's Ctrl-C is delivered to the
whole foreground process group; if the workers shared it, every training process would
get SIGINT at the same moment as the supervisor (Python turns it into KeyboardInterrupt,
exit code 1), the supervisor could not tell a user's stop from a crash, and a gang
restart could race the shutdown. With separate groups the supervisor alone receives
Ctrl-C and decides: it sends SIGTERM (the preemption signal the trainer handles by saving
a checkpoint and exiting 42) to each worker's ``roxxel-worker`` process, which forwards it
to the training command, waits up to the grace period, then SIGKILLs the whole group, so
that nothing the training command started survives. A second Ctrl-C skips the grace
period. On Linux each worker also gets SIGTERM if the supervisor dies
(``PR_SET_PDEATHSIG``), so a killed supervisor does not leave workers behind.

Grace period = the pod's ``terminationGracePeriodSeconds`` (the spec's
``termination_grace_period``) capped at :data:`GRACE_CAP_SECONDS` for local runs, as the
kubelet applies it on delete: SIGTERM, then SIGKILL once it has passed. (A program that
has initialised ``jax.distributed`` catches SIGTERM through JAX's preemption notifier:
unless it saves and exits itself, it is stopped by the SIGKILL at the end of the grace period.)

Outcomes of an attempt. Every worker is a pod of the rendered manifest
(:mod:`roxxel_launch.backends.local.pods`); the first worker that ends with a code other than 0
is judged by the manifest's policies (:mod:`roxxel_launch.backends.local.policy`):

- every worker exits 0: ``Succeeded``, exit 0 (a worker that exits 0 early waits for the
  others, like a completed pod);
- the Job re-creates the pod (``backoffLimit`` not used up, or an ``Ignore`` rule): that
  worker alone starts again;
- the JobSet restarts (``RestartJobSet``, counted against ``maxRestarts``, or
  ``RestartJobSetAndIgnoreMaxRestarts``, e.g. exit 42 after a preemption, not counted):
  the others get SIGTERM, the job is ``Restarting`` until all of them are gone
  (``BlockingRecreate``), then every pod starts again with the JobSet's
  ``restart-attempt`` one higher (a new coordinator port, an attempt header in each log);
- the workload fails: exit 42 (an Indexed Job, which has no gang restart) makes it
  ``Preempted`` (:meth:`LocalBackend.resume` runs it again and the training program
  restores its last checkpoint); exit 78 (:data:`roxxel.exit_codes.CONFIG_ERROR_EXIT_CODE`)
  ``Failed`` with reason ``config_error``; ``maxRestarts`` used up ``Failed`` with reason
  ``restarts_exhausted``; anything else ``Failed``. The message names the worker and quotes
  the last lines of its log;
- a container the engine could not start (the runtime's ``EngineError``: exit 125-127
  before the program ran, see :mod:`roxxel_launch.backends.local.containers`) fails the
  job at once whatever the policies say, ``Failed`` with reason ``config_error``, the
  engine's message and the fix in one line: it would fail the same way on every attempt;
- Ctrl-C / SIGTERM / SIGHUP to the supervisor: ``Preempted`` (42) when the workers
  exited 42 (or 0), ``Succeeded`` if they had all finished, else ``Failed`` with
  ``128 + signal`` (130 for Ctrl-C, 143 for SIGTERM). A job is never restarted after a
  stop request.

When a worker's ``roxxel-worker`` process ends, whatever is left in its process group is
SIGKILLed, as when a container ends.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shlex
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from roxxel import exit_codes
from roxxel.wording import count
from roxxel_launch import contract
from roxxel_launch.backends import rendered_pods
from roxxel_launch.backends.base import BackendError, JobState, JobStatus, StopReason
from roxxel_launch.backends.local import policy
from roxxel_launch.backends.local.pods import LocalSettings, make_volume_dirs
from roxxel_launch.backends.local.processes import LogEcho
from roxxel_launch.backends.local.rundir import (
    ATTEMPT_HEADER,
    GRACE_CAP_SECONDS,
    LAUNCH_FILE,
    LOCK_FILE,
    POLL_SECONDS,
    SPEC_FILE,
    STATUS_FILE,
    SUPERVISOR_LOG,
    TAIL_LINES,
    acquire_lock,
    log_tail,
    now,
    read_json,
    status_from_dict,
    write_json,
)
from roxxel_launch.backends.local.runtime import ENGINE_FAILURE, RunningWorker, WorkerRuntime
from roxxel_launch.backends.local.runtimes import runtime_for
from roxxel_launch.backends.process_plan import rendered_objects

__all__ = ["Supervisor"]

logger = logging.getLogger("roxxel_launch.backends.local")

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


# ------------------------------------------------------------------------------------
# The supervisor
# ------------------------------------------------------------------------------------


@dataclasses.dataclass
class _Worker:
    index: int
    run: RunningWorker
    exit_code: int | None = None
    exit_order: int | None = None
    group_killed: bool = False  # SIGKILL went to its whole group: members may still be unreaped
    termination: tuple[str, str] | None = None  # (reason, message) where the runtime knows why it ended


@dataclasses.dataclass
class _Outcome:
    kind: str  # "succeeded" | "decided" (the policy's decision) | "stopped"
    codes: list[int | None]
    worker: int | None = None  # the failed worker the decision is about
    decision: policy.Decision | None = None

    def failing_worker(self) -> tuple[int, int]:
        """``(index, exit code)`` of the worker that a "decided" outcome is about."""
        code = None if self.worker is None else self.codes[self.worker]
        if self.worker is None or code is None:
            raise RuntimeError(f"a {self.kind!r} outcome names no worker that exited (codes {self.codes})")
        return self.worker, code


class Supervisor:
    """Runs one job's attempts in the calling process (see the module docstring)."""

    def __init__(
        self,
        run_dir: Path,
        *,
        echo: IO[str] | None,
        resume: bool,
        stderr_level: int | None,
        runtime: WorkerRuntime | None = None,
    ):
        """``runtime``: what starts and signals each pod's worker; default
        :func:`~roxxel_launch.backends.local.runtime.default_runtime` (processes)."""
        self.run_dir = run_dir
        self.runtime = runtime
        self.echo = echo
        self.resume = resume
        self.stderr_level = stderr_level
        self.workers: list[_Worker] = []
        self.signals: list[int] = []
        self.exits_seen = 0
        self.network = None  # a netns.PodNetwork in --netns runs
        self.job_failures: dict[str, int] = {}  # failures counted against each Job's backoffLimit

    # -- entry point -------------------------------------------------------------------
    def run(self) -> JobStatus:
        if threading.current_thread() is not threading.main_thread():
            raise BackendError("a local job runs its supervisor in the main thread only (it handles signals)")
        lock_fd = acquire_lock(self.run_dir / LOCK_FILE)
        try:
            with self._logging(), self._signal_handlers():
                self._load()
                try:
                    with self._pod_network():
                        return self._supervise()
                except BaseException as err:
                    logger.exception("supervisor error; stopping every worker")
                    self._stop_workers(grace=0.0)
                    self._finish(
                        JobState.FAILED,
                        1,
                        f"the local supervisor failed: {err!r} (see {self.run_dir / SUPERVISOR_LOG})",
                        StopReason.FAILED,
                    )
                    raise
        finally:
            os.close(lock_fd)

    @contextlib.contextmanager
    def _logging(self):
        handlers: list[logging.Handler] = [logging.FileHandler(self.run_dir / SUPERVISOR_LOG, encoding="utf-8")]
        handlers[0].setFormatter(logging.Formatter("%(asctime)s %(levelname)s: %(message)s"))
        handlers[0].setLevel(logging.INFO)
        if self.stderr_level is not None:
            handlers.append(logging.StreamHandler(sys.stderr))
            handlers[-1].setFormatter(logging.Formatter("[roxxel-launch] %(levelname)s: %(message)s"))
            handlers[-1].setLevel(self.stderr_level)
        previous = (logger.level, logger.propagate)
        logger.setLevel(logging.INFO if self.stderr_level is None else min(logging.INFO, self.stderr_level))
        logger.propagate = False
        for h in handlers:
            logger.addHandler(h)
        try:
            yield
        finally:
            for h in handlers:
                logger.removeHandler(h)
                h.close()
            logger.setLevel(previous[0])
            logger.propagate = previous[1]

    @contextlib.contextmanager
    def _signal_handlers(self):
        def handler(signo: int, _frame: object) -> None:
            self.signals.append(signo)

        previous = {signo: signal.signal(signo, handler) for signo in _STOP_SIGNALS}
        try:
            yield
        finally:
            for signo, old in previous.items():
                signal.signal(signo, old)

    @contextlib.contextmanager
    def _pod_network(self):
        """``self.network``: the run's network namespaces with ``--netns``, else None (loopback)."""
        if self.launch.get("network", "loopback") != "netns":
            yield
            return
        from roxxel_launch.backends.local import netns

        reason = netns.unavailable_reason()
        if reason is not None:
            logger.warning("--netns: %s; running the workers on loopback instead", reason)
            yield
            return
        with netns.PodNetwork(self.spec, self.launch.get("python")) as self.network:
            yield
        self.network = None

    def _worker_name(self, i: int) -> str:
        """``worker i``, with its host in --netns runs (which host failed is what a user asks)."""
        if self.network is None:
            return f"worker {i}"
        return f"worker {i} (host {self.network.hosts[i].hostname}, {self.network.address(i)})"

    # -- state ---------------------------------------------------------------------------
    def _load(self) -> None:
        from roxxel_launch.spec import spec_from_dict

        self.spec = spec_from_dict(read_json(self.run_dir / SPEC_FILE))
        self.launch = read_json(self.run_dir / LAUNCH_FILE)
        self.status = read_json(self.run_dir / STATUS_FILE)
        # The manifest a cluster would get: its pods, their containers, env and policies.
        objects = rendered_objects(self.spec)
        self.pods = rendered_pods.manifest_pods(objects)
        self.policy = policy.policy_of(objects)
        self.is_jobset = any(obj.get("kind") == "JobSet" for obj in objects)
        self.settings = LocalSettings(
            python=self.launch.get("python") or sys.executable,
            run_dir=self.run_dir,
            data_dir=self.launch.get("data_dir"),
            devices_per_worker=self.launch.get("devices_per_worker"),
        )
        self.grace = float(min(self.pods[0].grace_seconds, GRACE_CAP_SECONDS))
        if self.runtime is None:
            self.runtime = runtime_for(self.launch.get("runtime"), self.run_dir, self.settings.python)
        for left in self.runtime.remove_run():  # what a killed supervisor of this run left
            logger.warning("removed %s, left by an earlier supervisor of this run", left)
        if self.resume:
            self.status["resumes"] = self.status.get("resumes", 0) + 1
            logger.info("resuming job %s (resume %d)", self.spec.name, self.status["resumes"])
        self.status.update(
            state=JobState.PENDING.value,
            restarts=0,
            restarts_counted=0,
            exit_code=None,
            message="",
            reason=None,
            supervisor_pid=os.getpid(),
            pids=[],
            worker_exit_codes=[],
            failed_process=None,
        )
        self.status.setdefault("attempts", [])
        self._save()

    def _save(self) -> None:
        self.status["updated"] = now()
        write_json(self.run_dir / STATUS_FILE, self.status)

    def _finish(self, state: JobState, code: int, message: str, reason: StopReason | None = None) -> JobStatus:
        self.status.update(
            state=state.value, exit_code=code, message=message, reason=None if reason is None else reason.value
        )
        self._save()
        # INFO: the caller reports the outcome (the CLI prints it; status() returns it).
        logger.info(
            "job %s %s (exit code %d)%s", self.spec.name, state.value.lower(), code, f": {message}" if message else ""
        )
        return status_from_dict(self.status, self.run_dir)

    # -- attempts ------------------------------------------------------------------------
    def _supervise(self) -> JobStatus:
        while True:
            outcome = self._attempt()
            if outcome.kind == "succeeded":
                return self._finish(JobState.SUCCEEDED, exit_codes.SUCCESS, "")
            if outcome.kind == "stopped":
                return self._finish_stopped(outcome)
            i, code = outcome.failing_worker()
            decision = outcome.decision
            if decision is None:
                raise RuntimeError(f"worker {i} failed and no policy decision was taken")
            what = f"{self._worker_name(i)} exited with {code} ({self._why(i, code)})"
            if self.signals:
                return self._finish(
                    JobState.FAILED,
                    code,
                    f"{what}; not restarted: stop requested by {signal.Signals(self.signals[0]).name}",
                    StopReason.STOPPED_BY_USER,
                )
            if decision.action is policy.Action.RESTART:
                restarts = self.status["restarts"] + 1
                counted = self.status.get("restarts_counted", 0) + int(decision.counted)
                which = (
                    f"gang restart {counted} of at most {self.policy.max_restarts}"
                    if decision.counted
                    else f"gang restart {restarts}, not counted against max_restarts"
                )
                self.status.update(
                    restarts=restarts,
                    restarts_counted=counted,
                    state=JobState.RESTARTING.value,
                    message=f"{what}; {which} ({decision.message})",
                )
                self._save()
                logger.warning("%s; %s (%s)", what, which, decision.message)
                continue
            return self._finish_decided(i, code, what, decision)

    def _why(self, i: int, code: int) -> str:
        """What worker ``i``'s exit means: the runtime's reason where it has one (a container
        ``OOMKilled``), else what the code says."""
        ended = next((w.termination for w in self.workers if w.index == i), None)
        return exit_codes.describe(code) if ended is None else f"{ended[0]}: {ended[1]}"

    def _finish_decided(self, i: int, code: int, what: str, decision: policy.Decision) -> JobStatus:
        """The workload failed by the manifest's policies: Preempted (42, resume it), a
        configuration error (78), max_restarts used up, or another failure."""
        ended = next((w.termination for w in self.workers if w.index == i), None)
        if ended is not None and ended[0] == ENGINE_FAILURE:
            # One line: the engine's words and the fix (the worker's log holds only those).
            self.status["failed_process"] = i
            return self._finish(
                JobState.FAILED,
                code,
                f"{self._worker_name(i)}: {ended[1]}; not restarted: a configuration error, "
                "every attempt would fail the same way",
                StopReason.CONFIG_ERROR,
            )
        if code == exit_codes.PREEMPTED_EXIT_CODE:
            return self._finish(
                JobState.PREEMPTED,
                code,
                f"{what}: {decision.message}; "  # `what` says "preempted" already
                f"resume with `roxxel-launch resume {self.spec.name} --local`",
                StopReason.PREEMPTED,
            )
        if code == exit_codes.CONFIG_ERROR_EXIT_CODE:
            # Said once, in this machine's words: the failure policy's message (Kubernetes'
            # "Container worker for pod ... matching FailJob rule") stays in the attempt's record.
            return self._finish_failed(
                i,
                code,
                f"{self._worker_name(i)} exited with {code}, a configuration error: not restarted, "
                "as it fails the same way on every attempt; fix the job and submit again",
                StopReason.CONFIG_ERROR,
            )
        if decision.reason == policy.REACHED_MAX_RESTARTS:
            return self._finish_failed(
                i,
                code,
                f"{what}; max_restarts ({self.policy.max_restarts}) used up "
                f"after {count(self.status['restarts'], 'gang restart')}",
                StopReason.RESTARTS_EXHAUSTED,
            )
        return self._finish_failed(i, code, f"{what}; {decision.message}", StopReason.FAILED)

    def _finish_failed(self, worker: int, code: int, what: str, reason: StopReason) -> JobStatus:
        log = self.run_dir / f"worker-{worker}.log"
        tail = "\n".join(log_tail(log, TAIL_LINES)) or "(empty)"
        self.status["failed_process"] = worker
        return self._finish(JobState.FAILED, code, f"{what}. Last lines of {log}:\n{tail}", reason)

    def _finish_stopped(self, outcome: _Outcome) -> JobStatus:
        signo = self.signals[0]
        name = signal.Signals(signo).name
        codes = outcome.codes
        code_text = ", ".join(f"worker {i}: {c}" for i, c in enumerate(codes))
        if all(c in (exit_codes.SUCCESS, exit_codes.PREEMPTED_EXIT_CODE) for c in codes):
            if exit_codes.PREEMPTED_EXIT_CODE in codes:
                return self._finish(
                    JobState.PREEMPTED,
                    exit_codes.PREEMPTED_EXIT_CODE,
                    f"stopped by {name}; the workers saved a checkpoint ({code_text}); resume with "
                    f"`roxxel-launch resume {self.spec.name} --local`",
                    StopReason.STOPPED_BY_USER,
                )
            return self._finish(JobState.SUCCEEDED, exit_codes.SUCCESS, f"all workers had finished when {name} came")
        return self._finish(
            JobState.FAILED,
            exit_codes.SIGNAL_EXIT_BASE + signo,
            f"stopped by {name} ({code_text})",
            StopReason.STOPPED_BY_USER,
        )

    def _processes(self) -> tuple[str, list[tuple[list[str], dict[str, str]]]]:
        """The coordinator address the workers will use and each pod's (argv, env), from the
        manifest, as the runtime runs them (see :meth:`WorkerRuntime.commands`)."""
        attempt = self.status["restarts"] if self.is_jobset else None  # the restart-attempt label
        if self.runtime is None:
            raise RuntimeError("the supervisor plans attempts only after _load")
        return self.runtime.commands(self.pods, self.settings, restart_attempt=attempt, network=self.network)

    def _start_worker(self, i: int, argv: list[str], env: dict[str, str], header: str) -> _Worker:
        pod = self.pods[i]
        make_volume_dirs(pod, self.settings)
        network = self.network
        wrap = None if network is None else (lambda command: network.wrap(i, command))
        if self.runtime is None:
            raise RuntimeError("the supervisor starts workers only after _load")
        with open(self.run_dir / f"worker-{i}.log", "ab") as log:
            log.write(f"{header}, {now()} =====\n".encode())
            log.flush()
            run = self.runtime.start(i, argv, env=env, cwd=self.launch["cwd"], log=log, wrap=wrap)
        logger.info("%s (pod %s): pid %d", self._worker_name(i), pod.name, run.pid)
        return _Worker(i, run)

    def _attempt(self) -> _Outcome:
        spec, n = self.spec, len(self.pods)
        number = len(self.status["attempts"]) + 1
        if self.network is not None:
            self.network.up()  # fresh pods' network for every attempt, as a gang restart recreates pods
        address, procs = self._processes()
        record = {
            "attempt": number,
            "started": now(),
            "coordinator_address": address,
            "restart": self.status["restarts"],
            "resume": self.status.get("resumes", 0),
            "pods": [pod.name for pod in self.pods],
            "pids": [],
            "exit_codes": [],
            "outcome": None,
            "ended": None,
        }
        if self.network is not None:
            record["hosts"] = self.network.describe()
        self.status["attempts"].append(record)
        self.workers, self.exits_seen = [], 0
        self.job_failures = {}  # a gang restart creates new Jobs
        echo = LogEcho(self.run_dir / "worker-0.log", "[worker 0] ", self.echo) if self.echo else None
        logger.info(
            "attempt %d: starting %s, coordinator %s: %s", number, count(n, "pod"), address, shlex.join(procs[0][0])
        )
        headers = [
            f"{ATTEMPT_HEADER} attempt {number} (restart {record['restart']}, resume {record['resume']}) "
            f"of job {spec.name}, pod {pod.name}, process {i} of {n}, coordinator {address}"
            for i, pod in enumerate(self.pods)
        ]
        for i, (argv, env) in enumerate(procs):
            if self.signals:
                break
            self.workers.append(self._start_worker(i, argv, env, headers[i]))
        record["pids"] = [w.run.pid for w in self.workers]
        # After a gang restart the message keeps saying why it happened.
        self.status.update(state=JobState.RUNNING.value, pids=record["pids"], worker_exit_codes=[None] * n)
        self._save()

        outcome = None
        while outcome is None:
            if echo:
                echo.pump()
            self._reap()
            if self.signals or len(self.workers) < n:
                if self.signals:
                    logger.warning(
                        "%s received: stopping %s (SIGTERM, then SIGKILL after %gs; "
                        "a second Ctrl-C kills them at once)",
                        signal.Signals(self.signals[0]).name,
                        count(n, "worker"),
                        self.grace,
                    )
                self._stop_workers(self.grace, echo=echo)
                outcome = _Outcome("stopped", self._codes(n))
                break
            failed = self._first_failure()
            if failed is not None:
                decision = self._decide(failed)
                if decision.action is policy.Action.RECREATE_POD:
                    logger.warning(
                        "%s; the Job re-creates the pod (%s)", self._worker_name(failed.index), decision.message
                    )
                    self.workers[failed.index] = self._start_worker(
                        failed.index, *procs[failed.index], f"{headers[failed.index]}, pod re-created"
                    )
                    continue
                what = f"{self._worker_name(failed.index)} exited with {failed.exit_code}"
                if decision.action is policy.Action.RESTART and not self.signals:
                    # BlockingRecreate: the restart is under way while the old workers go.
                    self.status.update(
                        state=JobState.RESTARTING.value, message=f"{what}; stopping every worker for a gang restart"
                    )
                    self._save()
                logger.info("%s (%s): stopping the other workers", what, decision.message)
                if decision.action is policy.Action.RESTART:  # the policy's words follow in the restart's line
                    logger.warning("%s: stopping the other workers for a gang restart", what)
                # else the job's final report follows at once: said there, once
                self._stop_workers(self.grace, echo=echo)
                # The verdict is the first failed worker's; the others were stopped by us.
                outcome = _Outcome("decided", self._codes(n), failed.index, decision)
                break
            if all(w.exit_code == exit_codes.SUCCESS for w in self.workers):
                outcome = _Outcome("succeeded", self._codes(n))
                break
            time.sleep(POLL_SECONDS)
        if echo:
            echo.pump(final=True)
        if self.network is not None:
            self.network.down()  # every worker of the attempt is gone
        if self.runtime is not None:
            self.runtime.attempt_over()
        kind = outcome.kind
        if kind == "decided":  # recorded as what happened to the pod
            kind = "preempted" if outcome.failing_worker()[1] == exit_codes.PREEMPTED_EXIT_CODE else "failure"
        record.update(exit_codes=outcome.codes, outcome=kind, ended=now())
        if outcome.decision is not None:
            record["decision"] = {
                "action": outcome.decision.action.value,
                "counted": outcome.decision.counted,
                "reason": outcome.decision.reason,
                "rule": outcome.decision.rule,
                "message": outcome.decision.message,
            }
        self.status["worker_exit_codes"] = outcome.codes
        self._save()
        return outcome

    def _first_failure(self) -> _Worker | None:
        """The worker that ended first with a code other than 0, if any."""
        ended = sorted(
            (w for w in self.workers if w.exit_order is not None and w.exit_code is not None),
            key=lambda w: w.exit_order or 0,
        )
        return next((w for w in ended if w.exit_code != exit_codes.SUCCESS), None)

    def _decide(self, worker: _Worker) -> policy.Decision:
        """The manifest's policies on a failed worker (see :mod:`roxxel_launch.backends.local.policy`)."""
        pod = self.pods[worker.index]
        code = worker.exit_code if worker.exit_code is not None else 1
        exit = policy.PodExit(
            pod=f"{pod.namespace}/{pod.name}",
            job=pod.job,
            exit_code=code,
            container=contract.CONTAINER_NAME,
            replicated_job=pod.replicated_job,
        )
        if worker.termination is not None and worker.termination[0] == ENGINE_FAILURE:
            # The engine could not start the container: every attempt would fail the same way.
            return policy.Decision(
                policy.Action.FAIL, False, ENGINE_FAILURE, f"{ENGINE_FAILURE}: not restarted, as a configuration error"
            )
        decision = self.policy.decide(
            exit,
            failed_before=self.job_failures.get(pod.job, 0),
            counted_restarts=self.status.get("restarts_counted", 0),
        )
        if decision.action is policy.Action.RECREATE_POD and decision.counted:
            self.job_failures[pod.job] = self.job_failures.get(pod.job, 0) + 1
        return decision

    def _codes(self, n: int) -> list[int | None]:
        codes: list[int | None] = [None] * n
        for w in self.workers:
            codes[w.index] = w.exit_code
        return codes

    def _reap(self) -> None:
        """Collect the exit codes of workers that ended; kill what they left in their group."""
        changed = False
        for w in self.workers:
            if w.exit_code is None and (returncode := w.run.poll()) is not None:
                w.exit_code = exit_codes.from_returncode(returncode)
                w.termination = w.run.termination()
                self.exits_seen += 1
                w.exit_order = self.exits_seen
                changed = True
                if w.termination is not None:
                    self.status["attempts"][-1].setdefault("reasons", {})[str(w.index)] = w.termination[0]
                logger.info(
                    "worker %d (pid %d) exited with %d (%s)",
                    w.index,
                    w.run.pid,
                    w.exit_code,
                    self._why(w.index, w.exit_code),
                )
                # Like a container that ends: nothing it started may outlive it.
                if w.run.kill() and not w.group_killed:
                    logger.warning("worker %d left processes in its process group %d; killed them", w.index, w.run.pid)
        if changed:
            self.status["worker_exit_codes"] = self._codes(len(self.workers))
            self._save()

    def _stop_workers(self, grace: float, *, echo: LogEcho | None = None) -> None:
        """SIGTERM every running worker, wait up to ``grace`` seconds (less after a second stop
        signal), SIGKILL the process groups of those left, and reap them all."""
        self._reap()
        running = [w for w in self.workers if w.exit_code is None]
        for w in running:
            logger.info("worker %d: SIGTERM to pid %d", w.index, w.run.pid)
            w.run.terminate()
        deadline = time.monotonic() + grace
        while any(w.exit_code is None for w in self.workers):
            forced = len(self.signals) >= 2  # a second Ctrl-C: no more waiting
            if time.monotonic() >= deadline or forced:
                left = [w for w in self.workers if w.exit_code is None]
                reason = "a second stop signal" if forced else f"the grace period ({grace:g}s)"
                logger.warning(
                    "after %s, SIGKILL to the process groups of workers %s",
                    reason,
                    ", ".join(str(w.index) for w in left),
                )
                for w in left:
                    w.run.kill()
                    w.group_killed = True
                for w in left:
                    w.run.wait()
                self._reap()
                break
            if echo:
                echo.pump()
            time.sleep(POLL_SECONDS)
            self._reap()


# ------------------------------------------------------------------------------------
# Detached supervisor: python -m roxxel_launch.backends.local.supervisor supervise RUN_DIR [--resume]
# ------------------------------------------------------------------------------------


def _main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) not in (2, 3) or args[0] != "supervise" or (len(args) == 3 and args[2] != "--resume"):
        sys.stderr.write("usage: python -m roxxel_launch.backends.local.supervisor supervise RUN_DIR [--resume]\n")
        return exit_codes.USAGE_ERROR
    status = Supervisor(Path(args[1]), echo=None, resume=len(args) == 3, stderr_level=None).run()
    return status.exit_code if status.exit_code is not None else 1


if __name__ == "__main__":
    raise SystemExit(_main())
