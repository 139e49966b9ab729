"""Discovery and OpenAPI v3 documents of the simulated API server, enough for ``kubectl``.

``kubectl`` finds a resource by the API server's discovery documents
(https://kubernetes.io/docs/concepts/overview/kubernetes-api/#discovery-api): ``/api``,
``/apis`` and one ``APIResourceList`` per group version (the unaggregated form, which clients
fall back to when the server does not answer the aggregated one). Before it sends
``fieldValidation=Strict`` it checks that the server's OpenAPI v3 document of the group
version (https://kubernetes.io/docs/concepts/overview/kubernetes-api/#openapi-v3) has a PATCH
operation for the kind with that query parameter; otherwise it falls back to validating on
the client. This module serves those documents for the kinds ``k8s_fake_server`` knows:
Pods (with ``pods/log``), Services, Jobs, NetworkPolicies and JobSets, with the schemas of
:mod:`k8s_schema` as ``components.schemas`` (so ``kubectl explain`` works too).
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any

from support import k8s_schema as S

# group version -> [(resource, kind, short names, definition name)]
RESOURCES: dict[str, list[tuple[str, str, list[str], str]]] = {
    "v1": [
        ("pods", "Pod", ["po"], S.BUILTIN_DEFINITIONS["pods"]),
        ("services", "Service", ["svc"], S.BUILTIN_DEFINITIONS["services"]),
    ],
    "batch/v1": [("jobs", "Job", [], S.BUILTIN_DEFINITIONS["jobs"])],
    "networking.k8s.io/v1": [
        ("networkpolicies", "NetworkPolicy", ["netpol"], S.BUILTIN_DEFINITIONS["networkpolicies"])
    ],
    f"{S.JOBSET_GROUP}/{S.JOBSET_VERSION}": [("jobsets", "JobSet", [], S.JOBSET_DEFINITION)],
}
VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
# query parameters of writes (https://kubernetes.io/docs/reference/kubernetes-api/common-parameters/common-parameters/)
WRITE_PARAMETERS = ["dryRun", "fieldManager", "fieldValidation", "pretty"]
READ_PARAMETERS = [
    "labelSelector",
    "fieldSelector",
    "limit",
    "continue",
    "resourceVersion",
    "watch",
    "allowWatchBookmarks",
    "timeoutSeconds",
    "pretty",
]


def _url_part(group_version: str) -> str:
    return "api/v1" if group_version == "v1" else f"apis/{group_version}"


def version() -> dict:
    major, minor, _ = S.KUBERNETES_VERSION.split(".")
    return {
        "major": major,
        "minor": minor,
        "gitVersion": f"v{S.KUBERNETES_VERSION}",
        "gitCommit": "0" * 40,
        "gitTreeState": "clean",
        "buildDate": "2024-12-11T00:00:00Z",
        "goVersion": "go1.23.4",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def api_versions(server_address: str) -> dict:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def api_group_list() -> dict:
    groups = []
    for group_version in RESOURCES:
        if "/" not in group_version:
            continue
        group, ver = group_version.split("/")
        entry = {"groupVersion": group_version, "version": ver}
        groups.append({"name": group, "versions": [entry], "preferredVersion": entry})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(name: str, versions: tuple[str, ...]) -> dict:
    """An APIGroup entry of ``/apis``: the served versions, the preferred one first."""
    entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": entries, "preferredVersion": entries[0]}


def api_resource_list(group_version: str) -> dict:
    resources: list[dict] = []
    for resource, kind, short, _ in RESOURCES[group_version]:
        resources.append(
            {
                "name": resource,
                "singularName": kind.lower(),
                "namespaced": True,
                "kind": kind,
                "verbs": VERBS,
                **({"shortNames": short} if short else {}),
                **({"categories": ["all"]} if resource in ("pods", "services", "jobs") else {}),
            }
        )
        resources.append(
            {
                "name": f"{resource}/status",
                "singularName": "",
                "namespaced": True,
                "kind": kind,
                "verbs": ["get", "patch", "update"],
            }
        )
        if resource == "pods":
            resources.append(
                {"name": "pods/log", "singularName": "", "namespaced": True, "kind": "Pod", "verbs": ["get"]}
            )
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}


def _parameter(name: str) -> dict:
    return {"name": name, "in": "query", "schema": {"type": "string"}, "uniqueItems": True}


def _operation(action: str, gvk: dict, definition: str, parameters: list[str]) -> dict:
    ref = {"$ref": f"#/components/schemas/{definition}"}
    return {
        "operationId": f"{action}{gvk['kind']}",
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk,
        "parameters": [_parameter(p) for p in parameters],
        "requestBody": {"content": {"application/json": {"schema": ref}}}
        if action in ("post", "put", "patch")
        else None,
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": ref}}}},
    }


def _components(root: str) -> dict[str, Any]:
    """The definition ``root`` and every definition it refers to."""
    schemas = {**S.builtin_schemas(), S.JOBSET_DEFINITION: S.jobset_schema()}
    found: dict[str, Any] = {}
    pending = [root]
    while pending:
        name = pending.pop()
        if name in found:
            continue
        found[name] = schemas[name]
        text = json.dumps(schemas[name])
        pending += [part.split('"', 1)[0] for part in text.split('"#/components/schemas/')[1:]]
    return found


@functools.cache
def openapi_v3_document(group_version: str) -> dict:
    """The OpenAPI v3 document of one group version, as ``/openapi/v3/<api|apis/...>`` serves it."""
    group, _, ver = group_version.rpartition("/")
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    for resource, kind, _, definition in RESOURCES[group_version]:
        gvk = {"group": group, "version": ver, "kind": kind}
        base = f"/{_url_part(group_version)}/namespaces/{{namespace}}/{resource}"
        namespace = [{"name": "namespace", "in": "path", "required": True, "schema": {"type": "string"}}]
        named = namespace + [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}]

        def ops(*pairs: tuple[str, list[str]], gvk=gvk, definition=definition) -> dict:
            return {
                method: {k: v for k, v in _operation(action, gvk, definition, params).items() if v is not None}
                for method, (action, params) in pairs
            }

        paths[base] = {
            "parameters": namespace,
            **ops(("get", ("list", READ_PARAMETERS)), ("post", ("post", WRITE_PARAMETERS))),
        }
        paths[f"{base}/{{name}}"] = {
            "parameters": named,
            **ops(
                ("get", ("get", ["pretty"])),
                ("put", ("put", WRITE_PARAMETERS)),
                ("patch", ("patch", [*WRITE_PARAMETERS, "force"])),
                ("delete", ("delete", ["dryRun", "gracePeriodSeconds", "propagationPolicy"])),
            ),
        }
        schemas.update(_components(definition))
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": f"v{S.KUBERNETES_VERSION}"},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def openapi_v3_index() -> dict:
    """``/openapi/v3``: where each group version's document is (with a content hash)."""
    paths = {}
    for group_version in RESOURCES:
        digest = (
            hashlib.sha512(json.dumps(openapi_v3_document(group_version), sort_keys=True).encode())
            .hexdigest()
            .upper()[:128]
        )
        paths[_url_part(group_version)] = {"serverRelativeURL": f"/openapi/v3/{_url_part(group_version)}?hash={digest}"}
    return {"paths": paths}


def answer(path: str, server_address: str) -> tuple[int, Any] | None:
    """(code, body) for a discovery or OpenAPI path; None for any other path."""
    if path == "/version":
        return 200, version()
    if path == "/api":
        return 200, api_versions(server_address)
    if path == "/apis":
        return 200, api_group_list()
    if path.startswith("/openapi/v3"):
        rest = path[len("/openapi/v3") :].strip("/")
        if not rest:
            return 200, openapi_v3_index()
        for group_version in RESOURCES:
            if rest == _url_part(group_version):
                return 200, openapi_v3_document(group_version)
        return None
    for group_version in RESOURCES:
        if path.rstrip("/") == f"/{_url_part(group_version)}":
            return 200, api_resource_list(group_version)
    return None
