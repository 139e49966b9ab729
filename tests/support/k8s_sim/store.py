"""The object store of the simulated cluster: create (admission through ``k8s_schema``,
``dryRun``, the namespace's existence, name validation, ``AlreadyExists``), read, list
(label and field selectors, lists across namespaces, ``limit``/``continue``), delete
(propagation, foreground deletion's ``linger``), JSON merge patches, resourceVersions, and
the garbage collector.

Each follows the API server's documented behaviour, cited where it is implemented:
https://kubernetes.io/docs/reference/using-api/api-concepts/ (resourceVersion, chunked
lists, dry run, field validation),
https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors,
https://kubernetes.io/docs/concepts/overview/working-with-objects/field-selectors/,
https://kubernetes.io/docs/concepts/architecture/garbage-collection/ and RFC 7386 (merge
patch).
"""

from __future__ import annotations

import copy
import json
import re
import time
from typing import Any

from support import k8s_schema
from support.k8s_sim.api import DNS1123_LABEL, JOBSET_NAME, KINDS, status_object
from support.k8s_sim.request import Request


class Store:
    """Objects and their resourceVersions (a mixin of ``FakeKubernetes``, whose state it uses)."""

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

    def get(self, resource: str, name: str) -> dict | None:
        with self._lock:
            return copy.deepcopy(self.objects.get((resource, self.namespace, name)))

    def _not_found(self, resource: str, name: str) -> tuple[int, dict]:
        kind, group, _ = KINDS[resource]
        qualified = f"{resource}.{group}" if group else resource
        return 404, status_object(
            404, "NotFound", f'{qualified} "{name}" not found', name=name, group=group, kind=resource
        )

    def _create(self, request: Request) -> tuple[int, dict]:
        resource, ns = request.resource, request.namespace
        kind, group, api_version = KINDS[resource]
        obj = copy.deepcopy(request.body or {})
        meta = obj.get("metadata") or {}
        name = meta.get("name", "")
        if obj.get("kind") != kind or obj.get("apiVersion") != api_version:
            return 400, status_object(
                400, "BadRequest", f"expected {api_version} {kind}, got {obj.get('apiVersion')} {obj.get('kind')}"
            )
        if self.namespaces is not None and ns not in self.namespaces:
            return 404, status_object(404, "NotFound", f'namespaces "{ns}" not found', name=ns, kind="namespaces")
        if meta.get("namespace", ns) != ns:
            return 400, status_object(
                400, "BadRequest", "the namespace of the object does not match the namespace of the request"
            )
        admitted = self._admit(request, obj)
        if isinstance(admitted, tuple):
            return admitted
        obj = admitted
        meta = obj.get("metadata") or {}
        if len(name) > 63 or not DNS1123_LABEL.fullmatch(name):
            # As the API server's NewInvalid: "Kind.group" (no group for core kinds) and the Kind
            # in the details; the field error reads 'Invalid value: "<value>": <detail>'.
            body = (
                f"Invalid value: {json.dumps(name)}: must be a DNS-1123 label of at most 63 "
                "characters (lower case alphanumeric characters or '-', starting and ending "
                "with an alphanumeric character)"
            )
            message = f'{kind}{"." + group if group else ""} "{name}" is invalid: metadata.name: {body}'
            return 422, status_object(
                422,
                "Invalid",
                message,
                name=name,
                group=group,
                kind=kind,
                causes=[{"reason": "FieldValueInvalid", "field": "metadata.name", "message": body}],
            )
        if (resource, ns, name) in self.objects:
            return 409, status_object(
                409,
                "AlreadyExists",
                f'{resource}{"." + group if group else ""} "{name}" already exists',
                name=name,
                group=group,
                kind=resource,
            )
        meta.update(
            namespace=ns,
            uid=f"uid-{next(self._ids)}",
            resourceVersion=str(next(self._ids)),
            creationTimestamp=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        )
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
    def _admit(request: Request, obj: dict) -> dict | tuple[int, dict]:
        """``obj`` (a create's body, or a patch's result) through admission (``k8s_schema``:
        decoded, defaulted and validated, honouring ``fieldValidation``): the object to store,
        or the error answer. Its warnings go to ``request.warnings`` (Warning headers)."""
        admission = k8s_schema.admit(
            request.resource,
            obj,
            raw=request.raw_body,
            field_validation=request.query.get("fieldValidation"),
            status_object=status_object,
        )
        request.warnings.extend(admission.warnings)
        if admission.error is not None:
            return admission.error
        return admission.obj or obj

    def _list(self, request: Request) -> tuple[int, dict]:
        kind, _, api_version = KINDS[request.resource]
        problem = field_selector_problem(request.query.get("fieldSelector"), request.resource)
        if problem:
            return 400, status_object(400, "BadRequest", problem)
        selector = request.query.get("labelSelector")
        items = [
            copy.deepcopy(o)
            for (r, n, _), o in sorted(self.objects.items())
            if r == request.resource
            and request.namespace in (None, n)
            and selector_matches(selector, o["metadata"].get("labels") or {})
            and field_selector_matches(request.query.get("fieldSelector"), o, request.resource)
        ]
        return 200, {
            "kind": f"{kind}List",
            "apiVersion": api_version,
            "metadata": {"resourceVersion": str(next(self._ids))},
            "items": items,
        }

    def _read(self, request: Request) -> tuple[int, dict]:
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

    def _delete(self, request: Request) -> tuple[int, dict]:
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
            for pod_key in [
                k
                for k, o in self.objects.items()
                if k[0] == "pods" and k[1] == ns and o["metadata"]["labels"].get(owner_label) == name
            ]:
                del self.objects[pod_key]
        self._lock.notify_all()

    def _paginate(self, request: Request, code: int, body: dict) -> tuple[int, dict]:
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
                return 410, status_object(
                    410, "Expired", "The provided continue parameter is too old to display a consistent list result."
                )
            offset = int(token.removeprefix("offset-"))
        items = body["items"]
        body["items"] = items[offset : offset + limit]
        self._real.pages += 1
        if offset + limit < len(items):
            body["metadata"]["continue"] = f"offset-{offset + limit}"
            body["metadata"]["remainingItemCount"] = len(items) - offset - limit
        return code, body

    def _patch(self, request: Request) -> tuple[int, dict]:
        """A JSON merge patch (RFC 7386), as ``kubectl apply`` sends to a custom resource
        (https://kubernetes.io/docs/tasks/manage-kubernetes-objects/update-api-object-kubectl-patch/);
        the result is validated like a create. Strategic merge and JSON patches are not
        simulated: 415, naming the type."""
        if request.content_type != "application/merge-patch+json":
            return 415, status_object(
                415,
                "UnsupportedMediaType",
                f"the fake API server applies only application/merge-patch+json, not {request.content_type}",
            )
        key = (request.resource, request.namespace, request.name)
        if key not in self.objects:
            return self._not_found(request.resource, request.name)
        current = self.objects[key]
        patched = merge_patch(copy.deepcopy(current), request.body or {})
        result = self._admit(request, patched)
        if isinstance(result, tuple):
            return result
        for field in ("name", "namespace", "uid", "creationTimestamp"):  # not the patch's to change
            result["metadata"][field] = current["metadata"].get(field)
        if request.dry_run:
            return 200, result
        self._touch(result)
        self.objects[key] = result
        if request.resource in ("jobsets", "jobs") and bool(current["spec"].get("suspend")) != bool(
            result["spec"].get("suspend")
        ):
            self._suspension(key, bool(result["spec"].get("suspend")))
        self._lock.notify_all()
        return 200, copy.deepcopy(result)

    def _patch_owner(self, request: Request) -> tuple[int, dict]:
        """A merge patch of a Service's ``metadata.ownerReferences`` (all the launcher patches)."""
        key = ("services", request.namespace, request.name)
        if key not in self.objects:
            return self._not_found("services", request.name)
        refs = ((request.body or {}).get("metadata") or {}).get("ownerReferences")
        if refs is not None:
            self.objects[key]["metadata"]["ownerReferences"] = refs
        return 200, copy.deepcopy(self.objects[key])

    def _touch(self, *objects: dict) -> None:
        """A write changes an object's resourceVersion (watchers and lists see it as newer)."""
        for obj in objects:
            obj["metadata"]["resourceVersion"] = str(next(self._ids))

    def _bump_versions(self) -> int:
        """Gives every object whose content changed since last seen a new resourceVersion
        (the API server's is etcd's revision: it grows with every write); returns the
        newest."""
        real = self._real
        for key, obj in self.objects.items():
            meta = obj["metadata"]
            body = json.dumps({k: v for k, v in obj.items() if k != "metadata"}, sort_keys=True) + json.dumps(
                {k: v for k, v in meta.items() if k != "resourceVersion"}, sort_keys=True
            )
            if real.seen.get(key) != body:
                real.seen[key] = body
                meta["resourceVersion"] = str(next(self._ids))
        for key in [k for k in real.seen if k not in self.objects]:
            del real.seen[key]
        return max([int(o["metadata"].get("resourceVersion") or 0) for o in self.objects.values()] + [real.floor])

    def _collect_garbage(self) -> None:
        """The garbage collector: an object whose owners (ownerReferences uids) are all gone
        goes too (https://kubernetes.io/docs/concepts/architecture/garbage-collection/)."""
        uids = {o["metadata"].get("uid") for o in self.objects.values()}
        for key, obj in list(self.objects.items()):
            refs = obj["metadata"].get("ownerReferences") or []
            if refs and not any(r.get("uid") in uids for r in refs):
                del self.objects[key]


def selector_matches(selector: str | None, labels: dict) -> bool:
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


# Field selectors the API server supports on every kind
# (https://kubernetes.io/docs/concepts/overview/working-with-objects/field-selectors/).
_SELECTABLE_FIELDS = {"metadata.name": ("metadata", "name"), "metadata.namespace": ("metadata", "namespace")}


# The fields a core/v1 Event may be selected by, besides metadata's (the API server's event
# strategy, pkg/registry/core/event/strategy.go ToSelectableFields; `kubectl get events
# --field-selector involvedObject.name=POD` uses them).
_EVENT_FIELDS = {
    **{
        f"involvedObject.{f}": ("involvedObject", f)
        for f in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
    },
    "reason": ("reason",),
    "reportingComponent": ("reportingComponent",),
    "source": ("source", "component"),
    "type": ("type",),
}


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


def field_selector_problem(selector: str | None, resource: str | None = None) -> str | None:
    try:
        terms = _field_selector_terms(selector)
    except ValueError as err:
        return str(err)
    for key, _, _ in terms:
        if key not in _selectable(resource):
            return f"field label not supported: {key}"
    return None


def field_selector_matches(selector: str | None, obj: dict, resource: str | None = None) -> bool:
    if field_selector_problem(selector, resource):
        return False
    for key, op, value in _field_selector_terms(selector):
        actual: Any = obj
        for part in _selectable(resource)[key]:
            actual = (actual or {}).get(part) if isinstance(actual, dict) else None
        actual = actual or ""
        if (actual == value) != (op != "!="):
            return False
    return True


def _propagation_policy(request: Request) -> str | None:
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
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {"name": meta["name"], "group": KINDS[resource][1], "kind": resource, "uid": meta.get("uid")},
    }


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, ``null`` removes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    if not isinstance(target, dict):
        target = {}
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = merge_patch(target.get(key), value)
    return target
