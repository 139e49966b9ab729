"""The Kubernetes Events that explain a stuck job: which objects to ask about, and merging.

A pod that does not start says why only in Events: the scheduler's ``FailedScheduling``, the
kubelet's ``FailedMount`` (a GCS FUSE bucket the Workload Identity may not read),
``FailedCreatePodSandBox``, ``Failed``/``BackOff`` for an image that cannot be pulled
(ErrImagePull, ImagePullBackOff); a Job whose pods cannot be created says ``FailedCreate``.
They are read as ``kubectl describe`` reads them: core/v1 Events of the namespace with a field
selector on the object (``involvedObject.kind``, ``involvedObject.name``), one list per object.
The fields used are the Event's own
(https://kubernetes.io/docs/reference/kubernetes-api/cluster-resources/event-v1/): ``type``
(Normal, Warning), ``reason``, ``message``, ``count`` with ``firstTimestamp`` /
``lastTimestamp`` from the classic recorder, or ``series`` (``count``,
``lastObservedTime``) and ``eventTime`` from events.k8s.io/v1 recorders, which leave the
former unset.

Events are read only when they can explain something (a pod still Pending, or when asked for
with ``status --events``), at most :data:`MAX_PODS` pods a time. An account without
permission to list events (403) is told so in one logged line and the rest goes on without
them.
"""

from __future__ import annotations

import calendar
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from roxxel_launch.backends.base import BackendError, JobEvent

if TYPE_CHECKING:
    from roxxel_launch.backends.kubernetes.api import KubernetesApi

logger = logging.getLogger(__name__)

MAX_PODS = 8  # pods whose events one read asks for (the first ones by name: a slice looks alike)
STUCK_AFTER_SECONDS = 60.0  # how long a pod may stay Pending before `wait` shows its events
RECHECK_SECONDS = 15.0  # how often `wait` looks at a job whose pods have not all started


def last_seen(event: Mapping) -> str | None:
    """When the Event last happened: ``series.lastObservedTime``, ``lastTimestamp``,
    ``eventTime`` or ``firstTimestamp``, the first set (see the module doc)."""
    series = event.get("series") or {}
    return (
        series.get("lastObservedTime")
        or event.get("lastTimestamp")
        or event.get("eventTime")
        or event.get("firstTimestamp")
    )


def times(event: Mapping) -> int:
    """How many times the Event happened: ``series.count``, else ``count``, at least 1."""
    series = event.get("series") or {}
    try:
        return max(int(series.get("count") or event.get("count") or 1), 1)
    except (TypeError, ValueError):
        return 1


def merge(events: Iterable[Mapping], *, warnings_only: bool = False) -> list[JobEvent]:
    """Events as :class:`JobEvent`: those of the same type, reason and message (about any
    object) merged, their counts added; Warnings first, then the most recent first."""
    merged: dict[tuple[str, str, str], dict] = {}
    for event in events:
        kind = event.get("type") or "Normal"
        if warnings_only and kind != "Warning":
            continue
        key = (kind, event.get("reason") or "", event.get("message") or "")
        entry = merged.setdefault(key, {"count": 0, "last": None, "objects": []})
        entry["count"] += times(event)
        seen = last_seen(event)
        if seen and (entry["last"] is None or seen > entry["last"]):
            entry["last"] = seen
        involved = event.get("involvedObject") or {}
        label = f"{involved.get('kind', '?')}/{involved.get('name', '?')}"
        if label not in entry["objects"]:
            entry["objects"].append(label)
    found = [
        JobEvent(type=t, reason=r, message=m, count=e["count"], last_seen=e["last"], objects=tuple(e["objects"]))
        for (t, r, m), e in merged.items()
    ]
    found.sort(key=lambda e: e.last_seen or "", reverse=True)  # stable: Warnings first next
    return sorted(found, key=lambda e: e.type != "Warning")


def _rfc3339_seconds(text: str | None) -> float | None:
    try:
        return calendar.timegm(time.strptime((text or "")[:19], "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def not_started(pods: Iterable[Mapping]) -> list[Mapping]:
    """The pods in phase Pending (not scheduled, ContainerCreating, pulling an image), not
    being deleted, by name."""
    return sorted(
        (
            p
            for p in pods
            if (p.get("status") or {}).get("phase", "Pending") == "Pending"
            and not (p.get("metadata") or {}).get("deletionTimestamp")
        ),
        key=lambda p: (p.get("metadata") or {}).get("name", ""),
    )


class EventReader:
    """Reads the Events of a job's objects; after a 403 it says so once and reads no more.

    Args:
        api: the client, in the job's namespace.
    """

    def __init__(self, api: KubernetesApi):
        self.api = api
        self.forbidden = False

    def read(self, objects: Sequence[tuple[str, str]]) -> list[dict] | None:
        """The Events about each ``(kind, name)``; None when they may not be read.

        Raises: BackendError for anything but a 403 (the API server's, with its fix).
        """
        if self.forbidden:
            return None
        found: list[dict] = []
        for kind, name in objects:
            try:
                found += self.api.list("Event", None, fields=f"involvedObject.kind={kind},involvedObject.name={name}")
            except BackendError as err:
                if getattr(err.__cause__, "status", None) != 403:
                    raise
                self.forbidden = True
                logger.warning("events not shown: %s", err)
                return None
        return found


def job_objects(
    kind: str, obj: Mapping, child_jobs: Iterable[str], pods: Sequence[Mapping], workloads: Iterable[Mapping] = ()
) -> list[tuple[str, str]]:
    """``(kind, name)`` of the objects whose Events describe the job: itself, its child Jobs,
    its Kueue Workloads and at most :data:`MAX_PODS` of ``pods``."""
    name = (obj.get("metadata") or {}).get("name", "?")
    found = [(kind, name), *(("Job", j) for j in child_jobs)]
    found += [("Workload", (w.get("metadata") or {}).get("name", "?")) for w in workloads]
    found += [("Pod", (p.get("metadata") or {}).get("name", "?")) for p in pods[:MAX_PODS]]
    return found


class StuckPods:
    """What ``wait`` shows of pods that stay Pending: their Warning events, each once.

    A pod is stuck once it has been Pending for ``after`` seconds, counted from its
    ``creationTimestamp`` or from when this watcher first saw it, whichever is longer (a
    clock skew between this machine and the API server then delays, never hastens, it).

    Args:
        reader: reads the events.
        after: seconds (:data:`STUCK_AFTER_SECONDS` by default).
        report: called with the events not shown yet.
    """

    def __init__(self, reader: EventReader, after: float, report: Callable[[Sequence[JobEvent]], None]):
        self.reader = reader
        self.after = after
        self.report = report
        self.first_seen: dict[str, float] = {}
        self.shown: set[tuple[str, str, str]] = set()

    def _stuck(self, pod: Mapping) -> bool:
        meta = pod.get("metadata") or {}
        now = time.monotonic()
        seen = now - self.first_seen.setdefault(meta.get("name", "?"), now)
        created = _rfc3339_seconds(meta.get("creationTimestamp"))
        since = time.time() - created if created is not None else 0.0
        return (seen if created is None else max(seen, since)) >= self.after

    def check(self, kind: str, obj: Mapping, pods: Sequence[Mapping]) -> None:
        """Reports the new Warning events of the stuck pods (and of the job's object)."""
        stuck = [p for p in not_started(pods) if self._stuck(p)]
        if not stuck:
            return
        events = self.reader.read(job_objects(kind, obj, (), stuck))
        if not events:
            return
        new = [e for e in merge(events, warnings_only=True) if (e.type, e.reason, e.message) not in self.shown]
        if new:
            self.shown.update((e.type, e.reason, e.message) for e in new)
            self.report(new)
