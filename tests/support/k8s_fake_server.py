"""A test double of the Kubernetes API server: a small HTTP server on 127.0.0.1, in a thread.

This is NOT a Kubernetes API server and no real controller runs behind it. It answers the
subset of the REST API that ``roxxel_launch.backends.kubernetes.backend`` uses, over real HTTP, so
the official ``kubernetes`` client is exercised end to end (kubeconfig loading, URL and
query building, bearer token, JSON bodies, chunked log streams, error Status objects):

* JobSets (``/apis/jobset.x-k8s.io/v1alpha2/namespaces/NS/jobsets[/NAME]``, the
  CustomObjects API), Jobs (``/apis/batch/v1/...``), Services and Pods (``/api/v1/...``):
  create (``POST``, with ``dryRun=All`` persisting nothing), read, list (equality and
  existence label selectors) and delete (``propagationPolicy`` recorded; the object and
  its pods go at once, or after ``linger`` reads to mimic foreground deletion);
* pod logs (``/api/v1/namespaces/NS/pods/NAME/log``), with ``follow=true`` streamed as a
  chunked response that ends when the pod has terminated or :meth:`FakeKubernetes.end_log`
  is called (and after at most ``FOLLOW_LIMIT_S`` seconds in any case);
* errors as the API server sends them (a ``Status`` object): 401 for a wrong token, 404
  for a missing object or an unknown path, 409 ``AlreadyExists``, 422 ``Invalid`` for an
  object name that is not a DNS-1123 label, and any status injected with
  :meth:`FakeKubernetes.fail`.

In place of the JobSet, Job and Kueue controllers, a scripted stand-in: creating a JobSet
or Job also creates its worker pods (Running, with the labels the controllers put on
them), and :meth:`FakeKubernetes.plan` says how each successive submission of a job ends
— ``succeed``, ``fail`` (a worker exits 1 in every attempt), ``preempt`` (a pod gets the
DisruptionTarget condition and exits 42 after its checkpoint), ``evict`` (Kueue suspends
it and its pods go) or ``run`` (keeps running) — applied when the object has been read
``after`` times (status polls), so that tests are deterministic and need no sleeps. Worker
exits, those of ``fail`` and ``preempt`` as those scripted with
:meth:`FakeKubernetes.exit_worker`, are decided by the stored object's own policies
(``podFailurePolicy``, ``backoffLimit``, the JobSet's ``failurePolicy`` rules and
``maxRestarts``) through ``roxxel_launch.backends.local.policy``, the engine the local backend
runs the same manifest with, and carried out as the JobSet controller does
(kubernetes-sigs/jobset@08dfbdfd682714a9ab929633eca8dc95315187e7,
pkg/controllers/failure_policy.go and jobset_controller.go; see
:meth:`FakeKubernetes._gang_restart`): a preempted JobSet of the launcher's manifest is
restarted in place for free, and its next planned outcome applies to the new attempt.
:func:`count_preemptions` renders a rule that counts instead, the one way a preemption
ends a JobSet (Preempted, for the tests of ``resume``). Child Jobs of a JobSet are not
stored: their names, failure reasons and messages appear in the decisions, conditions
and events the fake writes.

Enough for ``kubectl`` too (tests/launcher/test_kubectl_referee.py; ``tls=True``, since
kubectl sends its token only over TLS, see ``k8s_tls``): discovery and OpenAPI v3 documents
(``k8s_discovery``); every create decoded, defaulted and validated against the official
schemas and the JobSet CRD with its CEL rules, honouring ``fieldValidation`` (``k8s_schema``;
warnings go out as ``Warning`` headers); ``fieldSelector`` on ``metadata.name`` /
``metadata.namespace``; the same watch for ``kubectl wait`` as for the launcher; DELETE
answering with the deleted object for pods, services and custom resources and with a
Success Status otherwise, as the API server's registries do; pods made from their Job's pod
template (containers, annotations); JSON merge patches; JobSets printed as a Table with the
CRD's columns (``k8s_table``); :meth:`FakeKubernetes.settle` ends a job at once.

It is the one API double of the launcher tests (tests/launcher/test_launch_kubernetes.py
included), so it also takes objects stored directly (:meth:`FakeKubernetes.put`, as a
controller or an earlier submit left them), namespaces that do not exist
(``namespaces``), Nodes with labels, taints and allocatable resources, listed cluster-wide
(:meth:`FakeKubernetes.add_node`; none unless a test adds them), a cluster without JobSet
(``jobset_api``), raw-text answers and faults
on watches only (:meth:`FakeKubernetes.fail`) and raw log chunks
(:meth:`FakeKubernetes.log_bytes`).
"""

from __future__ import annotations

import base64
import copy
import functools
import http.server
import itertools
import json
import re
import subprocess
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

import yaml

from roxxel_launch.backends.local import policy

from support import k8s_discovery, k8s_schema, k8s_streams, k8s_table, k8s_tls

TOKEN = "fake-token-for-tests"
FOLLOW_LIMIT_S = 20.0  # a followed log stream never stays open longer than this

_ROUTES = [
    # No namespace: a list across all namespaces (authorized by the ClusterRole's rules).
    ("jobsets", re.compile(r"^/apis/jobset\.x-k8s\.io/v1alpha2/(?:namespaces/([^/]+)/)?jobsets(?:/([^/]+))?$")),
    ("jobs", re.compile(r"^/apis/batch/v1/(?:namespaces/([^/]+)/)?jobs(?:/([^/]+))?$")),
    ("services", re.compile(r"^/api/v1/namespaces/([^/]+)/services(?:/([^/]+))?$")),
    ("networkpolicies", re.compile(
        r"^/apis/networking\.k8s\.io/v1/namespaces/([^/]+)/networkpolicies(?:/([^/]+))?$")),
    ("log", re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/log$")),
    ("exec", re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/exec$")),
    ("portforward", re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/portforward$")),
    ("pods", re.compile(r"^/api/v1/(?:namespaces/([^/]+)/)?pods(?:/([^/]+))?$")),
    ("events", re.compile(r"^/api/v1/namespaces/([^/]+)/events(?:/([^/]+))?$")),
    # Cluster-scoped: the empty group stands for the namespace a Node does not have.
    ("nodes", re.compile(r"^/api/v1/nodes()(?:/([^/]+))?$")),
]
_KINDS = {"jobsets": ("JobSet", "jobset.x-k8s.io", "jobset.x-k8s.io/v1alpha2"),
          "jobs": ("Job", "batch", "batch/v1"), "services": ("Service", "", "v1"),
          "networkpolicies": ("NetworkPolicy", "networking.k8s.io", "networking.k8s.io/v1"),
          "pods": ("Pod", "", "v1"), "events": ("Event", "", "v1"), "nodes": ("Node", "", "v1")}
_RESOURCE_OF = {kind: resource for resource, (kind, _, _) in _KINDS.items()}
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_OUTCOMES = ("succeed", "fail", "preempt", "evict", "run")

JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
RJOB_NAME = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


def status_object(code: int, reason: str, message: str, **details) -> dict:
    """An API server error answer (``kind: Status``)."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "details": details, "code": code}


def _selector_matches(selector: str | None, labels: dict) -> bool:
    for term in filter(None, (selector or "").split(",")):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.split("=", 1)
            if labels.get(key.rstrip("=")) != value:
                return False
        elif term not in labels:
            return False
    return True


class _Request:
    def __init__(self, method: str, raw_path: str, body: bytes):
        parsed = urllib.parse.urlsplit(raw_path)
        self.method = method
        self.path = parsed.path
        self.query = dict(urllib.parse.parse_qsl(parsed.query))
        # Repeated parameters (exec's command=...&command=...), in order.
        self.query_lists: dict[str, list[str]] = {}
        for key, value in urllib.parse.parse_qsl(parsed.query):
            self.query_lists.setdefault(key, []).append(value)
        self.headers: list[tuple[str, str]] = []  # set by the handler (a WebSocket upgrade needs them)
        self.body = json.loads(body) if body else None
        self.raw_body = body
        self.content_type = ""  # set by the handler (PATCH needs it)
        self.accept = ""  # set by the handler (a Table of JobSets for kubectl get)
        self.warnings: list[str] = []  # sent as Warning headers (k8s_schema.admit)
        self.resource = self.namespace = self.name = None
        for resource, pattern in _ROUTES:
            match = pattern.match(self.path)
            if match:
                self.resource, self.namespace, self.name = resource, match.group(1) or None, match.group(2)
                break

    @property
    def dry_run(self) -> bool:
        return self.query.get("dryRun") == "All"

    @property
    def watch(self) -> bool:
        """A watch (``?watch=true``; kubectl and the Python client send ``true``)."""
        return self.query.get("watch") in ("true", "1")

    def __repr__(self) -> str:
        query = f"?{urllib.parse.urlencode(self.query)}" if self.query else ""
        return f"{self.method} {self.path}{query}"


class FakeKubernetes:
    """The test double (see the module docstring). Use as a context manager.

    Attributes:
        requests: every request served, in order (``method``, ``path``, ``query``, ``body``,
            ``resource``, ``namespace``, ``name``, ``dry_run``).
        objects: ``{(resource, namespace, name): object}`` as stored.
        linger: reads a deleted object survives (foreground deletion under way).
    """

    def __init__(self, namespace: str = "team-a", *, tls: bool = False):
        self.namespace = namespace
        self.tls = tls  # serve HTTPS (kubectl sends its token only over TLS; see k8s_tls)
        self.objects: dict[tuple[str, str, str], dict] = {}
        self.requests: list[_Request] = []
        self.linger = 0
        # The namespaces that exist (None: every one). Creating in another is 404 NotFound
        # 'namespaces "x" not found', as the NamespaceLifecycle admission plugin answers
        # (https://kubernetes.io/docs/reference/access-authn-authz/admission-controllers/#namespacelifecycle).
        self.namespaces: set[str] | None = None
        self._faults: list[dict] = []
        self._plans: dict[str, list[tuple[str, int]]] = {}
        self._scripts: dict[tuple[str, str, str], list] = {}
        self._dying: dict[tuple[str, str, str], int] = {}
        self._logs: dict[str, list[str | bytes]] = {}  # the running (or last) container's
        self._previous_logs: dict[str, list[str | bytes]] = {}  # the container before it
        self._log_ended: set[str] = set()
        self._submissions: dict[str, int] = {}
        self._lock = threading.Condition()
        self._closing = False
        self._ids = itertools.count(1)
        self._server: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> FakeKubernetes:
        fake = self

        class Handler(_Handler):
            server_fake = fake

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        if self.tls:  # the handshake happens in the handler's thread, not in accept()
            self._server.socket = k8s_tls.server_context().wrap_socket(
                self._server.socket, server_side=True, do_handshake_on_connect=False)
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-k8s",
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        with self._lock:
            self._closing = True
            self._lock.notify_all()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{'https' if self.tls else 'http'}://{host}:{port}"

    def write_kubeconfig(self, path: Path, *, token: str = TOKEN) -> Path:
        """A kubeconfig whose current context points at this server, in ``self.namespace``."""
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url, **self._ca_data()}}],
            "users": [{"name": "tester", "user": {"token": token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "tester",
                                                      "namespace": self.namespace}}],
        }))
        return path

    # ------------------------------------------------------------------ test controls

    def plan(self, name: str, *outcomes: str, after: int = 2) -> None:
        """How the next submissions of job ``name`` end, one outcome per submission.

        Each outcome applies when the object has been read ``after`` times since it was
        created; submissions beyond the plan keep running. ``fail`` and ``preempt`` are
        worker exits decided by the stored object's own policies, as :meth:`exit_worker`'s
        are (see :meth:`_exit_until_failed`). ``succeed`` and ``evict`` need no failure
        policy. An outcome that does not end the object applies the next one to its new
        pods: a Kueue re-admission after ``evict``, and a JobSet's gang restart after
        ``preempt`` (the launcher's rule ``preemption``, ``RestartJobSetAndIgnoreMaxRestarts``,
        restarts it in place without counting, so ``plan(name, "preempt", "succeed")`` is
        one submission that restarts once and completes). A preempted JobSet ends only
        under a rule that counts the preemption (:func:`count_preemptions`), once its
        ``maxRestarts`` are used up.
        """
        for outcome in outcomes:
            if outcome not in _OUTCOMES:
                raise ValueError(f"unknown outcome {outcome!r}; use one of {_OUTCOMES}")
        with self._lock:
            self._plans.setdefault(name, []).extend((o, after) for o in outcomes)

    def fail(self, method: str, resource: str, code: int, message: str = "injected failure", *,
             reason: str = "InternalError", dry_run: bool | None = None, times: int = 1,
             watch: bool | None = None, raw: bytes | None = None, **details) -> None:
        """Answer the next ``times`` matching requests (``watch``: only watches, or only
        other requests) with this error Status, or with ``raw`` text (as a proxy or the
        API server's mux answers an unknown path: ``404 page not found``)."""
        answer = (code, ("raw", raw)) if raw is not None else \
            (code, status_object(code, reason, message, **details))
        with self._lock:
            self._faults.append(dict(method=method, resource=resource, dry_run=dry_run, times=times,
                                     watch=watch, answer=answer))

    def put(self, resource: str, obj: dict) -> dict:
        """Store ``obj`` as if created earlier (by a submit, or by a controller: pods); no
        controller acts on it. Returns the stored object, for the test to edit in place."""
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        meta.setdefault("namespace", self.namespace)
        meta.setdefault("creationTimestamp", "2025-01-01T00:00:00Z")
        meta.setdefault("uid", f"uid-{next(self._ids)}")
        meta.setdefault("resourceVersion", str(next(self._ids)))
        with self._lock:
            self.objects[(resource, meta["namespace"], meta["name"])] = obj
            self._lock.notify_all()
        return obj

    def add_node(self, name: str, *, labels: dict[str, str], allocatable: dict[str, str],
                 taints: tuple[dict, ...] = ()) -> dict:
        """Store a Node as the kubelet registers it (the Node API,
        https://kubernetes.io/docs/reference/kubernetes-api/cluster-resources/node-v1/):
        ``metadata.labels`` (GKE's node-pool and accelerator labels among them),
        ``spec.taints`` and ``status.allocatable`` (quantities as strings, ``capacity`` the
        same). Listed by ``GET /api/v1/nodes`` (cluster-scoped: authorized by the ClusterRole)."""
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": dict(labels), "uid": f"uid-{next(self._ids)}",
                             "resourceVersion": str(next(self._ids)),
                             "creationTimestamp": "2025-01-01T00:00:00Z"},
                "spec": {"taints": [dict(t) for t in taints]} if taints else {},
                "status": {"allocatable": dict(allocatable), "capacity": dict(allocatable)}}
        with self._lock:
            self.objects[("nodes", "", name)] = node
        return node

    def log_bytes(self, pod: str, *chunks: bytes) -> None:
        """Append raw chunks to a pod's log (a followed stream sends each as it comes)."""
        with self._lock:
            self._logs.setdefault(pod, []).extend(chunks)
            self._lock.notify_all()

    @property
    def jobset_api(self) -> bool:
        """Is JobSet installed? Without it its CRD is not served and every JobSet path is
        unknown to the API server: 404 with the mux's plain ``404 page not found``."""
        return self._real.crd

    @jobset_api.setter
    def jobset_api(self, installed: bool) -> None:
        self._real.crd = installed

    def log(self, pod: str, *lines: str, container: str | None = None) -> None:
        """Append lines to a pod's log (a followed stream sends them at once): its first
        container's, or ``container``'s."""
        with self._lock:
            self._logs.setdefault(pod if container is None else f"{pod}/{container}", []).extend(lines)
            self._lock.notify_all()

    def add_sidecar(self, pod: str, name: str = "gke-gcsfuse-sidecar") -> None:
        """Inject a native sidecar into ``pod``, as GKE's GCS FUSE webhook does: an init
        container with ``restartPolicy: Always``, running beside the app containers
        (https://kubernetes.io/docs/concepts/workloads/pods/sidecar-containers/,
        https://cloud.google.com/kubernetes-engine/docs/how-to/cloud-storage-fuse-csi-driver-sidecar)."""
        with self._lock:
            obj = self.objects[("pods", self.namespace, pod)]
            obj["spec"].setdefault("initContainers", []).append(
                {"name": name, "image": f"gke.gcr.io/{name}:v1", "restartPolicy": "Always"})
            obj["status"].setdefault("initContainerStatuses", []).append(
                {"name": name, "ready": True, "restartCount": 0, "started": True,
                 "state": {"running": {"startedAt": obj["metadata"]["creationTimestamp"]}}})
            self._touch(obj)

    def serve_port(self, pod: str, port: int, address: tuple[str, int]) -> None:
        """Port ``port`` of ``pod`` is served by the TCP listener at ``address`` (the pod's
        process, for portforward). A port nobody serves refuses, as the kubelet reports."""
        with self._lock:
            self._real.ports[(pod, port)] = address

    def on_exec(self, run) -> None:
        """``run(argv) -> subprocess.Popen`` (stdout and stderr pipes) runs exec'd commands;
        by default the argv runs on this machine, in place of the container's runtime."""
        with self._lock:
            self._real.exec_runner = run

    @property
    def execs(self) -> list[tuple[str, str, list[str]]]:
        """(pod, container, argv) of every exec, in order."""
        with self._lock:
            return list(self._real.execs)

    def restart_container(self, pod: str, code: int = 1) -> None:
        """The kubelet restarts the first container of ``pod`` in place (a pod whose
        ``restartPolicy`` is OnFailure or Always): the old container exited with ``code``; its
        status moves to ``lastState.terminated`` (with its ``containerID``),
        ``restartCount`` grows, and its log becomes the previous container's log, which
        ``previous=true`` reads
        (https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/pod-v1/#get-read-log-of-the-specified-pod);
        the new container starts with an empty log."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        with self._lock:
            container = self.objects[("pods", self.namespace, pod)]["status"]["containerStatuses"][0]
            container["lastState"] = {"terminated": {
                "exitCode": code, "reason": "Completed" if code == 0 else "Error",
                "finishedAt": now, "containerID": container.get("containerID")}}
            container.update(restartCount=container["restartCount"] + 1,
                             containerID=f"containerd://{next(self._ids):064x}",
                             state={"running": {"startedAt": now}})
            self._previous_logs[pod] = self._logs.pop(pod, [])
            self._touch(self.objects[("pods", self.namespace, pod)])
            self._lock.notify_all()

    def end_log(self, pod: str) -> None:
        """End a followed log stream of ``pod`` (as when its container exits)."""
        with self._lock:
            self._log_ended.add(pod)
            self._lock.notify_all()

    def event(self, involved: dict, reason: str, message: str, *, type_: str = "Warning",
              component: str = "kubelet", series: bool = False) -> dict:
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
                if r == "events" and n == ns and old["involvedObject"]["uid"] == meta.get("uid") \
                        and (old["type"], old["reason"], old["message"]) == (type_, reason, message):
                    if "series" in old or series:
                        entry = old.setdefault("series", {"count": 1})
                        entry.update(count=entry["count"] + 1, lastObservedTime=micro)
                    else:
                        old.update(count=old["count"] + 1, lastTimestamp=now)
                    self._lock.notify_all()
                    return copy.deepcopy(old)
            name = f"{meta['name']}.{next(self._ids):016x}"
            event = {"apiVersion": "v1", "kind": "Event",
                     "metadata": {"name": name, "namespace": ns, "uid": f"uid-{next(self._ids)}",
                                  "creationTimestamp": now, "resourceVersion": str(next(self._ids))},
                     "involvedObject": {"kind": involved.get("kind"), "name": meta["name"],
                                        "namespace": ns, "uid": meta.get("uid"),
                                        "apiVersion": involved.get("apiVersion")},
                     "type": type_, "reason": reason, "message": message,
                     "source": {"component": component}, "reportingComponent": component}
            if series:
                event.update(eventTime=micro, action=reason, count=None, firstTimestamp=None,
                             lastTimestamp=None)
            else:
                event.update(count=1, firstTimestamp=now, lastTimestamp=now)
            self.objects[("events", ns, name)] = event
            self._lock.notify_all()
            return copy.deepcopy(event)

    def hold(self, pod: str, phase: str = "Pending", *, waiting: str | None = None,
             unschedulable: str | None = None) -> dict:
        """Keep ``pod`` from running, as a stuck pod looks: ``phase`` Pending with its
        container ``waiting`` (ContainerCreating, ErrImagePull, ...) or, with
        ``unschedulable`` (the scheduler's message), condition PodScheduled False, reason
        Unschedulable and no container started
        (https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-conditions).
        Returns the pod as stored."""
        with self._lock:
            obj = self.objects[("pods", self.namespace, pod)]
            status = obj["status"]
            status["phase"] = phase
            for container in status.get("containerStatuses") or []:
                container.update(ready=False, state={"waiting": {"reason": waiting}} if waiting
                                 else {"waiting": {"reason": "ContainerCreating"}})
            if unschedulable is not None:
                status.pop("containerStatuses", None)
                status["conditions"] = [{"type": "PodScheduled", "status": "False",
                                         "reason": "Unschedulable", "message": unschedulable}]
            self._lock.notify_all()
            return copy.deepcopy(obj)

    def get(self, resource: str, name: str) -> dict | None:
        with self._lock:
            return copy.deepcopy(self.objects.get((resource, self.namespace, name)))

    def pods(self, owner: str) -> list[dict]:
        """The pods of a JobSet or Job, by name."""
        with self._lock:
            return sorted((copy.deepcopy(o) for (r, _, _), o in self.objects.items() if r == "pods"
                           and owner in (o["metadata"]["labels"].get(JOBSET_NAME),
                                         o["metadata"]["labels"].get("job-name"))),
                          key=lambda p: p["metadata"]["name"])

    def submissions(self, name: str) -> int:
        """How many times a job of this name was created (not dry runs)."""
        with self._lock:
            return self._submissions.get(name, 0)

    def calls(self, method: str | None = None, resource: str | None = None) -> list[_Request]:
        with self._lock:
            return [r for r in self.requests if (method is None or r.method == method)
                    and (resource is None or r.resource == resource)]

    # ------------------------------------------------------------------ answering

    def answer(self, request: _Request, authorization: str | None) -> tuple[int, Any]:
        """(status code, JSON-able body) — or (200, ("stream", ns, pod, follow, previous)) for a
        log."""
        with self._lock:
            self.requests.append(request)
            if authorization != f"Bearer {TOKEN}":
                return 401, status_object(401, "Unauthorized", "Unauthorized")
            if request.resource == "jobsets" and not self._real.crd:
                return 404, ("raw", b"404 page not found\n")
            injected = self._injected(request) if request.watch else None  # before a watch starts
            if injected is not None:
                return injected
            client_side = self._client_side_answer(request)  # see "behaving like a real server"
            if client_side is not None:
                return client_side
            injected = None if request.watch else self._injected(request)
            if injected is not None:
                return injected
            served = self._discovery_or_patch(request)
            if served is not None:
                return served
            if request.resource is None:
                return 404, status_object(404, "NotFound", "the server could not find the requested resource")
            if request.resource == "log":
                return self._log_answer(request)
            if request.resource in ("exec", "portforward"):
                return self._stream_answer(request)
            if request.method == "POST":
                return self._create(request)
            if request.method == "GET" and request.name is None:
                return self._paginate(request, *self._list(request))
            if request.method == "GET":
                return self._read(request)
            if request.method == "DELETE":
                return self._delete(request)
            return 405, status_object(405, "MethodNotAllowed", f"{request.method} is not supported here")

    def _injected(self, request: _Request) -> tuple[int, Any] | None:
        """The answer of the first :meth:`fail` fault that matches ``request``, if any."""
        for fault in self._faults:
            if (fault["times"] > 0 and fault["method"] == request.method
                    and fault["resource"] == request.resource
                    and fault["dry_run"] in (None, request.dry_run)
                    and fault["watch"] in (None, request.watch)):
                fault["times"] -= 1
                return fault["answer"]
        return None

    def _not_found(self, resource: str, name: str) -> tuple[int, dict]:
        kind, group, _ = _KINDS[resource]
        qualified = f"{resource}.{group}" if group else resource
        return 404, status_object(404, "NotFound", f'{qualified} "{name}" not found',
                                  name=name, group=group, kind=resource)

    def _create(self, request: _Request) -> tuple[int, dict]:
        resource, ns = request.resource, request.namespace
        kind, group, api_version = _KINDS[resource]
        obj = copy.deepcopy(request.body or {})
        meta = obj.get("metadata") or {}
        name = meta.get("name", "")
        if obj.get("kind") != kind or obj.get("apiVersion") != api_version:
            return 400, status_object(400, "BadRequest", f"expected {api_version} {kind}, got "
                                      f"{obj.get('apiVersion')} {obj.get('kind')}")
        if self.namespaces is not None and ns not in self.namespaces:
            return 404, status_object(404, "NotFound", f'namespaces "{ns}" not found',
                                      name=ns, kind="namespaces")
        if meta.get("namespace", ns) != ns:
            return 400, status_object(400, "BadRequest", "the namespace of the object does not "
                                      "match the namespace of the request")
        admitted = self._admit(request, obj)
        if isinstance(admitted, tuple):
            return admitted
        obj = admitted
        meta = obj.get("metadata") or {}
        if len(name) > 63 or not _DNS1123_LABEL.fullmatch(name):
            # As the API server's NewInvalid: "Kind.group" (no group for core kinds) and the Kind
            # in the details; the field error reads 'Invalid value: "<value>": <detail>'.
            body = (f'Invalid value: {json.dumps(name)}: must be a DNS-1123 label of at most 63 '
                    "characters (lower case alphanumeric characters or '-', starting and ending "
                    "with an alphanumeric character)")
            message = f'{kind}{"." + group if group else ""} "{name}" is invalid: metadata.name: {body}'
            return 422, status_object(422, "Invalid", message, name=name, group=group, kind=kind, causes=[
                {"reason": "FieldValueInvalid", "field": "metadata.name", "message": body}])
        if (resource, ns, name) in self.objects:
            return 409, status_object(409, "AlreadyExists",
                                      f'{resource}{"." + group if group else ""} "{name}" already exists',
                                      name=name, group=group, kind=resource)
        meta.update(namespace=ns, uid=f"uid-{next(self._ids)}", resourceVersion=str(next(self._ids)),
                    creationTimestamp=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        obj["metadata"] = meta
        if request.dry_run:
            return 201, obj
        self.objects[(resource, ns, name)] = obj
        if resource in ("jobsets", "jobs"):
            self._submissions[name] = self._submissions.get(name, 0) + 1
            self._arm((resource, ns, name))
            self._start_pods(resource, obj)
        return 201, copy.deepcopy(obj)

    @staticmethod
    def _admit(request: _Request, obj: dict) -> dict | tuple[int, dict]:
        """``obj`` (a create's body, or a patch's result) through admission (``k8s_schema``:
        decoded, defaulted and validated, honouring ``fieldValidation``): the object to store,
        or the error answer. Its warnings go to ``request.warnings`` (Warning headers)."""
        admission = k8s_schema.admit(request.resource, obj, raw=request.raw_body,
                                     field_validation=request.query.get("fieldValidation"),
                                     status_object=status_object)
        request.warnings.extend(admission.warnings)
        if admission.error is not None:
            return admission.error
        return admission.obj or obj

    def _list(self, request: _Request) -> tuple[int, dict]:
        kind, _, api_version = _KINDS[request.resource]
        problem = _field_selector_problem(request.query.get("fieldSelector"), request.resource)
        if problem:
            return 400, status_object(400, "BadRequest", problem)
        selector = request.query.get("labelSelector")
        items = [copy.deepcopy(o) for (r, n, _), o in sorted(self.objects.items())
                 if r == request.resource and request.namespace in (None, n)
                 and _selector_matches(selector, o["metadata"].get("labels") or {})
                 and _field_selector_matches(request.query.get("fieldSelector"), o, request.resource)]
        return 200, {"kind": f"{kind}List", "apiVersion": api_version,
                     "metadata": {"resourceVersion": str(next(self._ids))}, "items": items}

    def _read(self, request: _Request) -> tuple[int, dict]:
        key = (request.resource, request.namespace, request.name)
        if key not in self.objects:
            return self._not_found(request.resource, request.name)
        if key in self._dying:
            self._dying[key] -= 1
            if self._dying[key] < 0:
                self._remove(key)
                return self._not_found(request.resource, request.name)
        self._restarting_done(key)
        script = self._scripts.get(key)
        if script is not None:
            script[1] -= 1
            if script[1] <= 0:
                del self._scripts[key]
                self._apply(key, script[0])
        return 200, copy.deepcopy(self.objects[key])

    def _delete(self, request: _Request) -> tuple[int, dict]:
        key = (request.resource, request.namespace, request.name)
        if key not in self.objects:
            return self._not_found(request.resource, request.name)
        self._scripts.pop(key, None)
        if self.linger:
            meta = self.objects[key]["metadata"]
            meta["deletionTimestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            if _propagation_policy(request) == "Foreground":
                meta["finalizers"] = ["foregroundDeletion"]
            self._dying[key] = self.linger
            return 200, copy.deepcopy(self.objects[key])  # still there: the object, as it is now
        deleted = copy.deepcopy(self.objects[key])
        self._remove(key)
        return 200, _deleted_answer(request.resource, deleted)

    def _remove(self, key: tuple[str, str, str]) -> None:
        self.objects.pop(key, None)
        self._dying.pop(key, None)
        resource, ns, name = key
        if resource in ("jobsets", "jobs"):
            owner_label = JOBSET_NAME if resource == "jobsets" else "job-name"
            for pod_key in [k for k, o in self.objects.items() if k[0] == "pods" and k[1] == ns
                            and o["metadata"]["labels"].get(owner_label) == name]:
                del self.objects[pod_key]
        self._lock.notify_all()

    # ------------------------------------------------------------------ the scripted controllers

    def _start_pods(self, resource: str, obj: dict) -> None:
        name, ns = obj["metadata"]["name"], obj["metadata"]["namespace"]
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        if resource == "jobsets":
            # The controller stamps status.restarts on the new attempt's Jobs and pods.
            attempt = str((obj.get("status") or {}).get("restarts") or 0)
            for rjob in obj["spec"]["replicatedJobs"]:
                job_spec = rjob["template"]["spec"]
                template_labels = (job_spec["template"].get("metadata") or {}).get("labels") or {}
                for s in range(rjob.get("replicas", 1)):
                    for i in range(job_spec.get("completions", 1)):
                        labels = {**template_labels, JOBSET_NAME: name, RJOB_NAME: rjob["name"],
                                  JOB_INDEX: str(s), RESTART_ATTEMPT: attempt, COMPLETION_INDEX: str(i),
                                  "job-name": f"{name}-{rjob['name']}-{s}",
                                  "batch.kubernetes.io/job-name": f"{name}-{rjob['name']}-{s}"}
                        self._put_pod(f"{name}-{rjob['name']}-{s}-{i}-{next(self._ids):05d}", ns, labels,
                                      started, template=job_spec["template"])
        else:
            template_labels = (obj["spec"]["template"].get("metadata") or {}).get("labels") or {}
            for i in range(obj["spec"].get("completions", 1)):
                labels = {**template_labels, "job-name": name, "batch.kubernetes.io/job-name": name,
                          COMPLETION_INDEX: str(i)}
                self._put_pod(f"{name}-{i}-{next(self._ids):05d}", ns, labels, started,
                              template=obj["spec"]["template"])

    def _put_pod(self, name: str, ns: str, labels: dict, started: str, *,
                 template: dict | None = None) -> None:
        # A pod is made from its Job's pod template: the template's annotations and spec (its
        # containers: kubectl logs picks the container from them), plus what the controllers add.
        template = template or {}
        annotations = {**((template.get("metadata") or {}).get("annotations") or {}),
                       COMPLETION_INDEX: labels[COMPLETION_INDEX]}
        if RESTART_ATTEMPT in labels:
            annotations[RESTART_ATTEMPT] = labels[RESTART_ATTEMPT]
        spec = copy.deepcopy(template.get("spec") or {"containers": [{"name": "worker"}]})
        self.objects[("pods", ns, name)] = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": labels,
                         "annotations": annotations,
                         "creationTimestamp": started, "uid": f"uid-{next(self._ids)}"},
            "spec": spec,
            "status": {"phase": "Running", "conditions": [],
                       "containerStatuses": [{"name": c["name"], "ready": True, "restartCount": 0,
                                              "containerID": f"containerd://{next(self._ids):064x}",
                                              "state": {"running": {"startedAt": started}}}
                                             for c in spec.get("containers") or []]}}

    def _apply(self, key: tuple[str, str, str], outcome: str) -> None:
        resource, ns, name = key
        obj = self.objects[key]
        owner_label = JOBSET_NAME if resource == "jobsets" else "job-name"
        pods = sorted((o for k, o in self.objects.items() if k[0] == "pods" and k[1] == ns
                       and o["metadata"]["labels"].get(owner_label) == name),
                      key=lambda p: (int(p["metadata"]["labels"].get(JOB_INDEX, "0")),
                                     int(p["metadata"]["labels"][COMPLETION_INDEX])))
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

        def condition(type_: str, reason: str, message: str) -> dict:
            return {"type": type_, "status": "True", "reason": reason, "message": message,
                    "lastTransitionTime": now}

        if outcome == "run":
            return
        if outcome in ("fail", "preempt"):
            self._exit_until_failed(key, outcome)
            return
        if outcome == "succeed":
            for pod in pods:
                _end_pod(pod, 0, now)
            if resource == "jobsets":  # the restarts so far stay (setJobSetCompletedCondition)
                kept = {k: v for k, v in (obj.get("status") or {}).items()
                        if k in ("restarts", "restartsCountTowardsMax")}
                obj["status"] = {"restarts": 0, **kept, "terminalState": "Completed", "conditions": [
                    condition("Completed", "AllJobsCompleted", "jobset completed successfully")]}
            else:
                obj["status"] = {"succeeded": len(pods), "conditions": [
                    condition("SuccessCriteriaMet", "CompletionsReached", "Reached expected number of succeeded pods"),
                    condition("Complete", "CompletionsReached", "Reached expected number of succeeded pods")]}
        elif outcome == "evict":
            obj["spec"]["suspend"] = True
            obj["status"] = {"conditions": [condition(
                "Suspended", "SuspendedTrue" if resource == "jobsets" else "JobSuspended",
                "evicted by Kueue: preempted to admit a higher-priority workload")]}
            for pod in pods:
                del self.objects[("pods", ns, pod["metadata"]["name"])]
        for pod in pods:
            self._log_ended.add(pod["metadata"]["name"])
        self._touch(obj, *pods)
        self._lock.notify_all()

    # ------------------------------------------------------------------ logs

    def _log_answer(self, request: _Request) -> tuple[int, Any]:
        """A pod's log; with ``previous=true`` its previous terminated container's, which the
        kubelet finds from ``lastState.terminated.containerID`` and refuses (400 BadRequest,
        the kubelet's words) when there is none, as in a pod that never restarted one."""
        pod = self.objects.get(("pods", request.namespace, request.name))
        if pod is None:
            return self._not_found("pods", request.name)
        container = request.query.get("container")
        invalid = _invalid_container(pod, container)
        if invalid is not None:
            return invalid
        default = (((pod.get("spec") or {}).get("containers") or [{}])[0]).get("name")
        key = request.name if container in (None, default) or default is None \
            else f"{request.name}/{container}"
        previous = request.query.get("previous") == "true"
        if previous:
            statuses = pod["status"].get("containerStatuses") or [{}]
            container = request.query.get("container") or statuses[0].get("name")
            status = next((c for c in statuses if c.get("name") == container), {})
            if not ((status.get("lastState") or {}).get("terminated") or {}).get("containerID"):
                return 400, status_object(400, "BadRequest", f'previous terminated container '
                                          f'"{container}" in pod "{request.name}" not found')
        return 200, ("stream", request.namespace, request.name,
                     request.query.get("follow") == "true", previous, key)

    def stream_log(self, ns: str, pod: str, follow: bool, write, previous: bool = False,
                   key: str | None = None) -> None:
        """Writes a pod's log lines with ``write(bytes)``; with ``follow`` until it ends. The
        ``previous`` container's log has ended: it is written whole, followed or not. ``key``:
        the log of another container than the first (``POD/CONTAINER``, see :meth:`log`)."""
        logs = self._previous_logs if previous else self._logs
        key = key or pod
        sent = 0
        deadline = time.monotonic() + FOLLOW_LIMIT_S
        while True:
            with self._lock:
                lines = logs.get(key, [])[sent:]
                sent += len(lines)
                obj = self.objects.get(("pods", ns, pod))
                over = (not follow or previous or self._closing or obj is None
                        or pod in self._log_ended
                        or obj["status"]["phase"] in ("Succeeded", "Failed"))
                if not lines and not over:
                    self._lock.wait(timeout=max(0.0, min(0.5, deadline - time.monotonic())))
                    if time.monotonic() >= deadline:
                        return
                    continue
            if lines:
                write(b"".join(line if isinstance(line, bytes) else (line + "\n").encode()
                               for line in lines))
            if over:
                with self._lock:
                    if not logs.get(key, [])[sent:]:
                        return

    def _stream_answer(self, request: _Request) -> tuple[int, Any]:
        """exec and portforward (see ``k8s_streams``): the pod must exist and run, exec's
        container be one of it; then ("upgrade", ...) for the handler to take the connection
        over. Without ``Upgrade: websocket`` (SPDY, which this double does not speak) 400."""
        pod = self.objects.get(("pods", request.namespace, request.name))
        if pod is None:
            return self._not_found("pods", request.name)
        upgrade = dict((k.lower(), v) for k, v in request.headers).get("upgrade", "").lower()
        if upgrade != "websocket":
            return 400, status_object(400, "BadRequest", f"Upgrade request required (this simulated API "
                                      f"server speaks WebSocket only, not {upgrade or 'plain HTTP'})")
        phase = pod["status"].get("phase")
        if phase in ("Succeeded", "Failed"):  # the API server's message for a finished pod
            return 400, status_object(400, "BadRequest", "cannot exec into a container in a completed "
                                      f"pod; current phase is {phase}")
        if request.resource == "portforward":
            port = int(request.query.get("ports", "0") or 0)
            uid = pod["metadata"].get("uid", "")
            refused = (f"error forwarding port {port} to pod {request.name}, uid {uid}: failed to connect "
                       f"to localhost:{port} inside the pod: connect: connection refused")
            return 101, ("upgrade", "portforward", port, self._real.ports.get((request.name, port)), refused)
        container = request.query.get("container") or pod["spec"]["containers"][0]["name"]
        invalid = _invalid_container(pod, container)
        if invalid is not None:
            return invalid
        command = request.query_lists.get("command") or []
        self._real.execs.append((request.name, container, command))
        run = self._real.exec_runner or (lambda argv: subprocess.Popen(
            list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        return 101, ("upgrade", "exec", command, run)

    # ================================================================== behaving like a real server
    # Watches, pagination, fault injection, RBAC, the JobSet CRD, Kueue objects, gang
    # restarts and owner references: what a client that runs for days meets on a real
    # cluster. Each behaviour cites the documentation it follows. State lives in one
    # object (``self._real``), made on first use.

    @property
    def _real(self) -> _RealServerState:
        state = self.__dict__.get("_real_state")
        if state is None:
            state = self.__dict__["_real_state"] = _RealServerState()
        return state

    # --- test controls

    def storm(self, method: str, resource: str, times: int, *, retry_after: int = 1,
              code: int = 429) -> None:
        """The next ``times`` matching requests get 429 TooManyRequests with ``Retry-After``
        (https://kubernetes.io/docs/concepts/cluster-administration/flow-control/: a request
        rejected by API Priority and Fairness gets 429 and a Retry-After header), or any
        other ``code`` (500, 503) with the same header."""
        reason = {429: "TooManyRequests", 503: "ServiceUnavailable"}.get(code, "InternalError")
        with self._lock:
            self._real.faults.append(dict(
                method=method, resource=resource, times=times, answer=(code, (
                    "headers", status_object(code, reason, "the server has received too many "
                                             "requests and has asked us to try again later"
                                             if code == 429 else "injected failure",
                                             retryAfterSeconds=retry_after),
                    {"Retry-After": str(retry_after)}))))

    def drop(self, method: str, resource: str, times: int = 1) -> None:
        """The next ``times`` matching requests lose their connection with no answer."""
        with self._lock:
            self._real.faults.append(dict(method=method, resource=resource, times=times,
                                          answer=(0, ("drop",))))

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

    def restart(self, name: str) -> None:
        """A gang restart of JobSet ``name`` now, as its ``preemption`` rule makes one (see
        :meth:`_gang_restart`)."""
        with self._lock:
            self._gang_restart(("jobsets", self.namespace, name))

    def exit_worker(self, name: str, code: int, *, process: int = 0,
                    disrupted: bool = False) -> policy.Decision:
        """Worker ``process`` of job ``name`` (a JobSet, else a Job) ends now with exit
        ``code``; the simulated Job and JobSet controllers then do what the stored object's
        own policies say, decided by the engine the local backend uses
        (:mod:`roxxel_launch.backends.local.policy`: the Job's ``podFailurePolicy`` and
        ``backoffLimit``, https://kubernetes.io/docs/concepts/workloads/controllers/job/
        #pod-failure-policy; the JobSet's ``failurePolicy`` rules and ``maxRestarts``,
        https://jobset.sigs.k8s.io/docs/concepts/#failure-policy):

        * ``RecreatePod``: the failed pod is replaced by a new one (the Job's
          ``status.failed`` grows);
        * ``Restart``: a gang restart (:meth:`_gang_restart`), counted toward
          ``maxRestarts`` or not;
        * ``Fail``: every other pod is stopped (exit 143) and the workload fails with the
          controller's condition: a Job with ``FailureTarget`` + ``Failed`` (reason
          ``PodFailurePolicy`` or ``BackoffLimitExceeded``), a JobSet with ``Failed`` and
          ``terminalState: Failed`` (reason ``FailJobSetFailurePolicyAction``,
          ``ReachedMaxRestarts`` or ``FailedJobs``, the JobSet controller's constants).

        ``disrupted`` gives the pod the ``DisruptionTarget`` condition first (a preemption).
        Returns the decision (all of them are in ``_real.decisions``)."""
        with self._lock:
            key = next((k for k in (("jobsets", self.namespace, name), ("jobs", self.namespace, name))
                        if k in self.objects), None)
            if key is None:
                raise KeyError(f"no JobSet or Job {name} in {self.namespace}")
            decision = self._pod_exit(key, code, process, disrupted)
            self._real.decisions.append(decision)
            self._bump_versions()
            self._lock.notify_all()
            return decision

    def _pod_exit(self, key: tuple[str, str, str], code: int, process: int,
                  disrupted: bool, message: str = "") -> policy.Decision:
        resource, ns, name = key
        obj = self.objects[key]
        pods = self._ordered_pods(key)
        if not 0 <= process < len(pods):
            raise IndexError(f"{name} has processes 0..{len(pods) - 1}, not {process}")
        pod = pods[process]
        labels = pod["metadata"]["labels"]
        exit = _pod_exit_of(pod, code, disrupted)
        status = obj.setdefault("status", {})
        failures = (key, exit.job)
        decision = policy.policy_of([obj]).decide(
            exit, failed_before=self._real.job_failures.get(failures, 0),
            counted_restarts=int(status.get("restartsCountTowardsMax") or 0))
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        if disrupted:
            pod["status"]["conditions"].append({
                "type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
                "message": "Preempted in order to admit critical pod", "lastTransitionTime": now})
        _end_pod(pod, code, now, message)
        self._log_ended.add(pod["metadata"]["name"])
        if decision.action is policy.Action.RECREATE_POD:
            if decision.counted:
                self._real.job_failures[failures] = self._real.job_failures.get(failures, 0) + 1
            if resource == "jobs":
                status["failed"] = int(status.get("failed") or 0) + 1
            base = pod["metadata"]["name"].rsplit("-", 1)[0]
            template = obj["spec"]["template"] if resource == "jobs" else next(
                r["template"]["spec"]["template"] for r in obj["spec"]["replicatedJobs"]
                if r["name"] == exit.replicated_job)
            self._put_pod(f"{base}-{next(self._ids):05d}", ns, dict(labels), now, template=template)
        elif decision.action is policy.Action.RESTART:
            self._gang_restart(key, counted=decision.counted, decision=decision, failed_job=exit.job)
        else:
            self._fail_workload(key, pods, pod, decision, now)
        self._touch(obj)
        return decision

    @staticmethod
    def _job_verdict(obj: dict, pod: dict, code: int, *, disrupted: bool) -> policy.Decision:
        """What the Job controller alone (the podFailurePolicy of ``pod``'s Job in ``obj``)
        decides when ``pod`` exits with ``code``, none of its failures counted before."""
        exit = _pod_exit_of(pod, code, disrupted)
        return policy.policy_of([obj]).jobs[exit.replicated_job or exit.job].decide(exit, 0)

    def _exit_until_failed(self, key: tuple[str, str, str], outcome: str) -> None:
        """The ``fail`` and ``preempt`` outcomes of :meth:`plan`, as worker exits that the
        policy engine decides on (:meth:`_pod_exit`, as for :meth:`exit_worker`):

        * ``fail``: worker 1 (0 when alone) exits 1 with ``ValueError: the loss is NaN``, in
          every attempt, until the controllers fail the workload (a launcher's Job at once,
          ``backoffLimit: 0``; its JobSet after ``maxRestarts`` counted gang restarts, with
          ``ReachedMaxRestarts``);
        * ``preempt``: worker 0 gets the ``DisruptionTarget`` condition and exits 42 after
          its checkpoint, in every attempt, until the controllers fail the workload (a
          launcher's Job fails by its podFailurePolicy) or restart the gang without
          counting it (a launcher's JobSet: its rule ``preemption``,
          ``RestartJobSetAndIgnoreMaxRestarts``). A JobSet restarted so goes on in place,
          and the plan's next outcome applies to its new attempt (:meth:`_arm`).

        Raises RuntimeError when the object's policies never fail it."""
        for _ in range(10_002):  # maxRestarts is at most 10000 (the spec's bound)
            pods = self._ordered_pods(key)
            if outcome == "preempt":
                decision = self._pod_exit(key, 42, 0, True, "checkpoint saved after SIGTERM")
            else:
                decision = self._pod_exit(key, 1, min(1, len(pods) - 1), False,
                                          "ValueError: the loss is NaN")
            self._real.decisions.append(decision)
            if decision.action is policy.Action.RESTART and not decision.counted:
                self._arm(key)
                self._lock.notify_all()
                return
            if decision.action is policy.Action.FAIL:
                self._lock.notify_all()
                return
        raise RuntimeError(f"{key[2]}: its policies never fail it; plan another outcome")

    def _arm(self, key: tuple[str, str, str]) -> None:
        """The plan's next outcome (:meth:`plan`) for the pods that start now: a new
        submission's, a re-admitted workload's, a JobSet's next attempt after a free gang
        restart; without one they keep running."""
        plan = self._plans.get(key[2]) or []
        outcome, after = plan.pop(0) if plan else ("run", 0)
        self._scripts[key] = [outcome, after]

    def _ordered_pods(self, key: tuple[str, str, str]) -> list[dict]:
        """The live pods of a JobSet or Job, in process order (job index, completion index)."""
        resource, ns, name = key
        owner_label = JOBSET_NAME if resource == "jobsets" else "job-name"
        return sorted((o for k, o in self.objects.items() if k[0] == "pods" and k[1] == ns
                       and o["metadata"]["labels"].get(owner_label) == name
                       and "deletionTimestamp" not in o["metadata"]),
                      key=lambda p: (int(p["metadata"]["labels"].get(JOB_INDEX, "0")),
                                     int(p["metadata"]["labels"][COMPLETION_INDEX])))

    def _fail_workload(self, key: tuple[str, str, str], pods: list[dict], failed: dict,
                       decision: policy.Decision, now: str) -> None:
        """The workload failed: the controllers stop the other pods (SIGTERM: exit 143) and
        set the failure conditions (see :meth:`exit_worker`). A failed JobSet's controller
        deletes its active child Jobs, foreground (kubernetes-sigs/jobset@08dfbdf
        pkg/controllers/jobset_controller.go ``reconcile``: ``jobSetFinished`` ->
        ``deleteJobs(ownedJobs.active)``), so only the failed Job's pods stay. When a
        preemption failed it, those peers were stopped by SIGTERM while training, saved a
        checkpoint and exited 42 (what the trainer does on SIGTERM, and why the Job's
        podFailurePolicy has its exit-42 rule)."""
        obj = self.objects[key]
        later = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 1))
        failed_job = failed["metadata"]["labels"].get("job-name")
        preempted = failed["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 42
        for pod in pods:  # stopped after the failure: they end later than the failed pod
            if key[0] == "jobsets" and pod["metadata"]["labels"].get("job-name") != failed_job:
                del self.objects[("pods", key[1], pod["metadata"]["name"])]
            elif pod is not failed and pod["status"]["phase"] not in ("Succeeded", "Failed"):
                if preempted:
                    _end_pod(pod, 42, later, "checkpoint saved after SIGTERM")
                else:
                    _end_pod(pod, 143, later)
            self._log_ended.add(pod["metadata"]["name"])
        status = obj.setdefault("status", {})

        def condition(type_: str, reason: str, message: str) -> dict:
            return {"type": type_, "status": "True", "reason": reason, "message": message,
                    "lastTransitionTime": now}
        if key[0] == "jobs":
            message = decision.message if decision.reason == policy.POD_FAILURE_POLICY else \
                "Job has reached the specified backoff limit"  # the Job controller's words
            status["failed"] = int(status.get("failed") or 0) + 1
            status["conditions"] = [condition("FailureTarget", decision.reason, message),
                                    condition("Failed", decision.reason, message)]
            return
        if decision.reason == policy.REACHED_MAX_RESTARTS:
            reason, message = decision.reason, "jobset failed due to reaching max number of restarts"
        elif decision.reason == policy.FAILED_JOBS:
            reason, message = decision.reason, "jobset failed due to one or more job failures"
        else:  # a FailJobSet rule
            reason, message = "FailJobSetFailurePolicyAction", "applying FailJobSet failure policy action"
        status["terminalState"] = "Failed"
        status["conditions"] = [condition("Failed", reason, message)]

    def plan_restarts(self, name: str, *afters: int) -> None:
        """Gang restarts of the next submission of JobSet ``name``, each when the JobSet
        has been read or watched ``after`` more times, before its planned outcome."""
        with self._lock:
            self._real.restart_plans.setdefault(name, []).extend(afters)

    def set_role(self, rules: list[dict] | None, cluster_rules: list[dict] | None = None) -> None:
        """Enforce an RBAC Role: every request is checked against ``rules`` (namespaced)
        and ``cluster_rules`` (a ClusterRole, for cluster-scoped objects such as CRDs), as
        the RBAC authorizer does (https://kubernetes.io/docs/reference/access-authn-authz/rbac/:
        rules are additive, a request is allowed when one rule matches its API group,
        resource (``pods/log`` for a subresource), verb and, if listed, resource name).
        ``None`` turns enforcement off."""
        with self._lock:
            self._real.role = rules
            self._real.cluster_role = cluster_rules or []

    def serve_jobset_crd(self, *, without: tuple[str, ...] = ()) -> None:
        """Serve the JobSet CRD (tests/fixtures), with the named properties of
        ``spec.failurePolicy`` removed (``restartStrategy``, ``rules``): an older JobSet."""
        with self._lock:
            self._real.crd_without = tuple(without)
            self._real.crd = True

    def kueue(self, *queues: str, priority_classes: tuple[str, ...] = (),
              versions: tuple[str, ...] = ("v1beta1",)) -> None:
        """Install Kueue with these LocalQueues in the namespace and these (cluster-scoped)
        WorkloadPriorityClasses (none of either: no Kueue API), serving these API versions,
        the preferred one first (Kueue 0.15 serves v1beta2 and v1beta1); discovery (``/apis``)
        lists them, and a path of another version is not found, as on a real API server."""
        with self._lock:
            self._real.local_queues = set(queues)
            self._real.priority_classes = set(priority_classes)
            self._real.kueue_versions = tuple(versions)

    @property
    def rbac_used(self) -> set[tuple[str, str, str]]:
        """Every (apiGroup, resource, verb) the client asked for."""
        with self._lock:
            return set(self._real.used)

    # --- answering

    def _client_side_answer(self, request: _Request) -> tuple[int, Any] | None:
        real = self._real
        self._collect_garbage()
        self._bump_versions()
        extra = _extra_route(request)
        forbidden = self._authorize(request, extra)
        if forbidden is not None:
            return forbidden
        for fault in real.faults:
            if (fault["times"] > 0 and fault["method"] == request.method
                    and fault["resource"] in (request.resource, extra and extra[0])):
                fault["times"] -= 1
                return fault["answer"]
        if extra is not None:
            return self._extra_answer(request, *extra)
        if request.resource in _KINDS and request.method == "GET" and request.name is None \
                and request.watch:
            problem = _field_selector_problem(request.query.get("fieldSelector"), request.resource)
            if problem:
                return 400, status_object(400, "BadRequest", problem)
            return 200, ("watch", request)
        if request.resource == "services" and request.method == "PATCH":
            return self._patch_owner(request)
        if request.resource == "jobsets" and request.method == "POST":
            return self._strict_jobset(request)
        return None

    def _authorize(self, request: _Request, extra: tuple | None) -> tuple[int, dict] | None:
        name = request.name
        if extra is not None:
            resource, group, name = extra[0], extra[1], extra[3]
        elif request.resource == "log":
            resource, group = "pods/log", ""
        elif request.resource in ("exec", "portforward"):
            resource, group = f"pods/{request.resource}", ""
        elif request.resource in _KINDS:
            resource, group = request.resource, _KINDS[request.resource][1]
        else:
            return None
        verb = {"POST": "create", "DELETE": "delete", "PATCH": "patch", "PUT": "update"}.get(
            request.method)
        if verb is None:
            verb = ("watch" if request.watch else "list") \
                if name is None else "get"
        # A WebSocket exec/portforward is a GET, authorized as `get`; API servers from 1.35 on
        # also require `create`, as for the POST that SPDY sends (feature gate
        # AuthorizePodWebsocketUpgradeCreatePermission). Both are checked.
        verbs = ("get", "create") if request.resource in ("exec", "portforward") else (verb,)
        for verb in verbs:
            self._real.used.add((group, resource, verb))
        if self._real.role is None:
            return None
        for verb in verbs:
            refused = self._refused(request, group, resource, verb, name, extra)
            if refused is not None:
                return refused
        return None

    def _refused(self, request: _Request, group: str, resource: str, verb: str, name: str | None,
                 extra: tuple | None) -> tuple[int, dict] | None:
        cluster = (extra is not None and extra[2] is None  # a cluster-scoped resource
                   or extra is None and request.namespace is None)  # a list across namespaces
        rules = self._real.cluster_role if cluster else self._real.role
        for rule in rules:
            if (group in rule.get("apiGroups", []) or "*" in rule.get("apiGroups", [])) and \
                    (resource in rule.get("resources", []) or "*" in rule.get("resources", [])) and \
                    (verb in rule.get("verbs", []) or "*" in rule.get("verbs", [])) and \
                    (not rule.get("resourceNames") or name in rule["resourceNames"]):
                return None
        # The RBAC authorizer's message (kube-apiserver, forbidden.go).
        where = "at the cluster scope" if cluster else f'in the namespace "{request.namespace}"'
        named = f' "{name}"' if name else ""
        qualified = f"{resource}.{group}" if group else resource
        return 403, status_object(
            403, "Forbidden", f'{qualified}{named} is forbidden: User "tester" cannot {verb} '
            f'resource "{resource}" in API group "{group}" {where}',
            name=name or "", group=group, kind=resource)

    def _paginate(self, request: _Request, code: int, body: dict) -> tuple[int, dict]:
        """``limit``/``continue`` (https://kubernetes.io/docs/reference/using-api/api-concepts/
        #retrieving-large-results-sets-in-chunks): a page of ``limit`` items, and a continue
        token while more remain; an expired token is 410 Expired."""
        limit = int(request.query.get("limit") or 0)
        if code != 200 or limit <= 0:
            return code, body
        token = request.query.get("continue")
        offset = 0
        if token:
            if self._real.expire_continue > 0:
                self._real.expire_continue -= 1
                return 410, status_object(410, "Expired", "The provided continue parameter is "
                                          "too old to display a consistent list result.")
            offset = int(token.removeprefix("offset-"))
        items = body["items"]
        body["items"] = items[offset:offset + limit]
        self._real.pages += 1
        if offset + limit < len(items):
            body["metadata"]["continue"] = f"offset-{offset + limit}"
            body["metadata"]["remainingItemCount"] = len(items) - offset - limit
        return code, body

    def _strict_jobset(self, request: _Request) -> tuple[int, dict] | None:
        """An older JobSet CRD (:meth:`serve_jobset_crd` ``without``): under
        ``fieldValidation=Strict`` a field its schema lacks is an error, else it is dropped
        silently (https://kubernetes.io/docs/reference/using-api/api-concepts/#field-validation)."""
        missing = self._real.crd_without
        policy = ((request.body or {}).get("spec") or {}).get("failurePolicy") or {}
        unknown = [f for f in missing if f in policy]
        if not unknown:
            return None
        if request.query.get("fieldValidation") == "Strict":
            return 400, status_object(400, "BadRequest", "; ".join(
                f".spec.failurePolicy.{f}: field not declared in schema" for f in unknown))
        for field in unknown:
            del policy[field]
        return None

    def _extra_answer(self, request: _Request, resource: str, group: str,
                      namespace: str | None, name: str | None) -> tuple[int, Any]:
        real = self._real
        if resource == "customresourcedefinitions":
            if not real.crd or name != "jobsets.jobset.x-k8s.io":
                return 404, status_object(404, "NotFound", f'customresourcedefinitions.'
                                          f'apiextensions.k8s.io "{name}" not found', name=name)
            return 200, _jobset_crd(real.crd_without)
        if real.local_queues is None or (group == "kueue.x-k8s.io" and not any(
                request.path.startswith(f"/apis/kueue.x-k8s.io/{v}/") for v in real.kueue_versions)):
            # Kueue is not installed, or does not serve this version: no such API
            return 404, status_object(404, "NotFound",
                                      "the server could not find the requested resource")
        if resource == "localqueues":
            if name not in real.local_queues:
                return 404, status_object(404, "NotFound", f'localqueues.kueue.x-k8s.io "{name}" '
                                          "not found", name=name, group=group, kind=resource)
            return 200, {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
                         "metadata": {"name": name, "namespace": namespace},
                         "spec": {"clusterQueue": "cluster-queue"}}
        if resource == "workloadpriorityclasses":
            if name not in real.priority_classes:
                return 404, status_object(404, "NotFound", f'workloadpriorityclasses.kueue.x-k8s.io "{name}" '
                                          "not found", name=name, group=group, kind=resource)
            return 200, {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "WorkloadPriorityClass",
                         "metadata": {"name": name}, "value": 1000}
        # workloads: one per JobSet/Job with a queue, as Kueue's job controller makes them
        # (label kueue.x-k8s.io/job-uid; conditions QuotaReserved, Admitted, Evicted).
        selector = request.query.get("labelSelector") or ""
        items = []
        for (r, ns, n), obj in sorted(self.objects.items()):
            labels = obj["metadata"].get("labels") or {}
            if r not in ("jobsets", "jobs") or ns != namespace or "kueue.x-k8s.io/queue-name" \
                    not in labels or labels.get("jobset.sigs.k8s.io/jobset-name"):
                continue
            workload_labels = {"kueue.x-k8s.io/job-uid": obj["metadata"]["uid"]}
            if not _selector_matches(selector, workload_labels):
                continue
            items.append(_workload(r, n, ns, obj, workload_labels))
        return 200, {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "WorkloadList",
                     "metadata": {}, "items": items}

    def _patch_owner(self, request: _Request) -> tuple[int, dict]:
        """A merge patch of a Service's ``metadata.ownerReferences`` (all the launcher patches)."""
        key = ("services", request.namespace, request.name)
        if key not in self.objects:
            return self._not_found("services", request.name)
        refs = ((request.body or {}).get("metadata") or {}).get("ownerReferences")
        if refs is not None:
            self.objects[key]["metadata"]["ownerReferences"] = refs
        return 200, copy.deepcopy(self.objects[key])

    def _collect_garbage(self) -> None:
        """The garbage collector: an object whose owners (ownerReferences uids) are all gone
        goes too (https://kubernetes.io/docs/concepts/architecture/garbage-collection/)."""
        uids = {o["metadata"].get("uid") for o in self.objects.values()}
        for key, obj in list(self.objects.items()):
            refs = obj["metadata"].get("ownerReferences") or []
            if refs and not any(r.get("uid") in uids for r in refs):
                del self.objects[key]

    # --- resourceVersions and watches

    def _bump_versions(self) -> int:
        """Gives every object whose content changed since last seen a new resourceVersion
        (the API server's is etcd's revision: it grows with every write); returns the
        newest."""
        real = self._real
        for key, obj in self.objects.items():
            meta = obj["metadata"]
            body = json.dumps({k: v for k, v in obj.items() if k != "metadata"}, sort_keys=True) \
                + json.dumps({k: v for k, v in meta.items() if k != "resourceVersion"},
                             sort_keys=True)
            if real.seen.get(key) != body:
                real.seen[key] = body
                meta["resourceVersion"] = str(next(self._ids))
        for key in [k for k in real.seen if k not in self.objects]:
            del real.seen[key]
        return max([int(o["metadata"].get("resourceVersion") or 0) for o in
                    self.objects.values()] + [real.floor])

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

    def _kueue_readmits(self, key: tuple[str, str, str]) -> None:
        """Kueue's requeue of an evicted workload (https://kueue.sigs.k8s.io/docs/concepts/
        workload/#requeuing-strategy): after ``readmit_after`` ticks it is admitted again,
        un-suspended, and its pods start; the next planned outcome then applies to it."""
        obj = self.objects.get(key)
        if obj is None or not obj["spec"].get("suspend") or \
                "kueue.x-k8s.io/queue-name" not in (obj["metadata"].get("labels") or {}):
            return
        left = self._real.requeues.get(key, self._real.readmit_after) - 1
        self._real.requeues[key] = left
        if left > 0:
            return
        del self._real.requeues[key]
        obj["spec"]["suspend"] = False
        obj["status"] = {"restarts": 0} if key[0] == "jobsets" else {}
        self._start_pods(key[0], obj)
        self._arm(key)
        self._real.readmissions += 1

    def stream_watch(self, request: _Request, write) -> bool:
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
        kind, _, api_version = _KINDS[request.resource]
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
            return (key[0] == request.resource and key[1] == request.namespace
                    and _selector_matches(selector, obj["metadata"].get("labels") or {})
                    and _field_selector_matches(fields, obj, request.resource))
        with self._lock:
            real = self._real
            real.watches += 1
            if real.expire > 0:
                real.expire -= 1
                write(json.dumps({"type": "ERROR", "object": status_object(
                    410, "Expired", f"too old resource version: {since} "
                    f"({self._bump_versions()})")}).encode() + b"\n")
                return True
            break_after = real.breaks.pop(0) if real.breaks else None
            self._bump_versions()
            # What the client already has: nothing without a resourceVersion (all is ADDED).
            known = {k: copy.deepcopy(o) for k, o in self.objects.items() if matches(k, o)} \
                if since else {}
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
                        events.append({"type": "MODIFIED" if key in known else "ADDED",
                                       "object": copy.deepcopy(obj)})
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
                    events.append({"type": "BOOKMARK", "object": {
                        "kind": kind, "apiVersion": api_version,
                        "metadata": {"resourceVersion": str(newest)}}})
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

    # --- gang restarts

    def _gang_restart(self, key: tuple[str, str, str], *, counted: bool = False,
                      decision: policy.Decision | None = None, failed_job: str = "") -> None:
        """A JobSet gang restart, as the JobSet controller does it (kubernetes-sigs/jobset
        @08dfbdfd682714a9ab929633eca8dc95315187e7, pkg/controllers/failure_policy.go
        ``failurePolicyRecreateAll`` and jobset_controller.go ``getChildJobs`` /
        ``deleteJobs`` / ``labelAndAnnotateObject``; https://jobset.sigs.k8s.io/docs/concepts/
        #failure-policy):

        * ``status.restarts`` grows by one, and ``status.restartsCountTowardsMax`` too when
          ``counted`` (``RestartJobSet``; ``RestartJobSetAndIgnoreMaxRestarts`` does not
          count); the latter is ``omitempty`` in the API type, so it is absent while 0;
        * condition ``RestartingJobSet`` True, reason ``FailurePolicy_<rule>`` (or
          ``DefaultFailurePolicy`` when no rule matched), message "applying <action> failure
          policy action (first failed job: <job>)", and a Warning event with reason
          ``<action>FailurePolicyAction`` on the JobSet; :meth:`_restarting_done` sets the
          condition False (``JobsReady``) once the new pods run;
        * the child Jobs of the old attempt (label ``restart-attempt`` below
          ``status.restarts``) are deleted with foreground propagation, their pods with them,
          and every Job is created again from its template with the new attempt on the Job's
          and pods' ``jobset.sigs.k8s.io/restart-attempt`` label and annotation; here the old
          pods go at once, so ``BlockingRecreate`` (new pods only once the old are gone)
          holds trivially.

        ``decision`` (the policy engine's, whose ``rule`` names the JobSet rule) and
        ``failed_job`` say why; without them (:meth:`restart`) the restart is the
        ``preemption`` rule's."""
        obj = self.objects.get(key)
        if obj is None:
            return
        resource, ns, name = key
        status = obj.setdefault("status", {})
        attempt = int(status.get("restarts") or 0) + 1
        status["restarts"] = attempt
        towards_max = int(status.get("restartsCountTowardsMax") or 0) + counted
        status.pop("restartsCountTowardsMax", None)
        if towards_max:
            status["restartsCountTowardsMax"] = towards_max
        rule = decision.rule if decision is not None else "preemption"
        action = "RestartJobSet" if counted else "RestartJobSetAndIgnoreMaxRestarts"
        if not failed_job:
            rjob = obj["spec"]["replicatedJobs"][0]["name"]
            failed_job = f"{name}-{rjob}-0"
        message = f"applying {action} failure policy action (first failed job: {failed_job})"
        self._set_restarting(obj, "True", f"FailurePolicy_{rule}" if rule else "DefaultFailurePolicy",
                             message)
        self._real.job_failures = {j: n for j, n in self._real.job_failures.items()
                                   if j[0] != key}  # the child Jobs are new: no failures yet
        for pod_key in [k for k, o in self.objects.items() if k[0] == "pods" and k[1] == ns
                        and o["metadata"]["labels"].get(JOBSET_NAME) == name]:
            del self.objects[pod_key]
            self._log_ended.add(pod_key[2])
        self._start_pods(resource, obj)
        self._real.gang_restarts += 1
        self.event(obj, f"{action}FailurePolicyAction", message, component="jobset-controller")
        self._lock.notify_all()

    @staticmethod
    def _set_restarting(obj: dict, state: str, reason: str, message: str) -> None:
        """The JobSet condition ``RestartingJobSet`` (jobset_types.go ``JobSetRestarting``)."""
        status = obj.setdefault("status", {})
        status["conditions"] = [c for c in status.get("conditions") or []
                                if c.get("type") != "RestartingJobSet"] + [{
            "type": "RestartingJobSet", "status": state, "reason": reason, "message": message,
            "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}]

    def _restarting_done(self, key: tuple[str, str, str]) -> None:
        """The controller's next reconcile after a gang restart: once every pod of the new
        attempt runs (``allJobsReady``), ``RestartingJobSet`` goes False with reason
        ``JobsReady`` ("all jobs are ready"; jobset_controller.go
        ``setRestartingConditionFalse``)."""
        obj = self.objects.get(key)
        if key[0] != "jobsets" or obj is None:
            return
        conditions = (obj.get("status") or {}).get("conditions") or []
        if not any(c.get("type") == "RestartingJobSet" and c.get("status") == "True"
                   for c in conditions):
            return
        if all(p["status"]["phase"] == "Running" for p in self._ordered_pods(key)):
            self._set_restarting(obj, "False", "JobsReady", "all jobs are ready")

    # ------------------------------------------------------------------ what kubectl needs too

    def _ca_data(self) -> dict:
        if not self.tls:
            return {}
        return {"certificate-authority-data": base64.b64encode(
            k8s_tls.certificate()[0].read_bytes()).decode()}

    def _discovery_or_patch(self, request: _Request) -> tuple[int, Any] | None:
        """Discovery and OpenAPI documents (k8s_discovery), a Table of JobSets, and a merge
        patch; None for every other request."""
        if request.method == "PATCH" and request.resource not in (None, "log") and request.name:
            return self._patch(request)
        if request.method != "GET":
            return None
        if request.resource is None:
            host, port = self._server.server_address[:2]
            # The official client asks for "/apis/" (ApisApi), kubectl for "/apis".
            path = "/apis" if request.path == "/apis/" else request.path
            answer = k8s_discovery.answer(path, f"{host}:{port}")
            if answer is not None and path == "/apis" and self._real.local_queues is not None:
                answer[1]["groups"].append(k8s_discovery.api_group(
                    "kueue.x-k8s.io", self._real.kueue_versions))
            return answer
        if request.resource == "jobsets" and k8s_table.wants_table(request.accept):
            code, answer = self._list(request) if request.name is None else self._read(request)
            if code != 200:
                return code, answer
            items = answer["items"] if request.name is None else [answer]
            return 200, k8s_table.table(items, answer["metadata"].get("resourceVersion", ""),
                                        request.query.get("includeObject"))
        return None

    def _touch(self, *objects: dict) -> None:
        """A write changes an object's resourceVersion (watchers and lists see it as newer)."""
        for obj in objects:
            obj["metadata"]["resourceVersion"] = str(next(self._ids))

    def _patch(self, request: _Request) -> tuple[int, dict]:
        """A JSON merge patch (RFC 7386), as ``kubectl apply`` sends to a custom resource
        (https://kubernetes.io/docs/tasks/manage-kubernetes-objects/update-api-object-kubectl-patch/);
        the result is validated like a create. Strategic merge and JSON patches are not
        simulated: 415, naming the type."""
        if request.content_type != "application/merge-patch+json":
            return 415, status_object(415, "UnsupportedMediaType", f"the fake API server applies "
                                      f"only application/merge-patch+json, not {request.content_type}")
        key = (request.resource, request.namespace, request.name)
        if key not in self.objects:
            return self._not_found(request.resource, request.name)
        current = self.objects[key]
        patched = _merge_patch(copy.deepcopy(current), request.body or {})
        result = self._admit(request, patched)
        if isinstance(result, tuple):
            return result
        for field in ("name", "namespace", "uid", "creationTimestamp"):  # not the patch's to change
            result["metadata"][field] = current["metadata"].get(field)
        if request.dry_run:
            return 200, result
        self._touch(result)
        self.objects[key] = result
        if request.resource in ("jobsets", "jobs") and \
                bool(current["spec"].get("suspend")) != bool(result["spec"].get("suspend")):
            self._suspension(key, bool(result["spec"].get("suspend")))
        self._lock.notify_all()
        return 200, copy.deepcopy(result)

    def _suspension(self, key: tuple[str, str, str], suspended: bool) -> None:
        """A change of ``spec.suspend``, as the controllers follow it. The JobSet controller
        suspends (or resumes) every child Job ("Suspend suspends all running child Jobs when
        set to true", jobset.x-k8s.io/v1alpha2 JobSetSpec; its condition type ``Suspended``,
        reasons ``SuspendedTrue`` / ``ResumeJobs``), and the Job controller deletes a
        suspended Job's active pods without counting them as failures, and creates them again
        on resume (https://kubernetes.io/docs/concepts/workloads/controllers/job/#suspending-a-job;
        condition ``Suspended``, reasons ``JobSuspended`` / ``JobResumed``). A JobSet's new
        pods keep its restart attempt."""
        resource, ns, name = key
        obj = self.objects[key]
        reasons = {("jobsets", True): ("SuspendedTrue", "jobset is suspended"),
                   ("jobsets", False): ("ResumeJobs", "jobset is resumed"),
                   ("jobs", True): ("JobSuspended", "Job suspended"),
                   ("jobs", False): ("JobResumed", "Job resumed")}
        reason, message = reasons[(resource, suspended)]
        status = obj.setdefault("status", {})
        status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != "Suspended"] + [
            {"type": "Suspended", "status": str(suspended), "reason": reason, "message": message,
             "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}]
        self._scripts.pop(key, None)  # a planned outcome applies to running pods
        owner_label = JOBSET_NAME if resource == "jobsets" else "job-name"
        for pod_key in [k for k, o in self.objects.items() if k[0] == "pods" and k[1] == ns
                        and o["metadata"]["labels"].get(owner_label) == name]:
            del self.objects[pod_key]
            self._log_ended.add(pod_key[2])
        if suspended:
            return
        self._start_pods(resource, obj)  # a JobSet's keep its restart attempt

    def settle(self, resource: str, name: str, outcome: str, *, namespace: str | None = None) -> None:
        """End job ``name`` (a ``jobsets`` or ``jobs`` object, in ``namespace`` or this fake's)
        with ``outcome`` now, as its controller would (see :meth:`plan` for the outcomes);
        watchers and followed logs see the change."""
        if outcome not in _OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r}; use one of {_OUTCOMES}")
        namespace = namespace or self.namespace
        with self._lock:
            key = (resource, namespace, name)
            if key not in self.objects:
                raise KeyError(f"no {resource} {name} in {namespace}")
            self._scripts.pop(key, None)
            self._apply(key, outcome)


class _RealServerState:
    """The state of the FakeKubernetes "behaving like a real server" section."""

    def __init__(self):
        self.ports: dict[tuple[str, int], tuple[str, int]] = {}  # serve_port
        self.exec_runner = None  # on_exec
        self.execs: list[tuple[str, str, list[str]]] = []
        self.faults: list[dict] = []
        self.expire = 0  # watches still to expire (410)
        self.expire_continue = 0  # continue tokens still to expire (410)
        self.breaks: list[int] = []  # watches still to break, after so many events
        self.restart_plans: dict[str, list[int]] = {}
        self.role: list[dict] | None = None
        self.cluster_role: list[dict] = []
        self.used: set[tuple[str, str, str]] = set()
        self.crd = True  # JobSet is installed: its CRD is served
        self.crd_without: tuple[str, ...] = ()
        self.local_queues: set[str] | None = None
        self.priority_classes: set[str] = set()
        self.kueue_versions: tuple[str, ...] = ("v1beta1",)
        self.seen: dict[tuple[str, str, str], str] = {}
        self.floor = 0
        self.watches = 0
        self.bookmarks = 0
        self.pages = 0
        self.gang_restarts = 0
        self.requeues: dict[tuple[str, str, str], int] = {}
        self.readmit_after = 3  # watch ticks before Kueue admits an evicted workload again
        self.readmissions = 0
        # failures counted against backoffLimit, per (workload key, child Job name)
        self.job_failures: dict[tuple[tuple[str, str, str], str], int] = {}
        self.decisions: list[policy.Decision] = []  # what the controllers decided, in order


def _pod_exit_of(pod: dict, code: int, disrupted: bool) -> policy.PodExit:
    """What the policy engine is told of ``pod``'s first container ending with ``code``."""
    labels = pod["metadata"]["labels"]
    return policy.PodExit(pod=f"{pod['metadata']['namespace']}/{pod['metadata']['name']}",
                          job=labels["job-name"], exit_code=code,
                          container=pod["status"]["containerStatuses"][0]["name"],
                          replicated_job=labels.get(RJOB_NAME), disrupted=disrupted)


def _end_pod(pod: dict, code: int, finished: str, message: str = "") -> None:
    """The kubelet's record of a container that exited with ``code`` (``message``: its
    termination message)."""
    pod["status"]["phase"] = "Succeeded" if code == 0 else "Failed"
    terminated = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                  "finishedAt": finished}
    if message:
        terminated["message"] = message
    if not pod["status"].get("containerStatuses"):  # a pod that was never scheduled (hold)
        pod["status"]["containerStatuses"] = [{"name": c["name"], "restartCount": 0}
                                              for c in pod["spec"].get("containers") or []]
    pod["status"]["containerStatuses"][0].update(ready=False, state={"terminated": terminated})


_EXTRA_ROUTES = [
    ("customresourcedefinitions", "apiextensions.k8s.io", re.compile(
        r"^/apis/apiextensions\.k8s\.io/v1/customresourcedefinitions/([^/]+)$"), False),
    ("localqueues", "kueue.x-k8s.io", re.compile(
        r"^/apis/kueue\.x-k8s\.io/v1beta[12]/namespaces/([^/]+)/localqueues(?:/([^/]+))?$"), True),
    ("workloads", "kueue.x-k8s.io", re.compile(
        r"^/apis/kueue\.x-k8s\.io/v1beta[12]/namespaces/([^/]+)/workloads(?:/([^/]+))?$"), True),
    ("workloadpriorityclasses", "kueue.x-k8s.io", re.compile(
        r"^/apis/kueue\.x-k8s\.io/v1beta[12]/workloadpriorityclasses/([^/]+)$"), False),
]


def _extra_route(request: _Request) -> tuple[str, str, str | None, str | None] | None:
    """(resource, group, namespace, name) of a path outside ``_ROUTES``, else None."""
    for resource, group, pattern, namespaced in _EXTRA_ROUTES:
        match = pattern.match(request.path)
        if match:
            if namespaced:
                return resource, group, match.group(1), match.group(2)
            return resource, group, None, match.group(1)
    return None


@functools.lru_cache(maxsize=1)
def _parsed_jobset_crd() -> dict:
    """The JobSet CRD fixture, parsed once (a second of YAML parsing per read otherwise)."""
    from support.paths import JOBSET_CRD

    return yaml.safe_load(JOBSET_CRD.read_text())


def _jobset_crd(without: tuple[str, ...]) -> dict:
    crd = copy.deepcopy(_parsed_jobset_crd())
    for version in crd["spec"]["versions"]:
        spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
        policy = spec["properties"].get("failurePolicy") or {}
        for field in without:
            (policy.get("properties") or {}).pop(field, None)
    return crd


def _workload(resource: str, name: str, ns: str, obj: dict, labels: dict) -> dict:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    suspended = bool(obj["spec"].get("suspend"))
    evicted = any(c.get("type") == "Suspended" for c in (obj.get("status") or {}).get("conditions") or [])
    conditions = [{"type": "QuotaReserved", "status": "False" if suspended else "True",
                   "reason": "Pending" if suspended else "QuotaReserved",
                   "message": "couldn't assign flavors to pod set slice: insufficient quota for "
                              "google.com/tpu in flavor v5p" if suspended else
                              "Quota reserved in ClusterQueue cluster-queue",
                   "lastTransitionTime": now},
                  {"type": "Admitted", "status": "False" if suspended else "True",
                   "reason": "NoReservation" if suspended else "Admitted",
                   "message": "The workload has no reservation" if suspended else
                              "The workload is admitted", "lastTransitionTime": now}]
    if evicted:
        conditions.append({"type": "Evicted", "status": "True", "reason": "Preempted",
                           "message": "Preempted to accommodate a workload (UID: w-2) due to "
                                      "prioritization in the ClusterQueue",
                           "lastTransitionTime": now})
    kind = "jobset" if resource == "jobsets" else "job"
    return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
            "metadata": {"name": f"{kind}-{name}-1a2b3", "namespace": ns, "labels": labels},
            "spec": {"queueName": obj["metadata"]["labels"].get("kueue.x-k8s.io/queue-name")},
            "status": {"conditions": conditions}}


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_fake: FakeKubernetes

    def log_message(self, format, *args):  # noqa: A002 - quiet: tests read fake.requests instead
        pass

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        request = _Request(self.command, self.path, body)
        request.content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        request.accept = self.headers.get("Accept") or ""
        request.headers = list(self.headers.items())
        code, payload = self.server_fake.answer(request, self.headers.get("Authorization"))
        if self._serve_client_side(code, payload):
            return
        if isinstance(payload, tuple) and payload[0] == "stream":
            _, ns, pod, follow, previous, key = payload
            self._stream(code, "text/plain",
                         lambda write: self.server_fake.stream_log(ns, pod, follow, write, previous, key))
            return
        if isinstance(payload, tuple) and payload[0] == "upgrade":
            self._upgrade(request, payload)
            return
        data = json.dumps(payload).encode()
        self.send_response(code)
        for warning in request.warnings:  # https://www.rfc-editor.org/rfc/rfc7234#section-5.5
            self.send_header("Warning", f"299 - {json.dumps(warning)}")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _upgrade(self, request: _Request, payload: tuple) -> None:
        """The connection becomes a WebSocket session of exec or portforward (``k8s_streams``)."""
        self.close_connection = True
        self.wfile.flush()
        if payload[1] == "exec":
            session = k8s_streams.accept(self.connection, self.path, request.headers,
                                         k8s_streams.EXEC_PROTOCOLS)
            if session is not None:
                k8s_streams.serve_exec(session, payload[2], payload[3])
        else:
            session = k8s_streams.accept(self.connection, self.path, request.headers,
                                         k8s_streams.PORTFORWARD_PROTOCOLS)
            if session is not None:
                k8s_streams.serve_portforward(session, payload[2], payload[3], payload[4])

    def _stream(self, code: int, content_type: str, produce) -> None:
        """A chunked response whose chunks ``produce(write)`` writes; when ``produce`` returns
        False the stream is dropped (no terminating chunk), as a broken connection would."""
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def write(data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        try:
            if produce(write) is False:
                self.close_connection = True
                self.connection.shutdown(2)
                return
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:  # broken pipe, reset, or over TLS an SSLEOFError
            self.close_connection = True  # the client stopped reading

    def _serve_client_side(self, code: int, payload: Any) -> bool:
        """Answers of the "behaving like a real server" section: a dropped connection, an
        answer with headers (429 + Retry-After), a watch stream. False for anything else."""
        if not isinstance(payload, tuple):
            return False
        if payload[0] == "raw":  # plain text, not a Status
            data = payload[1]
            self.send_response(code)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return True
        if payload[0] == "drop":  # the connection closes with no answer (a reset, a proxy)
            self.close_connection = True
            self.connection.shutdown(2)
            return True
        if payload[0] == "headers":
            _, body, headers = payload
            data = json.dumps(body).encode()
            self.send_response(code)
            for key, value in {"Content-Type": "application/json",
                               "Content-Length": str(len(data)), **headers}.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)
            return True
        if payload[0] == "watch":  # ("watch", request): kubectl's and the launcher's
            self._stream(code, "application/json",
                         lambda write: self.server_fake.stream_watch(payload[1], write))
            return True
        return False

    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _serve


# ----------------------------------------------------------------------------- API conventions

# Field selectors the API server supports on every kind
# (https://kubernetes.io/docs/concepts/overview/working-with-objects/field-selectors/).
_SELECTABLE_FIELDS = {"metadata.name": ("metadata", "name"),
                      "metadata.namespace": ("metadata", "namespace")}
# The fields a core/v1 Event may be selected by, besides metadata's (the API server's event
# strategy, pkg/registry/core/event/strategy.go ToSelectableFields; `kubectl get events
# --field-selector involvedObject.name=POD` uses them).
_EVENT_FIELDS = {**{f"involvedObject.{f}": ("involvedObject", f) for f in (
    "kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")},
    "reason": ("reason",), "reportingComponent": ("reportingComponent",),
    "source": ("source", "component"), "type": ("type",)}


def _selectable(resource: str | None) -> dict[str, tuple[str, ...]]:
    return {**_SELECTABLE_FIELDS, **(_EVENT_FIELDS if resource == "events" else {})}


def _field_selector_terms(selector: str | None) -> list[tuple[str, str, str]]:
    terms = []
    for term in filter(None, (selector or "").split(",")):
        match = re.fullmatch(r"([^!=]+)(==|=|!=)(.*)", term)
        if match is None:
            raise ValueError(f"invalid selector: '{selector}'; can't understand '{term}'")
        terms.append((match.group(1), match.group(2), match.group(3)))
    return terms


def _field_selector_problem(selector: str | None, resource: str | None = None) -> str | None:
    try:
        terms = _field_selector_terms(selector)
    except ValueError as err:
        return str(err)
    for key, _, _ in terms:
        if key not in _selectable(resource):
            return f'field label not supported: {key}'
    return None


def _field_selector_matches(selector: str | None, obj: dict, resource: str | None = None) -> bool:
    if _field_selector_problem(selector, resource):
        return False
    for key, op, value in _field_selector_terms(selector):
        actual: Any = obj
        for part in _selectable(resource)[key]:
            actual = (actual or {}).get(part) if isinstance(actual, dict) else None
        actual = actual or ""
        if (actual == value) != (op != "!="):
            return False
    return True


def _invalid_container(pod: dict, container: str | None) -> tuple[int, dict] | None:
    """400 BadRequest for a container that is not one of the pod's (init containers, native
    sidecars among them, included), in the API server's words (pod strategy's
    validateContainer); None when it is one, or none was named, or the pod was stored
    without containers (a test's sketch of one: every pod the API server holds has some)."""
    spec = pod.get("spec") or {}
    names = [c.get("name") for key in ("initContainers", "containers", "ephemeralContainers")
             for c in spec.get(key) or []]
    if container is None or not names or container in names:
        return None
    return 400, status_object(400, "BadRequest",
                              f"container {container} is not valid for pod {pod['metadata']['name']}")


def _propagation_policy(request: _Request) -> str | None:
    """From the query (the Python client) or the DeleteOptions body (kubectl)."""
    body = request.body if isinstance(request.body, dict) else {}
    return request.query.get("propagationPolicy") or body.get("propagationPolicy")


# Kinds whose registry answers a delete with the deleted object (``ReturnDeletedObject`` in the
# API server's generic registry: pods, services and every custom resource); the others answer
# with a Success Status naming the object.
_RETURNS_DELETED_OBJECT = {"pods", "services", "jobsets"}


def _deleted_answer(resource: str, deleted: dict) -> dict:
    if resource in _RETURNS_DELETED_OBJECT:
        return deleted
    meta = deleted["metadata"]
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "details": {"name": meta["name"], "group": _KINDS[resource][1], "kind": resource,
                        "uid": meta.get("uid")}}


def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, ``null`` removes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    if not isinstance(target, dict):
        target = {}
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = _merge_patch(target.get(key), value)
    return target


def count_preemptions(monkeypatch) -> None:
    """Render JobSets whose failure-policy rule ``preemption`` is ``RestartJobSet`` instead
    of ``RestartJobSetAndIgnoreMaxRestarts`` (a manifest edited after rendering): each
    preemption then counts against ``maxRestarts``, and the one after them ends the JobSet
    Failed (``ReachedMaxRestarts``) with its workers preempted, which the launcher reports
    as Preempted and ``resume`` continues. With the rendered rule a preemption never ends a
    JobSet (kubernetes-sigs/jobset@08dfbdf pkg/controllers/failure_policy.go
    ``restartJobSetAndIgnoreMaxRestartsActionApplier`` does not check ``maxRestarts``)."""
    from roxxel_launch.backends.kubernetes import backend as kubernetes_backend

    real = kubernetes_backend.render

    def counting(spec):
        rendered = real(spec)
        for obj in rendered.objects:
            for rule in ((obj.get("spec") or {}).get("failurePolicy") or {}).get("rules") or ():
                if obj.get("kind") == "JobSet" and rule.get("name") == "preemption":
                    rule["action"] = "RestartJobSet"
        return rendered
    monkeypatch.setattr(kubernetes_backend, "render", counting)


def use_cluster(server: FakeKubernetes, directory: Path, monkeypatch, retry=None) -> FakeKubernetes:
    """Point the official client (and the CLI) at ``server`` for one test: a kubeconfig in
    ``directory``, no in-cluster config, no proxy, and ``retry`` (default: fast retries with
    simulated delays) as the backend's retry policy. Returns ``server``."""
    from roxxel_launch.backends.kubernetes import retry as kubernetes_retry
    from support.fake_clock import fast_retry

    monkeypatch.setenv("KUBECONFIG", str(server.write_kubeconfig(directory / "kubeconfig")))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(kubernetes_retry, "DEFAULT_POLICY", retry if retry is not None else fast_retry())
    return server
