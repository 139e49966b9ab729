"""The versioned job spec (``roxxel.dev/v1alpha1``, kind ``RoxxelJob``).

A job spec is a YAML file plus ``--set key.path=value`` overrides. It is parsed and
validated once, here, into frozen dataclasses; rendering and the backends trust it. Every
error is a :class:`SpecError` that names the field (``accelerator.tpu.topology``), says what
is wrong with the value and how to fix it.

The dataclasses are also the schema: :func:`spec_schema` turns their type hints and field
docs into a JSON-schema-like dict from which reference docs can be generated.

Example::

    apiVersion: roxxel.dev/v1alpha1
    kind: RoxxelJob
    name: lm-small
    image: us-docker.pkg.dev/my-proj/roxxel/worker:tpu
    command: [python, examples/lm/train.py, --steps, "2000", "1000"]
    accelerator:
      tpu: {type: v5p, topology: 4x4x4}
    num_slices: 2
    data:
      gcsfuse: {bucket: my-data, only_dir: shards/v1}
    checkpoint_dir: gs://my-ckpt/lm-small
    service_account: roxxel-trainer
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import difflib
import re
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Union

import yaml

from roxxel_launch import contract, names, tpu

API_VERSION = "roxxel.dev/v1alpha1"
KIND = "RoxxelJob"
DEFAULT_GCSFUSE_MOUNT_OPTIONS = ("implicit-dirs", "file-cache:max-size-mb:-1")

# Resource names the accelerator block owns; users may not set them in `resources`.
TPU_RESOURCE = "google.com/tpu"
GPU_RESOURCE = "nvidia.com/gpu"
TPU_ACCELERATOR_SELECTOR = "cloud.google.com/gke-tpu-accelerator"
TPU_TOPOLOGY_SELECTOR = "cloud.google.com/gke-tpu-topology"
GPU_ACCELERATOR_SELECTOR = "cloud.google.com/gke-accelerator"

_QUANTITY = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d+)?")
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-/:@+]*")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_BUCKET = re.compile(r"[a-z0-9][a-z0-9_.\-]{1,220}[a-z0-9]")
_BAD_TEXT = re.compile(r"[\x00\ud800-\udfff]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.\-]*[A-Za-z0-9])?|[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*")


class SpecError(ValueError):
    """An invalid job spec. ``field`` is the dotted path of the offending field."""

    def __init__(self, field: str, problem: str, fix: str = ""):
        self.field = field
        self.problem = problem
        self.fix = fix
        message = f"{field}: {problem}" if field else problem
        super().__init__(f"{message}. {fix}" if fix else message)


@contextlib.contextmanager
def _within(prefix: str):
    """Prefixes the field path of a SpecError raised inside a nested spec object."""
    try:
        yield
    except SpecError as err:
        if not prefix:
            raise
        field = f"{prefix}.{err.field}" if err.field else prefix
        raise SpecError(field, err.problem, err.fix) from err


def _doc(text: str, **kwargs) -> Any:
    return dataclasses.field(metadata={"doc": text, **kwargs.pop("metadata", {})}, **kwargs)


def _check(field: str, problem: str | None, fix: str = "") -> None:
    if problem:
        raise SpecError(field, problem, fix)


def _freeze(mapping: Mapping) -> Mapping:
    return types.MappingProxyType(dict(mapping))


# ----------------------------------------------------------------------------- accelerators


@dataclasses.dataclass(frozen=True)
class TpuAccelerator:
    """A Cloud TPU slice on GKE; the number of hosts follows from the topology."""

    type: str = _doc("TPU generation: " + ", ".join(tpu.TPU_TYPES) + ".")
    topology: str = _doc("Chip topology of one slice, e.g. 4x4 (v5e/v6e) or 2x2x4 (v4/v5p).")

    def __post_init__(self):
        if self.type not in tpu.TPU_TYPES:
            raise SpecError("type", f"unknown TPU type {self.type!r}",
                            f"Use one of {', '.join(tpu.TPU_TYPES)}.")
        try:
            tpu.tpu_slice(self.type, self.topology)
        except ValueError as err:
            raise SpecError("topology", str(err)) from err

    @property
    def slice(self) -> tpu.TpuSlice:
        return tpu.tpu_slice(self.type, self.topology)


@dataclasses.dataclass(frozen=True)
class GpuAccelerator:
    """NVIDIA GPU hosts on GKE: ``count`` GPUs on each of ``hosts`` hosts."""

    type: str = _doc("Value of the cloud.google.com/gke-accelerator node label, e.g. nvidia-h100-80gb.")
    count: int = _doc("GPUs per host (nvidia.com/gpu limit).")
    hosts: int = _doc("Hosts (pods) per slice.", default=1)

    def __post_init__(self):
        _check("type", names.label_value_problem(self.type) or (None if self.type else "must not be empty"))
        if not 1 <= self.count <= 16:
            raise SpecError("count", f"must be between 1 and 16 GPUs per host, got {self.count}")
        if self.hosts < 1:
            raise SpecError("hosts", f"must be at least 1, got {self.hosts}")


@dataclasses.dataclass(frozen=True)
class CpuAccelerator:
    """CPU-only hosts (tests, small jobs); size them with ``resources``."""

    hosts: int = _doc("Hosts (pods) per slice.", default=1)

    def __post_init__(self):
        if self.hosts < 1:
            raise SpecError("hosts", f"must be at least 1, got {self.hosts}")


@dataclasses.dataclass(frozen=True)
class Accelerator:
    """Exactly one of ``tpu``, ``gpu`` or ``cpu`` (the string ``cpu`` means one CPU host)."""

    tpu: TpuAccelerator | None = _doc("A TPU slice.", default=None)
    gpu: GpuAccelerator | None = _doc("GPU hosts.", default=None)
    cpu: CpuAccelerator | None = _doc("CPU hosts.", default=None)

    def __post_init__(self):
        given = [n for n in ("tpu", "gpu", "cpu") if getattr(self, n) is not None]
        if len(given) != 1:
            raise SpecError("", f"give exactly one of tpu, gpu, cpu (got {', '.join(given) or 'none'})",
                            "For example accelerator: {tpu: {type: v5p, topology: 2x2x2}}.")

    @classmethod
    def _coerce(cls, data: Any) -> Any:
        if data == "cpu":
            return {"cpu": {}}
        return data

    @property
    def kind(self) -> str:
        return "tpu" if self.tpu else "gpu" if self.gpu else "cpu"

    @property
    def hosts_per_slice(self) -> int:
        if self.tpu is not None:
            return self.tpu.slice.hosts
        accelerator = self.gpu or self.cpu
        if accelerator is None:
            raise ValueError("the spec names no accelerator (tpu, gpu or cpu)")
        return accelerator.hosts


# ----------------------------------------------------------------------------- data mounts


@dataclasses.dataclass(frozen=True)
class GcsFuseMount:
    """A GCS bucket mounted read-only through the GKE GCS FUSE CSI driver."""

    bucket: str = _doc("Bucket name (without gs://).")
    only_dir: str | None = _doc("Mount only this directory of the bucket.", default=None)
    mount_options: tuple[str, ...] = _doc(
        "gcsfuse mount options, joined with commas.", default=DEFAULT_GCSFUSE_MOUNT_OPTIONS)

    def __post_init__(self):
        if not _BUCKET.fullmatch(self.bucket):
            raise SpecError("bucket", f"{self.bucket!r} is not a GCS bucket name",
                            "Give the bare bucket name, e.g. my-data (no gs://, no path).")
        if self.only_dir is not None and (
                not self.only_dir or "," in self.only_dir or _CONTROL.search(self.only_dir)):
            raise SpecError("only_dir", f"{self.only_dir!r} must be non-empty, with no ',' and "
                            "no control characters", "A comma would start another mount option.")
        for i, option in enumerate(self.mount_options):
            if not option or "," in option or _CONTROL.search(option):
                raise SpecError(f"mount_options[{i}]", f"{option!r} must be non-empty, with no ',' "
                                "and no control characters", "Give one option per list item.")

    def joined_options(self) -> str:
        options = list(self.mount_options)
        if self.only_dir is not None:
            options.append(f"only-dir:{self.only_dir}")
        return ",".join(options)


@dataclasses.dataclass(frozen=True)
class NfsMount:
    """An NFS export (e.g. Filestore) mounted read-only."""

    server: str = _doc("NFS server host name or IP address.")
    path: str = _doc("Exported path on the server.")

    def __post_init__(self):
        if not _HOST.fullmatch(self.server):
            raise SpecError("server", f"{self.server!r} is not a host name or IP address")
        if not self.path.startswith("/") or _CONTROL.search(self.path):
            raise SpecError("path", f"{self.path!r} must be an absolute path without control "
                            "characters, e.g. /vol1/data")


@dataclasses.dataclass(frozen=True)
class PvcMount:
    """An existing PersistentVolumeClaim (ReadOnlyMany for shared data) mounted read-only."""

    claim: str = _doc("Name of the PersistentVolumeClaim in the job's namespace.")

    def __post_init__(self):
        _check("claim", names.dns1123_subdomain_problem(self.claim))


@dataclasses.dataclass(frozen=True)
class DataMount:
    """Exactly one of ``gcsfuse``, ``nfs`` or ``pvc``, mounted read-only at /data."""

    gcsfuse: GcsFuseMount | None = _doc("GCS bucket through GCS FUSE.", default=None)
    nfs: NfsMount | None = _doc("NFS export.", default=None)
    pvc: PvcMount | None = _doc("PersistentVolumeClaim.", default=None)

    def __post_init__(self):
        given = [n for n in ("gcsfuse", "nfs", "pvc") if getattr(self, n) is not None]
        if len(given) != 1:
            raise SpecError("", f"give exactly one of gcsfuse, nfs, pvc (got {', '.join(given) or 'none'})")


# ----------------------------------------------------------------------------- scheduling


@dataclasses.dataclass(frozen=True)
class Toleration:
    """A pod toleration, as in Kubernetes (snake_case ``toleration_seconds``)."""

    key: str | None = _doc("Taint key; empty with operator Exists tolerates every taint.", default=None)
    operator: Literal["Equal", "Exists"] = _doc("Equal or Exists.", default="Equal")
    value: str | None = _doc("Taint value (operator Equal).", default=None)
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = _doc(
        "Taint effect; empty matches all effects.", default=None)
    toleration_seconds: int | None = _doc("How long a NoExecute taint is tolerated.", default=None)

    def __post_init__(self):
        if self.key is not None:
            _check("key", names.qualified_name_problem(self.key))
        elif self.operator != "Exists":
            raise SpecError("key", "is required unless operator is Exists")
        if self.operator == "Exists" and self.value is not None:
            raise SpecError("value", "must be empty when operator is Exists")
        if self.value is not None:
            _check("value", names.label_value_problem(self.value))
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise SpecError("toleration_seconds", "is only allowed with effect NoExecute")

    def to_k8s(self) -> dict:
        out = {"key": self.key, "operator": self.operator, "value": self.value,
               "effect": self.effect, "tolerationSeconds": self.toleration_seconds}
        return {k: v for k, v in out.items() if v is not None}


@dataclasses.dataclass(frozen=True)
class Resources:
    """Extra container requests and limits (cpu, memory, ephemeral-storage, ...)."""

    requests: Mapping[str, str] = _doc("Resource requests, e.g. {cpu: '8', memory: 32Gi}.",
                                       default_factory=dict)
    limits: Mapping[str, str] = _doc("Resource limits.", default_factory=dict)

    @classmethod
    def _coerce(cls, data: Any) -> Any:
        # YAML reads `cpu: 8` as an int; a quantity is a string in the API.
        if isinstance(data, dict):
            return {k: ({n: str(q) if isinstance(q, (int, float)) and not isinstance(q, bool) else q
                         for n, q in v.items()} if isinstance(v, dict) else v)
                    for k, v in data.items()}
        return data

    def __post_init__(self):
        for section in ("requests", "limits"):
            mapping = getattr(self, section)
            for name, quantity in mapping.items():
                _check(f"{section}.{name}", names.qualified_name_problem(name))
                if name in (TPU_RESOURCE, GPU_RESOURCE):
                    raise SpecError(f"{section}.{name}", "is set from the accelerator block",
                                    "Remove it; set accelerator.tpu or accelerator.gpu.count instead.")
                if not _QUANTITY.fullmatch(quantity):
                    raise SpecError(f"{section}.{name}", f"{quantity!r} is not a resource quantity",
                                    "Use e.g. '8', '500m', '32Gi'.")
            object.__setattr__(self, section, _freeze(mapping))


# ----------------------------------------------------------------------------- security


@dataclasses.dataclass(frozen=True)
class Security:
    """What the pods may do: who they run as, API credentials, who may reach them.

    The pods meet the Kubernetes Pod Security Standards "restricted" profile: non-root user,
    no privilege escalation, all capabilities dropped, RuntimeDefault seccomp, read-only root
    filesystem with emptyDir mounts for /tmp and caches (docs/run-on-gke.md, "Security").
    """

    run_as_user: int = _doc("UID the worker runs as; the worker image's user (Dockerfile).",
                            default=contract.WORKER_UID)
    run_as_group: int = _doc("GID the worker runs as, and the pod's fsGroup.",
                             default=contract.WORKER_GID)
    automount_service_account_token: bool = _doc(
        "Mount a Kubernetes API token into the pods. Off: the worker never calls the API, and "
        "Workload Identity gets cloud credentials from the GKE metadata server without it. "
        "Turn it on for a program that uses the Kubernetes API (e.g. JAX's K8sCluster "
        "auto-detection).", default=False)
    network_policy: bool = _doc(
        "Create a NetworkPolicy with the job that admits traffic to its pods only from its own "
        "pods (needs a CNI that enforces NetworkPolicy, e.g. GKE Dataplane V2).", default=True)

    def __post_init__(self):
        # Pod Security "restricted" forbids UID 0; the kubelet refuses it with runAsNonRoot.
        for name in ("run_as_user", "run_as_group"):
            value = getattr(self, name)
            if not 1 <= value <= 2**31 - 1:
                raise SpecError(name, f"must be between 1 and 2147483647, got {value}",
                                "Pods never run as root (0); use the image's user, e.g. "
                                f"{contract.WORKER_UID}.")


# ----------------------------------------------------------------------------- the job


@dataclasses.dataclass(frozen=True)
class JobSpec:
    """A multi-host JAX training job: what runs, where, on what, and how it restarts."""

    api_version: str = _doc(f"Spec version; must be {API_VERSION}.", metadata={"key": "apiVersion"})
    kind: str = _doc(f"Must be {KIND}.")
    name: str = _doc("Name of the JobSet (or Job and Service): a DNS-1035 label.")
    image: str = _doc("Worker image; its entrypoint is roxxel-worker.")
    command: tuple[str, ...] = _doc(
        "The training command, run as `roxxel-worker -- COMMAND...`; passed literally "
        "(no $(VAR) expansion).")
    accelerator: Accelerator = _doc("Exactly one of tpu, gpu, cpu.")
    namespace: str = _doc("Kubernetes namespace.", default="default")
    num_slices: int = _doc("Slices (replicas of the per-slice job); TPU multislice when > 1.", default=1)
    env: Mapping[str, str] = _doc("Extra environment variables (values are strings).",
                                  default_factory=dict)
    data: DataMount | None = _doc(f"Read-only data volume, mounted at {contract.DATA_MOUNT_PATH}.",
                                  default=None)
    checkpoint_dir: str | None = _doc(
        "gs://BUCKET/PATH (Orbax writes directly) or an absolute path on a writable mount.",
        default=None)
    run_name: str | None = _doc("Run identity kept across resumes (label value); defaults to name.",
                                default=None)
    service_account: str | None = _doc("Kubernetes service account (Workload Identity).", default=None)
    queue: str | None = _doc("Kueue LocalQueue (kueue.x-k8s.io/queue-name label).", default=None)
    priority_class: str | None = _doc("PriorityClass name.", default=None)
    max_restarts: int = _doc("Gang restarts for failures other than preemption (JobSet only).",
                             default=3)
    termination_grace_period: int = _doc(
        "Seconds between SIGTERM and SIGKILL: enough to save a checkpoint.", default=300)
    workload: Literal["jobset", "indexed-job"] = _doc(
        "Object kind: jobset (gang restarts, multislice) or indexed-job (Job + headless Service, "
        "no JobSet controller needed, no gang restart).", default="jobset")
    resources: Resources = _doc("Extra container requests/limits.", default_factory=Resources)
    node_selectors: Mapping[str, str] = _doc("Extra node selectors.", default_factory=dict)
    tolerations: tuple[Toleration, ...] = _doc("Extra tolerations.", default=())
    security: Security = _doc("Pod security context, API token, NetworkPolicy.",
                              default_factory=Security)

    def __post_init__(self):
        if self.api_version != API_VERSION:
            raise SpecError("apiVersion", f"{self.api_version!r} is not supported",
                            f"Use apiVersion: {API_VERSION}.")
        if self.kind != KIND:
            raise SpecError("kind", f"{self.kind!r} is not a job spec kind", f"Use kind: {KIND}.")
        _check("name", names.dns1035_label_problem(self.name))
        _check("namespace", names.dns1123_label_problem(self.namespace))
        _check("image", image_reference_problem(self.image),
               "Use e.g. us-docker.pkg.dev/PROJECT/REPO/IMAGE:TAG, or pin a digest: "
               "us-docker.pkg.dev/PROJECT/REPO/IMAGE@sha256:<64 hex digits>.")
        if not self.command:
            raise SpecError("command", "must not be empty", "Give e.g. [python, examples/lm/train.py].")
        if self.num_slices < 1:
            raise SpecError("num_slices", f"must be at least 1, got {self.num_slices}")
        if self.workload == "indexed-job" and self.num_slices != 1:
            raise SpecError("num_slices", "an indexed-job runs a single slice",
                            "Use workload: jobset for several slices.")
        for key in self.env:
            _check(f"env.{key}", names.env_var_name_problem(key))
            if key in contract.RESERVED_ENV_NAMES:
                raise SpecError(f"env.{key}", "is set by roxxel-launch", "Remove it from env.")
        object.__setattr__(self, "env", _freeze(self.env))
        self._check_checkpoint_dir()
        run_name = self.name if self.run_name is None else self.run_name
        _check("run_name", names.label_value_problem(run_name) or (None if run_name else "must not be empty"))
        object.__setattr__(self, "run_name", run_name)
        if self.service_account is not None:
            _check("service_account", names.dns1123_subdomain_problem(self.service_account))
        if self.queue is not None:
            _check("queue", names.dns1123_label_problem(self.queue))
        if self.priority_class is not None:
            _check("priority_class", names.dns1123_subdomain_problem(self.priority_class))
        if not 0 <= self.max_restarts <= 10_000:
            raise SpecError("max_restarts", f"must be between 0 and 10000, got {self.max_restarts}")
        if not 0 <= self.termination_grace_period <= 86_400:
            raise SpecError("termination_grace_period",
                            f"must be between 0 and 86400 seconds, got {self.termination_grace_period}")
        owned = accelerator_node_selectors(self.accelerator)
        for key, value in self.node_selectors.items():
            _check(f"node_selectors.{key}", names.qualified_name_problem(key))
            _check(f"node_selectors.{key}", names.label_value_problem(value))
            if key in owned:
                raise SpecError(f"node_selectors.{key}", "is set from the accelerator block",
                                "Remove it from node_selectors.")
        object.__setattr__(self, "node_selectors", _freeze(self.node_selectors))
        _check("name", names.pod_name_problem(longest_pod_name(self)),
               f"Shorten name to at most {max_name_length(self)} characters.")

    def _check_checkpoint_dir(self) -> None:
        path = self.checkpoint_dir
        if path is None:
            return
        if path.startswith("gs://"):
            bucket = path[len("gs://"):].split("/", 1)[0]
            if not _BUCKET.fullmatch(bucket):
                raise SpecError("checkpoint_dir", f"{bucket!r} in {path!r} is not a GCS bucket name")
            return
        if "://" in path:
            raise SpecError("checkpoint_dir", f"{path!r}: only gs:// URLs are supported",
                            "Use gs://BUCKET/PATH or an absolute path.")
        if not path.startswith("/"):
            raise SpecError("checkpoint_dir", f"{path!r} is neither gs://... nor an absolute path",
                            "Use gs://BUCKET/PATH or an absolute path.")
        data = contract.DATA_MOUNT_PATH
        if self.data is not None and (path == data or path.startswith(data + "/")):
            raise SpecError("checkpoint_dir", f"{path!r} is on the read-only data mount {data}",
                            "Write checkpoints to gs://... or another, writable path.")

    @property
    def hosts_per_slice(self) -> int:
        return self.accelerator.hosts_per_slice

    @property
    def num_processes(self) -> int:
        return self.num_slices * self.hosts_per_slice


# ----------------------------------------------------------------------------- derived names


def image_reference_problem(image: str) -> str | None:
    """Why ``image`` is not a pullable reference (``NAME[:TAG][@sha256:DIGEST]``), or None."""
    if not _IMAGE.fullmatch(image):
        return f"{image!r} is not an image reference"
    name, at, digest = image.partition("@")
    if at and not _DIGEST.fullmatch(digest):
        return (f"{image!r}: the digest {digest!r} is not sha256: followed by 64 lowercase hex "
                "digits")
    if "@" in digest or not name or name.endswith((":", "/")):
        return f"{image!r} is not an image reference"
    return None


def image_is_pinned(image: str) -> bool:
    """Whether the image is pinned by digest (immutable) rather than named by a tag (mutable)."""
    return "@" in image


# Name of the replicated job inside a JobSet (short: it is part of every pod name).
REPLICATED_JOB_NAME = "slice"


def longest_pod_name(spec: JobSpec) -> str:
    """The longest pod name (without the random suffix) the controllers will generate."""
    if spec.workload == "jobset":
        return f"{spec.name}-{REPLICATED_JOB_NAME}-{spec.num_slices - 1}-{spec.hosts_per_slice - 1}"
    return f"{spec.name}-{spec.hosts_per_slice - 1}"


def max_name_length(spec: JobSpec) -> int:
    overhead = len(longest_pod_name(spec)) - len(spec.name)
    return names.MAX_LABEL - names.POD_NAME_SUFFIX - overhead


def accelerator_node_selectors(accelerator: Accelerator) -> dict[str, str]:
    """The node selectors the accelerator block implies."""
    if accelerator.tpu is not None:
        shape = accelerator.tpu.slice
        return {TPU_ACCELERATOR_SELECTOR: shape.type.gke_accelerator,
                TPU_TOPOLOGY_SELECTOR: shape.topology}
    if accelerator.gpu is not None:
        return {GPU_ACCELERATOR_SELECTOR: accelerator.gpu.type}
    return {}


# ----------------------------------------------------------------------------- parsing


def _key(f: dataclasses.Field) -> str:
    return f.metadata.get("key", f.name)


def _is_optional(tp: Any) -> bool:
    return typing.get_origin(tp) in (Union, types.UnionType) and type(None) in typing.get_args(tp)


def _strip_optional(tp: Any) -> Any:
    if _is_optional(tp):
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        return inner
    return tp


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _convert(tp: Any, value: Any, path: str) -> Any:
    if _is_optional(tp):
        return None if value is None else _convert(_strip_optional(tp), value, path)
    origin = typing.get_origin(tp)
    if origin is Literal:
        choices = typing.get_args(tp)
        if value not in choices:
            raise SpecError(path, f"{value!r} is not allowed", f"Use one of {', '.join(choices)}.")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise SpecError(path, f"must be a string, got {_type_name(value)} {value!r}",
                            "Quote the value in YAML.")
        if _BAD_TEXT.search(value):
            raise SpecError(path, "contains a NUL character or a lone surrogate, which is not text")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise SpecError(path, f"must be true or false, got {_type_name(value)} {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(path, f"must be an integer, got {_type_name(value)} {value!r}")
        return value
    if origin is tuple:
        if not isinstance(value, list):
            raise SpecError(path, f"must be a list, got {_type_name(value)} {value!r}")
        item = typing.get_args(tp)[0]
        return tuple(_convert(item, v, f"{path}[{i}]") for i, v in enumerate(value))
    if origin is Mapping:
        if not isinstance(value, dict):
            raise SpecError(path, f"must be a mapping, got {_type_name(value)} {value!r}")
        key_type, value_type = typing.get_args(tp)
        return {_convert(key_type, k, path): _convert(value_type, v, f"{path}.{k}")
                for k, v in value.items()}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _build(tp, value, path)
    raise TypeError(f"no converter for {tp!r} at {path}")


def _build(cls: type, data: Any, path: str) -> Any:
    coerce = getattr(cls, "_coerce", None)
    if coerce is not None:
        data = coerce(data)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SpecError(path, f"must be a mapping, got {_type_name(data)} {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {_key(f): f for f in dataclasses.fields(cls)}
    for key in data:
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            fix = f"Did you mean {close[0]!r}?" if close else f"Valid fields: {', '.join(fields)}."
            raise SpecError(f"{path}.{key}" if path else str(key), "unknown field", fix)
    kwargs = {}
    for key, f in fields.items():
        sub = f"{path}.{key}" if path else key
        if key in data:
            kwargs[f.name] = _convert(hints[f.name], data[key], sub)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise SpecError(sub, "is required", f"Add it: {f.metadata.get('doc', '')}")
    with _within(path):
        return cls(**kwargs)


def _type_at(path: Sequence[str]) -> Any:
    """The declared type of the field at a dotted path, or None if there is no such field."""
    tp: Any = JobSpec
    for part in path:
        tp = _strip_optional(tp)
        if dataclasses.is_dataclass(tp):
            fields = {_key(f): f for f in dataclasses.fields(tp)}
            if part not in fields:
                return None
            tp = typing.get_type_hints(tp)[fields[part].name]
        elif typing.get_origin(tp) is Mapping:
            tp = typing.get_args(tp)[1]
        else:
            return None
    return _strip_optional(tp)


def apply_overrides(data: Mapping, overrides: Sequence[str]) -> dict:
    """Applies ``key.path=value`` overrides to a raw spec mapping; returns a new mapping.

    The value's type follows the field: strings are taken verbatim (``--set env.X=007`` keeps
    ``007``), integers are parsed, and lists or mappings are read as YAML flow text
    (``--set 'command=[python, train.py]'``).
    """
    out = copy.deepcopy(dict(data))
    for override in overrides:
        path, eq, text = override.partition("=")
        # Keys such as nvidia.com/gpu contain dots: write them as nvidia\.com/gpu.
        parts = [p.replace("\\.", ".") for p in re.split(r"(?<!\\)\.", path)]
        if not eq or not all(parts):
            raise SpecError("--set", f"{override!r} is not key.path=value",
                            "Write e.g. --set accelerator.tpu.topology=4x4.")
        tp = _type_at(parts)
        if tp is str or typing.get_origin(tp) is Literal or tp is None:
            value: Any = text
        elif tp is int:
            try:
                value = int(text)
            except ValueError:
                raise SpecError(path, f"{text!r} is not an integer") from None
        elif tp is bool:
            if text.lower() not in ("true", "false"):
                raise SpecError(path, f"{text!r} is not true or false")
            value = text.lower() == "true"
        else:
            try:
                value = yaml.safe_load(text)
            except yaml.YAMLError as err:
                raise SpecError(path, f"{text!r} is not YAML: {err}") from err
        node = out
        for i, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise SpecError(".".join(parts[: i + 1]), f"is a {_type_name(child)}, not a mapping",
                                f"Set the whole field instead: --set {'.'.join(parts[: i + 1])}=...")
            node = child
        node[parts[-1]] = value
    return out


def spec_from_dict(data: Any, overrides: Sequence[str] = ()) -> JobSpec:
    """Validates a raw mapping (e.g. parsed YAML) plus overrides into a JobSpec."""
    if not isinstance(data, dict):
        raise SpecError("", f"a job spec must be a mapping, got {_type_name(data)}",
                        f"Start the file with apiVersion: {API_VERSION} and kind: {KIND}.")
    return _build(JobSpec, apply_overrides(data, overrides), "")


def load_spec(path: str | Path, overrides: Sequence[str] = ()) -> JobSpec:
    """Reads a YAML job spec file and applies ``--set`` overrides."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise SpecError("", f"{path} is not valid YAML: {err}") from err
    try:
        return spec_from_dict(data, overrides)
    except SpecError as err:
        raise SpecError(err.field, f"{err.problem} (in {path})", err.fix) from err


def spec_to_dict(spec: Any) -> Any:
    """The spec as plain data with YAML keys, omitting unset optional fields."""
    if dataclasses.is_dataclass(spec):
        return {_key(f): spec_to_dict(getattr(spec, f.name))
                for f in dataclasses.fields(spec) if getattr(spec, f.name) is not None}
    if isinstance(spec, tuple):
        return [spec_to_dict(v) for v in spec]
    if isinstance(spec, Mapping):
        return {k: spec_to_dict(v) for k, v in spec.items()}
    return spec


# ----------------------------------------------------------------------------- schema


def _schema_of(tp: Any) -> dict:
    tp = _strip_optional(tp)
    origin = typing.get_origin(tp)
    if origin is Literal:
        return {"type": "string", "enum": list(typing.get_args(tp))}
    if tp is str:
        return {"type": "string"}
    if tp is bool:
        return {"type": "boolean"}
    if tp is int:
        return {"type": "integer"}
    if origin is tuple:
        return {"type": "array", "items": _schema_of(typing.get_args(tp)[0])}
    if origin is Mapping:
        return {"type": "object", "additionalProperties": _schema_of(typing.get_args(tp)[1])}
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        properties, required = {}, []
        for f in dataclasses.fields(tp):
            prop = _schema_of(hints[f.name])
            prop["description"] = f.metadata.get("doc", "")
            if f.default is not dataclasses.MISSING:
                if f.default is not None:
                    prop["default"] = spec_to_dict(f.default)
            elif f.default_factory is dataclasses.MISSING:
                required.append(_key(f))
            properties[_key(f)] = prop
        schema = {"type": "object", "description": (tp.__doc__ or "").strip(),
                  "properties": properties, "additionalProperties": False}
        if required:
            schema["required"] = required
        if tp in (Accelerator, DataMount):
            schema["minProperties"] = schema["maxProperties"] = 1
        return schema
    raise TypeError(f"no schema for {tp!r}")


def spec_schema() -> dict:
    """A JSON-schema-like description of the job spec, for generated docs and editors."""
    schema = _schema_of(JobSpec)
    schema["title"] = f"{KIND} ({API_VERSION})"
    schema["properties"]["apiVersion"]["enum"] = [API_VERSION]
    schema["properties"]["kind"]["enum"] = [KIND]
    schema["properties"]["accelerator"]["oneOf"] = [
        {"type": "object"}, {"type": "string", "enum": ["cpu"]}]
    return schema
