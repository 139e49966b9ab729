"""core/v1 Events, as a controller's event recorder writes them
(https://kubernetes.io/docs/reference/kubernetes-api/cluster-resources/event-v1/), with the
correlator's counting of repeats.
"""

from __future__ import annotations

import copy
import time


class Events:
    """Recording Events (a mixin of ``FakeKubernetes``)."""

    def event(
        self,
        involved: dict,
        reason: str,
        message: str,
        *,
        type_: str = "Warning",
        component: str = "kubelet",
        series: bool = False,
    ) -> dict:
        """Record a core/v1 Event about ``involved`` (a stored object: pod, JobSet, Job,
        Workload) as a controller's event recorder does
        (https://kubernetes.io/docs/reference/kubernetes-api/cluster-resources/event-v1/):
        ``involvedObject`` (kind, name, namespace, uid, apiVersion), ``type`` Normal or
        Warning, ``reason``, ``message``, ``source.component`` / ``reportingComponent``. The
        same (object, type, reason, message) again is not a new Event: the recorder's
        correlator counts it on the first one (``count`` and ``lastTimestamp``), or, for an
        Event written through events.k8s.io/v1 (``series``), in ``series.count`` and
        ``series.lastObservedTime`` while ``count`` and ``lastTimestamp`` stay unset and
        ``eventTime`` says when it was first seen. Returns the stored Event."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        micro = now.replace("Z", ".000000Z")  # eventTime and series: MicroTime
        meta = involved["metadata"]
        ns = meta.get("namespace") or self.namespace
        with self._lock:
            for (r, n, _), old in self.objects.items():
                if (
                    r == "events"
                    and n == ns
                    and old["involvedObject"]["uid"] == meta.get("uid")
                    and (old["type"], old["reason"], old["message"]) == (type_, reason, message)
                ):
                    if "series" in old or series:
                        entry = old.setdefault("series", {"count": 1})
                        entry.update(count=entry["count"] + 1, lastObservedTime=micro)
                    else:
                        old.update(count=old["count"] + 1, lastTimestamp=now)
                    self._lock.notify_all()
                    return copy.deepcopy(old)
            name = f"{meta['name']}.{next(self._ids):016x}"
            event = {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {
                    "name": name,
                    "namespace": ns,
                    "uid": f"uid-{next(self._ids)}",
                    "creationTimestamp": now,
                    "resourceVersion": str(next(self._ids)),
                },
                "involvedObject": {
                    "kind": involved.get("kind"),
                    "name": meta["name"],
                    "namespace": ns,
                    "uid": meta.get("uid"),
                    "apiVersion": involved.get("apiVersion"),
                },
                "type": type_,
                "reason": reason,
                "message": message,
                "source": {"component": component},
                "reportingComponent": component,
            }
            if series:
                event.update(eventTime=micro, action=reason, count=None, firstTimestamp=None, lastTimestamp=None)
            else:
                event.update(count=1, firstTimestamp=now, lastTimestamp=now)
            self.objects[("events", ns, name)] = event
            self._lock.notify_all()
            return copy.deepcopy(event)
