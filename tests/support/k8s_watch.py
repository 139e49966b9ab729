"""A minimal watch for the simulated API server: what ``kubectl wait`` and informers need.

A watch (``GET <collection>?watch=true``,
https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes)
is a chunked stream of JSON events, one per line: ``{"type": "ADDED" | "MODIFIED" |
"DELETED", "object": {...}}``. Started without a ``resourceVersion`` (or with "0") it first
sends every matching object as ADDED; started from the ``resourceVersion`` of a list it
sends only the changes after that list (objects whose ``resourceVersion`` is newer, as
MODIFIED; the fake bumps it on every write of its controllers). It ends after ``timeoutSeconds`` (capped at
:data:`WATCH_LIMIT_S`) or when the server shuts down; the client then watches again.

The fake's scripted controllers change objects in place, so changes are found by comparing
snapshots of the watched collection (taken under the fake's lock, whenever it is notified
and at least every :data:`POLL_S`); each change gets a new ``resourceVersion``.
Bookmarks, expiry (410 Gone) and fault injection are not simulated here.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

WATCH_LIMIT_S = 20.0  # no watch stream stays open longer (tests must not hang on one)
POLL_S = 0.2


def _snapshot(fake: Any, request: Any) -> dict[str, tuple[str, dict]]:
    """{name: (the object's state without its resourceVersion, the object)}."""
    _, listed = fake._list(request)
    state = {}
    for obj in listed["items"]:
        bare = {**obj, "metadata": {k: v for k, v in obj["metadata"].items() if k != "resourceVersion"}}
        state[obj["metadata"]["name"]] = (json.dumps(bare, sort_keys=True), obj)
    return state


def stream(fake: Any, request: Any, write: Callable[[bytes], None]) -> None:
    """Writes the watch events of ``request`` (a collection GET with ``watch``) with ``write``."""
    try:
        timeout = float(request.query.get("timeoutSeconds") or WATCH_LIMIT_S)
    except ValueError:
        timeout = WATCH_LIMIT_S
    deadline = time.monotonic() + min(timeout, WATCH_LIMIT_S)
    since = request.query.get("resourceVersion")
    if since and not since.isdigit():
        since = None  # not one of ours: start afresh
    with fake._lock:
        seen = _snapshot(fake, request)
    if since in (None, "", "0"):
        events = [("ADDED", obj) for _, obj in seen.values()]
    else:  # what changed between the list and this watch
        events = [("MODIFIED", obj) for _, obj in seen.values()
                  if int(obj["metadata"].get("resourceVersion") or 0) > int(since)]
    while True:
        for kind, obj in events:
            write((json.dumps({"type": kind, "object": obj}) + "\n").encode())
        with fake._lock:
            if fake._closing or time.monotonic() >= deadline:
                return
            fake._lock.wait(timeout=POLL_S)
            now = _snapshot(fake, request)
            events = []
            for name, (state, obj) in now.items():
                if name not in seen or seen[name][0] != state:
                    obj["metadata"]["resourceVersion"] = str(next(fake._ids))
                    events.append(("ADDED" if name not in seen else "MODIFIED", obj))
            events += [("DELETED", obj) for name, (_, obj) in seen.items() if name not in now]
            seen = now
