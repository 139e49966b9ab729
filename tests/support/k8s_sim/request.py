"""One request to the simulated API server, parsed: method, path, query, body, and the
resource, namespace and name its path names (the REST paths of
https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-uris; a path without
a namespace lists across all namespaces).
"""

from __future__ import annotations

import json
import re
import urllib.parse


_ROUTES = [
    # No namespace: a list across all namespaces (authorized by the ClusterRole's rules).
    ("jobsets", re.compile(r"^/apis/jobset\.x-k8s\.io/v1alpha2/(?:namespaces/([^/]+)/)?jobsets(?:/([^/]+))?$")),
    ("jobs", re.compile(r"^/apis/batch/v1/(?:namespaces/([^/]+)/)?jobs(?:/([^/]+))?$")),
    ("services", re.compile(r"^/api/v1/namespaces/([^/]+)/services(?:/([^/]+))?$")),
    ("networkpolicies", re.compile(r"^/apis/networking\.k8s\.io/v1/namespaces/([^/]+)/networkpolicies(?:/([^/]+))?$")),
    ("log", re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/log$")),
    ("exec", re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/exec$")),
    ("portforward", re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/portforward$")),
    ("pods", re.compile(r"^/api/v1/(?:namespaces/([^/]+)/)?pods(?:/([^/]+))?$")),
    ("events", re.compile(r"^/api/v1/namespaces/([^/]+)/events(?:/([^/]+))?$")),
    ("resourcequotas", re.compile(r"^/api/v1/namespaces/([^/]+)/resourcequotas(?:/([^/]+))?$")),
    # Cluster-scoped: the empty group stands for the namespace a Node does not have.
    ("nodes", re.compile(r"^/api/v1/nodes()(?:/([^/]+))?$")),
]


class Request:
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


_EXTRA_ROUTES = [
    (
        "customresourcedefinitions",
        "apiextensions.k8s.io",
        re.compile(r"^/apis/apiextensions\.k8s\.io/v1/customresourcedefinitions/([^/]+)$"),
        False,
    ),
    (
        "localqueues",
        "kueue.x-k8s.io",
        re.compile(r"^/apis/kueue\.x-k8s\.io/v1beta[12]/namespaces/([^/]+)/localqueues(?:/([^/]+))?$"),
        True,
    ),
    (
        "workloads",
        "kueue.x-k8s.io",
        re.compile(r"^/apis/kueue\.x-k8s\.io/v1beta[12]/namespaces/([^/]+)/workloads(?:/([^/]+))?$"),
        True,
    ),
    (
        "workloadpriorityclasses",
        "kueue.x-k8s.io",
        re.compile(r"^/apis/kueue\.x-k8s\.io/v1beta[12]/workloadpriorityclasses/([^/]+)$"),
        False,
    ),
    (
        "priorityclasses",
        "scheduling.k8s.io",
        re.compile(r"^/apis/scheduling\.k8s\.io/v1/priorityclasses/([^/]+)$"),
        False,
    ),
]


def extra_route(request: Request) -> tuple[str, str, str | None, str | None] | None:
    """(resource, group, namespace, name) of a path outside ``_ROUTES``, else None."""
    for resource, group, pattern, namespaced in _EXTRA_ROUTES:
        match = pattern.match(request.path)
        if match:
            if namespaced:
                return resource, group, match.group(1), match.group(2)
            return resource, group, None, match.group(1)
    return None
