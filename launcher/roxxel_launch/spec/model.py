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
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Union

import yaml

from roxxel.wording import as_clause
from roxxel_launch import contract, gpu_networking, names, tpu

API_VERSION = "roxxel.dev/v1alpha1"
KIND = "RoxxelJob"
DEFAULT_GCSFUSE_MOUNT_OPTIONS = ("implicit-dirs",)

# Resource names the accelerator block owns; users may not set them in `resources`.
TPU_RESOURCE = "google.com/tpu"
GPU_RESOURCE = "nvidia.com/gpu"
TPU_ACCELERATOR_SELECTOR = "cloud.google.com/gke-tpu-accelerator"
TPU_TOPOLOGY_SELECTOR = "cloud.google.com/gke-tpu-topology"
GPU_ACCELERATOR_SELECTOR = "cloud.google.com/gke-accelerator"

# A non-negative resource quantity (Kubernetes' Quantity grammar without a sign: a negative
# request or limit is refused by the API server only at submit time).
_QUANTITY = re.compile(r"\+?(\d+\.?\d*|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d+)?")
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-/:@+]*")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_BUCKET = re.compile(r"[a-z0-9][a-z0-9_.\-]{1,220}[a-z0-9]")
# What _BUCKET checks, in the words of Cloud Storage's naming rules, for error messages.
_BUCKET_RULE = ("bucket names are 3-63 characters (up to 222 with dots) of lowercase letters, digits, '-', '_' "
                "and '.', starting and ending with a letter or digit")
_BAD_TEXT = re.compile(r"[\x00\ud800-\udfff]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# gcsfuse options as the CSI driver takes them: key, key:value or section:key:value.
_GCSFUSE_OPTION = re.compile(r"[a-z][a-z0-9-]*(:[A-Za-z0-9_.\-]+){0,2}")
_GCSFUSE_DIR = re.compile(r"[A-Za-z0-9_.\-]+(/[A-Za-z0-9_.\-]+)*/?")
_CONFIG_KEY = re.compile(r"[-._a-zA-Z0-9]{1,253}")
# Volume names the renderer uses itself: shared memory, data, the GCS FUSE file cache and
# the writable emptyDirs of the read-only root filesystem (contract.WRITABLE_DIRS).
RESERVED_VOLUME_NAMES = frozenset({"dshm", "data", "gke-gcsfuse-cache", *contract.WRITABLE_DIRS,
                                   *gpu_networking.VOLUME_NAMES})
# Label/annotation prefixes users may not set: ours and the controllers'.
RESERVED_PREFIXES = frozenset({"roxxel.dev", "jobset.sigs.k8s.io", "alpha.jobset.sigs.k8s.io",
                               "batch.kubernetes.io", "kueue.x-k8s.io", "gke-gcsfuse"})
# Keys under shared prefixes that the renderer sets itself (render.MANAGED_BY_LABEL,
# render.DEFAULT_CONTAINER_ANNOTATION); the rest of Kubernetes' recommended labels
# (app.kubernetes.io/name, part-of, component, ...) are the user's.
RESERVED_KEYS = frozenset({"app.kubernetes.io/managed-by", "kubectl.kubernetes.io/default-container"})
_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.\-]*[A-Za-z0-9])?|[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*")


# Kubernetes stores replicas, parallelism, completions and most counts as int32.
INT32_MAX = 2**31 - 1
# An Indexed Job runs at most 100,000 pods in parallel (maxParallelismForIndexedJob in
# kubernetes/pkg/apis/batch/validation): the bound of hosts per slice.
MAX_HOSTS_PER_SLICE = 100_000
# A spec file is at most this many bytes: the whole spec is stored in one annotation and
# Kubernetes refuses more than 256 KiB of annotations per object (JSON escaping can triple
# non-ASCII text, so 64 KiB of YAML always fits).
MAX_SPEC_BYTES = 64 * 1024
# Deepest nesting of mappings and lists a spec may have (the real spec nests about 6 deep;
# the cap keeps a hostile file from exhausting the parser's recursion).
MAX_SPEC_DEPTH = 32
# Slices of one JobSet (replicas of its replicated job, an int32; JAX's process ids too).
MAX_SLICES = 100_000


class SpecError(ValueError):
    """An invalid job spec. ``field`` is the dotted path of the offending field.

    ``also``: further problems found in the same pass (other fields of the spec, each checked
    on its own), so that one run of ``validate`` names every field to fix, one line each;
    ``field``, ``problem`` and ``fix`` describe the first.
    """

    def __init__(self, field: str, problem: str, fix: str = "", *, also: Sequence[SpecError] = ()):
        self.field = field
        self.problem = problem
        self.fix = fix
        self.also = tuple(one for err in also for one in err.each())
        message = f"{field}: {problem}" if field else problem
        line = f"{as_clause(message)}. {fix}" if fix else message
        if self.also:
            line = f"{1 + len(self.also)} problems:\n  " + "\n  ".join([line] + [str(e) for e in self.also])
        super().__init__(line)

    def each(self) -> list[SpecError]:
        """Every problem, each as a SpecError of its own."""
        return [SpecError(self.field, self.problem, self.fix) if self.also else self, *self.also]

    @classmethod
    def joined(cls, errors: Sequence[SpecError]) -> SpecError:
        """One error for several (the first, with the others in ``also``)."""
        flat = [one for err in errors for one in err.each()]
        first = flat[0]
        return first if len(flat) == 1 else cls(first.field, first.problem, first.fix, also=flat[1:])

    def mapped(self, change: Callable[[SpecError], SpecError]) -> SpecError:
        """The same problems, each passed through ``change`` (to re-path or annotate it)."""
        return SpecError.joined([change(err) for err in self.each()])


@contextlib.contextmanager
def _within(prefix: str):
    """Prefixes the field path of a SpecError raised inside a nested spec object."""
    try:
        yield
    except SpecError as err:
        if not prefix:
            raise
        raise err.mapped(lambda e: SpecError(f"{prefix}.{e.field}" if e.field else prefix, e.problem, e.fix)) from err


class _Problems:
    """Runs independent checks, each in ``with problems.check():``, and keeps what each one
    raised, so that all of them are reported together by :meth:`raise_any`."""

    def __init__(self) -> None:
        self.errors: list[SpecError] = []

    @contextlib.contextmanager
    def check(self):
        try:
            yield
        except SpecError as err:
            self.errors.append(err)

    def failed(self, field: str) -> bool:
        """Whether a check of ``field`` has failed."""
        return any(err.field == field for err in self.errors)

    def raise_any(self) -> None:
        if self.errors:
            raise SpecError.joined(self.errors)


def _doc(text: str, **kwargs) -> Any:
    return dataclasses.field(metadata={"doc": text, **kwargs.pop("metadata", {})}, **kwargs)


def _check(field: str, problem: str | None, fix: str = "") -> None:
    if problem:
        raise SpecError(field, problem, fix)


def _check_quantity(field: str, quantity: str) -> None:
    if not _QUANTITY.fullmatch(quantity):
        raise SpecError(field, f"{quantity!r} is not a non-negative resource quantity",
                        "Use e.g. '8', '500m', '32Gi'.")


def _freeze(mapping: Mapping) -> Mapping:
    return types.MappingProxyType(dict(mapping))


# ----------------------------------------------------------------------------- accelerators


@dataclasses.dataclass(frozen=True)
class TpuAccelerator:
    """A Cloud TPU slice on GKE; the number of hosts follows from the topology."""

    type: str = _doc("TPU generation: " + ", ".join(tpu.TPU_TYPES) + ".")
    topology: str = _doc("Chip topology of one slice, e.g. 4x4 (v5e/v6e) or 2x2x4 (v4/v5p/tpu7x).")
    chips_per_host: int | None = _doc(
        "Only for topologies served both ways (v5e/v6e 2x4): 8 = one host (ct5lp-hightpu-8t, "
        "ct6e-standard-8t, the default), 4 = two hosts (ct5lp-hightpu-4t, ct6e-standard-4t).",
        default=None)

    def __post_init__(self):
        if self.type not in tpu.TPU_TYPES:
            raise SpecError("type", f"unknown TPU type {self.type!r}",
                            f"Use one of {', '.join(tpu.TPU_TYPES)}.")
        try:
            tpu.tpu_slice(self.type, self.topology, self.chips_per_host)
        except ValueError as err:
            raise SpecError("chips_per_host" if self.chips_per_host and "chips per host" in str(err)
                            else "topology", str(err)) from err

    @property
    def slice(self) -> tpu.TpuSlice:
        return tpu.tpu_slice(self.type, self.topology, self.chips_per_host)


@dataclasses.dataclass(frozen=True)
class GpuAccelerator:
    """NVIDIA GPU hosts on GKE: ``count`` GPUs on each of ``hosts`` hosts."""

    type: str = _doc("Value of the cloud.google.com/gke-accelerator node label, e.g. nvidia-h100-80gb.")
    count: int = _doc("GPUs per host (nvidia.com/gpu limit).")
    hosts: int = _doc("Hosts (pods) per slice.", default=1)
    networking: Literal["none", "tcpx", "tcpxo", "rdma"] | None = _doc(
        "GKE high-bandwidth GPU networking preset: tcpx (A3 High, a3-highgpu-8g), tcpxo (A3 "
        "Mega, a3-megagpu-8g), rdma (A3 Ultra a3-ultragpu-8g / A4 a4-highgpu-8g); none "
        "or unset: the node's default network only.",
        default=None)
    networks: tuple[str, ...] | None = _doc(
        "The node pool's additional network names, in interface order (default: the GKE "
        "recipe's vpc1..vpc4 for tcpx, vpc1..vpc8 for tcpxo, rdma-0..rdma-7 for rdma).",
        default=None)
    daemon_image: str | None = _doc(
        "Image of the TCPX/TCPXO receive-datapath daemon sidecar (default: the GKE recipe's).",
        default=None)

    def __post_init__(self):
        _check("type", names.label_value_problem(self.type) or (None if self.type else "must not be empty"))
        if not 1 <= self.count <= 16:
            raise SpecError("count", f"must be between 1 and 16 GPUs per host, got {self.count}")
        _check_hosts(self.hosts)
        self._check_networking()

    def _check_networking(self) -> None:
        mode = self.networking or "none"
        if mode == "none":
            if self.networks is not None or self.daemon_image is not None:
                raise SpecError("networking", "networks and daemon_image need a networking preset",
                                "Set networking: tcpx, tcpxo or rdma, or remove them.")
            return
        preset = gpu_networking.PRESETS[mode]
        if self.type not in preset.gke_accelerators:
            raise SpecError("networking", f"{mode} runs on {preset.machine_type} nodes "
                            f"({', '.join(preset.gke_accelerators)}), not on {self.type!r}",
                            "Pick the preset of your machine type, or networking: none.")
        if self.count != gpu_networking.GPUS_PER_HOST:
            raise SpecError("count", f"networking: {mode} needs whole {preset.machine_type} hosts "
                            f"({gpu_networking.GPUS_PER_HOST} GPUs), got {self.count}")
        if self.networks is not None:
            if len(self.networks) != len(preset.networks):
                raise SpecError("networks", f"{mode} uses {len(preset.networks)} additional "
                                f"networks, got {len(self.networks)}")
            for i, network in enumerate(self.networks):
                _check(f"networks[{i}]", names.dns1123_label_problem(network))
            if len(set(self.networks)) != len(self.networks):
                raise SpecError("networks", "a network is named twice")
        if self.daemon_image is not None:
            if preset.daemon_image is None:
                raise SpecError("daemon_image", f"{mode} runs no daemon sidecar", "Remove it.")
            _check("daemon_image", image_reference_problem(self.daemon_image))

    @property
    def network_names(self) -> tuple[str, ...]:
        """The additional networks the preset attaches (empty for networking: none)."""
        if self.networking in (None, "none"):
            return ()
        return self.networks or gpu_networking.PRESETS[self.networking].networks


@dataclasses.dataclass(frozen=True)
class CpuAccelerator:
    """CPU-only hosts (tests, small jobs); size them with ``resources``."""

    hosts: int = _doc("Hosts (pods) per slice.", default=1)

    def __post_init__(self):
        _check_hosts(self.hosts)


def _check_hosts(hosts: int) -> None:
    if not 1 <= hosts <= MAX_HOSTS_PER_SLICE:
        raise SpecError("hosts", f"must be at least 1 and at most {MAX_HOSTS_PER_SLICE} (the most pods an "
                        f"Indexed Job runs in parallel), got {hosts}")


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
    """A GCS bucket mounted read-only through the GKE GCS FUSE CSI driver.

    The driver injects a sidecar (``gke-gcsfuse-sidecar``) whose cpu, memory and
    ephemeral-storage limits are set explicitly through pod annotations. The file cache
    is off unless ``file_cache_mb`` is given; then it is bounded and lives on its own
    ``gke-gcsfuse-cache`` volume, never under the sidecar's ephemeral-storage limit.
    """

    bucket: str = _doc("Bucket name (without gs://).")
    only_dir: str | None = _doc("Mount only this directory of the bucket (only-dir:DIR).", default=None)
    mount_options: tuple[str, ...] = _doc(
        "gcsfuse mount options in the driver's key or key:value form (e.g. "
        "metadata-cache:ttl-secs:-1), joined with commas; the file cache is set by file_cache_mb.",
        default=DEFAULT_GCSFUSE_MOUNT_OPTIONS)
    file_cache_mb: int | None = _doc(
        "Turn the gcsfuse file cache on, bounded to this many MiB (file-cache:max-size-mb), "
        "on a dedicated gke-gcsfuse-cache volume.", default=None)
    file_cache_medium: Literal["memory", "disk"] = _doc(
        "Where the gke-gcsfuse-cache volume lives: memory (tmpfs, counts against the pod's "
        "memory) or disk (the node's ephemeral storage: local SSD on node pools created with "
        "--ephemeral-storage-local-ssd).", default="disk")
    sidecar_cpu_limit: str = _doc("gke-gcsfuse/cpu-limit annotation; \"0\" = no limit.", default="0")
    sidecar_memory_limit: str = _doc("gke-gcsfuse/memory-limit annotation; \"0\" = no limit.",
                                     default="0")
    sidecar_ephemeral_storage_limit: str = _doc(
        "gke-gcsfuse/ephemeral-storage-limit annotation; \"0\" = no limit.", default="0")

    def __post_init__(self):
        if not _BUCKET.fullmatch(self.bucket):
            raise SpecError("bucket", f"{self.bucket!r} is not a GCS bucket name ({_BUCKET_RULE})",
                            "Give the bare bucket name, e.g. my-data (no gs://, no path).")
        if self.only_dir is not None and not _GCSFUSE_DIR.fullmatch(self.only_dir):
            raise SpecError("only_dir", f"{self.only_dir!r} must be a relative directory of letters, "
                            "digits and . _ - / (no ',', ':', '=' or spaces)",
                            "The driver splits mount options at ',' and at ':'.")
        for i, option in enumerate(self.mount_options):
            if not _GCSFUSE_OPTION.fullmatch(option):
                raise SpecError(f"mount_options[{i}]", f"{option!r} is not a gcsfuse mount option in "
                                "the key or key:value form (no ',', '=' or spaces)",
                                "Give one option per list item, e.g. implicit-dirs or "
                                "metadata-cache:ttl-secs:-1.")
            key = option.split(":", 1)[0]
            if key in ("file-cache", "cache-dir", "only-dir"):
                raise SpecError(f"mount_options[{i}]", f"{option!r} is set by roxxel-launch",
                                "Use file_cache_mb / only_dir instead.")
        if self.file_cache_mb is not None and not 1 <= self.file_cache_mb <= INT32_MAX:
            raise SpecError("file_cache_mb", f"must be at least 1 MiB, got {self.file_cache_mb}",
                            "Leave it out to turn the file cache off.")
        for field in ("sidecar_cpu_limit", "sidecar_memory_limit", "sidecar_ephemeral_storage_limit"):
            _check_quantity(field, getattr(self, field))

    def joined_options(self) -> str:
        options = list(self.mount_options)
        if self.only_dir is not None:
            options.append(f"only-dir:{self.only_dir}")
        if self.file_cache_mb is not None:
            options.append(f"file-cache:max-size-mb:{self.file_cache_mb}")
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
                _check_quantity(f"{section}.{name}", quantity)
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
            if not 1 <= value <= INT32_MAX:
                raise SpecError(name, f"must be between 1 and {INT32_MAX}, got {value}",
                                "Pods never run as root (0); use the image's user, e.g. "
                                f"{contract.WORKER_UID}.")


# ----------------------------------------------------------------------------- escape hatches


@dataclasses.dataclass(frozen=True)
class EnvFromSource:
    """Every key of a Secret or a ConfigMap as environment variables (Kubernetes ``envFrom``)."""

    secret: str | None = _doc("Secret name.", default=None)
    config_map: str | None = _doc("ConfigMap name.", default=None)
    prefix: str | None = _doc("Prefix added to every variable name.", default=None)
    optional: bool = _doc("Start even if the object is missing.", default=False)

    def __post_init__(self):
        _one_of(self, ("secret", "config_map"))
        for field in ("secret", "config_map"):
            if getattr(self, field) is not None:
                _check(field, names.dns1123_subdomain_problem(getattr(self, field)))
        if self.prefix is not None:
            _check("prefix", names.env_var_name_problem(self.prefix))

    def to_k8s(self) -> dict:
        ref = {"name": self.secret or self.config_map, "optional": self.optional}
        out: dict = {"secretRef" if self.secret else "configMapRef": ref}
        if self.prefix is not None:
            out["prefix"] = self.prefix
        return out


@dataclasses.dataclass(frozen=True)
class KeyRef:
    """One key of a Secret or ConfigMap as one variable (Kubernetes ``valueFrom``)."""

    key: str = _doc("Key in the object's data.")
    secret: str | None = _doc("Secret name.", default=None)
    config_map: str | None = _doc("ConfigMap name.", default=None)
    optional: bool = _doc("Start even if the key is missing.", default=False)

    def __post_init__(self):
        _one_of(self, ("secret", "config_map"))
        _check("key", None if _CONFIG_KEY.fullmatch(self.key) else
               f"{self.key!r} is not a Secret/ConfigMap key (letters, digits, '-', '_', '.')")
        for field in ("secret", "config_map"):
            if getattr(self, field) is not None:
                _check(field, names.dns1123_subdomain_problem(getattr(self, field)))

    def to_k8s(self) -> dict:
        ref = {"name": self.secret or self.config_map, "key": self.key, "optional": self.optional}
        return {"secretKeyRef" if self.secret else "configMapKeyRef": ref}


@dataclasses.dataclass(frozen=True)
class EmptyDirSource:
    """A scratch directory: the node's ephemeral storage (a local SSD) or memory."""

    medium: Literal["disk", "memory"] = _doc("disk (node ephemeral storage) or memory (tmpfs).",
                                             default="disk")
    size_limit: str | None = _doc("sizeLimit quantity, e.g. 100Gi.", default=None)

    def __post_init__(self):
        if self.size_limit is not None:
            _check_quantity("size_limit", self.size_limit)

    def to_k8s(self) -> dict:
        out = {"medium": "Memory"} if self.medium == "memory" else {}
        if self.size_limit is not None:
            out["sizeLimit"] = self.size_limit
        return out


@dataclasses.dataclass(frozen=True)
class ExtraVolume:
    """An extra volume mounted in the worker: exactly one of secret, config_map, pvc, nfs, empty_dir."""

    name: str = _doc("Volume name (DNS-1123 label).")
    mount_path: str = _doc("Absolute path in the worker container.")
    read_only: bool = _doc("Mount read-only.", default=True)
    secret: str | None = _doc("Secret name.", default=None)
    config_map: str | None = _doc("ConfigMap name.", default=None)
    pvc: str | None = _doc("PersistentVolumeClaim name (e.g. a Filestore share).", default=None)
    nfs: NfsMount | None = _doc("NFS export.", default=None)
    empty_dir: EmptyDirSource | None = _doc("Scratch space (local SSD or memory).", default=None)

    def __post_init__(self):
        _check("name", names.dns1123_label_problem(self.name))
        if self.name in RESERVED_VOLUME_NAMES:
            raise SpecError("name", f"{self.name!r} is used by roxxel-launch", "Pick another name.")
        if not self.mount_path.startswith("/") or _CONTROL.search(self.mount_path) \
                or ":" in self.mount_path:
            raise SpecError("mount_path", f"{self.mount_path!r} must be an absolute path without "
                            "':' or control characters")
        kind = _one_of(self, ("secret", "config_map", "pvc", "nfs", "empty_dir"))
        if kind in ("secret", "config_map", "pvc"):
            _check(kind, names.dns1123_subdomain_problem(getattr(self, kind)))

    def to_k8s(self) -> tuple[dict, dict]:
        """The pod ``volumes`` entry and the container ``volumeMounts`` entry."""
        source: dict[str, Any]
        if self.secret is not None:
            source = {"secret": {"secretName": self.secret}}
        elif self.config_map is not None:
            source = {"configMap": {"name": self.config_map}}
        elif self.pvc is not None:
            source = {"persistentVolumeClaim": {"claimName": self.pvc, "readOnly": self.read_only}}
        elif self.nfs is not None:
            source = {"nfs": {"server": self.nfs.server, "path": self.nfs.path,
                              "readOnly": self.read_only}}
        elif self.empty_dir is not None:
            source = {"emptyDir": self.empty_dir.to_k8s()}
        else:  # __post_init__ requires exactly one source; a volume changed since is refused here
            raise SpecError("name", f"volume {self.name!r} has no source")
        return ({"name": self.name, **source},
                {"name": self.name, "mountPath": self.mount_path, "readOnly": self.read_only})


def _one_of(obj: Any, fields: Sequence[str]) -> str:
    given = [f for f in fields if getattr(obj, f) is not None]
    if len(given) != 1:
        raise SpecError("", f"give exactly one of {', '.join(fields)} (got {', '.join(given) or 'none'})")
    return given[0]


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
    max_preemptions: int = _doc(
        "Free gang restarts (preemption, eviction, exit 42) on top of max_restarts (JobSet "
        "only): a pod of a later restart exits 78 before starting, failing the JobSet.",
        default=100)
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
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = _doc(
        "Container imagePullPolicy; default Always for a tag (tags are mutable), IfNotPresent "
        "for an image pinned by @sha256 digest.", default=None)
    image_pull_secrets: tuple[str, ...] = _doc("Secrets for pulling the image from a private "
                                               "registry (imagePullSecrets).", default=())
    env_from: tuple[EnvFromSource, ...] = _doc("Whole Secrets / ConfigMaps as environment "
                                               "variables (envFrom).", default=())
    env_refs: Mapping[str, KeyRef] = _doc("Variables read from one key of a Secret or ConfigMap "
                                          "(valueFrom).", default_factory=dict)
    volumes: tuple[ExtraVolume, ...] = _doc("Extra volumes and their mounts in the worker.",
                                            default=())
    labels: Mapping[str, str] = _doc("Extra labels on the workload object and its pods.",
                                     default_factory=dict)
    annotations: Mapping[str, str] = _doc("Extra annotations on the pods.", default_factory=dict)
    affinity: Mapping[str, Any] | None = _doc(
        "Pod affinity, as Kubernetes' Affinity object (checked against the official schema).",
        default=None)
    host_network: bool | None = _doc(
        "Run the pods on the node's network (hostNetwork + dnsPolicy ClusterFirstWithHostNet). "
        "Default: true for TPU multislice (DCN traffic), as GKE's reference TPU JobSets do; "
        "false otherwise.", default=None)
    ttl_seconds_after_finished: int | None = _doc(
        "Delete the finished JobSet / Job (and its pods' logs) this many seconds after it "
        "ends; `resume` cannot read a deleted job's spec.", default=None)
    pod_patch: Mapping[str, Any] | None = _doc(
        "Last resort: a strategic-merge patch of the rendered pod template (metadata + spec); "
        "the result is validated like everything else.", default=None)

    def __post_init__(self):
        # Independent checks: every failing one is reported (checks of one field stop at its first).
        problems = _Problems()
        with problems.check():
            if self.api_version != API_VERSION:
                raise SpecError("apiVersion", f"{self.api_version!r} is not supported",
                                f"Use apiVersion: {API_VERSION}.")
        with problems.check():
            if self.kind != KIND:
                raise SpecError("kind", f"{self.kind!r} is not a job spec kind", f"Use kind: {KIND}.")
        with problems.check():
            _check("name", names.dns1035_label_problem(self.name))
        with problems.check():
            _check("namespace", names.dns1123_label_problem(self.namespace))
        with problems.check():
            _check("image", image_reference_problem(self.image),
                   "Use e.g. us-docker.pkg.dev/PROJECT/REPO/IMAGE:TAG, or pin a digest: "
                   "us-docker.pkg.dev/PROJECT/REPO/IMAGE@sha256:<64 hex digits>.")
        with problems.check():
            if not self.command:
                raise SpecError("command", "must not be empty", "Give e.g. [python, examples/lm/train.py].")
        with problems.check():
            self._check_num_slices()
        for key in self.env:
            with problems.check():
                _check(f"env.{key}", names.env_var_name_problem(key))
                if key in contract.RESERVED_ENV_NAMES:
                    raise SpecError(f"env.{key}", "is set by roxxel-launch", "Remove it from env.")
        object.__setattr__(self, "env", _freeze(self.env))
        with problems.check():
            self._check_checkpoint_dir()
        run_name = self.name if self.run_name is None else self.run_name
        with problems.check():
            if self.run_name is not None or not problems.failed("name"):  # a bad name is reported once
                _check("run_name", names.label_value_problem(run_name) or (None if run_name else "must not be empty"))
        object.__setattr__(self, "run_name", run_name)
        with problems.check():
            if self.service_account is not None:
                _check("service_account", names.dns1123_subdomain_problem(self.service_account))
        with problems.check():
            if self.queue is not None:
                _check("queue", names.dns1123_label_problem(self.queue))
        with problems.check():
            if self.priority_class is not None:
                _check("priority_class", names.dns1123_subdomain_problem(self.priority_class))
        for field, value, most, unit in (("max_restarts", self.max_restarts, 10_000, ""),
                                         ("max_preemptions", self.max_preemptions, 100_000, ""),
                                         ("termination_grace_period", self.termination_grace_period, 86_400,
                                          " seconds")):
            with problems.check():
                if not 0 <= value <= most:
                    raise SpecError(field, f"must be between 0 and {most}{unit}, got {value}")
        owned = accelerator_node_selectors(self.accelerator)
        for key, value in self.node_selectors.items():
            with problems.check():
                _check(f"node_selectors.{key}", names.qualified_name_problem(key))
                _check(f"node_selectors.{key}", names.label_value_problem(value))
                if key in owned:
                    raise SpecError(f"node_selectors.{key}", "is set from the accelerator block",
                                    "Remove it from node_selectors.")
        object.__setattr__(self, "node_selectors", _freeze(self.node_selectors))
        with problems.check():
            self._check_escape_hatches()
        problems.raise_any()
        # Needs a valid name and slice count: after the others.
        _check("name", names.pod_name_problem(longest_pod_name(self)),
               f"Shorten name to at most {max_name_length(self)} characters.")

    def _check_num_slices(self) -> None:
        if not 1 <= self.num_slices <= MAX_SLICES:
            raise SpecError("num_slices",
                            f"must be at least 1 and at most {MAX_SLICES}, got {self.num_slices}")
        if self.num_processes > INT32_MAX:
            raise SpecError("num_slices", f"{self.num_slices} slices of {self.hosts_per_slice} hosts "
                            f"are {self.num_processes} processes, more than fit in an int32")
        if self.workload == "indexed-job" and self.num_slices != 1:
            raise SpecError("num_slices", "an indexed-job runs a single slice",
                            "Use workload: jobset for several slices.")

    def _check_escape_hatches(self) -> None:
        for i, secret in enumerate(self.image_pull_secrets):
            _check(f"image_pull_secrets[{i}]", names.dns1123_subdomain_problem(secret))
        for key in self.env_refs:
            _check(f"env_refs.{key}", names.env_var_name_problem(key))
            if key in contract.RESERVED_ENV_NAMES or key in self.env:
                raise SpecError(f"env_refs.{key}", "is already set (by roxxel-launch or in env)")
        object.__setattr__(self, "env_refs", _freeze(self.env_refs))
        paths = [v.mount_path.rstrip("/") for v in self.volumes]
        taken = [contract.SHM_MOUNT_PATH] + ([contract.DATA_MOUNT_PATH] if self.data else []) \
            + [path for path, _ in contract.WRITABLE_DIRS.values()]
        for i, volume in enumerate(self.volumes):
            if paths[i] in taken:
                raise SpecError(f"volumes[{i}].mount_path", f"{volume.mount_path!r} is where "
                                "roxxel-launch mounts a volume of its own", "Pick another path.")
            if paths.count(paths[i]) > 1:
                raise SpecError(f"volumes[{i}].mount_path", f"{volume.mount_path!r} is mounted twice")
        volume_names = [v.name for v in self.volumes]
        for i, name in enumerate(volume_names):
            if volume_names.count(name) > 1:
                raise SpecError(f"volumes[{i}].name", f"{name!r} is used twice")
        for section in ("labels", "annotations"):
            for key, value in getattr(self, section).items():
                _check(f"{section}.{key}", names.qualified_name_problem(key))
                if section == "labels":
                    _check(f"{section}.{key}", names.label_value_problem(value))
                if key.split("/", 1)[0] in RESERVED_PREFIXES or key in RESERVED_KEYS:
                    raise SpecError(f"{section}.{key}", "uses a key or prefix that roxxel-launch or its "
                                    "controllers own", "Pick a key under your own prefix.")
            object.__setattr__(self, section, _freeze(getattr(self, section)))
        if self.ttl_seconds_after_finished is not None and self.ttl_seconds_after_finished < 0:
            raise SpecError("ttl_seconds_after_finished",
                            f"must be 0 or more seconds, got {self.ttl_seconds_after_finished}")
        if self.host_network and self.accelerator.kind != "tpu":
            raise SpecError("host_network", "is offered for TPU slices only",
                            "GPU pods use GKE's multi-networking presets instead; remove it.")
        if self.host_network and self.data is not None and self.data.gcsfuse is not None:
            raise SpecError("host_network", "host-network pods cannot mount GCS FUSE volumes "
                            "without the driver's host-network opt-in, which roxxel-launch does not "
                            "render", "Set host_network: false, or read data from gs:// directly.")
        if self.host_network and self.workload != "jobset":
            raise SpecError("host_network", "needs workload: jobset (an indexed-job's headless "
                            "Service DNS names do not cover host-network pods)")

    @property
    def uses_host_network(self) -> bool:
        """hostNetwork: as given, else on for TPU multislice (the reference TPU JobSets do)
        unless the pods mount GCS FUSE, which host-network pods cannot without an opt-in."""
        if self.host_network is not None:
            return self.host_network
        gcsfuse = self.data is not None and self.data.gcsfuse is not None
        return self.accelerator.kind == "tpu" and self.num_slices > 1 and not gcsfuse

    def _check_checkpoint_dir(self) -> None:
        path = self.checkpoint_dir
        if path is None:
            return
        if path.startswith("gs://"):
            bucket = path[len("gs://"):].split("/", 1)[0]
            if not _BUCKET.fullmatch(bucket):
                raise SpecError("checkpoint_dir", f"{bucket!r} in {path!r} is not a GCS bucket name ({_BUCKET_RULE})")
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
    if tp is Any:
        return _plain(value, path)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(path, f"must be an integer, got {_type_name(value)} {value!r}")
        if not -INT32_MAX - 1 <= value <= INT32_MAX:
            raise SpecError(path, f"{value} does not fit in the 32-bit integer Kubernetes stores",
                            f"Use a value between 0 and {INT32_MAX}.")
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


def _plain(value: Any, path: str) -> Any:
    """A free-form value (affinity, pod_patch): strings, integers, booleans, null, lists and
    string-keyed mappings, returned as plain data; the schema check comes after rendering."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise SpecError(path, f"key {k!r} must be a string")
            out[_convert(str, k, path)] = _plain(v, f"{path}.{k}")
        return out
    if isinstance(value, list):
        return [_plain(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, str):
        return _convert(str, value, path)
    if isinstance(value, int) and not isinstance(value, bool):
        return _convert(int, value, path)
    if value is None or isinstance(value, bool):
        return value
    raise SpecError(path, f"a {_type_name(value)} cannot be placed in a manifest",
                    "Write numbers as integers or quoted strings.")


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
    # Every field is checked on its own and all problems are reported together. The checks of
    # the object as a whole (its __post_init__) run when every known field converted and every
    # required one is there: an unknown field alone does not hide them.
    unknown = []
    meant = set()  # fields an unknown key probably meant: not reported missing as well
    for key in data:
        if key not in fields:
            close = _meant_field(str(key), list(fields))
            meant.update(close)
            fix = f"Did you mean {close[0]!r}?" if close else f"Valid fields: {', '.join(fields)}."
            unknown.append(SpecError(f"{path}.{key}" if path else str(key), "unknown field", fix))
    problems = _Problems()
    kwargs, missing = {}, False
    for key, f in fields.items():
        sub = f"{path}.{key}" if path else key
        if key in data:
            with problems.check():
                kwargs[f.name] = _convert(hints[f.name], data[key], sub)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            missing = True
            if key not in meant:
                problems.errors.append(SpecError(sub, "is required", f"Add it: {f.metadata.get('doc', '')}"))
    built = None
    if not problems.errors and not missing:
        with problems.check(), _within(path):
            built = cls(**kwargs)
    if unknown or problems.errors:
        raise SpecError.joined(unknown + problems.errors)
    return built


def _meant_field(key: str, fields: list[str]) -> list[str]:
    """The field an unknown key most likely meant (``[]``: none): the longest field it contains
    (``queue`` for ``queue_name``), else the closest spelling."""
    contained = [f for f in fields if len(f) >= 4 and f in key]
    return [max(contained, key=len)] if contained else difflib.get_close_matches(key, fields, n=1)


def _type_at(path: Sequence[str]) -> Any:
    """The declared type of the field at a dotted path, or None if there is no such field."""
    tp: Any = JobSpec
    for part in path:
        tp = _strip_optional(tp)
        if tp is Any:  # inside a free-form value (pod_patch, affinity): everything below is too
            return Any
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
    (``--set 'command=[python, train.py]'``); inside a free-form field (``pod_patch``,
    ``affinity``) every value is YAML, as it would be in the spec file.
    """
    out, problems = _overridden(data, overrides)
    problems.raise_any()
    return out


def _overridden(data: Mapping, overrides: Sequence[str]) -> tuple[dict, _Problems]:
    """The mapping with every valid override applied, and the problems of the others."""
    out = copy.deepcopy(dict(data))
    problems = _Problems()
    for override in overrides:
        with problems.check():
            _apply_override(out, override)
    return out, problems


def _apply_override(out: dict, override: str) -> None:
    """Applies one ``key.path=value`` to ``out`` in place (nothing changes when it raises)."""
    path, eq, text = override.partition("=")
    # Keys such as nvidia.com/gpu contain dots: write them as nvidia\.com/gpu.
    parts = [p.replace("\\.", ".") for p in re.split(r"(?<!\\)\.", path)]
    if not eq or not all(parts):
        raise SpecError("--set", f"{override!r} is not key.path=value",
                        "Write e.g. --set accelerator.tpu.topology=4x4.")
    tp = _type_at(parts)
    value: Any
    if tp is Any:  # free-form (pod_patch, affinity): a YAML value, as in the spec file
        value = _override_yaml(text, path)
    elif tp is str or typing.get_origin(tp) is Literal or tp is None:
        value = text
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
        value = _override_yaml(text, path)
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


def _override_yaml(text: str, path: str) -> Any:
    """The YAML value of ``--set path=text``; an error names the field (so, the --set)."""
    try:
        return parse_yaml(text, f"--set {path}")
    except SpecError as err:
        raise SpecError(path, err.problem.removeprefix(f"--set {path}: "), err.fix) from None


def spec_from_dict(data: Any, overrides: Sequence[str] = ()) -> JobSpec:
    """Validates a raw mapping (e.g. parsed YAML) plus overrides into a JobSpec."""
    if not isinstance(data, dict):
        raise SpecError("", f"a job spec must be a mapping, got {_type_name(data)}",
                        f"Start the file with apiVersion: {API_VERSION} and kind: {KIND}.")
    out, problems = _overridden(data, overrides)
    with problems.check():
        spec = _build(JobSpec, out, "")
    problems.raise_any()
    return spec


class _SpecYAMLError(yaml.MarkedYAMLError):
    """Valid YAML that a job spec still refuses (duplicate keys, aliases, deep nesting)."""


class _SpecLoader(yaml.SafeLoader):
    """YAML's safe loader, stricter: no duplicate keys, no aliases, bounded nesting.

    PyYAML keeps the last of two equal keys silently, expands aliases (a small file can
    name a huge tree) and composes nested nodes recursively; a spec needs none of these.
    """

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise _SpecYAMLError(None, None, "aliases (*name) are not allowed in a job spec; "
                                       "write the value out", event.start_mark)
        self._depth += 1
        try:
            if self._depth > MAX_SPEC_DEPTH:
                raise _SpecYAMLError(None, None, f"nested more than {MAX_SPEC_DEPTH} levels deep",
                                           self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, (str, int, float, bool)) or key is None:
                if key in seen:
                    raise _SpecYAMLError(None, None, f"duplicate key {key!r}", key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _position(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "unknown position"


def parse_yaml(text: str, source: str) -> Any:
    """Parses YAML text with :class:`_SpecLoader`; every failure is one SpecError line.

    Raises:
        SpecError: syntax errors, duplicate keys, aliases and too deep nesting, naming
            ``source`` and the line and column (1-based).
    """
    try:
        return yaml.load(text, Loader=_SpecLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        what = " ".join(str(p) for p in (err.context, err.problem) if p)
        kind = "" if isinstance(err, _SpecYAMLError) else "not valid YAML: "
        raise SpecError("", f"{source}: {_position(mark)}: {kind}{' '.join(what.split())}") from None
    except yaml.YAMLError as err:
        raise SpecError("", f"{source}: not valid YAML: {' '.join(str(err).split())}") from None


def read_spec_text(path: str | Path) -> str:
    """Reads a spec file as UTF-8 text of at most :data:`MAX_SPEC_BYTES` bytes.

    Raises:
        SpecError: the file is unreadable, too large or not UTF-8 (with the line and column
            of the first bad byte).
    """
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_SPEC_BYTES + 1)
    except OSError as err:
        raise SpecError("", f"{path}: cannot read the job spec: {err.strerror or err}") from None
    if len(raw) > MAX_SPEC_BYTES:
        raise SpecError("", f"{path}: the job spec is larger than {MAX_SPEC_BYTES // 1024} KiB",
                        "The whole spec is stored in one annotation (Kubernetes allows 256 KiB of "
                        "annotations); move large values into a ConfigMap and use env_from.")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        column = err.start - (raw.rfind(b"\n", 0, err.start) + 1) + 1
        raise SpecError("", f"{path}: line {line}, column {column}: byte 0x{raw[err.start]:02x} is "
                        "not UTF-8", "Save the file as UTF-8.") from None


def load_spec(path: str | Path, overrides: Sequence[str] = ()) -> JobSpec:
    """Reads a YAML job spec file and applies ``--set`` overrides.

    Raises:
        SpecError: one line naming the file, and the position for malformed YAML.
    """
    data = parse_yaml(read_spec_text(path), str(path))
    try:
        return spec_from_dict(data, overrides)
    except SpecError as err:
        def located(e: SpecError) -> SpecError:
            source = _source_of(e.field, overrides, path)
            return SpecError(e.field, f"{e.problem} ({source})" if source else e.problem, e.fix)
        raise err.mapped(located) from err


def _source_of(field: str, overrides: Sequence[str], path: str | Path) -> str:
    """Where the value of ``field`` came from: the last ``--set`` that wrote it, a field around
    it (``command`` for ``command[3]``) or one inside it (``accelerater.tpu.type`` for an unknown
    ``accelerater``), else the spec file ("" for a malformed --set, whose message quotes it)."""
    if field == "--set":
        return ""
    for override in reversed(overrides):
        key = override.partition("=")[0].replace("\\.", ".")
        if field == key or field.startswith((key + ".", key + "[")) or key.startswith(field + "."):
            return f"from --set {override}"
    return f"in {path}"


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
        return {"type": "integer", "minimum": -INT32_MAX - 1, "maximum": INT32_MAX}
    if tp is Any:
        return {}
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
        if tp in (Accelerator, DataMount, EnvFromSource, KeyRef, ExtraVolume):
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
