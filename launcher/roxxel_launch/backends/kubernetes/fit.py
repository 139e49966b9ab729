"""The fit check before submit: can the cluster's nodes hold the job's workers at all?

xpk refuses a workload whose slices need more VMs of its device type than the cluster has
(``check_if_workload_can_schedule`` in AI-Hypercomputer/xpk, src/xpk/core/scheduling.py
@367c838), reading node-pool sizes that ``xpk cluster create`` stored in a ConfigMap.
roxxel-launch has no such ConfigMap and sees the cluster only through the Kubernetes API,
where node pools are not objects: it lists the Nodes (``GET /api/v1/nodes``, the Node API,
https://kubernetes.io/docs/reference/kubernetes-api/cluster-resources/node-v1/) and groups
them by their GKE node-pool label ``cloud.google.com/gke-nodepool``
(https://cloud.google.com/kubernetes-engine/docs/how-to/creating-managing-labels).

For every pod template of the rendered manifest (a worker), a node *matches* when its labels
carry every pair of the pod's ``nodeSelector`` and the pod tolerates each of its
``NoSchedule``/``NoExecute`` taints (https://kubernetes.io/docs/concepts/scheduling-eviction/
taint-and-toleration/); taints under ``node.kubernetes.io/`` are conditions the node
lifecycle controller sets and clears (not-ready, unschedulable), so they are not held against
a node. A matching node *can hold* a worker when its ``status.allocatable`` is at least the
pod's effective request of every resource (cpu, memory, ephemeral-storage, google.com/tpu,
nvidia.com/gpu, ...), counted as the scheduler does (:func:`pod_requests`). Then:

* matching nodes that report the worker's accelerators (a device plugin advertises them only
  once it runs: a node that has just joined shows none, and is left out, with a warning when
  all are such) exist, but none can hold a worker: refused, naming the request, the pool and
  the shortfall (a pool's nodes share one machine type, so a larger node of that kind will not
  come) — unless the cluster creates node pools itself (GKE Autopilot, whose nodes' names
  start with ``gk3-``, as Config Sync's ``IsGKEAutopilotCluster`` in
  GoogleContainerTools/kpt-config-sync tells Autopilot apart; node auto-provisioning, whose
  pools are named ``nap-...``): then a warning;
* no node matches: a warning naming the selector. A GKE node pool scaled to zero (or not yet
  auto-created) has no Node at all, and its size limits live in the GKE API, not in
  Kubernetes: nothing the Kubernetes API shows proves that such a pool cannot appear. But its
  machine type follows from the selector (a TPU host by accelerator and chips per host, an
  8-GPU A3/A4 host by GPU): a worker asking for more cpu or memory than that whole machine has
  is refused (:mod:`roxxel_launch.machines`);
* the nodes that can hold a worker hold fewer workers than the job has: a warning (the cluster
  autoscaler may add nodes).

A pod template annotated ``gke-gcsfuse/volumes: "true"`` gets the GCS FUSE CSI driver's
sidecar from its mutating webhook at pod creation, after this check: its requests (the
driver's defaults, 250m cpu, 256Mi memory and 5Gi ephemeral storage, under the "0" limits the
renderer writes; else what the pod's ``gke-gcsfuse/*`` annotations make of them:
:func:`roxxel_launch.spec.storage.gcsfuse_sidecar_requests`) are counted as a sidecar's, and
so are those of its metadata-prefetch sidecar (10m cpu, 10Mi memory, 10Mi ephemeral storage
by default), added when a volume sets ``gcsfuseMetadataPrefetchOnMount``.

What it does not see: other pods already on the nodes (it compares with allocatable, not with
what is free), required node affinity (it can only narrow the nodes further, so a refusal
stays right), pod overhead of a RuntimeClass, and Kueue quota.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from decimal import Decimal

from kubernetes.utils import parse_quantity

from roxxel.wording import count
from roxxel_launch.backends.base import BackendError
from roxxel_launch.backends.kubernetes.api import KubernetesApi
from roxxel_launch.machines import machine_for
from roxxel_launch.spec.storage import GCSFUSE_METADATA_PREFETCH_SIDECAR, GCSFUSE_SIDECAR, gcsfuse_sidecar_requests

logger = logging.getLogger(__name__)

NODE_POOL_LABEL = "cloud.google.com/gke-nodepool"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
SKIP_HINT = "--skip-fit-check"
_TRANSIENT_TAINTS = "node.kubernetes.io/"
_GCSFUSE_INJECTION = "gke-gcsfuse/volumes"
_METADATA_PREFETCH = "gcsfuseMetadataPrefetchOnMount"
_GO_TRUE = {"1", "t", "T", "TRUE", "true", "True"}  # what Go's strconv.ParseBool reads as true
_BYTES = ("memory", "ephemeral-storage")
_SPEC_FIELD = {
    "cpu": "resources.requests.cpu",
    "memory": "resources.requests.memory",
    "ephemeral-storage": "resources.requests.ephemeral-storage",
}


@dataclasses.dataclass(frozen=True)
class Worker:
    """One pod template of the manifest and how many pods it makes.

    ``job``: the replicated job's name (JobSet) or the Job's; ``pods``: replicas x parallelism;
    ``requests``: the pod's effective request per resource name (cores for cpu, bytes for
    memory and storage, a count for extended resources), the GCS FUSE sidecars' included;
    ``sidecar``: their part (empty without them); ``sidecars``: their container names;
    ``limits``: the pod's limits as ResourceQuota sums them (:func:`pod_limits`)."""

    job: str
    pods: int
    selector: Mapping[str, str]
    tolerations: Sequence[Mapping]
    requests: Mapping[str, Decimal]
    sidecar: Mapping[str, Decimal] = dataclasses.field(default_factory=dict)
    sidecars: tuple[str, ...] = ()
    limits: Mapping[str, Decimal] = dataclasses.field(default_factory=dict)


def _requests(container: Mapping) -> dict[str, Decimal]:
    asked = (container.get("resources") or {}).get("requests") or {}
    return {name: Decimal(parse_quantity(value)) for name, value in asked.items()}


def _add(into: dict[str, Decimal], more: Mapping[str, Decimal]) -> None:
    for name, value in more.items():
        into[name] = into.get(name, Decimal(0)) + value


def _max(into: dict[str, Decimal], other: Mapping[str, Decimal]) -> None:
    for name, value in other.items():
        into[name] = max(into.get(name, Decimal(0)), value)


def pod_requests(pod_spec: Mapping) -> dict[str, Decimal]:
    """The pod's effective request per resource, as the scheduler counts it: the sum over the
    app containers and the sidecars (init containers with ``restartPolicy: Always``, which
    keep running), or the largest request an init container has while it runs (itself plus
    the sidecars started before it), whichever is higher ("Resource sharing within
    containers", https://kubernetes.io/docs/concepts/workloads/pods/sidecar-containers/
    #resource-sharing-within-containers; the scheduler's ``PodRequests`` in kubernetes/kubernetes
    staging/src/k8s.io/component-helpers/resource/helpers.go). Pod overhead and pod-level
    ``spec.resources`` are not counted (roxxel-launch sets neither).

    Returns: resource name -> amount (cores, bytes or a count). Raises: ValueError for a
    quantity Kubernetes would not accept either.
    """
    total: dict[str, Decimal] = {}
    for container in pod_spec.get("containers") or []:
        _add(total, _requests(container))
    sidecars: dict[str, Decimal] = {}
    init_peak: dict[str, Decimal] = {}
    for container in pod_spec.get("initContainers") or []:
        asked = _requests(container)
        if container.get("restartPolicy") == "Always":
            _add(total, asked)
            _add(sidecars, asked)
            _max(init_peak, sidecars)
        else:
            running = dict(sidecars)
            _add(running, asked)
            _max(init_peak, running)
    _max(total, init_peak)
    return {name: value for name, value in total.items() if value > 0}


def pod_limits(pod_spec: Mapping) -> dict[str, Decimal]:
    """The pod's limits per resource as ResourceQuota adds them up: the app containers' and
    the sidecars' (init containers with ``restartPolicy: Always``), cores, bytes or counts.
    Raises: ValueError for a quantity Kubernetes would not accept either."""
    sidecars = [c for c in pod_spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    total: dict[str, Decimal] = {}
    for container in [*(pod_spec.get("containers") or []), *sidecars]:
        limits = (container.get("resources") or {}).get("limits") or {}
        _add(total, {name: Decimal(parse_quantity(value)) for name, value in limits.items()})
    return total


def workers(objects: Iterable[Mapping]) -> Iterator[Worker]:
    """The pod templates of a rendered manifest's JobSet or Job, with their pod counts."""
    for obj in objects:
        if obj.get("kind") == "JobSet":
            for rjob in (obj.get("spec") or {}).get("replicatedJobs") or []:
                job = (rjob.get("template") or {}).get("spec") or {}
                yield _worker(rjob.get("name", "?"), int(rjob.get("replicas", 1)), job)
        elif obj.get("kind") == "Job":
            yield _worker(obj["metadata"]["name"], 1, obj.get("spec") or {})


def gcsfuse_sidecars(pod_template: Mapping) -> dict[str, dict[str, Decimal]]:
    """The containers the GCS FUSE CSI driver's webhook will add to pods of this template, with
    their requests (see the module docstring): its sidecar, and its metadata-prefetch sidecar
    when a volume sets ``gcsfuseMetadataPrefetchOnMount`` (pkg/webhook/mutatingwebhook.go,
    injection.go); none when the template asks for no injection, and not one the template
    names itself (then its own resources count)."""
    annotations = (pod_template.get("metadata") or {}).get("annotations") or {}
    pod = pod_template.get("spec") or {}
    named = {c.get("name") for c in [*(pod.get("containers") or []), *(pod.get("initContainers") or [])]}
    if str(annotations.get(_GCSFUSE_INJECTION, "")).lower() != "true":
        return {}
    wanted = [GCSFUSE_SIDECAR] + ([GCSFUSE_METADATA_PREFETCH_SIDECAR] if _prefetches_metadata(pod) else [])
    return {
        sidecar: {
            name: Decimal(value.numerator) / Decimal(value.denominator)
            for name, value in gcsfuse_sidecar_requests(annotations, sidecar).items()
        }
        for sidecar in wanted
        if sidecar not in named
    }


def _prefetches_metadata(pod: Mapping) -> bool:
    """A CSI volume of the pod asks for metadata prefetch (the attribute is read with Go's
    strconv.ParseBool: pkg/webhook/sidecar_spec.go, parseMetadataPrefetchStringAndAppendVolume)."""
    return any(
        str(((v.get("csi") or {}).get("volumeAttributes") or {}).get(_METADATA_PREFETCH, "")) in _GO_TRUE
        for v in pod.get("volumes") or []
    )


def _worker(name: str, replicas: int, job: Mapping) -> Worker:
    template = job.get("template") or {}
    pod = template.get("spec") or {}
    sidecars = gcsfuse_sidecars(template)
    if sidecars:
        # The webhook puts its sidecars first among the init containers, as native sidecars
        # (restartPolicy: Always) on Kubernetes 1.29+, else among the containers: either way
        # their requests add to the pod's (pkg/webhook/mutatingwebhook.go).
        injected = [
            {"name": n, "restartPolicy": "Always", "resources": {"requests": {k: str(v) for k, v in r.items()}}}
            for n, r in sidecars.items()
        ]
        pod = {**pod, "initContainers": [*injected, *(pod.get("initContainers") or [])]}
    total: dict[str, Decimal] = {}
    for asked in sidecars.values():
        _add(total, asked)
    return Worker(
        job=name,
        pods=replicas * int(job.get("parallelism", 1)),
        selector=dict(pod.get("nodeSelector") or {}),
        tolerations=list(pod.get("tolerations") or []),
        requests=pod_requests(pod),
        sidecar=total,
        sidecars=tuple(sidecars),
        limits=pod_limits(pod),
    )


def tolerated(taint: Mapping, tolerations: Iterable[Mapping]) -> bool:
    """Whether one of ``tolerations`` tolerates ``taint`` (key, value, effect; an empty key
    with ``Exists`` tolerates everything, an empty effect every effect)."""
    for toleration in tolerations:
        if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
            continue
        if toleration.get("operator", "Equal") == "Exists":
            if not toleration.get("key") or toleration["key"] == taint.get("key"):
                return True
        elif toleration.get("key") == taint.get("key") and (toleration.get("value") or "") == (
            taint.get("value") or ""
        ):
            return True
    return False


def _labels(node: Mapping) -> Mapping[str, str]:
    return (node.get("metadata") or {}).get("labels") or {}


def _untolerated(node: Mapping, worker: Worker) -> list[Mapping]:
    return [
        t
        for t in (node.get("spec") or {}).get("taints") or []
        if t.get("effect") in ("NoSchedule", "NoExecute")
        and not str(t.get("key", "")).startswith(_TRANSIENT_TAINTS)
        and not tolerated(t, worker.tolerations)
    ]


def _shortfall(node: Mapping, worker: Worker) -> dict[str, tuple[Decimal, Decimal]]:
    """resource -> (requested, allocatable) for each resource the node has too little of."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    short = {}
    for name, wanted in worker.requests.items():
        have = Decimal(parse_quantity(allocatable[name])) if name in allocatable else Decimal(0)
        if wanted > have:
            short[name] = (wanted, have)
    return short


def _reporting(node: Mapping, worker: Worker) -> bool:
    """Whether the node reports each extended resource the worker asks for (``google.com/tpu``,
    ``nvidia.com/gpu``): a device plugin advertises them only once it runs on the node, so a
    node that has just joined shows none yet (https://kubernetes.io/docs/concepts/extend-kubernetes/
    compute-storage-net/device-plugins/)."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    return all(
        name in allocatable and Decimal(parse_quantity(allocatable[name])) > 0
        for name in worker.requests
        if "/" in name
    )


def _holds(node: Mapping, worker: Worker) -> int:
    """How many of the worker's pods one empty node holds (by allocatable)."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    counts = [
        int(Decimal(parse_quantity(allocatable[name])) // wanted)
        for name, wanted in worker.requests.items()
        if name in allocatable
    ]
    return min(counts, default=worker.pods)


def amount(name: str, value: Decimal) -> str:
    """A resource amount as people read it: ``180Gi``, ``256Mi`` below 1Gi (memory, storage),
    ``7910m`` (cpu), ``4`` (a count)."""
    if name in _BYTES:
        if 0 < value < 2**30:  # 256Mi, not 0.2Gi
            return f"{value / Decimal(2**20):.1f}".removesuffix(".0") + "Mi"
        gib = value / Decimal(2**30)
        return f"{gib:.1f}".removesuffix(".0") + "Gi"
    if name == "cpu" and value != value.to_integral_value():
        return f"{int(value * 1000)}m"
    return f"{value.normalize():f}"


def _pool(node: Mapping) -> str:
    labels = _labels(node)
    if NODE_POOL_LABEL in labels:
        return f"node pool {labels[NODE_POOL_LABEL]}"
    return f"node {(node.get('metadata') or {}).get('name', '?')}"


def _auto_creates_pools(nodes: Sequence[Mapping]) -> bool:
    """Whether the cluster shows that it makes node pools itself: Autopilot (node names
    ``gk3-...``) or GKE node auto-provisioning (pools ``nap-...``)."""
    return any(
        str((n.get("metadata") or {}).get("name", "")).startswith("gk3-")
        or str(_labels(n).get(NODE_POOL_LABEL, "")).startswith("nap-")
        for n in nodes
    )


def _describe(worker: Worker) -> str:
    asked = ", ".join(f"{name} {amount(name, value)}" for name, value in sorted(worker.requests.items()))
    if worker.sidecar:
        sidecar = ", ".join(f"{name} {amount(name, value)}" for name, value in sorted(worker.sidecar.items()))
        whose = (
            "the GCS FUSE sidecar's"
            if len(worker.sidecars) < 2
            else f"the GCS FUSE sidecars' ({', '.join(worker.sidecars)})"
        )
        asked += f"; {whose} {sidecar} included"
    return f"a worker of {worker.job} ({asked or 'no requests'})"


def _fix(short: Mapping[str, tuple[Decimal, Decimal]], sidecar: Mapping[str, Decimal]) -> str:
    """What to lower: the worker's own request to what the node leaves it beside the sidecar."""
    lower = [
        f"{_SPEC_FIELD.get(name, name)} to {amount(name, max(have - sidecar.get(name, Decimal(0)), Decimal(0)))} or less"
        for name, (_, have) in sorted(short.items())
    ]
    return f"lower {', '.join(lower)}, or use a node pool of a larger machine type"


def _check_machine(worker: Worker, selector: str) -> None:
    """With no node to compare, the worker's cpu and memory against the whole machine of its
    node selector (:mod:`roxxel_launch.machines`): a pool that scales from zero brings only
    nodes of that type. Raises: BackendError naming the numbers and the fix."""
    machine = machine_for(worker.selector, worker.requests)
    if machine is None:
        return
    capacity = machine.capacity()
    over = {
        name: (worker.requests[name], have) for name, have in capacity.items() if worker.requests.get(name, 0) > have
    }
    if not over:
        return
    fix = _fix(over, worker.sidecar)
    why = "; ".join(
        f"{name} {amount(name, want)} > the machine's {amount(name, have)}" for name, (want, have) in over.items()
    )
    raise BackendError(
        f"{_describe(worker)} asks for more than a whole {machine.name} host has ({machine.vcpus} vCPUs, "
        f"{machine.memory_gib} GiB, {machine.accelerators} accelerators), the machine type of its node selector "
        f"{selector}: {why}. No node of such a pool can hold it, even once the pool scales up from zero. "
        f"Nothing was created. {fix[0].upper()}{fix[1:]} (GKE keeps part of each machine for its daemons: "
        "leave it about a tenth)."
    )


def check_fit(api: KubernetesApi, objects: Sequence[Mapping]) -> None:
    """Compares the manifest's workers with the cluster's nodes (see the module docstring).

    Skipped, with one warning line, when listing nodes is forbidden. Raises: BackendError
    naming the worker, the node pool, the shortfall and the fix when no matching node can
    hold a worker; other errors of the node list as :meth:`KubernetesApi.list_nodes` does.
    """
    try:
        nodes = api.list_nodes()
    except BackendError as err:
        if getattr(err.__cause__, "status", None) != 403:
            raise
        logger.warning(
            "cannot list nodes (forbidden), so the fit check is skipped: grant `list nodes` "
            "(ClusterRole roxxel-launch-list-nodes in k8s/rbac/roxxel-launch-role.yaml) or "
            "pass %s",
            SKIP_HINT,
        )
        return
    for worker in workers(objects):
        _check_worker(worker, nodes)


def _check_worker(worker: Worker, nodes: Sequence[Mapping]) -> None:
    selector = ",".join(f"{k}={v}" for k, v in sorted(worker.selector.items())) or "(none)"
    matching = [
        n
        for n in nodes
        if all(_labels(n).get(k) == v for k, v in worker.selector.items()) and not _untolerated(n, worker)
    ]
    if not matching:
        _check_machine(worker, selector)
        logger.warning(
            "no node of the cluster matches %s (node selector %s, its tolerations): its pods stay "
            "Pending unless a node pool scaled to zero, or auto-created, brings such nodes (check: "
            "gcloud container node-pools list)",
            _describe(worker),
            selector,
        )
        return
    reporting = [n for n in matching if _reporting(n, worker)]
    if not reporting:
        logger.warning(
            "%s: no node matching it reports its accelerators yet (%s in %s; a device plugin still "
            "starting?), so whether one can hold it is not known",
            _describe(worker),
            count(len(matching), "node"),
            ", ".join(sorted({_pool(n) for n in matching})),
        )
        return
    shortfalls = {id(n): _shortfall(n, worker) for n in reporting}
    fitting = [n for n in reporting if not shortfalls[id(n)]]
    if not fitting:
        closest = min(reporting, key=lambda n: len(shortfalls[id(n)]))
        short = shortfalls[id(closest)]
        machine = _labels(closest).get(INSTANCE_TYPE_LABEL)
        pools = sorted({_pool(n) for n in reporting})
        why = "; ".join(
            f"{name} {amount(name, want)} > allocatable {amount(name, have)}"
            for name, (want, have) in sorted(short.items())
        )
        where = f"{', '.join(pools)}{f', {machine}' if machine else ''}"
        if _auto_creates_pools(nodes):
            logger.warning(
                "%s fits no node that matches it (%s): %s; the cluster creates node pools "
                "itself, so one may be made for it",
                _describe(worker),
                where,
                why,
            )
            return
        fix = _fix(short, worker.sidecar)
        raise BackendError(
            f"{_describe(worker)} fits no node that matches it ({where}): {why}. Nothing was created. "
            f"{fix[0].upper()}{fix[1:]}; if a node pool this cluster does not show yet (scaled to "
            f"zero) can hold it, pass {SKIP_HINT}."
        )
    room = sum(_holds(n, worker) for n in fitting)
    if room < worker.pods:
        logger.warning(
            "%s: the %s that can hold one (%s) hold %d of its %s; the rest stay Pending until the "
            "cluster autoscaler adds nodes (if the node pool may grow)",
            _describe(worker),
            count(len(fitting), "node"),
            ", ".join(sorted({_pool(n) for n in fitting})),
            room,
            count(worker.pods, "pod"),
        )
