"""Worker logs on Kubernetes: one rank or all, and ``-f`` that follows the job, not one pod.

A worker's output lives in its pod, and a JobSet gang restart replaces every pod (new
names, the ``jobset.sigs.k8s.io/restart-attempt`` label one higher). Following therefore
means: stream the newest attempt's pod of the rank; when that stream ends, read the job
again, and while it has not ended, attach to the next attempt's pod (waiting for it to
start), with a marker line ``── attempt N (restart N-1) ──`` between attempts. A Kueue
eviction deletes the pods and its readmission creates new ones in the same restart attempt
(Kueue suspends and un-suspends the job; see :func:`.status.kueue_evictions`): each
readmission is a new attempt too, announced as ``── attempt N: re-admitted by Kueue after
eviction K (Preempted: ...) ──``, and attempts count both. A stream
that breaks or times out (a quiet worker, a reset) is reopened on the same pod, skipping the
lines already shown (a container's log only grows), so that nothing repeats.
"""

from __future__ import annotations

import codecs
import logging
import queue
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException

from roxxel.wording import as_clause
from roxxel.wording import count as count_of
from roxxel_launch import contract
from roxxel_launch.backends.base import BackendError, JobNotFoundError
from roxxel_launch.backends.kubernetes.api import KubernetesApi, _server_message
from roxxel_launch.backends.kubernetes.preflight import read_workloads
from roxxel_launch.backends.kubernetes.status import (
    COMPLETION_INDEX_KEY,
    JOB_INDEX_LABEL,
    JOB_NAME_LABEL,
    JOBSET_NAME_LABEL,
    RESTART_ATTEMPT_KEY,
    _int,
    _pod_key,
    kueue_evictions,
    kueue_holds,
    shape,
    status_of,
    worker_from_pod,
)

logger = logging.getLogger(__name__)

FOLLOW_READ_TIMEOUT = 300.0  # seconds of silence after which a followed stream is reopened


def attempt_marker(attempt: int, evictions: int = 0) -> str:
    """The line before an attempt's output after gang restart ``attempt`` (attempts count from
    1, restarts from 0); each of the job's ``evictions`` by Kueue started an attempt too."""
    after = f", {count_of(evictions, 'Kueue eviction')}" if evictions else ""
    return f"── attempt {attempt + evictions + 1} (restart {attempt}{after}) ──"


def readmission_marker(attempt: int, evictions: int, last: str) -> str:
    """The line before the output of the attempt that Kueue's readmission after its
    ``evictions``-th eviction started, in gang restart ``attempt`` (``last``: that eviction's
    'Reason: message', cut to one line)."""
    return (
        f"── attempt {attempt + evictions + 1}: re-admitted by Kueue after eviction {evictions}"
        + (f" ({_one_line(last)})" if last else "")
        + " ──"
    )


def _one_line(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def read_logs(
    api: KubernetesApi,
    kind: str,
    obj: Mapping,
    *,
    process: int,
    follow: bool,
    all_processes: bool,
    since_seconds: int | None,
    previous: bool,
    poll_seconds: float,
    container: str | None = None,
) -> Iterator[str]:
    """Lines (without newline) of one worker's log, or of every worker's (``all_processes``:
    each line prefixed ``[rank N] ``).

    Args:
        api: the client, in the job's namespace.
        kind, obj: the job as read ("JobSet" | "Job", its object).
        process: the rank (``0 <= process < processes``); ignored with ``all_processes``.
        follow: stream until the job ends, across gang restarts (see the module docstring).
        since_seconds: only lines newer than this many seconds (``sinceSeconds``).
        previous: the previous terminated container of the pod (``previous=true``, as
            ``kubectl logs --previous``).
        poll_seconds: pause between reads of the job while waiting for a pod to start.
        container: the pod's container to read (None: the worker's, ``contract.CONTAINER_NAME``);
            e.g. the GCS FUSE sidecar ``gke-gcsfuse-sidecar``, a native sidecar (an init
            container with ``restartPolicy: Always``,
            https://kubernetes.io/docs/concepts/workloads/pods/sidecar-containers/).

    The pods are looked up now (errors raise here, not while iterating).
    Raises: JobNotFoundError; BackendError (no such process, no pod, no such container in
    the pod, a broken stream without ``follow``).
    """
    name = obj["metadata"]["name"]
    hosts, _, processes = shape(kind, obj)
    if not 0 <= process < processes:
        raise BackendError(f"{name} has processes 0..{processes - 1}; there is no process {process}.")
    ranks = list(range(processes)) if all_processes else [process]
    readers = [
        _RankReader(api, kind, obj, rank, hosts, since_seconds, previous, poll_seconds, container) for rank in ranks
    ]
    for reader in readers:
        reader.attach(wait=follow)  # errors now, not while iterating
        reader.first = reader.open_stream(follow)
    if not all_processes:
        return readers[0].lines(follow)
    return _merged(readers, follow)


def _merged(readers: list[_RankReader], follow: bool) -> Iterator[str]:
    """Every rank's lines, ``[rank N] ``-prefixed: one after the other without ``follow``,
    interleaved as they arrive with it (one thread per rank)."""
    if not follow:
        for reader in readers:
            for line in reader.lines(False):
                yield f"[rank {reader.rank}] {line}"
        return
    lines: queue.Queue = queue.Queue(maxsize=1000)
    done = object()
    stop = threading.Event()

    def pump(reader: _RankReader) -> None:
        try:
            for line in reader.lines(True):
                if stop.is_set():
                    return
                lines.put(f"[rank {reader.rank}] {line}")
        except BaseException as err:  # noqa: BLE001 - handed to the reading thread
            lines.put(err)
        finally:
            lines.put(done)

    threads = [threading.Thread(target=pump, args=(r,), daemon=True, name=f"logs-{r.rank}") for r in readers]
    for thread in threads:
        thread.start()
    running = len(threads)
    try:
        while running:
            item = lines.get()
            if item is done:
                running -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        stop.set()


class _RankReader:
    """The log of one rank, attempt after attempt."""

    def __init__(
        self,
        api: KubernetesApi,
        kind: str,
        obj: Mapping,
        rank: int,
        hosts: int,
        since_seconds: int | None,
        previous: bool,
        poll_seconds: float,
        container: str | None = None,
    ):
        self.api, self.kind, self.obj, self.rank, self.hosts = api, kind, obj, rank, hosts
        self.poll_seconds = poll_seconds
        self.name = obj["metadata"]["name"]
        self.since_seconds, self.previous = since_seconds, previous
        self.chosen = container  # checked against each pod's containers when given
        self.container = container or contract.CONTAINER_NAME
        self.started = time.monotonic()
        self.pod: str | None = None
        self.attempt = 0
        self.evictions = 0  # Kueue's evictions of the job when self.pod was attached (followed)
        self.last_eviction = ""  # the last of them: 'Reason: message'
        self._shown = 0  # lines of self.pod already yielded (skipped when it is reopened)
        self.first: Any = None  # the response opened by read_logs, read first

    def attach(self, *, wait: bool) -> None:
        """Find the rank's newest pod; with ``wait`` (following) once it has started, and with
        Kueue's evictions of the job as they were before it was looked for: an eviction
        counted after would belong to a later pod."""
        evicted = self._kueue_evictions() if wait else (0, "")
        pod = _pod_of(self.api, self.kind, self.obj, self.rank, self.hosts, wait=wait, poll_seconds=self.poll_seconds)
        if self.chosen is not None:
            check_container(pod, self.chosen, f"process {self.rank} of {self.name}")
        if pod["metadata"]["name"] != self.pod:
            self.evictions, self.last_eviction = evicted
        self.pod = pod["metadata"]["name"]
        self.attempt = _int(_pod_key(pod, RESTART_ATTEMPT_KEY), 0)
        logger.info("logs of %s process %d: pod %s (attempt %d)", self.name, self.rank, self.pod, self.attempt + 1)

    def open_stream(self, follow: bool) -> Any:
        api = self.api
        options: dict[str, Any] = dict(container=self.container, follow=follow)
        if self.since_seconds is not None:  # the same instant on every reconnect
            options["since_seconds"] = int(self.since_seconds + time.monotonic() - self.started)
        if self.previous:
            options["previous"] = True
        if follow:
            options["_request_timeout"] = (api.retry.connect_timeout, FOLLOW_READ_TIMEOUT)
        try:
            return api.call(
                "read logs of",
                "Pod log",
                self.pod,
                api.namespace,
                api.core().read_namespaced_pod_log,
                self.pod,
                api.namespace,
                **options,
            )
        except BackendError as err:
            cause = err.__cause__
            if not (self.previous and isinstance(cause, ApiException) and cause.status == 400):
                raise
            # The kubelet finds no lastState.terminated: no container was restarted in place.
            raise BackendError(
                f"process {self.rank} of {self.name} has no previous container: "
                f"{_server_message(cause)}. Its workers run with restartPolicy: Never (the "
                "Job's podFailurePolicy requires it), so a failed worker comes back as a pod of "
                f"the next attempt instead: `roxxel-launch logs {self.name}` shows the newest "
                "attempt, `--follow` marks each one as it starts."
            ) from err

    def lines(self, follow: bool) -> Iterator[str]:
        if not follow:
            yield from _lines(self._take(False), self.pod or "?")
            return
        shown_attempt = self.attempt
        if self.attempt + self.evictions > 0:
            yield attempt_marker(self.attempt, self.evictions)
        breaks = 0
        while True:
            count = 0
            skip = self._shown
            try:
                for line in _lines(self._take(True), self.pod or "?"):
                    count += 1
                    if count > skip:
                        self._shown = count
                        breaks = 0
                        yield line
            except BackendError as err:
                if not isinstance(err.__cause__, urllib3.exceptions.HTTPError):
                    raise
                breaks += 1
                delay = self.api.retry.delay(breaks)
                logger.warning(
                    "the log stream of pod %s broke (%s); reconnecting in %.1f s",
                    self.pod,
                    type(err.__cause__).__name__,
                    delay,
                )
                self.api.retry.sleep(delay)
                continue
            if self._ended():
                return
            pod, evictions = self.pod, self.evictions
            self.attach(wait=True)
            if self.pod != pod:
                self._shown = 0
            if self.attempt != shown_attempt:
                shown_attempt = self.attempt
                yield attempt_marker(self.attempt, self.evictions)
            elif self.pod != pod and self.evictions > evictions:
                # A new pod of the same restart attempt: Kueue re-admitted the job.
                yield readmission_marker(self.attempt, self.evictions, self.last_eviction)
            elif self.pod == pod:
                # The same pod: a stream the server ended (the pod finished, and the next
                # attempt has no pod yet; or a long stream closed): look again shortly.
                time.sleep(self.poll_seconds)

    def _kueue_evictions(self) -> tuple[int, str]:
        """Kueue's evictions of the job so far (:func:`.status.kueue_evictions`); (0, "") for a
        job without a queue, or when its Workload cannot be read."""
        if not kueue_holds(self.obj):
            return 0, ""
        return kueue_evictions(read_workloads(self.api, self.obj))

    def _take(self, follow: bool) -> Any:
        response, self.first = self.first, None
        return response if response is not None else self.open_stream(follow)

    def _ended(self) -> bool:
        """Whether the job has ended (then the log is complete); raises when it is gone."""
        current = self.api.get(self.kind, self.name)
        if current is None:
            raise JobNotFoundError(
                f"{self.kind} {self.api.namespace}/{self.name} was deleted while following its logs."
            )
        self.obj = current
        return status_of(self.kind, current, []).state.terminal


def container_names(pod: Mapping) -> list[str]:
    """The names of a pod's containers: init containers (native sidecars among them, such
    as ``gke-gcsfuse-sidecar``), then the app containers, then ephemeral ones."""
    spec = pod.get("spec") or {}
    return [
        c.get("name", "?")
        for key in ("initContainers", "containers", "ephemeralContainers")
        for c in spec.get(key) or []
    ]


def check_container(pod: Mapping, container: str, who: str) -> None:
    """Raises BackendError, listing the pod's containers, when ``container`` is not one of them
    (the API server would answer 400 "container X is not valid for pod Y")."""
    names = container_names(pod)
    if container not in names:
        raise BackendError(
            f"pod {pod['metadata']['name']} ({who}) has no container {container!r}; its "
            f"containers: {', '.join(names) or 'none'} (choose one with -c/--container)"
        )


def pod_of(api: KubernetesApi, kind: str, obj: Mapping, process: int) -> dict:
    """``process``'s newest pod (its current attempt's), as it is now.

    Raises: BackendError (no such process, or no pod yet)."""
    hosts, _, processes = shape(kind, obj)
    name = obj["metadata"]["name"]
    if not 0 <= process < processes:
        raise BackendError(f"{name} has processes 0..{processes - 1}; there is no process {process}.")
    return _pod_of(api, kind, obj, process, hosts, wait=False, poll_seconds=0.0)


def _pod_of(
    api: KubernetesApi, kind: str, obj: Mapping, process: int, hosts: int, *, wait: bool, poll_seconds: float
) -> dict:
    """``process``'s newest pod; with ``wait``, once it has started (or the job has ended)."""
    name = obj["metadata"]["name"]
    if kind == "JobSet":
        slice_index, index = divmod(process, hosts)
        selector = f"{JOBSET_NAME_LABEL}={name},{JOB_INDEX_LABEL}={slice_index}"
    else:
        index = process
        selector = f"{JOB_NAME_LABEL}={name}"
    announced = None
    while True:
        pods = [p for p in api.list("Pod", selector) if _int(_pod_key(p, COMPLETION_INDEX_KEY), -1) == index]
        if pods:
            newest = max(
                pods,
                key=lambda p: (
                    _int(_pod_key(p, RESTART_ATTEMPT_KEY), 0),
                    (p.get("metadata") or {}).get("creationTimestamp") or "",
                ),
            )
            worker = worker_from_pod(newest, hosts)
            states = [c.get("state") or {} for c in (newest.get("status") or {}).get("containerStatuses") or []]
            started = worker.phase != "Pending" or any("running" in s or "terminated" in s for s in states)
            if started or not wait:
                return newest
            reason = worker.describe()
        else:
            newest = None
            if not wait:
                raise BackendError(
                    f"process {process} of {name} has no pod yet (see roxxel-launch status "
                    f"{name}); follow the logs (-f) to wait for it."
                )
            reason = f"process {process} has no pod yet"
        current = api.get(kind, name)
        if current is None:
            raise JobNotFoundError(f"{kind} {api.namespace}/{name} was deleted while waiting for its pod.")
        state = status_of(kind, current, []).state
        if state.terminal:
            if newest is not None:  # it will not start any more: show what there is
                return newest
            raise BackendError(f"{name} is {state.value} and process {process} has no pod left to read logs from.")
        if reason != announced:
            logger.info("waiting for %s to start: %s", name, reason)
            announced = reason
        time.sleep(poll_seconds)


def _lines(response, pod: str) -> Iterator[str]:
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    buffer = ""
    finished = False
    try:
        for chunk in response.stream(amt=None, decode_content=True):
            buffer += decoder.decode(chunk)
            *lines, buffer = buffer.split("\n")
            for line in lines:
                yield line.removesuffix("\r")
        buffer += decoder.decode(b"", final=True)
        if buffer:
            yield buffer.removesuffix("\r")
        finished = True
    except urllib3.exceptions.HTTPError as err:
        raise BackendError(
            f"the log stream of pod {pod} broke: {as_clause(err)}. Run logs again (with -f to keep following)."
        ) from err
    finally:
        if finished:
            response.release_conn()
        else:
            response.close()  # stopped early: drop the connection, the server still streams
