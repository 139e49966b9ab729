"""Watching a job until it ends: one watch of its JobSet or Job, polling only as a fallback.

How the watch follows the API's rules
(https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes):

* it starts at the ``resourceVersion`` of the object as last read, with a field selector
  ``metadata.name=NAME`` and ``allowWatchBookmarks=true`` (BOOKMARK events only move the
  resourceVersion forward, so a reconnect does not replay old events);
* the server ends a watch after ``timeoutSeconds``; it is opened again from the last
  resourceVersion seen;
* an ERROR event with code 410 (Gone: the resourceVersion is older than the server keeps)
  means "read it again": the object is re-read and the watch restarts from there;
* a stream that breaks (reset, timeout) is reopened after a backoff (one warning line);
  the opening request is retried like every call (429, 5xx);
* an API server or RBAC Role that refuses watches (403, 405) turns it into polling, with
  one warning.

A JobSet's or Job's ``status`` changes with each step that matters (pods ready, a gang
restart, a condition), so one watch of the object replaces a GET plus a pod LIST every
``poll_seconds``; the pods are listed only when the object changed. Pods that do not start
(unschedulable, a volume that cannot be mounted) change nothing in the object, so with
``recheck_seconds`` a job not yet running is looked at again that often (each watch request
ends then), for the events that explain them.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import urllib3

from roxxel_launch.backends.base import (
    BackendError,
    JobNotFoundError,
    JobState,
    JobStatus,
    WaitProgress,
    WaitTimeout,
)
from roxxel_launch.backends.kubernetes.status import kueue_holds

if TYPE_CHECKING:
    from roxxel_launch.backends.kubernetes.api import KubernetesApi

logger = logging.getLogger(__name__)

WATCH_SECONDS = 300  # timeoutSeconds of one watch request (the server ends it then)
_NO_WATCH = (403, 405)  # the Role lacks the watch verb, or the server does not serve watches


class WatchExpired(Exception):
    """The watch's resourceVersion is too old (410 Gone): read the object again."""


def resource_version(obj: Mapping) -> str | None:
    return (obj.get("metadata") or {}).get("resourceVersion")


def watch_object(api: KubernetesApi, kind: str, name: str, version: str | None, seconds: int) -> Iterator[dict]:
    """The events (``{"type", "object"}``) of one object after ``version``, until the server
    ends the watch (after ``seconds``).

    Raises: WatchExpired (410); BackendError (opening failed after retries, or an ERROR
    event); urllib3.exceptions.HTTPError (the stream broke).
    """
    fn, args = api.list_call(kind)
    namespace = api.namespace
    options: dict[str, Any] = dict(
        watch=True,
        field_selector=f"metadata.name={name}",
        allow_watch_bookmarks=True,
        timeout_seconds=max(1, int(seconds)),
        _request_timeout=(api.retry.connect_timeout, seconds + api.retry.read_timeout),
    )
    if version:
        options["resource_version"] = version
    response = api.call("watch", kind, name, namespace, fn, *args, **options)
    try:
        buffer = b""
        for chunk in response.stream(amt=None, decode_content=True):
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if not line.strip():
                    continue
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    if status.get("code") == 410:
                        raise WatchExpired(status.get("message") or "410 Gone")
                    raise BackendError(
                        f"the watch of {kind} {namespace}/{name} failed: {status.get('message') or status}"
                    )
                yield event
    finally:
        response.close()


def wait_for_job(
    api: KubernetesApi,
    name: str,
    *,
    find: Callable[[], tuple[str, Mapping]],
    status: Callable[[str, Mapping], JobStatus],
    timeout: float | None,
    poll_seconds: float,
    evicted_ends: bool,
    on_change: Callable[[JobStatus], None] | None,
    recheck_seconds: float | None = None,
) -> JobStatus:
    """:meth:`Backend.wait` on Kubernetes, by watching the job's object (see the module doc).

    Args:
        api: the client, in the job's namespace.
        find: reads the job now: ``(kind, object)``; raises JobNotFoundError.
        status: the job's status from its object as read (``kind``, ``object``), with its
            pods as they are now.
        recheck_seconds: while the job is Pending or Restarting, read its status again at
            least this often, changed or not; None: only when it changes.
    """
    clock = time.monotonic  # the wait's own timeout is wall time; backoff is the policy's
    started = clock()
    kind, obj = find()
    version = resource_version(obj)
    progress = WaitProgress(evicted_ends=evicted_ends, on_change=on_change)
    watching = True
    breaks = 0

    starting = False  # Pending or Restarting when last read

    def settle(obj: Mapping) -> JobStatus | None:
        """Reports the object's status; returns it when the wait is over."""
        nonlocal starting
        current = status(kind, obj)
        starting = current.state in (JobState.PENDING, JobState.RESTARTING)
        return current if progress.over(current, requeued=kueue_holds(obj)) else None

    def left() -> float | None:
        return None if timeout is None else started + timeout - clock()

    ended = settle(obj)
    while ended is None:
        remaining = left()
        if remaining is not None and remaining <= 0:
            raise WaitTimeout(status(*find()), timeout or 0.0)
        seconds = WATCH_SECONDS if remaining is None else max(1, min(WATCH_SECONDS, int(remaining) + 1))
        recheck = recheck_seconds is not None and starting
        if recheck:
            seconds = max(1, min(seconds, int(recheck_seconds or 0)))
        if not watching:
            time.sleep(poll_seconds if remaining is None else min(poll_seconds, remaining))
            kind, obj = find()
            ended = settle(obj)
            continue
        try:
            for event in watch_object(api, kind, name, version, seconds):
                version = resource_version(event.get("object") or {}) or version
                breaks = 0
                if event.get("type") == "BOOKMARK":
                    continue
                if event.get("type") == "DELETED":
                    raise JobNotFoundError(f"{kind} {api.namespace}/{name} was deleted while waiting for it to end.")
                obj = event["object"]
                ended = settle(obj)
                if ended is not None:
                    break
                remaining = left()
                if remaining is not None and remaining <= 0:
                    break
            else:
                if recheck:  # the window ended with no change: the pods may have news
                    ended = settle(obj)
        except WatchExpired as err:
            logger.info("the watch of %s expired (%s); reading it again", name, err)
            kind, obj = find()
            version = resource_version(obj)
            ended = settle(obj)
        except urllib3.exceptions.HTTPError as err:
            breaks += 1
            delay = api.retry.delay(breaks)
            logger.warning("the watch of %s broke (%s); reconnecting in %.1f s", name, type(err).__name__, delay)
            api.retry.sleep(delay)
        except JobNotFoundError:
            raise
        except BackendError as err:
            code = getattr(err.__cause__, "status", None)
            if code not in _NO_WATCH:
                raise
            logger.warning("cannot watch %s (%s); polling every %g s instead", name, err, poll_seconds)
            watching = False
    return ended
