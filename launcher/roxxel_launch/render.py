"""Renders a JobSpec into Kubernetes manifests: a JobSet, or an Indexed Job + headless Service.

Python decides every value (:func:`template_values`); the jinja2 templates in ``templates/`` only
place them. Each value reaches the text through the ``q`` filter, which writes it as JSON
(valid YAML) with every character that YAML could read as structure, a line break or
non-printable escaped, so no string can change the shape of the output. The environment's
``finalize`` hook refuses any ``{{ ... }}`` that did not go through ``q``.

What an Indexed Job (``workload: indexed-job``) cannot do that a JobSet does: it has no
gang restart. Its podFailurePolicy fails the whole Job on a preemption (reason
``PodFailurePolicy``) or on any other failure (``backoffLimit: 0``) because a single
re-created pod cannot rejoin a running JAX cluster; restarting is then up to
``roxxel-launch resume``, and ``max_restarts`` does not apply. It also runs one slice only
(no multislice, no exclusive-topology placement) and needs its own headless Service.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.resources
import json
import logging
import math
import pathlib
import re
from collections.abc import Mapping
from typing import Any

import jinja2
import yaml

from roxxel.contract import PREEMPTION_FILE
from roxxel_launch import contract, gpu_networking, patch
from roxxel_launch.spec import (
    DEFAULT_NODE_EPHEMERAL_STORAGE,
    EPHEMERAL_STORAGE,
    GPU_RESOURCE,
    PRIORITY_CLASS_LABEL,
    QUEUE_LABEL,
    REPLICATED_JOB_NAME,
    TPU_RESOURCE,
    JobSpec,
    ObjectMetadata,
    SpecError,
    accelerator_node_selectors,
    image_is_pinned,
    parse_quantity,
    spec_to_dict,
)

# The level a pod template is written for (security.profile): validation reads it to tell a
# chosen level from a control that something else breaks.
from roxxel_launch.validate import POD_SECURITY_ANNOTATION

logger = logging.getLogger(__name__)

TEMPLATE_PACKAGE = "roxxel_launch.templates"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "roxxel-launch"
RUN_NAME_LABEL = "roxxel.dev/run-name"
JOB_LABEL = "roxxel.dev/job"
SPEC_ANNOTATION = "roxxel.dev/spec"
EXCLUSIVE_TOPOLOGY_ANNOTATION = "alpha.jobset.sigs.k8s.io/exclusive-topology"
NODEPOOL_LABEL = "cloud.google.com/gke-nodepool"
GCSFUSE_ANNOTATION = "gke-gcsfuse/volumes"
GCSFUSE_DRIVER = "gcsfuse.csi.storage.gke.io"
GCSFUSE_LIMIT_ANNOTATIONS = {
    "cpu": "gke-gcsfuse/cpu-limit",
    "memory": "gke-gcsfuse/memory-limit",
    "ephemeral_storage": "gke-gcsfuse/ephemeral-storage-limit",
}
# The volume name the GCS FUSE driver's sidecar uses for its file cache when present.
GCSFUSE_CACHE_VOLUME = "gke-gcsfuse-cache"
DEFAULT_CONTAINER_ANNOTATION = "kubectl.kubernetes.io/default-container"
DATA_VOLUME = "data"
SHM_VOLUME = "dshm"
# Kubernetes refuses an object whose annotations (keys + values) exceed 256 KiB in total
# (TotalAnnotationSizeLimitB in apimachinery's ValidateAnnotations).
MAX_ANNOTATIONS_BYTES = 256 * 1024
# GKE's GPU nodes mount the NVIDIA driver's libraries here; images not built on a CUDA base
# image need it on the loader path (GKE "Run GPUs in GKE Standard node pools").
GKE_NVIDIA_LIB_DIR = "/usr/local/nvidia/lib64"
# GKE gives Spot / preemptible nodes about 30 s after the preemption notice.
SPOT_GRACE_SECONDS = 30
SPOT_SELECTORS = ("cloud.google.com/gke-spot", "cloud.google.com/gke-preemptible")
# GKE's GPU maintenance handler taints a node that is about to be terminated for host
# maintenance; Google's GPU recipes tolerate it (AI-Hypercomputer/gpu-recipes,
# src/helm-charts/a3mega/job/templates/workload-job.yaml).
IMPENDING_TERMINATION_TAINT = "cloud.google.com/impending-node-termination"
# A Job's failure message when podFailurePolicy rule 0 (exit code CONFIG_ERROR_EXIT_CODE)
# fails it, as the Job controller writes it: "Container worker for pod NS/POD failed with
# exit code 78 matching FailJob rule at index 0".
CONFIG_ERROR_MESSAGE_PATTERN = (
    f"failed with exit code {contract.CONFIG_ERROR_EXIT_CODE} matching FailJob rule at index 0"
)

# Characters written as-is inside a double-quoted scalar: printable ASCII except '"' and
# '\', and printable non-ASCII except YAML line breaks (U+2028/9), BOM and surrogates.
_NEEDS_ESCAPE = re.compile(
    r"[^\x20\x21\x23-\x5b\x5d-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd"
    r"\U00010000-\U0010ffff]"
)


class _Quoted(str):
    """Text produced by the ``q`` filter; the only kind of value a template may print."""


def _escape(match: re.Match) -> str:
    char = match.group()
    if char == '"':
        return '\\"'
    if char == "\\":
        return "\\\\"
    if "\ud800" <= char <= "\udfff":
        raise ValueError("a lone surrogate cannot be written to a manifest")
    return f"\\u{ord(char):04x}"


def quote(value: Any) -> _Quoted:
    """Writes a value as JSON flow text that YAML reads back as exactly that value."""
    if isinstance(value, str):
        return _Quoted('"' + _NEEDS_ESCAPE.sub(_escape, value) + '"')
    if value is None or isinstance(value, (bool, int)):
        return _Quoted(json.dumps(value))
    if isinstance(value, (list, tuple)):
        return _Quoted("[" + ", ".join(quote(v) for v in value) + "]")
    if isinstance(value, Mapping):
        return _Quoted("{" + ", ".join(f"{quote(k)}: {quote(v)}" for k, v in value.items()) + "}")
    raise TypeError(f"cannot place a {type(value).__name__} in a manifest: {value!r}")


def _finalize(value: Any) -> Any:
    if not isinstance(value, _Quoted):
        raise jinja2.TemplateError(f"template printed {value!r} without the q filter")
    return value


def _nest(text: str, width: int) -> str:
    pad = " " * width
    return "".join(pad + line if line.strip() else line for line in text.splitlines(True))


def _load_template(name: str) -> str:
    return importlib.resources.files(TEMPLATE_PACKAGE).joinpath(name).read_text(encoding="utf-8")


@functools.cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(_load_template),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        finalize=_finalize,
    )
    env.filters["q"] = quote
    env.filters["nest"] = _nest
    return env


@dataclasses.dataclass(frozen=True)
class Rendered:
    """Rendered manifests: the YAML text (for ``kubectl apply -f -``) and the parsed objects."""

    objects: tuple[dict, ...]
    yaml: str


def _literal(text: str) -> str:
    # Kubernetes expands $(VAR) in command, args and env values; $$ is its escape for '$'.
    return text.replace("$", "$$")


def _data_volume(spec: JobSpec) -> dict | None:
    data = spec.data
    if data is None:
        return None
    if data.gcsfuse is not None:
        return {
            "name": DATA_VOLUME,
            "csi": {
                "driver": GCSFUSE_DRIVER,
                "readOnly": True,
                "volumeAttributes": data.gcsfuse.volume_attributes(spec.uses_host_network),
            },
        }
    if data.nfs is not None:
        return {"name": DATA_VOLUME, "nfs": {"server": data.nfs.server, "path": data.nfs.path, "readOnly": True}}
    if data.pvc is None:
        raise ValueError("data: none of gcsfuse, nfs and pvc is set")
    return {"name": DATA_VOLUME, "persistentVolumeClaim": {"claimName": data.pvc.claim, "readOnly": True}}


def _gcsfuse_extras(spec: JobSpec) -> tuple[dict[str, str], list[dict]]:
    """The sidecar's annotations (injection + explicit limits) and its cache volume, if any."""
    fuse = spec.data.gcsfuse if spec.data is not None else None
    if fuse is None:
        return {}, []
    annotations = {
        GCSFUSE_ANNOTATION: "true",
        GCSFUSE_LIMIT_ANNOTATIONS["cpu"]: fuse.sidecar_cpu_limit,
        GCSFUSE_LIMIT_ANNOTATIONS["memory"]: fuse.sidecar_memory_limit,
        GCSFUSE_LIMIT_ANNOTATIONS["ephemeral_storage"]: fuse.sidecar_ephemeral_storage_limit,
    }
    if fuse.file_cache_mb is None:
        return annotations, []
    # The cache volume holds the bounded cache plus gcsfuse's own bookkeeping: 10% headroom.
    empty_dir = {"sizeLimit": f"{fuse.cache_volume_mib}Mi"}
    if fuse.file_cache_medium == "memory":
        empty_dir["medium"] = "Memory"
    return annotations, [{"name": GCSFUSE_CACHE_VOLUME, "emptyDir": empty_dir}]


def _checkpoint_problem(spec: JobSpec) -> str | None:
    """A local checkpoint_dir is only durable on a pod if a writable extra volume backs it."""
    path = spec.checkpoint_dir
    if path is None or "://" in path:
        return None
    for volume in spec.volumes:
        root = volume.mount_path.rstrip("/")
        if (path == root or path.startswith(root + "/")) and not volume.read_only and volume.empty_dir is None:
            return None
    return (
        f"{path!r} is a local path, and no writable persistent volume (pvc or nfs in "
        "volumes, read_only: false) is mounted there: a pod's own file system is lost on "
        "every restart, and so would be the checkpoints"
    )


def _size_problem(annotations: Mapping[str, str]) -> str | None:
    size = sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items())
    if size > MAX_ANNOTATIONS_BYTES:
        return (
            f"the annotations take {size} bytes, more than the {MAX_ANNOTATIONS_BYTES} "
            f"Kubernetes allows (the whole spec is stored in {SPEC_ANNOTATION})"
        )
    return None


def _warn_spot(spec: JobSpec) -> None:
    spot = [k for k in SPOT_SELECTORS if spec.node_selectors.get(k) == "true"]
    if spot and spec.termination_grace_period > SPOT_GRACE_SECONDS:
        logger.warning(
            "%s: termination_grace_period is %d s but the pods target Spot / preemptible "
            "nodes (%s), which GKE stops about %d s after the notice: only the last "
            "periodic checkpoint is sure to survive; size the Trainer's save_interval_steps for it",
            spec.name,
            spec.termination_grace_period,
            spot[0],
            SPOT_GRACE_SECONDS,
        )


PREEMPTION_SAVE_MARGIN = 1.5
"""How much longer than the last measured preemption save the grace period should be (the
notice arrives up to one step before the agreed step, and storage varies)."""


def _warn_preemption_save(spec: JobSpec) -> None:
    """Warn when the last preemption save recorded in a local ``checkpoint_dir`` (by the
    training program's checkpointer: ``roxxel_preemption.json``) would not fit the grace period."""
    path = spec.checkpoint_dir
    if path is None or "://" in path:
        return
    try:
        record = json.loads((pathlib.Path(path) / PREEMPTION_FILE).read_text())
        took = float(record["save_s"])
        gib = float(record.get("state_bytes") or 0) / 2**30
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return  # none, or not a record the checkpointer wrote: nothing to compare with
    if not 0 <= took < 86400 or not math.isfinite(gib):
        return
    need = math.ceil(took * PREEMPTION_SAVE_MARGIN) + 10
    if spec.termination_grace_period < need:
        logger.warning(
            "%s: the last preemption save of this run took %.1f s (step %s, %.2f GiB on %s processes, "
            "%s); termination_grace_period is %d s: raise it to at least %d s, or a preemption's save is "
            "cut off by SIGKILL and the steps since the last periodic checkpoint are lost",
            spec.name,
            took,
            record.get("step"),
            gib,
            record.get("process_count"),
            record.get("at"),
            spec.termination_grace_period,
            need,
        )


def _warn_ephemeral_storage(spec: JobSpec) -> None:
    need = spec.ephemeral_storage_bytes
    if spec.node_ephemeral_storage is None and need > DEFAULT_NODE_EPHEMERAL_STORAGE:
        logger.warning(
            "%s: each pod needs %.1f GiB of node ephemeral storage (gcsfuse file cache "
            "and ephemeral-storage request) but a node with GKE's default 100 GB boot disk "
            "offers about %.1f GiB: the pods stay Pending there. Set node_ephemeral_storage "
            "to your nodes' allocatable (larger boot disk or local SSD), or lower file_cache_mb",
            spec.name,
            need / 2**30,
            DEFAULT_NODE_EPHEMERAL_STORAGE / 2**30,
        )


def _quantity(nbytes: int) -> str:
    return f"{nbytes // 2**20}Mi" if nbytes % 2**20 == 0 else str(nbytes)


def _container_resources(spec: JobSpec) -> tuple[dict[str, str], dict[str, str]]:
    """The worker's limits and requests: the spec's, the accelerator's, and the disk file
    cache added to ephemeral-storage. The scheduler places a pod by its containers' requests,
    and the kubelet evicts it when its emptyDirs and containers use more than the sum of their
    limits: the cache volume is counted in both (in the limit only when one is given)."""
    limits = {**spec.resources.limits, **_accelerator_limits(spec)}
    requests = {**spec.resources.requests, **_accelerator_limits(spec)}
    cache = spec.disk_cache_bytes
    if cache:
        own = requests.get(EPHEMERAL_STORAGE, limits.get(EPHEMERAL_STORAGE))
        requests[EPHEMERAL_STORAGE] = _quantity(cache + (0 if own is None else int(parse_quantity(own))))
        if EPHEMERAL_STORAGE in limits:
            limits[EPHEMERAL_STORAGE] = _quantity(cache + int(parse_quantity(limits[EPHEMERAL_STORAGE])))
    return limits, requests


def _accelerator_limits(spec: JobSpec) -> dict[str, str]:
    accelerator = spec.accelerator
    if accelerator.tpu is not None:
        return {TPU_RESOURCE: str(accelerator.tpu.slice.chips_per_host)}
    if accelerator.gpu is not None:
        return {GPU_RESOURCE: str(accelerator.gpu.count)}
    return {}


def _accelerator_tolerations(spec: JobSpec) -> list[dict]:
    resource = {"tpu": TPU_RESOURCE, "gpu": GPU_RESOURCE}.get(spec.accelerator.kind)
    if resource is None:
        return []
    tolerations = [{"key": resource, "operator": "Exists", "effect": "NoSchedule"}]
    if spec.accelerator.kind == "gpu":
        tolerations.append({"key": IMPENDING_TERMINATION_TAINT, "operator": "Exists"})
    return tolerations


def _tolerations(spec: JobSpec) -> list[dict]:
    """The accelerator's, the Spot / preemptible taint's when node_selectors ask for such
    nodes (GKE recommends tainting those pools ``KEY=true:NoSchedule``; a pod that selects
    them without tolerating the taint stays Pending), the queued-provisioning nodes' taint with
    ``queue_provisioning``, then the spec's; each once."""
    spot = [
        {"key": key, "operator": "Equal", "value": "true", "effect": "NoSchedule"}
        for key in SPOT_SELECTORS
        if spec.node_selectors.get(key) == "true"
    ]
    queued = spec.queue_provisioning.tolerations() if spec.queue_provisioning is not None else []
    out: list[dict] = []
    for toleration in _accelerator_tolerations(spec) + spot + queued + [t.to_k8s() for t in spec.tolerations]:
        if toleration not in out:
            out.append(toleration)
    return out


# ----------------------------------------------------------------------------- pod security


def image_pull_policy(image: str, override: str | None = None) -> str:
    """The container's imagePullPolicy: ``override`` (the spec's ``image_pull_policy``) if
    given; else Always for a tag (it can move: every pod must get what the tag names now) and
    IfNotPresent for a digest, which names one immutable image."""
    if override is not None:
        return override
    return "IfNotPresent" if image_is_pinned(image) else "Always"


def _pod_security_context(spec: JobSpec, profile: str) -> dict[str, Any]:
    user, group = spec.security.ids(profile)
    context: dict[str, Any] = {"runAsUser": user, "runAsGroup": group}
    if user != 0:
        context = {"runAsNonRoot": True, **context}
    if group != 0:
        # Group-writable volumes (a PVC for checkpoints); skip the recursive chown when
        # the volume's root already has the group, so large volumes mount fast.
        context.update(fsGroup=group, fsGroupChangePolicy="OnRootMismatch")
    context["seccompProfile"] = {"type": "RuntimeDefault"}
    return context


def _container_security_context(profile: str, capabilities: tuple[str, ...] = ()) -> dict[str, Any]:
    """The worker's securityContext; ``capabilities`` (a GPU networking preset's) are added
    under baseline (a privileged container has them all; the spec refuses them under restricted)."""
    if profile == "restricted":
        return {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}
    # baseline / privileged: the runtime's default capabilities and a writable root, as the
    # references run the container; the API server refuses allowPrivilegeEscalation: false
    # next to privileged: true, so neither profile sets it.
    context: dict[str, Any] = {"readOnlyRootFilesystem": False}
    if profile == "privileged":
        context["privileged"] = True
    elif capabilities:
        context["capabilities"] = {"add": list(capabilities)}
    return context


def _worker_command(spec: JobSpec, networking: gpu_networking.PodAdditions) -> list[str]:
    """The worker's command: roxxel-worker, or, for a GPU networking preset whose NCCL
    environment comes from a script, bash sourcing it first (the spec's env keeps its values)."""
    if networking.init_script is None:
        return list(contract.WORKER_ENTRYPOINT)
    keep = tuple(sorted({*spec.env, *spec.env_refs}))
    return [
        _literal(part)
        for part in gpu_networking.worker_command(networking.init_script, contract.WORKER_ENTRYPOINT, keep)
    ]


def _security_values(spec: JobSpec, capabilities: tuple[str, ...] = ()) -> dict[str, Any]:
    """Pod and container securityContext for the spec's Pod Security profile
    (kubernetes.io/docs/concepts/security/pod-security-standards; ``spec.security_profile``),
    restricted with a read-only root filesystem; the service-account token only when asked for."""
    profile = spec.security_profile
    return {
        "automount_service_account_token": spec.security.automount_service_account_token,
        "pod_security_context": _pod_security_context(spec, profile),
        "container_security_context": _container_security_context(profile, capabilities),
        "image_pull_policy": image_pull_policy(spec.image, spec.image_pull_policy),
    }


def _writable_dirs(spec: JobSpec) -> dict[str, list[dict]]:
    """emptyDir volumes, mounts and env for what the worker writes (contract.WRITABLE_DIRS).

    A variable the user sets already (``env`` or ``env_refs``) keeps the user's value."""
    out: dict[str, list[dict]] = {"volumes": [], "mounts": [], "env": []}
    for name, (path, variables) in contract.WRITABLE_DIRS.items():
        out["volumes"].append({"name": name, "emptyDir": {}})
        out["mounts"].append({"name": name, "mountPath": path})
        out["env"] += [
            {"name": key, "value": value}
            for key, value in variables.items()
            if key not in spec.env and key not in spec.env_refs
        ]
    return out


def _network_policy_ports(spec: JobSpec) -> list[dict]:
    """Ports the job's pods accept from each other; [] means every port.

    Single-slice TPU: the JAX coordinator and the TPU runtime's ports
    (contract.TPU_RUNTIME_PORTS). TPU multislice: every port, because libtpu's inter-slice
    (DCN, "megascale") transport is closed source and no published list names every port
    it opens; xpk and the JobSet TPU example run it on the host network, where no
    NetworkPolicy applies. GPU and CPU: every port, because NCCL (GPU) and Gloo (JAX's CPU
    collectives) listen on ephemeral ports. Either way only the job's own pods may connect.
    """
    if spec.accelerator.kind != "tpu" or spec.num_slices > 1:
        return []
    ports = [contract.DEFAULT_COORDINATOR_PORT, *contract.TPU_RUNTIME_PORTS.values()]
    return [{"protocol": "TCP", "port": port} for port in ports]


def _tpu_runtime_ports(spec: JobSpec) -> list[dict]:
    if spec.accelerator.kind != "tpu":
        return []
    return [{"name": name, "containerPort": port} for name, port in contract.TPU_RUNTIME_PORTS.items()]


# ----------------------------------------------------------------------------- values


def template_values(spec: JobSpec, *, cluster: bool = True) -> dict[str, Any]:
    """Every value the templates place, computed from a (valid) spec.

    Args:
        spec: the job.
        cluster: the manifests go to a cluster (not ``--local``): a local ``checkpoint_dir``
            then needs a writable persistent volume behind it.

    Raises:
        SpecError: the spec cannot run as manifests (annotations over Kubernetes' limit, a
            local checkpoint directory with nothing durable behind it on a cluster).
    """
    jobset = spec.workload == "jobset"
    if cluster:
        _check_spec(
            "checkpoint_dir",
            _checkpoint_problem(spec),
            "Write checkpoints to gs://BUCKET/PATH, or mount a pvc or nfs volume "
            "(read_only: false) under volumes and put checkpoint_dir inside it.",
        )
    _warn_spot(spec)
    _warn_preemption_save(spec)
    _warn_ephemeral_storage(spec)
    labels = {MANAGED_BY_LABEL: MANAGED_BY, RUN_NAME_LABEL: spec.run_name, **spec.labels}
    job_labels = dict(labels)
    # The job object's own labels (metadata.labels): not its pods', nor its child Jobs'.
    metadata = spec.metadata or ObjectMetadata()
    labels.update(metadata.labels)
    if spec.queue is not None:
        labels[QUEUE_LABEL] = spec.queue
    # Kueue reads the workload's priority from the job object's labels, never the pods'.
    if spec.workload_priority_class is not None:
        labels[PRIORITY_CLASS_LABEL] = spec.workload_priority_class
    # Kueue reads provreq.kueue.x-k8s.io/* (ProvisioningRequest parameters) from the job object.
    provisioning = spec.queue_provisioning.job_annotations() if spec.queue_provisioning is not None else {}
    annotations = {
        **metadata.annotations,
        **provisioning,
        SPEC_ANNOTATION: json.dumps(spec_to_dict(spec), sort_keys=True, separators=(",", ":")),
    }
    if jobset and spec.accelerator.kind == "tpu" and spec.hosts_per_slice > 1:
        annotations[EXCLUSIVE_TOPOLOGY_ANNOTATION] = NODEPOOL_LABEL
    _check_spec(
        "",
        _size_problem(annotations),
        "Make the spec smaller (move large values into a ConfigMap and read them with env_from).",
    )
    # JOB_LABEL selects the job's pods: the Service of an indexed job, the NetworkPolicy.
    # The user's labels come first and cannot replace ours (their prefixes are refused).
    pod_labels = {**spec.labels, RUN_NAME_LABEL: spec.run_name, JOB_LABEL: spec.name}
    fuse_annotations, fuse_volumes = _gcsfuse_extras(spec)
    if fuse_annotations:
        if spec.service_account is None:
            logger.warning(
                "%s: no service_account; reading a bucket through GCS FUSE usually "
                "needs one bound to a cloud identity (Workload Identity)",
                spec.name,
            )

    if jobset:
        distributed = contract.jobset_env(
            subdomain=spec.name,
            hosts_per_slice=spec.hosts_per_slice,
            num_slices=spec.num_slices,
            max_restart_attempt=spec.max_restarts + spec.max_preemptions,
        )
    else:
        distributed = contract.indexed_job_env(
            job_name=spec.name, service_name=spec.name, num_processes=spec.num_processes
        )
    data_volume = _data_volume(spec)
    run = contract.run_env(
        run_name=spec.run_name or spec.name,
        checkpoint_dir=spec.checkpoint_dir,
        data_dir=contract.DATA_MOUNT_PATH if data_volume else None,
        termination_grace_s=spec.termination_grace_period,
        restore_from=spec.restore_from,
        watchdog=spec.watchdog.env_value(),
    )
    env = [var.to_k8s() for var in (*distributed, *run)]
    for var in env:
        if "value" in var:
            var["value"] = _literal(var["value"])
    env += [{"name": key, "value": _literal(value)} for key, value in spec.env.items()]
    env += [{"name": key, "valueFrom": ref.to_k8s()} for key, ref in spec.env_refs.items()]
    writable = _writable_dirs(spec)
    env += writable["env"]
    gpu = spec.accelerator.gpu
    networking = (
        gpu_networking.pod_additions(
            gpu.networking or "none", gpu.network_names, gpu.daemon_image, host_network=spec.uses_host_network
        )
        if gpu is not None
        else gpu_networking.PodAdditions()
    )
    _check_spec(
        "env",
        next(
            (
                f"{key} is set by accelerator.gpu.networking"
                for key in networking.env
                if key != "LD_LIBRARY_PATH" and (key in spec.env or key in spec.env_refs)
            ),
            None,
        ),
        "Remove it.",
    )
    env += [{"name": key, "value": value} for key, value in networking.env.items() if key != "LD_LIBRARY_PATH"]
    # The preset's recommended NCCL settings, unless the spec sets the variable itself.
    env += [
        {"name": key, "value": value}
        for key, value in networking.tuning.items()
        if key not in spec.env and key not in spec.env_refs
    ]
    # GPU: the driver's libraries on the loader path, unless the user sets it (an env_refs
    # value is read from a Secret or ConfigMap: nothing to check here).
    if spec.accelerator.kind == "gpu" and "LD_LIBRARY_PATH" not in spec.env_refs:
        library_path = spec.env.get("LD_LIBRARY_PATH")
        if library_path is None:
            env.append({"name": "LD_LIBRARY_PATH", "value": networking.env.get("LD_LIBRARY_PATH", GKE_NVIDIA_LIB_DIR)})
        elif GKE_NVIDIA_LIB_DIR not in library_path.split(":"):
            logger.warning(
                "%s: env LD_LIBRARY_PATH does not include %s, where GKE mounts the "
                "NVIDIA driver's libraries: JAX may not find CUDA",
                spec.name,
                GKE_NVIDIA_LIB_DIR,
            )

    pod_annotations = {
        DEFAULT_CONTAINER_ANNOTATION: contract.CONTAINER_NAME,
        POD_SECURITY_ANNOTATION: spec.security_profile,
        **fuse_annotations,
        **networking.annotations,
        **spec.annotations,
    }
    # Kueue's topology-aware scheduling reads the pod template's annotations (its PodSet).
    if spec.topology is not None:
        pod_annotations.update(spec.topology.pod_annotations())
    _check_spec("annotations", _size_problem(pod_annotations))
    limits, requests = _container_resources(spec)
    volumes = [{"name": SHM_VOLUME, "emptyDir": {"medium": "Memory"}}]
    mounts: list[dict[str, Any]] = [{"name": SHM_VOLUME, "mountPath": contract.SHM_MOUNT_PATH}]
    if data_volume is not None:
        volumes.append(data_volume)
        mounts.append({"name": DATA_VOLUME, "mountPath": contract.DATA_MOUNT_PATH, "readOnly": True})
    volumes += fuse_volumes + networking.volumes
    mounts += networking.mounts
    for extra in spec.volumes:
        volume, mount = extra.to_k8s()
        volumes.append(volume)
        mounts.append(mount)

    return {
        "name": spec.name,
        "namespace": spec.namespace,
        "labels": labels,
        "job_labels": job_labels,
        "annotations": annotations,
        "subdomain": spec.name,
        "service_name": spec.name,
        "pod_selector": {JOB_LABEL: spec.name},
        "replicated_job_name": REPLICATED_JOB_NAME,
        "num_slices": spec.num_slices,
        "hosts_per_slice": spec.hosts_per_slice,
        "max_restarts": spec.max_restarts,
        "preemption_exit_code": contract.PREEMPTED_EXIT_CODE,
        "config_error_exit_code": contract.CONFIG_ERROR_EXIT_CODE,
        "config_error_message_pattern": CONFIG_ERROR_MESSAGE_PATTERN,
        "jobset_ttl": spec.ttl_seconds_after_finished if jobset else None,
        "job_ttl": None if jobset else spec.ttl_seconds_after_finished,
        "host_network": spec.uses_host_network,
        "image_pull_secrets": [{"name": n} for n in spec.image_pull_secrets],
        "env_from": [source.to_k8s() for source in spec.env_from],
        "affinity": None if spec.affinity is None else dict(spec.affinity),
        "pod_template": None,
        "container_name": contract.CONTAINER_NAME,
        "coordinator_port": contract.DEFAULT_COORDINATOR_PORT,
        "tpu_runtime_ports": _tpu_runtime_ports(spec),
        "pod_labels": pod_labels,
        "pod_annotations": pod_annotations,
        # The JobSet controller sets the pods' subdomain itself; a bare Job needs it here.
        "pod_subdomain": None if jobset else spec.name,
        "termination_grace_period": spec.termination_grace_period,
        "service_account": spec.service_account,
        "priority_class": spec.priority_class,
        "node_selector": {
            **accelerator_node_selectors(spec.accelerator),
            **spec.node_selectors,
            **(spec.queue_provisioning.node_selectors() if spec.queue_provisioning else {}),
        },
        "tolerations": _tolerations(spec),
        "image": spec.image,
        "command": _worker_command(spec, networking),
        "args": [_literal(item) for item in spec.command],
        "env": env,
        "limits": limits,
        "requests": requests,
        "volumes": volumes,
        "volume_mounts": mounts,
        "init_containers": networking.init_containers,
        **_security_values(spec, networking.capabilities),
        "writable_volumes": writable["volumes"],
        "writable_mounts": writable["mounts"],
        "network_policy_ports": _network_policy_ports(spec),
    }


def _parse(text: str) -> tuple[dict, ...]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return tuple(doc for doc in yaml.load_all(text, Loader=loader) if doc is not None)


def _check_spec(field: str, problem: str | None, fix: str = "") -> None:
    if problem:
        raise SpecError(field, problem, fix)


def render(spec: JobSpec, *, cluster: bool = True) -> Rendered:
    """Renders the manifests of a job, in creation order: [NetworkPolicy, JobSet] or
    [Service, NetworkPolicy, Job] (no NetworkPolicy with ``security.network_policy: false``).

    The NetworkPolicy comes before the pods' owner so that no pod ever runs unprotected.

    Args:
        spec: the job.
        cluster: see :func:`template_values` (False for ``--local`` dress rehearsals).

    Raises:
        SpecError: see :func:`template_values`; a ``pod_patch`` that is not a valid patch.
    """
    values = template_values(spec, cluster=cluster)
    env = _environment()
    if spec.pod_patch is not None:
        # The pod template as rendered, patched, then placed whole through the q filter.
        pod = yaml.safe_load(env.get_template("_pod.yaml.j2").render(values))
        try:
            values["pod_template"] = patch.strategic_merge(pod, spec.pod_patch)
        except ValueError as err:
            raise SpecError("pod_patch", str(err)) from err
    parts = []
    if spec.workload == "indexed-job":
        parts.append("service.yaml.j2")
    if spec.security.network_policy:
        parts.append("networkpolicy.yaml.j2")
    parts.append("jobset.yaml.j2" if spec.workload == "jobset" else "indexed-job.yaml.j2")
    text = "---\n".join(env.get_template(name).render(values) for name in parts)
    logger.debug("rendered %s %s/%s", spec.workload, spec.namespace, spec.name)
    return Rendered(objects=_parse(text), yaml=text)
