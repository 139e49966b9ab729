"""What every backend offers: submit, status, logs, list, delete, resume.

The CLI (``roxxel-launch``) talks to backends only through :class:`Backend`, so the local
backend and the Kubernetes backend are interchangeable and follow the same contract:
the same environment variables reach the workers, the same exit codes mean the same thing
(0 done, :data:`roxxel.exit_codes.PREEMPTED_EXIT_CODE` preempted after a checkpoint,
anything else failed).
"""

from __future__ import annotations

import abc
import dataclasses
import enum
from typing import Iterator


class JobState(str, enum.Enum):
    """Lifecycle of a job, the same words for every backend."""

    PENDING = "Pending"  # submitted, workers not all running yet (queued, scheduling, pulling)
    RUNNING = "Running"
    RESTARTING = "Restarting"  # gang restart under way (a worker failed or was preempted)
    SUCCEEDED = "Succeeded"
    PREEMPTED = "Preempted"  # stopped after a complete checkpoint; `resume` continues it
    FAILED = "Failed"
    SUSPENDED = "Suspended"  # e.g. held or evicted by Kueue

    @property
    def terminal(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.PREEMPTED, JobState.FAILED)


class StopReason(str, enum.Enum):
    """Why a job ended other than by succeeding, the same words for every backend.

    The CLI decides from this (and :class:`JobState`), never from the message text, whether
    ``resume --until-done`` re-submits a job.
    """

    PREEMPTED = "preempted"  # the cluster stopped it (preemption, eviction, exit 42 after a checkpoint)
    STOPPED_BY_USER = "stopped_by_user"  # stop requested (Ctrl-C / SIGTERM to the local supervisor)
    CONFIG_ERROR = "config_error"  # a worker found a configuration error: fails the same way on retry
    RESTARTS_EXHAUSTED = "restarts_exhausted"  # max_restarts gang restarts used up on failures
    FAILED = "failed"  # any other failure (the message names the failing worker)


@dataclasses.dataclass(frozen=True)
class JobStatus:
    """A job as a backend sees it.

    Attributes:
        name: the job's name (JobSet/Job name, or the local run's name).
        state: see :class:`JobState`.
        processes: worker processes (hosts) in the job.
        restarts: gang restarts so far.
        exit_code: the job's exit status once terminal (0, 42 preempted, else failed), else None.
        message: a short human explanation (the failing worker and its error, the queue's reason).
        reason: why a Preempted or Failed job ended (see :class:`StopReason`); None otherwise
            (and for a local run recorded before reasons existed).
        run_dir: where the local backend keeps the run (None on Kubernetes).
        created: ISO-8601 creation time.
    """

    name: str
    state: JobState
    processes: int
    restarts: int = 0
    exit_code: int | None = None
    message: str = ""
    reason: StopReason | None = None
    run_dir: str | None = None
    created: str | None = None


class Backend(abc.ABC):
    """A place where jobs run."""

    @abc.abstractmethod
    def submit(self, spec, *, dry_run: bool = False) -> JobStatus:
        """Start the job described by ``spec`` (a ``roxxel_launch.spec.JobSpec``).

        Raises:
            JobExistsError: a job of that name exists (delete it, or resume it).
            BackendError: the backend refused it (the message says why and what to do).
        """

    @abc.abstractmethod
    def status(self, name: str) -> JobStatus:
        """Raises: JobNotFoundError."""

    @abc.abstractmethod
    def logs(self, name: str, *, process: int = 0, follow: bool = False) -> Iterator[str]:
        """Lines of one worker's output (process 0 by default). Raises: JobNotFoundError."""

    @abc.abstractmethod
    def list(self) -> list[JobStatus]:
        """Jobs this backend knows (submitted by roxxel-launch)."""

    @abc.abstractmethod
    def delete(self, name: str) -> None:
        """Stop the job and remove its objects/processes. Raises: JobNotFoundError."""

    @abc.abstractmethod
    def resume(self, name: str) -> JobStatus:
        """Start a stopped (preempted or failed) job again from its last checkpoint.

        Raises: JobNotFoundError; BackendError when it is still running.
        """

    def wait(self, name: str, *, poll_seconds: float = 2.0) -> JobStatus:
        """Block until the job is terminal; returns its final status."""
        import time

        while True:
            status = self.status(name)
            if status.state.terminal:
                return status
            time.sleep(poll_seconds)


class BackendError(RuntimeError):
    """The backend could not do what was asked; the message names the problem and the fix."""


class JobNotFoundError(BackendError, LookupError):
    """No job of that name."""


class JobExistsError(BackendError):
    """A job of that name already exists."""
