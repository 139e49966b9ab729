"""RBAC, as the RBAC authorizer decides
(https://kubernetes.io/docs/reference/access-authn-authz/rbac/): a Role's rules for
namespaced requests, a ClusterRole's for cluster-scoped ones and lists across namespaces,
subresources as ``pods/log``, ``pods/exec``, ``pods/portforward``; refusals in
kube-apiserver's words (403 Forbidden).
"""

from __future__ import annotations

from support.k8s_sim.api import KINDS, status_object
from support.k8s_sim.request import Request


class Rbac:
    """Role enforcement and the record of what was asked (a mixin of ``FakeKubernetes``)."""

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

    @property
    def rbac_used(self) -> set[tuple[str, str, str]]:
        """Every (apiGroup, resource, verb) the client asked for."""
        with self._lock:
            return set(self._real.used)

    def _authorize(self, request: Request, extra: tuple | None) -> tuple[int, dict] | None:
        name = request.name
        if extra is not None:
            resource, group, name = extra[0], extra[1], extra[3]
        elif request.resource == "log":
            resource, group = "pods/log", ""
        elif request.resource in ("exec", "portforward"):
            resource, group = f"pods/{request.resource}", ""
        elif request.resource in KINDS:
            resource, group = request.resource, KINDS[request.resource][1]
        else:
            return None
        verb = {"POST": "create", "DELETE": "delete", "PATCH": "patch", "PUT": "update"}.get(request.method)
        if verb is None:
            verb = ("watch" if request.watch else "list") if name is None else "get"
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

    def _refused(
        self, request: Request, group: str, resource: str, verb: str, name: str | None, extra: tuple | None
    ) -> tuple[int, dict] | None:
        cluster = (
            extra is not None
            and extra[2] is None  # a cluster-scoped resource
            or extra is None
            and request.namespace is None
        )  # a list across namespaces
        rules = self._real.cluster_role if cluster else self._real.role
        for rule in rules:
            if (
                (group in rule.get("apiGroups", []) or "*" in rule.get("apiGroups", []))
                and (resource in rule.get("resources", []) or "*" in rule.get("resources", []))
                and (verb in rule.get("verbs", []) or "*" in rule.get("verbs", []))
                and (not rule.get("resourceNames") or name in rule["resourceNames"])
            ):
                return None
        # The RBAC authorizer's message (kube-apiserver, forbidden.go).
        where = "at the cluster scope" if cluster else f'in the namespace "{request.namespace}"'
        named = f' "{name}"' if name else ""
        qualified = f"{resource}.{group}" if group else resource
        return 403, status_object(
            403,
            "Forbidden",
            f'{qualified}{named} is forbidden: User "tester" cannot {verb} '
            f'resource "{resource}" in API group "{group}" {where}',
            name=name or "",
            group=group,
            kind=resource,
        )
