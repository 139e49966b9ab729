"""The Kubernetes API calls of the backend: credentials, requests, errors, CRUD by kind.

Built on the official ``kubernetes`` client. Credentials load lazily, on the first API call
(constructing a :class:`KubernetesApi` touches neither files nor the network): in a pod
(``KUBERNETES_SERVICE_HOST`` set, no ``context`` asked for) the service account comes
first, else the kubeconfig (``KUBECONFIG`` or ``~/.kube/config``) with the given context.

Responses are read as raw JSON (``_preload_content=False``) rather than through the
client's models, so pods, Jobs and JobSets are all plain dicts with the API's field names.
Every :class:`~kubernetes.client.exceptions.ApiException` becomes a :class:`BackendError`
(or :class:`JobNotFoundError` / :class:`JobExistsError`) whose message names the problem
and the fix.
"""

from __future__ import annotations

import builtins
import json
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import urllib3
import yaml
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from roxxel.wording import as_clause
from roxxel_launch.backends.base import RENAME_HINT, RESUME_HINT, BackendError, JobExistsError, JobNotFoundError
from roxxel_launch.backends.kubernetes import retry as kubernetes_retry
from roxxel_launch.backends.kubernetes.retry import RetryPolicy, describe, retrying

logger = logging.getLogger(__name__)

T = TypeVar("T")

JOBSET_GROUP = "jobset.x-k8s.io"
JOBSET_VERSION = "v1alpha2"
JOBSET_PLURAL = "jobsets"
FIELD_MANAGER = "roxxel-launch"
FOREGROUND = "Foreground"
# JobSet v0.8 and v0.9 run jobs with a reduced failure policy (preflight.without_message_patterns);
# v0.10.0 is the first whose CRD has every field rendered (onJobFailureMessagePatterns).
# The release named is one whose CRD the tests use (tests/fixtures/k8s).
JOBSET_MIN_FULL_VERSION = "v0.10.0"
JOBSET_INSTALL_HINT = (
    f"install JobSet {JOBSET_MIN_FULL_VERSION} or newer: kubectl apply --server-side -f "
    "https://github.com/kubernetes-sigs/jobset/releases/download/v0.12.0/manifests.yaml"
)
INCLUSTER_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
DEFAULT_KUBECONFIG = "~/.kube/config"
LIST_PAGE_SIZE = 500  # objects per page of a list (kubectl asks for 500 too)

# What RBAC calls each kind, for "kubectl auth can-i VERB RESOURCE" hints.
_RBAC_RESOURCE = {
    "JobSet": f"{JOBSET_PLURAL}.{JOBSET_GROUP}",
    "Job": "jobs.batch",
    "Service": "services",
    "Pod": "pods",
    "Pod log": "pods/log",
    "Pod exec": "pods/exec",
    "Pod portforward": "pods/portforward",
    "NetworkPolicy": "networkpolicies.networking.k8s.io",
    "Event": "events",
    "Node": "nodes",
}
_RBAC_VERB = {
    "create": "create",
    "read": "get",
    "list": "list",
    "delete": "delete",
    "watch": "watch",
    "patch": "patch",
    "read logs of": "get",
}


# ----------------------------------------------------------------------------- errors


def _status_body(err: ApiException) -> dict:
    """The API server's Status object from an error response ({} when the body is not one)."""
    body = err.body
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if not body:
        return {}
    try:
        data = json.loads(body)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _server_message(err: ApiException) -> str:
    status = _status_body(err)
    message = status.get("message") or ""
    causes = (status.get("details") or {}).get("causes") or []
    if causes and not message:
        message = "; ".join(f"{c.get('field', '')}: {c.get('message', '')}".strip(": ") for c in causes)
    if not message:
        text = err.body.decode("utf-8", "replace") if isinstance(err.body, bytes) else err.body
        message = (text or err.reason or "").strip()
    return message if len(message) <= 1000 else message[:1000] + "..."


def _resource_type_missing(err: BaseException | None) -> bool:
    """A 404 for the resource type itself (no such API), not for one named object."""
    if not isinstance(err, ApiException) or err.status != 404:
        return False
    details = _status_body(err).get("details") or {}
    # A missing object's Status names it; an unknown API answers "404 page not found" or a
    # Status without a name ("the server could not find the requested resource").
    return not details.get("name")


def _made_from(existing: Mapping, sent: Mapping) -> bool:
    """Whether ``existing`` carries every label and annotation of ``sent`` (our own create)."""
    have, want = existing.get("metadata") or {}, sent.get("metadata") or {}
    return all(
        ((have.get(key) or {}).get(k) == v)
        for key in ("labels", "annotations")
        for k, v in (want.get(key) or {}).items()
    )


# ----------------------------------------------------------------------------- the client


class KubernetesApi:
    """The API calls of the Kubernetes backend, one namespace, raw JSON in and out.

    Args:
        namespace: where objects live. None: the kubeconfig context's namespace (the pod's
            own namespace in-cluster), else ``default``.
        context: kubeconfig context; None uses the current one. Asking for a context makes
            it use the kubeconfig even inside a pod.
        config_file: kubeconfig path; None: ``$KUBECONFIG``, else ``~/.kube/config``.
        retry: timeouts and retries of every call (default: ``kubernetes_retry.DEFAULT_POLICY``).

    Constructing reads nothing and sends nothing; the first API call loads the credentials.
    """

    def __init__(
        self,
        namespace: str | None = None,
        context: str | None = None,
        *,
        config_file: str | None = None,
        retry: RetryPolicy | None = None,
    ):
        self._namespace = namespace
        self.retry = retry or kubernetes_retry.DEFAULT_POLICY
        self.last_attempts = 0
        self._context = context
        self._config_file = config_file
        self._api_client: k8s_client.ApiClient | None = None
        self._resolved_namespace: str | None = None
        self._host = "?"

    def _load_config(self) -> tuple[k8s_client.Configuration, str | None, str]:
        """(client configuration, namespace from the config or None, where it came from)."""
        configuration = k8s_client.Configuration()
        in_cluster_error = None
        if os.environ.get("KUBERNETES_SERVICE_HOST") and self._context is None:
            try:
                k8s_config.load_incluster_config(client_configuration=configuration)
            except k8s_config.ConfigException as err:
                in_cluster_error = err
                logger.info("in-cluster credentials unusable (%s); trying the kubeconfig", err)
            else:
                namespace = None
                try:
                    with open(INCLUSTER_NAMESPACE_FILE, encoding="utf-8") as f:
                        namespace = f.read().strip() or None
                except FileNotFoundError:
                    logger.debug("no %s; namespace defaults to 'default'", INCLUSTER_NAMESPACE_FILE)
                return configuration, namespace, "the pod's service account"
        path = self._config_file or os.environ.get("KUBECONFIG") or DEFAULT_KUBECONFIG
        try:
            k8s_config.load_kube_config(
                config_file=path, context=self._context, client_configuration=configuration, persist_config=False
            )
            contexts, current = k8s_config.list_kube_config_contexts(config_file=path)
        except (k8s_config.ConfigException, OSError, ValueError, yaml.YAMLError) as err:
            context = f" (context {self._context!r})" if self._context else ""
            also = f"; in-cluster credentials failed too: {as_clause(in_cluster_error)}" if in_cluster_error else ""
            raise BackendError(
                f"cannot load Kubernetes credentials from {path}{context}: {as_clause(err)}{also}. "
                "Point KUBECONFIG at a kubeconfig (e.g. run `gcloud container clusters "
                "get-credentials CLUSTER`), or pick an existing context with --context "
                "(kubectl config get-contexts); for a job run on this machine, add --local."
            ) from err
        if self._context is not None:
            current = next((c for c in contexts if c.get("name") == self._context), current)
        namespace = ((current or {}).get("context") or {}).get("namespace")
        return configuration, namespace, f"{path}, context {(current or {}).get('name')!r}"

    @property
    def api_client(self) -> k8s_client.ApiClient:
        """The client, created (and the credentials loaded) on first use."""
        if self._api_client is None:
            configuration, namespace, source = self._load_config()
            self._resolved_namespace = self._namespace or namespace or "default"
            self._host = configuration.host
            # One retry loop (ours, with backoff and a deadline), not urllib3's immediate ones.
            configuration.retries = False
            self._api_client = k8s_client.ApiClient(configuration)
            logger.info(
                "Kubernetes API %s (credentials from %s), namespace %s", self._host, source, self._resolved_namespace
            )
        return self._api_client

    @property
    def namespace(self) -> str:
        """The namespace this backend works in (loads the config when not given)."""
        if self._namespace is not None:
            return self._namespace
        self.api_client  # noqa: B018 - resolves the namespace from the config
        if self._resolved_namespace is None:
            raise RuntimeError("loading the Kubernetes configuration resolved no namespace")
        return self._resolved_namespace

    def close(self) -> None:
        if self._api_client is not None:
            self._api_client.close()
            self._api_client = None

    def __enter__(self) -> KubernetesApi:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # ------------------------------------------------------------------ raw API calls

    def error(self, err: ApiException, action: str, kind: str, name: str | None, namespace: str) -> BackendError:
        what = f"{kind} {namespace}/{name}" if name else f"{kind}s in namespace {namespace}"
        server = _server_message(err)
        status = err.status
        if status == 404 and kind == "JobSet" and _resource_type_missing(err):
            return BackendError(
                f"cannot {action} {what}: the JobSet API ({JOBSET_GROUP}/{JOBSET_VERSION}) is "
                f"not installed in this cluster ({server}). {JOBSET_INSTALL_HINT} — or use "
                "workload: indexed-job, which needs no JobSet controller."
            )
        if status == 404 and (_status_body(err).get("details") or {}).get("kind") == "namespaces":
            return BackendError(
                f"cannot {action} {what}: namespace {namespace!r} does not exist ({server}). "
                f"Create it (kubectl create namespace {namespace}) or pick another (--namespace)."
            )
        if status == 404:
            return JobNotFoundError(
                f"{what} not found ({server}). Check the name (roxxel-launch list) and the namespace (--namespace)."
            )
        if status == 409:
            return JobExistsError(
                f"{what} already exists ({server}). Delete it (roxxel-launch delete {name}), "
                f"resume it (roxxel-launch resume {name}), or {RENAME_HINT}. {RESUME_HINT}."
            )
        if status == 403:
            verb = _RBAC_VERB.get(action.removesuffix(" (dry run)"), action)
            resource = _RBAC_RESOURCE.get(kind, kind.lower() + "s")
            return BackendError(
                f"forbidden to {action} {what}: {server}. Your account needs RBAC permission "
                f"to {verb} {resource} in namespace {namespace} (check: kubectl auth can-i "
                f"{verb} {resource} -n {namespace}); ask a cluster admin for a Role, or use a "
                "namespace you may use (--namespace)."
            )
        if status == 401:
            return BackendError(
                f"the API server at {self._host} rejected the credentials while trying to "
                f"{action} {what} ({server}). Refresh them (e.g. `gcloud container clusters "
                "get-credentials CLUSTER`) or pick another context (--context)."
            )
        if status in (400, 422):
            return BackendError(
                f"the API server rejected {what} ({action}): {server}. Fix the field it names "
                "in the job spec (roxxel-launch validate checks a spec offline)."
            )
        if not status:
            return BackendError(
                f"cannot {action} {what}: {as_clause(err.reason or server)}. Check the "
                f"connection to the API server at {self._host}."
            )
        return BackendError(
            f"the API server failed to {action} {what}: HTTP {status} {err.reason or ''}: "
            f"{server}. Retry; if it persists, check the cluster's health "
            "(kubectl get --raw /readyz)."
        )

    def call(
        self,
        action: str,
        kind: str,
        name: str | None,
        namespace: str,
        fn: Callable,
        *args,
        idempotent: bool = True,
        **kwargs,
    ):
        """Calls an API method for its raw response (``_preload_content=False``).

        Every call has a timeout (the policy's, unless ``_request_timeout`` is given) and is
        retried by the :class:`RetryPolicy` (``idempotent``: may a 5xx or a broken connection
        be retried; 429 always is). ``self.last_attempts`` says how many attempts it took.
        """
        kwargs.setdefault("_request_timeout", self.retry.request_timeout)
        return self._retrying(
            action, kind, name, namespace, idempotent, lambda: fn(*args, _preload_content=False, **kwargs)
        )

    def _retrying(
        self, action: str, kind: str, name: str | None, namespace: str, idempotent: bool, attempt: Callable[[], T]
    ) -> T:
        what = f"{action} {kind} {namespace}/{name}" if name else f"{action} {kind}s in namespace {namespace}"
        self.last_attempts = 0

        def counted() -> T:
            self.last_attempts += 1
            return attempt()

        try:
            return retrying(counted, self.retry, what, idempotent=idempotent)
        except ApiException as err:
            error = self.error(err, action, kind, name, namespace)
            notes = "; ".join(getattr(err, "__notes__", ()))
            raise (type(error)(f"{error} ({notes})") if notes else error) from err
        except urllib3.exceptions.HTTPError as err:
            notes = "; ".join(getattr(err, "__notes__", ()))
            raise BackendError(
                f"cannot reach the Kubernetes API server at {self._host} to {what}: "
                f"{describe(err)}{f' ({notes})' if notes else ''}. Check the network and the "
                "kubeconfig context (kubectl cluster-info)."
            ) from err
        except ValueError as err:
            # The client checks arguments and (kubernetes >= 35, pydantic) bodies itself.
            raise BackendError(f"the kubernetes client refused to {action} {kind} {name or ''}: {err}") from err

    def json(
        self,
        action: str,
        kind: str,
        name: str | None,
        namespace: str,
        fn: Callable,
        *args,
        idempotent: bool = True,
        **kwargs,
    ) -> dict:
        """The JSON answer of an API method (the request and the read of the answer are
        retried together: a connection that breaks mid-answer is retried too)."""
        kwargs.setdefault("_request_timeout", self.retry.request_timeout)

        def attempt() -> bytes:
            response = fn(*args, _preload_content=False, **kwargs)
            try:
                return response.data
            finally:
                response.release_conn()

        data = self._retrying(action, kind, name, namespace, idempotent, attempt)
        if not data:
            return {}
        try:
            return json.loads(data)
        except ValueError as err:
            raise BackendError(
                f"the API server answered {action} {kind} {name or ''} with something that is not JSON: {data[:200]!r}"
            ) from err

    def custom(self) -> k8s_client.CustomObjectsApi:
        return k8s_client.CustomObjectsApi(self.api_client)

    def batch(self) -> k8s_client.BatchV1Api:
        return k8s_client.BatchV1Api(self.api_client)

    def core(self) -> k8s_client.CoreV1Api:
        return k8s_client.CoreV1Api(self.api_client)

    def apiextensions(self) -> k8s_client.ApiextensionsV1Api:
        return k8s_client.ApiextensionsV1Api(self.api_client)

    def apis(self) -> k8s_client.ApisApi:
        """The discovery document ``/apis``: every API group and its served versions."""
        return k8s_client.ApisApi(self.api_client)

    def networking(self) -> k8s_client.NetworkingV1Api:
        return k8s_client.NetworkingV1Api(self.api_client)

    def create(self, obj: Mapping, *, dry_run: bool) -> dict:
        """Creates ``obj`` (``dryRun=All`` with ``dry_run``), with strict field validation.

        ``fieldValidation=Strict`` makes the API server refuse a field its schema does not
        know (an older JobSet CRD without ``failurePolicy.rules``, a typo) instead of
        dropping it silently (https://kubernetes.io/docs/reference/using-api/api-concepts/
        #field-validation). A create is retried like a read: when an attempt that failed
        without an answer (5xx, broken connection) had in fact created the object, the
        next attempt's 409 is resolved by reading it back: the same labels and annotations
        are ours, and the create succeeded.
        """
        kind = obj["kind"]
        name = obj["metadata"]["name"]
        namespace = obj["metadata"].get("namespace") or self.namespace
        options: dict[str, Any] = {"field_manager": FIELD_MANAGER, "field_validation": "Strict"}
        if dry_run:
            options["dry_run"] = "All"
        action = "create (dry run)" if dry_run else "create"
        logger.debug("%s %s %s/%s", action, kind, namespace, name)
        body = dict(obj)
        if kind == "JobSet":
            call: tuple = (
                self.custom().create_namespaced_custom_object,
                JOBSET_GROUP,
                JOBSET_VERSION,
                namespace,
                JOBSET_PLURAL,
                body,
            )
        elif kind == "Job":
            call = (self.batch().create_namespaced_job, namespace, body)
        elif kind == "Service":
            call = (self.core().create_namespaced_service, namespace, body)
        elif kind == "NetworkPolicy":
            call = (self.networking().create_namespaced_network_policy, namespace, body)
        elif kind == "Pod":  # only as a dry run: the admission check of a worker pod (preflight)
            call = (self.core().create_namespaced_pod, namespace, body)
        else:
            raise BackendError(f"roxxel-launch does not create {kind} objects")
        try:
            return self.json(action, kind, name, namespace, *call, **options)
        except JobExistsError:
            if dry_run or self.last_attempts < 2:
                raise
            existing = self.get(kind, name)
            if existing is None or not _made_from(existing, obj):
                raise
            logger.info("%s %s/%s was created by an earlier attempt", kind, namespace, name)
            return existing

    def set_owner(self, kind: str, name: str, owner: Mapping) -> dict:
        """Makes ``owner`` (an object as the API returned it: apiVersion, kind, name, uid)
        the owner of ``kind``/``name``, so that the garbage collector deletes it with its
        owner (https://kubernetes.io/docs/concepts/overview/working-with-objects/owners-dependents/).
        Only Services are patched this way."""
        if kind != "Service":
            raise ValueError(f"roxxel-launch sets owners of Services only, not {kind}")
        meta = owner.get("metadata") or {}
        reference = {
            "apiVersion": owner.get("apiVersion"),
            "kind": owner.get("kind"),
            "name": meta.get("name"),
            "uid": meta.get("uid"),
            "blockOwnerDeletion": False,
            "controller": False,
        }
        body = {"metadata": {"ownerReferences": [reference]}}
        return self.json(
            "patch",
            kind,
            name,
            self.namespace,
            self.core().patch_namespaced_service,
            name,
            self.namespace,
            body,
            field_manager=FIELD_MANAGER,
        )

    def patch(self, kind: str, name: str, body: Mapping) -> dict:
        """A JSON merge patch (RFC 7386) of a JobSet or Job, as ``kubectl patch --type merge``
        sends; the object as patched.

        Raises: JobNotFoundError (no such object); BackendError.
        """
        merge = "application/merge-patch+json"
        namespace = self.namespace
        if kind == "JobSet":
            return self.json(
                "patch",
                kind,
                name,
                namespace,
                self.custom().patch_namespaced_custom_object,
                JOBSET_GROUP,
                JOBSET_VERSION,
                namespace,
                JOBSET_PLURAL,
                name,
                body,
                field_manager=FIELD_MANAGER,
                _content_type=merge,
            )
        if kind == "Job":
            return self.json(
                "patch",
                kind,
                name,
                namespace,
                self.batch().patch_namespaced_job,
                name,
                namespace,
                body,
                field_manager=FIELD_MANAGER,
                _content_type=merge,
            )
        raise ValueError(f"roxxel-launch patches JobSets and Jobs only, not {kind}")

    def get(self, kind: str, name: str) -> dict | None:
        """The object, or None when there is none (or, for a JobSet, no JobSet API)."""
        namespace = self.namespace
        try:
            if kind == "JobSet":
                return self.json(
                    "read",
                    kind,
                    name,
                    namespace,
                    self.custom().get_namespaced_custom_object,
                    JOBSET_GROUP,
                    JOBSET_VERSION,
                    namespace,
                    JOBSET_PLURAL,
                    name,
                )
            if kind == "Job":
                return self.json("read", kind, name, namespace, self.batch().read_namespaced_job, name, namespace)
            if kind == "Service":
                return self.json("read", kind, name, namespace, self.core().read_namespaced_service, name, namespace)
            if kind == "NetworkPolicy":
                return self.json(
                    "read", kind, name, namespace, self.networking().read_namespaced_network_policy, name, namespace
                )
        except JobNotFoundError:
            return None
        except BackendError as err:
            cause = err.__cause__
            if kind == "JobSet" and isinstance(cause, ApiException) and _resource_type_missing(cause):
                logger.debug("no JobSet API in this cluster; no JobSet %s", name)
                return None
            raise
        raise ValueError(f"unknown kind {kind}")

    def list(self, kind: str, selector: str | None, *, fields: str | None = None) -> list[dict]:
        """Every object of ``kind`` matching the label ``selector`` (and the field selector
        ``fields``), page by page.

        Pages of :data:`LIST_PAGE_SIZE` (``limit``/``continue``,
        https://kubernetes.io/docs/reference/using-api/api-concepts/#retrieving-large-results-sets-in-chunks);
        a continue token that expired meanwhile (410) restarts the list from the beginning.
        """
        items, _ = self.list_with_version(kind, selector, fields=fields)
        return items

    def list_with_version(
        self, kind: str, selector: str | None, *, fields: str | None = None
    ) -> tuple[builtins.list[dict], str | None]:
        """(items, the list's resourceVersion: where a watch of the same objects starts)."""
        fn, args = self.list_call(kind)
        namespace = "(cluster)" if kind == "Node" else self.namespace
        for _ in range(3):
            items: builtins.list[dict] = []
            token = None
            try:
                while True:
                    page: dict[str, Any] = {"limit": LIST_PAGE_SIZE, **({"_continue": token} if token else {})}
                    if selector:
                        page["label_selector"] = selector
                    if fields:
                        page["field_selector"] = fields
                    data = self.json("list", kind, None, namespace, fn, *args, **page)
                    items += data.get("items") or []
                    meta = data.get("metadata") or {}
                    token = meta.get("continue")
                    if not token:
                        return items, meta.get("resourceVersion")
            except BackendError as err:
                if getattr(err.__cause__, "status", None) != 410:
                    raise
                logger.info("the list of %ss expired between two pages; listing again", kind)
        raise BackendError(
            f"the list of {kind}s in namespace {namespace} kept expiring between pages (410 Gone); retry."
        )

    def list_nodes(self) -> builtins.list[dict]:
        """Every Node of the cluster (cluster-scoped: needs ``list nodes`` from a ClusterRole),
        page by page as :meth:`list`. Raises: BackendError (403 without that permission)."""
        return self.list("Node", None)

    def list_all_namespaces(self, kind: str, selector: str, field_selector: str | None = None) -> builtins.list[dict]:
        """Every JobSet, Job or Pod matching ``selector`` in every namespace (one request each,
        no pages: roxxel-launch's own jobs are few); needs ``list`` on them cluster-wide.

        Raises: BackendError (403 without that permission)."""
        options: dict[str, Any] = {"label_selector": selector}
        if field_selector:
            options["field_selector"] = field_selector
        if kind == "JobSet":
            data = self.json(
                "list",
                kind,
                None,
                "(all)",
                self.custom().list_cluster_custom_object,
                JOBSET_GROUP,
                JOBSET_VERSION,
                JOBSET_PLURAL,
                **options,
            )
        elif kind == "Job":
            data = self.json("list", kind, None, "(all)", self.batch().list_job_for_all_namespaces, **options)
        elif kind == "Pod":
            data = self.json("list", kind, None, "(all)", self.core().list_pod_for_all_namespaces, **options)
        else:
            raise ValueError(f"roxxel-launch lists JobSets, Jobs and Pods across namespaces, not {kind}")
        return list(data.get("items") or [])

    def use_namespace(self, namespace: str) -> None:
        """Work in ``namespace`` from now on (where a job was found)."""
        self._namespace = namespace

    def list_call(self, kind: str) -> tuple[Callable, tuple]:
        """The client function that lists objects of ``kind`` and its leading arguments (group, version,
        namespace, plural for a JobSet; the namespace for the others; none for a Node): what a list and
        a watch of that kind both call (``kubernetes.watch.Watch.stream(fn, *args, ...)``).

        Raises:
            ValueError: a kind this client does not list.
        """
        if kind == "Node":
            return self.core().list_node, ()
        namespace = self.namespace
        if kind == "JobSet":
            return (
                self.custom().list_namespaced_custom_object,
                (JOBSET_GROUP, JOBSET_VERSION, namespace, JOBSET_PLURAL),
            )
        if kind == "Job":
            return self.batch().list_namespaced_job, (namespace,)
        if kind == "Pod":
            return self.core().list_namespaced_pod, (namespace,)
        if kind == "Event":
            return self.core().list_namespaced_event, (namespace,)
        if kind == "ResourceQuota":
            return self.core().list_namespaced_resource_quota, (namespace,)
        raise ValueError(f"unknown kind {kind}")

    def delete(self, kind: str, name: str, namespace: str | None = None) -> bool:
        """Deletes with foreground propagation; False when it was already gone."""
        namespace = namespace or self.namespace
        logger.info("deleting %s %s/%s (foreground)", kind, namespace, name)
        try:
            if kind == "JobSet":
                self.json(
                    "delete",
                    kind,
                    name,
                    namespace,
                    self.custom().delete_namespaced_custom_object,
                    JOBSET_GROUP,
                    JOBSET_VERSION,
                    namespace,
                    JOBSET_PLURAL,
                    name,
                    propagation_policy=FOREGROUND,
                )
            elif kind == "Job":
                self.json(
                    "delete",
                    kind,
                    name,
                    namespace,
                    self.batch().delete_namespaced_job,
                    name,
                    namespace,
                    propagation_policy=FOREGROUND,
                )
            elif kind == "Service":
                self.json(
                    "delete",
                    kind,
                    name,
                    namespace,
                    self.core().delete_namespaced_service,
                    name,
                    namespace,
                    propagation_policy=FOREGROUND,
                )
            elif kind == "NetworkPolicy":
                self.json(
                    "delete",
                    kind,
                    name,
                    namespace,
                    self.networking().delete_namespaced_network_policy,
                    name,
                    namespace,
                    propagation_policy=FOREGROUND,
                )
            else:
                raise ValueError(f"unknown kind {kind}")
        except JobNotFoundError:
            logger.debug("%s %s/%s was already gone", kind, namespace, name)
            return False
        return True

    # ------------------------------------------------------------------ lookups
