"""Watches, as the API server streams them
(https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes):
ADDED/MODIFIED/DELETED events from a resourceVersion, BOOKMARKs
(https://kubernetes.io/docs/reference/using-api/api-concepts/#watch-bookmarks), 410 Expired
(https://kubernetes.io/docs/reference/using-api/api-concepts/#410-gone-responses) and broken
streams on demand. Each pass of a watch is a tick of the scripted controllers.
"""

from __future__ import annotations

import copy
import json
import time

from support.k8s_sim.api import FOLLOW_LIMIT_S, KINDS, status_object
from support.k8s_sim.request import Request
from support.k8s_sim.store import field_selector_matches, selector_matches


class Watches:
    """The one watch of the fake (a mixin of ``FakeKubernetes``)."""

    def expire_watches(self, times: int = 1) -> None:
        """The next ``times`` watches answer at once with an ERROR event, code 410 Gone
        (https://kubernetes.io/docs/reference/using-api/api-concepts/#410-gone-responses:
        the resourceVersion asked for is older than the server keeps; the client re-lists)."""
        with self._lock:
            self._real.expire += times

    def break_watches(self, times: int = 1, after_events: int = 1) -> None:
        """The next ``times`` watches break (the connection drops mid-stream) after
        ``after_events`` events."""
        with self._lock:
            self._real.breaks.extend([after_events] * times)

    def stream_watch(self, request: Request, write) -> bool:
        """Writes the watch events of ``request`` (a collection GET with ``watch=true``), the
        one watch of the fake, for kubectl and for the launcher alike; returns False when the
        stream was broken on purpose (:meth:`break_watches`).

        As the API server does
        (https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes):
        a chunked stream of JSON events, one a line, ``{"type": "ADDED" | "MODIFIED" |
        "DELETED" | "BOOKMARK" | "ERROR", "object": {...}}``, for the objects of the path's
        namespace matching ``labelSelector`` and ``fieldSelector``:

        * without a ``resourceVersion`` (or with "0", or one that is not ours) it starts
          with every matching object as ADDED, then sends the changes; from a
          ``resourceVersion`` (of a list or a read) it sends only the objects changed after
          it (MODIFIED; ADDED for one new to the watch); an object that goes is DELETED with
          its last state;
        * BOOKMARK events (only ``metadata.resourceVersion``) when ``allowWatchBookmarks``
          and nothing changed for a while
          (https://kubernetes.io/docs/reference/using-api/api-concepts/#watch-bookmarks);
        * it ends after ``timeoutSeconds`` (at most :data:`FOLLOW_LIMIT_S`) or at shutdown;
        * :meth:`expire_watches`: an ERROR event with a 410 Expired Status at once
          (https://kubernetes.io/docs/reference/using-api/api-concepts/#410-gone-responses).

        Each pass over the objects counts as a read of the watched jobs for the scripted
        controllers (:meth:`_tick`); every change gets a new resourceVersion
        (:meth:`_bump_versions`)."""
        kind, _, api_version = KINDS[request.resource]
        selector = request.query.get("labelSelector")
        fields = request.query.get("fieldSelector")
        since_text = request.query.get("resourceVersion") or ""
        since = int(since_text) if since_text.isdigit() else 0
        try:
            seconds = float(request.query.get("timeoutSeconds") or FOLLOW_LIMIT_S)
        except ValueError:
            seconds = FOLLOW_LIMIT_S
        bookmarks = request.query.get("allowWatchBookmarks") == "true"
        deadline = time.monotonic() + min(seconds, FOLLOW_LIMIT_S)

        def matches(key, obj) -> bool:
            return (
                key[0] == request.resource
                and key[1] == request.namespace
                and selector_matches(selector, obj["metadata"].get("labels") or {})
                and field_selector_matches(fields, obj, request.resource)
            )

        with self._lock:
            real = self._real
            real.watches += 1
            if real.expire > 0:
                real.expire -= 1
                write(
                    json.dumps(
                        {
                            "type": "ERROR",
                            "object": status_object(
                                410, "Expired", f"too old resource version: {since} ({self._bump_versions()})"
                            ),
                        }
                    ).encode()
                    + b"\n"
                )
                return True
            break_after = real.breaks.pop(0) if real.breaks else None
            self._bump_versions()
            # What the client already has: nothing without a resourceVersion (all is ADDED).
            known = {k: copy.deepcopy(o) for k, o in self.objects.items() if matches(k, o)} if since else {}
        sent_events = 0
        last_bookmark = time.monotonic()
        while True:
            events = []
            with self._lock:
                for key in sorted(known):
                    self._tick(key)
                newest = self._bump_versions()
                for key, obj in sorted(self.objects.items()):
                    if not matches(key, obj):
                        continue
                    if key not in known or int(obj["metadata"]["resourceVersion"]) > since:
                        events.append({"type": "MODIFIED" if key in known else "ADDED", "object": copy.deepcopy(obj)})
                        known[key] = copy.deepcopy(obj)
                for key in sorted(k for k in known if k not in self.objects):
                    gone = known.pop(key)
                    gone["metadata"]["resourceVersion"] = str(newest)
                    events.append({"type": "DELETED", "object": gone})
                if events:
                    since = max(since, newest)
                if bookmarks and not events and time.monotonic() - last_bookmark > 0.2:
                    last_bookmark = time.monotonic()
                    since = max(since, newest)
                    events.append(
                        {
                            "type": "BOOKMARK",
                            "object": {
                                "kind": kind,
                                "apiVersion": api_version,
                                "metadata": {"resourceVersion": str(newest)},
                            },
                        }
                    )
                    real.bookmarks += 1
            for event in events:
                if break_after is not None and sent_events >= break_after:
                    return False
                write(json.dumps(event).encode() + b"\n")
                if event["type"] != "BOOKMARK":
                    sent_events += 1
            with self._lock:
                if self._closing or time.monotonic() >= deadline:
                    return True
                self._lock.wait(timeout=0.02)

    def _tick(self, key: tuple[str, str, str]) -> None:
        """A watch of ``key`` counts as a read for the scripted controllers (the outcome of
        :meth:`plan`, the restarts of :meth:`plan_restarts`)."""
        self._restarting_done(key)
        restarts = self._real.restart_plans.get(key[2])
        if key[0] == "jobsets" and key in self.objects and restarts:
            restarts[0] -= 1
            if restarts[0] <= 0:
                restarts.pop(0)
                self._gang_restart(key)
            return
        script = self._scripts.get(key)
        if script is not None:
            script[1] -= 1
            if script[1] <= 0:
                del self._scripts[key]
                restarts = ((self.objects.get(key) or {}).get("status") or {}).get("restarts")
                self._apply(key, script[0])
                if restarts and key in self.objects:  # the outcome keeps the restarts so far
                    status = self.objects[key].setdefault("status", {})
                    status["restarts"] = max(restarts, int(status.get("restarts") or 0))
            return
        self._kueue_readmits(key)
