"""What every backend offers: submit, status, details, logs, list, delete, suspend, resume, wait.

The CLI (``roxxel-launch``) talks to backends only through :class:`Backend`, so the local
backend and the Kubernetes backend are interchangeable and follow the same contract:
the same environment variables reach the workers, the same exit codes mean the same thing
(0 done, :data:`roxxel.exit_codes.PREEMPTED_EXIT_CODE` preempted after a checkpoint,
anything else failed). What differs between backends (the local run's data directory and
devices, the cluster's context and namespace) goes to the backend's constructor, never to a
call, so the CLI does nothing backend-specific beyond choosing the backend.
"""

from __future__ import annotations

import abc
import dataclasses
import enum
import time
from collections.abc import Callable, Iterator, Mapping, Sequence


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
        namespace: the Kubernetes namespace the job lives in (None for a local run).
        queue: the Kueue LocalQueue that admits the job (None: no queue), which suspends it
            while it waits and after an eviction, and re-admits it by itself.
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
    namespace: str | None = None
    queue: str | None = None


@dataclasses.dataclass(frozen=True)
class Worker:
    """One worker pod, as status and logs see it.

    Attributes:
        process: JAX process id (slice * hosts_per_slice + index).
        slice: JobSet job index (0 for an indexed job).
        index: completion index within the slice.
        pod: pod name.
        phase: pod phase (Pending, Running, Succeeded, Failed, Unknown).
        restart_attempt: JobSet restart attempt the pod belongs to (0 for an indexed job).
        exit_code: the worker container's exit code once terminated, else None.
        reason: why it waits or stopped (Unschedulable, ImagePullBackOff, Error, OOMKilled, ...).
        message: the matching detail from the kubelet or scheduler.
        finished_at: when the worker container terminated (RFC 3339), else None.
        terminating: the pod is being deleted.
    """

    process: int
    slice: int
    index: int
    pod: str
    phase: str
    restart_attempt: int = 0
    exit_code: int | None = None
    reason: str = ""
    message: str = ""
    finished_at: str | None = None
    terminating: bool = False

    def describe(self) -> str:
        parts = [f"process {self.process} (pod {self.pod})"]
        if self.exit_code is not None:
            parts.append(f"exited with code {self.exit_code}")
        else:
            parts.append(self.phase)
        detail = ": ".join(p for p in (self.reason, self.message.strip()) if p)
        return " ".join(parts) + (f" ({detail})" if detail else "")


@dataclasses.dataclass(frozen=True)
class JobEvent:
    """What the cluster said about a job's objects: Kubernetes Events of one kind, merged.

    The fields are the core/v1 Event's
    (https://kubernetes.io/docs/reference/kubernetes-api/cluster-resources/event-v1/); events
    of the same ``type``, ``reason`` and ``message`` about several objects (every pod of a
    slice that cannot be scheduled) are one JobEvent.

    Attributes:
        type: ``Warning`` or ``Normal``.
        reason: the event's reason (FailedScheduling, FailedMount, FailedCreatePodSandBox,
            Failed, BackOff, ...).
        message: what the reporting component said.
        count: how many times it happened, over every object (the Event's ``count``, or
            ``series.count`` for events written through events.k8s.io/v1; at least 1 each).
        last_seen: when it last happened (RFC 3339), or None when the Event says nothing.
        objects: ``Kind/name`` of each object it is about, in the order first seen.
    """

    type: str
    reason: str
    message: str
    count: int = 1
    last_seen: str | None = None
    objects: tuple[str, ...] = ()

    def describe(self) -> str:
        """'Warning FailedScheduling (Pod/lm-0, x3): 0/3 nodes are available: ...'."""
        shown = ", ".join(self.objects[:2]) + (f" and {len(self.objects) - 2} more" if len(self.objects) > 2 else "")
        times = f", x{self.count}" if self.count > 1 else ""
        return f"{self.type} {self.reason} ({shown}{times}): {' '.join(self.message.split())}"


@dataclasses.dataclass(frozen=True)
class JobDetails:
    """A job as ``roxxel-launch status`` shows it: its status, conditions and worker pods.

    Attributes:
        status: the job's :class:`JobStatus`.
        kind: ``JobSet`` or ``Job`` (an indexed job).
        namespace: where the job lives.
        slices: slices (JobSet replicas; 1 for an indexed job).
        hosts_per_slice: worker pods per slice.
        conditions: the object's ``status.conditions`` (type, status, reason, message,
            lastTransitionTime), as the API server returned them.
        workers: the worker pods of the current attempt, by process.
        events: the job's Kubernetes Events (:class:`JobEvent`, Warnings first, then the
            newest), as asked for (see :meth:`Backend.details`); None when they could not
            be read (no RBAC permission: logged once).
    """

    status: JobStatus
    kind: str
    namespace: str
    slices: int
    hosts_per_slice: int
    conditions: tuple[Mapping, ...]
    workers: tuple[Worker, ...]
    events: tuple[JobEvent, ...] | None = ()


class WaitProgress:
    """What :meth:`Backend.wait` decides on each status it reads, however it reads them
    (polling :meth:`Backend.status`, or the Kubernetes backend's watch of the job's object):
    what to report, and whether the wait is over.

    Args:
        evicted_ends: the wait is also over for a job that was admitted (seen in any state
            but Suspended) and is Suspended again: evicted by its queue.
        on_change: called with the status each time its state changes (the first one too).
    """

    def __init__(self, *, evicted_ends: bool = False, on_change: Callable[[JobStatus], None] | None = None):
        self.evicted_ends = evicted_ends
        self.on_change = on_change
        self.admitted = False
        self.shown: JobState | None = None

    def over(self, status: JobStatus, *, requeued: bool = False) -> bool:
        """Reports ``status`` (when its state changed); True when the wait is over: the job is
        terminal, or ``evicted_ends`` and it was admitted and is Suspended again, unless
        ``requeued`` (its queue re-admits it by itself: Kueue's job, see
        ``KubernetesBackend._kueue_holds``)."""
        if self.on_change is not None and status.state is not self.shown:
            self.on_change(status)
            self.shown = status.state
        if status.state.terminal:
            return True
        if status.state is not JobState.SUSPENDED:
            self.admitted = True
            return False
        return self.evicted_ends and self.admitted and not requeued


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
    def logs(
        self,
        name: str,
        *,
        process: int = 0,
        follow: bool = False,
        all_processes: bool = False,
        since_seconds: int | None = None,
        previous: bool = False,
        container: str | None = None,
    ) -> Iterator[str]:
        """Lines of one worker's output (process 0 by default).

        Args:
            follow: keep reading until the job ends (across gang restarts).
            all_processes: every worker's output, each line prefixed ``[rank N] ``.
            since_seconds: only output newer than this many seconds.
            previous: the previous terminated container (Kubernetes only).
            container: another container of the worker's pod than the worker (a sidecar such
                as ``gke-gcsfuse-sidecar``; Kubernetes only). None: the worker's own.

        Raises: JobNotFoundError; BackendError for an option the backend does not offer.
        """

    @abc.abstractmethod
    def list(self, *, all_namespaces: bool = False) -> list[JobStatus]:
        """Jobs this backend knows (submitted by roxxel-launch).

        Args:
            all_namespaces: on Kubernetes, the jobs of every namespace the account may list
                (as ``kubectl get -A``); each status names its ``namespace``.

        Raises: BackendError when ``all_namespaces`` is not allowed or not offered.
        """

    def exec(
        self,
        name: str,
        command: Sequence[str],
        *,
        process: int = 0,
        container: str | None = None,
        out: Callable[[bytes], None],
        err: Callable[[bytes], None],
    ) -> int:
        """Run ``command`` (an argv) in worker ``process``'s container, as ``kubectl exec``.

        ``out`` and ``err`` get the command's stdout and stderr bytes as they arrive.
        Returns the command's exit code.

        Raises: JobNotFoundError; BackendError (no such process or container, or the backend
        does not offer it: the message says what to do instead).
        """
        raise BackendError(f"this backend cannot run a command in {name}'s workers")

    def port_forward(
        self,
        name: str,
        local_port: int,
        remote_port: int,
        *,
        process: int = 0,
        on_listen: Callable[[str], None] | None = None,
    ) -> None:
        """Forward 127.0.0.1:``local_port`` to ``remote_port`` of worker ``process``'s pod, as
        ``kubectl port-forward``, until interrupted (KeyboardInterrupt). ``on_listen`` gets
        the address once it listens (``"127.0.0.1:PORT"``).

        Raises: JobNotFoundError; BackendError (no such process, the port is taken, or the
        backend does not offer it).
        """
        raise BackendError(f"this backend cannot forward a port to {name}'s workers")

    @abc.abstractmethod
    def delete(self, name: str, *, wait: bool = False) -> None:
        """Stop the job and remove its objects/processes.

        Args:
            wait: return only once everything is gone (a backend whose delete is
                synchronous always does).

        Raises: JobNotFoundError; BackendError when ``wait`` runs out of time.
        """

    @abc.abstractmethod
    def resume(self, name: str, *, spec=None, new_spec=None) -> JobStatus:
        """Start a stopped (preempted, failed or evicted) job again from its last checkpoint.

        Args:
            spec: the job's ``JobSpec``, needed only when the backend's own record of the job
                is gone (it was deleted); the job is then submitted again under that name.
            new_spec: a fixed ``JobSpec`` to resume under instead of the stored one (after a
                YAML edit): checked by :func:`resume_with_spec` (same name, run name,
                checkpoint_dir and workload), then stored as the job's spec.

        Raises:
            JobNotFoundError: no job and no ``spec``.
            BackendError: the job is still running or has succeeded.
        """

    def suspend(self, name: str) -> JobStatus:
        """Stop a job's workers and keep everything ``resume`` needs (its object or run
        directory, its stored spec); ``resume`` starts it again from its last checkpoint.

        The workers get SIGTERM and their grace period, as for a preemption, so a worker that
        saves a checkpoint on SIGTERM loses no step. Returns the status after the request.

        Raises:
            JobNotFoundError: no job of that name.
            BackendError: the job has ended, or the backend cannot suspend it (the message
                says what to do instead).
        """
        raise BackendError(
            f"this backend cannot suspend {name}; delete it and submit its spec again to continue from its checkpoints"
        )

    def details(self, name: str, *, all_events: bool = False) -> JobDetails | None:
        """Status plus conditions and worker pods, where the backend has them (Kubernetes);
        None where the status is all there is (the local backend's run directory holds the rest).

        Args:
            all_events: every event of the job's objects (``status --events``, as
                ``kubectl describe`` shows them); else only the Warning events that explain
                pods that have not started, and only while the job is not running.

        Raises: JobNotFoundError.
        """
        self.status(name)  # an unknown job is an error here too
        return None

    def wait(
        self,
        name: str,
        *,
        timeout: float | None = None,
        poll_seconds: float = 2.0,
        evicted_ends: bool = False,
        on_change: Callable[[JobStatus], None] | None = None,
        on_events: Callable[[Sequence[JobEvent]], None] | None = None,
    ) -> JobStatus:
        """Block until the job is terminal; returns its final status.

        This polls :meth:`status` (the local supervisor records the state where ``status``
        reads it); the Kubernetes backend watches the job's object instead. Both decide with
        :class:`WaitProgress`.

        Args:
            timeout: seconds; None waits as long as it takes.
            poll_seconds: pause between two reads of the status.
            evicted_ends: also return a job that was admitted (seen in any state but
                Suspended) and is Suspended again: evicted by its queue.
            on_change: called with the status each time its state changes (the first read too).
            on_events: called with the Warning events that explain pods which stay
                Pending (unschedulable, ContainerCreating, pulling) past the backend's
                threshold, each event once (Kubernetes; a backend without events never calls it).

        Raises:
            WaitTimeout: ``timeout`` passed first (its ``status`` is the last one read).
            JobNotFoundError: no job of that name (or it was deleted meanwhile).
        """
        started = time.monotonic()
        progress = WaitProgress(evicted_ends=evicted_ends, on_change=on_change)
        while True:
            status = self.status(name)
            if progress.over(status):
                return status
            if timeout is None:
                time.sleep(poll_seconds)
                continue
            left = started + timeout - time.monotonic()
            if left <= 0:
                raise WaitTimeout(status, timeout)
            time.sleep(min(poll_seconds, left))


class BackendError(RuntimeError):
    """The backend could not do what was asked; the message names the problem and the fix."""


class JobNotFoundError(BackendError, LookupError):
    """No job of that name."""


class JobExistsError(BackendError):
    """A job of that name already exists."""


def resume_with_spec(stored, new) -> list[str]:
    """What ``resume NAME --spec FILE`` changes in a stopped job, one ``field: old -> new`` line
    each; refuses what would make it another run.

    A resume continues the run in its ``checkpoint_dir`` under its ``run_name``: those, the
    name and the workload kind stay; everything else (image, command, resources, the pod's
    settings, more steps in the command's arguments) may change. Whether the batches before
    the restored step stay as they were is the training program's check at restore (a
    changed curriculum is refused there, exit 78), which the launcher cannot see.

    Args:
        stored, new: ``JobSpec``s: the one the job runs under, the fixed one.

    Raises:
        BackendError: a field that makes it another run, naming which of resume / delete +
            submit fits.
    """
    from roxxel_launch.spec import spec_to_dict

    name = stored.name
    for field, why in (
        ("name", "the spec is for another job"),
        ("run_name", "the run's checkpoints belong to its run name"),
        ("checkpoint_dir", "the run's checkpoints are there"),
        ("workload", "a JobSet and an Indexed Job are different objects"),
    ):
        old, now = getattr(stored, field), getattr(new, field)
        if old != now:
            raise BackendError(
                f"resume {name} --spec: {field} {old!r} -> {now!r} makes it another run ({why}). To continue "
                f"this run, keep {field} as it is; to start that one, submit the spec (roxxel-launch delete "
                f"{name} first to reuse the name; its checkpoints are kept)"
            )
    before, after = spec_to_dict(stored), spec_to_dict(new)
    return [
        f"{key}: {before.get(key)!r} -> {after.get(key)!r}"
        for key in sorted(set(before) | set(after))
        if before.get(key) != after.get(key)
    ]


RENAME_HINT = (
    "choose another name (--set name=NAME together with its own --set checkpoint_dir=...: "
    "a checkpoint directory belongs to one run, and another run's is refused; add --set "
    "restore_from=<that run's checkpoint_dir> to start from its weights)"
)
"""How a :class:`JobExistsError` offers a new name: a renamed job on the same checkpoint
directory would be refused at its first step (``CheckpointOwnerError``)."""
RESUME_HINT = (
    "resume re-runs the spec stored at submit; after editing the YAML, delete the job and submit "
    "it again (its checkpoints are kept, and the new spec resumes from them where its changes allow)"
)
"""When :class:`JobExistsError` offers both resume and delete: which fits after a YAML edit."""


class WaitTimeout(BackendError, TimeoutError):
    """:meth:`Backend.wait` gave up; the job keeps running.

    Attributes:
        status: the last status read.
        timeout: the seconds waited.
    """

    def __init__(self, status: JobStatus, timeout: float):
        super().__init__(f"timed out after {timeout:g} s waiting for job {status.name}: still {status.state.value}")
        self.status = status
        self.timeout = timeout
