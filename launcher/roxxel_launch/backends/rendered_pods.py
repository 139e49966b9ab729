"""The pods of rendered manifests, and what the kubelet makes of their containers.

Pure functions of the manifest (no processes, no files), shared by the local backend and
anything else that must run a manifest as a cluster would:

- :func:`manifest_pods`: the pods the JobSet and Job controllers create, with the labels and
  annotations they put on them (JobSet API ``jobset.x-k8s.io/v1alpha2``: ``jobset-name``,
  ``replicatedjob-name``, ``job-index``, ``replicatedjob-replicas``, ``restart-attempt``
  under ``jobset.sigs.k8s.io/``; batch/v1 Indexed Jobs: the completion index annotation and
  label ``batch.kubernetes.io/job-completion-index``), their hostnames
  (``<job>-<completion index>``, the child Job of a JobSet being
  ``<jobset>-<replicated job>-<job index>``) and DNS names;
- :func:`container_env`: a container's environment as the kubelet builds it: ``env``
  entries in order, each ``value`` expanded against the entries before it, ``fieldRef``
  values from the pod's metadata (downward API), and ``JOB_COMPLETION_INDEX`` added by the
  Job controller to every container of an Indexed Job's pod that does not set it;
- :func:`expand`: Kubernetes' ``$(VAR)`` expansion ("Define Dependent Environment
  Variables"): ``$(NAME)`` becomes the value of a variable defined *earlier*; a reference
  to an undefined name is left as it is; ``$$`` is a literal ``$``;
- :func:`container_argv`: ``command`` + ``args``, both expanded against the final environment.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = [
    "CLUSTER_DOMAIN",
    "COMPLETION_INDEX_KEY",
    "JOB_COMPLETION_INDEX",
    "RenderedPod",
    "UnresolvedReference",
    "container_argv",
    "container_env",
    "expand",
    "manifest_pods",
]

CLUSTER_DOMAIN = "cluster.local"
"""Kubernetes' default cluster domain (kubelet ``--cluster-domain``)."""
COMPLETION_INDEX_KEY = "batch.kubernetes.io/job-completion-index"
"""Annotation (and label) of an Indexed Job's pod: its completion index."""
JOB_COMPLETION_INDEX = "JOB_COMPLETION_INDEX"
"""The variable the Job controller adds to an Indexed Job's containers (from the annotation)."""
_JOBSET = "jobset.sigs.k8s.io/"
RESTART_ATTEMPT_KEY = _JOBSET + "restart-attempt"
"""Label and annotation of a JobSet's pods: the JobSet's restarts so far (``status.restarts``)."""


class UnresolvedReference(ValueError):
    """An ``env`` entry that this machine cannot resolve (a Secret, a ConfigMap, a resource)."""


@dataclasses.dataclass(frozen=True)
class RenderedPod:
    """One pod of a rendered workload, as its controllers would create it.

    Attributes:
        name: the pod's hostname (a DNS-1123 label); unique within the workload.
        namespace: the Kubernetes namespace.
        job: the name of the pod's Job.
        replicated_job: the JobSet's replicated job; None for a bare Job.
        job_index: the child Job's index within the replicated job (0 for a bare Job).
        completion_index: the pod's completion index within its Job.
        labels: the pod template's labels plus those the controllers add (without the
            restart attempt, which :func:`container_env` adds per attempt).
        annotations: likewise for annotations.
        subdomain: the DNS subdomain of the pods (a headless Service), or None.
        spec: the pod template's ``spec`` as rendered.
    """

    name: str
    namespace: str
    job: str
    replicated_job: str | None
    job_index: int
    completion_index: int
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    subdomain: str | None
    spec: Mapping[str, Any]

    @property
    def dns_names(self) -> tuple[str, ...]:
        """The names other pods reach this one by, fully qualified first (Kubernetes "DNS
        for Services and Pods": ``<hostname>.<subdomain>.<namespace>.svc.<domain>``, and the
        short form a pod's DNS search path completes)."""
        if self.subdomain is None:
            return ()
        return (f"{self.name}.{self.subdomain}.{self.namespace}.svc.{CLUSTER_DOMAIN}", f"{self.name}.{self.subdomain}")

    @property
    def grace_seconds(self) -> int:
        """``terminationGracePeriodSeconds`` (the API's default: 30)."""
        return int(self.spec.get("terminationGracePeriodSeconds", 30))

    def container(self, name: str | None = None) -> Mapping[str, Any]:
        """The container called ``name`` (default: the first one).

        Raises:
            KeyError: no such container.
        """
        containers = list(self.spec.get("containers") or ())
        for container in containers:
            if name is None or container.get("name") == name:
                return container
        raise KeyError(f"pod {self.name} has no container {name!r}")


# ----------------------------------------------------------------------------- pods


def manifest_pods(objects: Sequence[Mapping[str, Any]]) -> list[RenderedPod]:
    """The pods of the JobSet, else of the Job, in rendered manifests, ordered by (replicated
    job, job index, completion index).

    Raises:
        ValueError: the manifests hold neither a JobSet nor a Job, or a Job is not
            ``completionMode: Indexed`` with ``parallelism == completions``.
    """
    for obj in objects:
        if obj.get("kind") == "JobSet":
            return _jobset_pods(obj)
    for obj in objects:
        if obj.get("kind") == "Job":
            services = [o for o in objects if o.get("kind") == "Service"]
            return _job_pods(obj, obj["metadata"]["name"], None, 0, {}, _headless(obj, services))
    raise ValueError("the manifests hold no JobSet and no Job")


def _jobset_pods(jobset: Mapping[str, Any]) -> list[RenderedPod]:
    meta, spec = jobset["metadata"], jobset["spec"]
    name = meta["name"]
    network = spec.get("network") or {}
    # enableDNSHostnames: the controller creates a headless Service named after the subdomain.
    subdomain = (network.get("subdomain") or name) if network.get("enableDNSHostnames") else None
    pods = []
    for rjob in spec["replicatedJobs"]:
        replicas = int(rjob.get("replicas", 1))
        for j in range(replicas):
            keys = {
                "jobset-name": name,
                "replicatedjob-name": rjob["name"],
                "job-index": str(j),
                "replicatedjob-replicas": str(replicas),
            }
            extra = {_JOBSET + k: v for k, v in keys.items()}
            job = {
                **rjob["template"],
                "metadata": {**(rjob["template"].get("metadata") or {}), "namespace": meta.get("namespace", "default")},
            }
            pods += _job_pods(job, f"{name}-{rjob['name']}-{j}", rjob["name"], j, extra, subdomain)
    return pods


def _headless(job: Mapping[str, Any], services: Sequence[Mapping[str, Any]]) -> str | None:
    """The pods' subdomain when a headless Service of that name selects them (else DNS has no
    records for them)."""
    template = job["spec"]["template"]
    subdomain = template["spec"].get("subdomain")
    labels = (template.get("metadata") or {}).get("labels") or {}
    for service in services:
        spec = service.get("spec") or {}
        if (
            service["metadata"]["name"] == subdomain
            and spec.get("clusterIP") == "None"
            and all(labels.get(k) == v for k, v in (spec.get("selector") or {}).items())
        ):
            return subdomain
    return None


def _job_pods(
    job: Mapping[str, Any],
    job_name: str,
    rjob: str | None,
    job_index: int,
    extra: Mapping[str, str],
    subdomain: str | None,
) -> list[RenderedPod]:
    spec = job["spec"]
    if spec.get("completionMode") != "Indexed":
        raise ValueError(f"job {job_name}: completionMode is {spec.get('completionMode')!r}, not Indexed")
    parallelism, completions = int(spec.get("parallelism", 1)), int(spec.get("completions", 1))
    if parallelism != completions:
        raise ValueError(f"job {job_name}: parallelism {parallelism} != completions {completions}")
    template = spec["template"]
    meta = template.get("metadata") or {}
    namespace = (job.get("metadata") or {}).get("namespace", "default")
    pods = []
    for i in range(completions):
        index = {COMPLETION_INDEX_KEY: str(i)}
        labels = {**(meta.get("labels") or {}), **extra, **index, "batch.kubernetes.io/job-name": job_name}
        annotations = {**(meta.get("annotations") or {}), **extra, **index}
        pods.append(
            RenderedPod(
                f"{job_name}-{i}",
                namespace,
                job_name,
                rjob,
                job_index,
                i,
                labels,
                annotations,
                subdomain,
                template["spec"],
            )
        )
    return pods


# ----------------------------------------------------------------------------- expansion


def expand(text: str, lookup: Callable[[str], str | None]) -> str:
    """Kubernetes' ``$(VAR)`` expansion of ``text``.

    ``$(NAME)`` becomes ``lookup(NAME)``, or stays ``$(NAME)`` when that is None; ``$$``
    becomes ``$``; a ``$`` before anything else, and an unclosed ``$(``, stay as they are.
    (The rules of k8s.io/kubernetes third_party/forked/golang/expansion.)
    """
    out, i, n = [], 0, len(text)
    while i < n:
        char = text[i]
        if char != "$" or i + 1 == n:
            out.append(char)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
        elif nxt == "(":
            end = text.find(")", i + 2)
            if end < 0:
                out.append("$(")
                i += 2
            else:
                name = text[i + 2 : end]
                value = lookup(name)
                out.append(f"$({name})" if value is None else value)
                i = end + 1
        else:
            out.append("$" + nxt)
            i += 2
    return "".join(out)


def _field(pod: RenderedPod, path: str, labels: Mapping[str, str], annotations: Mapping[str, str], pod_ip: str) -> str:
    """A downward-API ``fieldRef`` value; a missing label or annotation reads as ""."""
    match = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if match:
        return (labels if match.group(1) == "labels" else annotations).get(match.group(2), "")
    simple = {
        "metadata.name": pod.name,
        "metadata.namespace": pod.namespace,
        "spec.serviceAccountName": str(pod.spec.get("serviceAccountName", "default")),
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
        "status.hostIP": pod_ip,
        "spec.nodeName": "localhost",
    }
    if path not in simple:
        raise UnresolvedReference(f"pod {pod.name}: the downward-API field {path!r} has no local value")
    return simple[path]


def container_env(
    pod: RenderedPod,
    container: Mapping[str, Any],
    *,
    restart_attempt: int | None = None,
    pod_ip: str = "127.0.0.1",
    secret: Callable[[str, Mapping[str, Any]], str | None] | None = None,
) -> dict[str, str]:
    """The container's environment, in the kubelet's order (see the module docstring).

    Args:
        pod: the pod.
        container: one of ``pod.spec``'s containers.
        restart_attempt: a JobSet pod's ``restart-attempt`` label and annotation (the
            JobSet's restarts so far); None for a bare Job's pod, which has none.
        pod_ip: ``status.podIP`` (and ``hostIP``).
        secret: ``(variable name, valueFrom) -> value`` for ``secretKeyRef`` and
            ``configMapKeyRef`` entries; None for an optional one that is absent.

    Raises:
        UnresolvedReference: a ``valueFrom`` that cannot be resolved (no ``secret`` given or
            it has no value for a required one; a ``resourceFieldRef``; an unknown field).
    """
    labels, annotations = dict(pod.labels), dict(pod.annotations)
    if restart_attempt is not None:
        labels[RESTART_ATTEMPT_KEY] = annotations[RESTART_ATTEMPT_KEY] = str(restart_attempt)
    entries = list(container.get("env") or ())
    if COMPLETION_INDEX_KEY in annotations and not any(e.get("name") == JOB_COMPLETION_INDEX for e in entries):
        entries.append(
            {
                "name": JOB_COMPLETION_INDEX,
                "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX_KEY}']"}},
            }
        )
    env: dict[str, str] = {}
    for entry in entries:
        name, source = entry["name"], entry.get("valueFrom")
        if source is None:
            env[name] = expand(str(entry.get("value", "")), env.get)
        elif "fieldRef" in source:
            env[name] = _field(pod, source["fieldRef"]["fieldPath"], labels, annotations, pod_ip)
        elif ("secretKeyRef" in source or "configMapKeyRef" in source) and secret is not None:
            value = secret(name, source)
            if value is not None:
                env[name] = value
        else:
            raise UnresolvedReference(
                f"pod {pod.name}: env {name} comes from {sorted(source)}, which has no value on this machine"
            )
    return env


def container_argv(container: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """``command`` + ``args`` expanded against ``env`` (the container's final environment).

    Raises:
        ValueError: the container has no ``command`` (a local run has no image entrypoint).
    """
    command = list(container.get("command") or ())
    if not command:
        raise ValueError(
            f"container {container.get('name')!r} has no command: a local run has no image entrypoint to fall back on"
        )
    return [expand(str(item), env.get) for item in (*command, *(container.get("args") or ()))]
