"""The simulated API server itself: ``FakeKubernetes``, made of one mixin per resource or
concern (``store``, ``watch``, ``rbac``, ``jobs``, ``workloads``, ``jobsets``, ``pods``,
``events``, ``nodes``, ``kueue``), with the lifecycle (an HTTP or HTTPS server on 127.0.0.1
in a thread, a kubeconfig pointing at it), authentication (a bearer token), routing of each
request to its resource, discovery (``k8s_discovery``), Tables (``k8s_table``) and injected
faults: errors, 429 with ``Retry-After``
(https://kubernetes.io/docs/concepts/cluster-administration/flow-control/) and dropped
connections. See the package docstring for what the whole does.
"""

from __future__ import annotations

import base64
import http.server
import itertools
import threading
from pathlib import Path
from typing import Any

import yaml

from roxxel_launch.backends.local import policy

from support import k8s_discovery, k8s_table, k8s_tls
from support.k8s_sim.admission import SYSTEM_PRIORITY_CLASSES, Admission
from support.k8s_sim.api import KINDS, status_object
from support.k8s_sim.events import Events
from support.k8s_sim.handler import ApiHandler
from support.k8s_sim.jobs import JobPods
from support.k8s_sim.jobsets import JobSets
from support.k8s_sim.kueue import EVICTED_PREEMPTED, Kueue
from support.k8s_sim.nodes import Nodes
from support.k8s_sim.pods import Pods
from support.k8s_sim.rbac import Rbac
from support.k8s_sim.request import Request, extra_route
from support.k8s_sim.store import Store, field_selector_problem
from support.k8s_sim.watch import Watches
from support.k8s_sim.workloads import Workloads


TOKEN = "fake-token-for-tests"


class FakeKubernetes(Store, Watches, Rbac, JobPods, Workloads, JobSets, Pods, Events, Nodes, Kueue, Admission):
    """The test double (see the package docstring). Use as a context manager.

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
        self.requests: list[Request] = []
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

    def __enter__(self) -> FakeKubernetes:
        fake = self

        class Handler(ApiHandler):
            server_fake = fake

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        if self.tls:  # the handshake happens in the handler's thread, not in accept()
            self._server.socket = k8s_tls.server_context().wrap_socket(
                self._server.socket, server_side=True, do_handshake_on_connect=False
            )
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="fake-k8s", kwargs={"poll_interval": 0.05}, daemon=True
        )
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
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "fake",
                    "clusters": [{"name": "fake", "cluster": {"server": self.url, **self._ca_data()}}],
                    "users": [{"name": "tester", "user": {"token": token}}],
                    "contexts": [
                        {"name": "fake", "context": {"cluster": "fake", "user": "tester", "namespace": self.namespace}}
                    ],
                }
            )
        )
        return path

    def _ca_data(self) -> dict:
        if not self.tls:
            return {}
        return {"certificate-authority-data": base64.b64encode(k8s_tls.certificate()[0].read_bytes()).decode()}

    def fail(
        self,
        method: str,
        resource: str,
        code: int,
        message: str = "injected failure",
        *,
        reason: str = "InternalError",
        dry_run: bool | None = None,
        times: int = 1,
        watch: bool | None = None,
        raw: bytes | None = None,
        **details,
    ) -> None:
        """Answer the next ``times`` matching requests (``watch``: only watches, or only
        other requests) with this error Status, or with ``raw`` text (as a proxy or the
        API server's mux answers an unknown path: ``404 page not found``)."""
        answer = (code, ("raw", raw)) if raw is not None else (code, status_object(code, reason, message, **details))
        with self._lock:
            self._faults.append(
                dict(method=method, resource=resource, dry_run=dry_run, times=times, watch=watch, answer=answer)
            )

    def storm(self, method: str, resource: str, times: int, *, retry_after: int = 1, code: int = 429) -> None:
        """The next ``times`` matching requests get 429 TooManyRequests with ``Retry-After``
        (https://kubernetes.io/docs/concepts/cluster-administration/flow-control/: a request
        rejected by API Priority and Fairness gets 429 and a Retry-After header), or any
        other ``code`` (500, 503) with the same header."""
        reason = {429: "TooManyRequests", 503: "ServiceUnavailable"}.get(code, "InternalError")
        with self._lock:
            self._real.faults.append(
                dict(
                    method=method,
                    resource=resource,
                    times=times,
                    answer=(
                        code,
                        (
                            "headers",
                            status_object(
                                code,
                                reason,
                                "the server has received too many requests and has asked us to try again later"
                                if code == 429
                                else "injected failure",
                                retryAfterSeconds=retry_after,
                            ),
                            {"Retry-After": str(retry_after)},
                        ),
                    ),
                )
            )

    def drop(self, method: str, resource: str, times: int = 1) -> None:
        """The next ``times`` matching requests lose their connection with no answer."""
        with self._lock:
            self._real.faults.append(dict(method=method, resource=resource, times=times, answer=(0, ("drop",))))

    def calls(self, method: str | None = None, resource: str | None = None) -> list[Request]:
        with self._lock:
            return [
                r
                for r in self.requests
                if (method is None or r.method == method) and (resource is None or r.resource == resource)
            ]

    @property
    def _real(self) -> SimState:
        state = self.__dict__.get("_real_state")
        if state is None:
            state = self.__dict__["_real_state"] = SimState()
        return state

    def answer(self, request: Request, authorization: str | None) -> tuple[int, Any]:
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
            client_side = self._client_side_answer(request)  # RBAC, storms, watches, Kueue, the CRD
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

    def _injected(self, request: Request) -> tuple[int, Any] | None:
        """The answer of the first :meth:`fail` fault that matches ``request``, if any."""
        for fault in self._faults:
            if (
                fault["times"] > 0
                and fault["method"] == request.method
                and fault["resource"] == request.resource
                and fault["dry_run"] in (None, request.dry_run)
                and fault["watch"] in (None, request.watch)
            ):
                fault["times"] -= 1
                return fault["answer"]
        return None

    def _client_side_answer(self, request: Request) -> tuple[int, Any] | None:
        """What a real server does before a resource's own handler: garbage collection,
        resourceVersions, RBAC, storms and drops, the CRD's and Kueue's paths, watches, the
        Service owner patch, an older JobSet CRD's schema; None for the rest."""
        real = self._real
        self._collect_garbage()
        self._bump_versions()
        extra = extra_route(request)
        forbidden = self._authorize(request, extra)
        if forbidden is not None:
            return forbidden
        for fault in real.faults:
            if (
                fault["times"] > 0
                and fault["method"] == request.method
                and fault["resource"] in (request.resource, extra and extra[0])
            ):
                fault["times"] -= 1
                return fault["answer"]
        if extra is not None:
            return self._extra_answer(request, *extra)
        if request.resource in KINDS and request.method == "GET" and request.name is None and request.watch:
            problem = field_selector_problem(request.query.get("fieldSelector"), request.resource)
            if problem:
                return 400, status_object(400, "BadRequest", problem)
            return 200, ("watch", request)
        if request.resource == "services" and request.method == "PATCH":
            return self._patch_owner(request)
        if request.resource == "jobsets" and request.method == "POST":
            return self._strict_jobset(request)
        if request.resource == "pods" and request.method == "POST":
            return self._admit_pod(request)
        return None

    def _extra_answer(
        self, request: Request, resource: str, group: str, namespace: str | None, name: str | None
    ) -> tuple[int, Any]:
        """A path outside the core routes: the JobSet CRD, or one of Kueue's."""
        if resource == "customresourcedefinitions":
            return self._crd_answer(name)
        if resource == "priorityclasses":
            return self._priority_class_answer(name)
        return self._kueue_answer(request, resource, group, namespace, name)

    def _discovery_or_patch(self, request: Request) -> tuple[int, Any] | None:
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
            if path.rstrip("/") == "/version" and self._real.git_version is not None:
                # A managed cluster's build, e.g. GKE's "v1.33.5-gke.1080000" (its API server's /version).
                answer = 200, {**k8s_discovery.version(), "gitVersion": self._real.git_version}
            if answer is not None and path == "/apis" and self._real.local_queues is not None:
                answer[1]["groups"].append(k8s_discovery.api_group("kueue.x-k8s.io", self._real.kueue_versions))
            return answer
        if request.resource == "jobsets" and k8s_table.wants_table(request.accept):
            code, answer = self._list(request) if request.name is None else self._read(request)
            if code != 200:
                return code, answer
            items = answer["items"] if request.name is None else [answer]
            return 200, k8s_table.table(
                items, answer["metadata"].get("resourceVersion", ""), request.query.get("includeObject")
            )
        return None


class SimState:
    """What the mixins keep besides the objects: faults, watches, RBAC, the CRD, Kueue, exec and
    port-forward, and the controllers' counts (``FakeKubernetes._real``, made on first use)."""

    def __init__(self):
        self.git_version: str | None = None  # /version's gitVersion (None: the plain Kubernetes release)
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
        self.crd_release: str | None = None  # an older JobSet's CRD (serve_jobset_crd), None: the newest
        self.pod_priority_classes: dict[str, int] = dict.fromkeys(SYSTEM_PRIORITY_CLASSES, 2000000000)
        self.service_accounts: set[str] | None = None  # None: any name exists (set_service_accounts)
        self.pod_security: str | None = None  # the namespace's enforced Pod Security level
        self.autopilot = False
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
        # Kueue's evictions of each job's Workload, by the job's uid, in order: (reason, message)
        self.evictions: dict[str, list[tuple[str, str]]] = {}
        self.eviction = EVICTED_PREEMPTED  # what the next ``evict`` outcome's eviction says
        # failures counted against backoffLimit, per (workload key, child Job name)
        self.job_failures: dict[tuple[tuple[str, str, str], str], int] = {}
        self.decisions: list[policy.Decision] = []  # what the controllers decided, in order


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
    # No Google credentials either: `status` reads a gs:// checkpoint_dir's goodput totals, and
    # with none it says so at once instead of reaching for the network.
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(directory / "no-google-credentials.json"))
    return server
