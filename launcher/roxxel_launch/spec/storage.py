"""What the pods mount: the read-only data volume (GCS FUSE, NFS, a PVC) and extra volumes."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any, Literal

from roxxel_launch import names
from roxxel_launch.spec.errors import SpecError, _check
from roxxel_launch.spec.fields import _CONTROL, INT32_MAX, _check_quantity, _doc, _one_of, parse_quantity
from roxxel_launch.spec.owned import refuse

DEFAULT_GCSFUSE_MOUNT_OPTIONS = ("implicit-dirs",)
GCSFUSE_SIDECAR = "gke-gcsfuse-sidecar"
"""The container the GCS FUSE CSI driver's webhook injects (pkg/webhook/sidecar_spec.go)."""
GCSFUSE_METADATA_PREFETCH_SIDECAR = "gke-gcsfuse-metadata-prefetch"
"""The second container the webhook injects, after :data:`GCSFUSE_SIDECAR`, when a volume of
the pod sets ``gcsfuseMetadataPrefetchOnMount`` (pkg/webhook/sidecar_spec.go, injection.go)."""
GCSFUSE_SIDECAR_DEFAULT_REQUESTS = {"cpu": "250m", "memory": "256Mi", "ephemeral-storage": "5Gi"}
"""The sidecar's requests when the pod's annotations give none and its limit is unset or "0":
the driver's defaults (GoogleCloudPlatform/gcs-fuse-csi-driver pkg/webhook/config.go, the
webhook's configuration; "Configure the Cloud Storage FUSE CSI driver sidecar container for
GKE", https://cloud.google.com/kubernetes-engine/docs/how-to/cloud-storage-fuse-csi-driver-sidecar)."""
GCSFUSE_METADATA_PREFETCH_DEFAULT_REQUESTS = {"cpu": "10m", "memory": "10Mi", "ephemeral-storage": "10Mi"}
"""The metadata-prefetch sidecar's default requests (the webhook's ``metadata-sidecar-*-request``
flags, cmd/webhook/main.go at 5fcdc04), by the same rule as the main sidecar's."""
GCSFUSE_SIDECARS = {
    GCSFUSE_SIDECAR: ("gke-gcsfuse/", GCSFUSE_SIDECAR_DEFAULT_REQUESTS),
    GCSFUSE_METADATA_PREFETCH_SIDECAR: ("gke-gcsfuse/metadata-prefetch-", GCSFUSE_METADATA_PREFETCH_DEFAULT_REQUESTS),
}
"""Each injected container -> (the prefix of its resource annotations, its default requests);
the webhook reads ``PREFIX{cpu,memory,ephemeral-storage}-{request,limit}`` (pkg/webhook/config.go,
prepareConfig; the prefixes in pkg/webhook/injection.go)."""


def gcsfuse_sidecar_requests(annotations: Mapping[str, str], sidecar: str = GCSFUSE_SIDECAR) -> dict[str, Fraction]:
    """The requests the GCS FUSE CSI driver's webhook gives its ``sidecar`` (a key of
    :data:`GCSFUSE_SIDECARS`), from the pod's resource annotations (for the main sidecar
    ``gke-gcsfuse/{cpu,memory,ephemeral-storage}-{request,limit}``), by its rule
    (GoogleCloudPlatform/gcs-fuse-csi-driver ``pkg/webhook/config.go``, ``populateResource``,
    commit 01870a9): no request and a limit unset or ``"0"`` (no limit): the default request;
    no request and a limit: the limit; a request: itself. A zero request is left out, as the
    webhook leaves it out.

    Returns: resource -> amount (cores, bytes). Raises: ValueError for an annotation that is
    not a quantity (the webhook refuses the pod then)."""
    prefix, defaults = GCSFUSE_SIDECARS[sidecar]
    out: dict[str, Fraction] = {}
    for resource, default in defaults.items():
        request = annotations.get(f"{prefix}{resource}-request")
        limit = annotations.get(f"{prefix}{resource}-limit")
        if request is None:
            request = default if limit is None or parse_quantity(limit) == 0 else limit
        amount = parse_quantity(request)
        if amount:
            out[resource] = amount
    return out


_BUCKET = re.compile(r"[a-z0-9][a-z0-9_.\-]{1,220}[a-z0-9]")
# What _BUCKET checks, in the words of Cloud Storage's naming rules, for error messages.
_BUCKET_RULE = (
    "bucket names are 3-63 characters (up to 222 with dots) of lowercase letters, digits, '-', '_' "
    "and '.', starting and ending with a letter or digit"
)
# gcsfuse options as the CSI driver takes them: key, key:value or section:key:value.
_GCSFUSE_OPTION = re.compile(r"[a-z][a-z0-9-]*(:[A-Za-z0-9_.\-]+){0,2}")
_GCSFUSE_DIR = re.compile(r"[A-Za-z0-9_.\-]+(/[A-Za-z0-9_.\-]+)*/?")
# identityProvider: an https URL, e.g. GKE's https://container.googleapis.com/v1/projects/
# P/locations/L/clusters/C; the driver splits volume attributes into mount options at ','.
_IDENTITY_PROVIDER = re.compile(r"https://[A-Za-z0-9.\-]+(:[0-9]+)?(/[A-Za-z0-9_.~\-]+)*/?")
_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.\-]*[A-Za-z0-9])?|[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*")


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
        default=DEFAULT_GCSFUSE_MOUNT_OPTIONS,
    )
    file_cache_mb: int | None = _doc(
        "Turn the gcsfuse file cache on, bounded to this many MiB (file-cache:max-size-mb), "
        "on a dedicated gke-gcsfuse-cache volume.",
        default=None,
    )
    file_cache_medium: Literal["memory", "disk"] = _doc(
        "Where the gke-gcsfuse-cache volume lives: memory (tmpfs, counts against the pod's "
        "memory) or disk (the node's ephemeral storage: local SSD on node pools created with "
        "--ephemeral-storage-local-ssd).",
        default="disk",
    )
    file_cache_for_range_read: bool = _doc(
        "Needs file_cache_mb. Cache a whole object on a first random or partial read too "
        "(file-cache:cache-file-for-range-read:true); off, only reads from offset 0 fill the "
        "cache.",
        default=False,
    )
    parallel_downloads: bool = _doc(
        "Needs file_cache_mb. Fill the file cache with parallel ranged downloads "
        "(file-cache:enable-parallel-downloads:true): faster first reads of large files.",
        default=False,
    )
    parallel_downloads_per_file: int | None = _doc(
        "Needs parallel_downloads. Downloads at once per file, at least 1 (file-cache:parallel-downloads-per-file).",
        default=None,
    )
    max_parallel_downloads: int | None = _doc(
        "Needs parallel_downloads. Downloads at once across all files, at least 1, or -1 for no "
        "limit (file-cache:max-parallel-downloads).",
        default=None,
    )
    download_chunk_size_mb: int | None = _doc(
        "Needs parallel_downloads. MiB each parallel download fetches, at least 1 (file-cache:download-chunk-size-mb).",
        default=None,
    )
    metadata_prefetch_on_mount: bool = _doc(
        "List the mounted directory once at mount, filling gcsfuse's metadata cache "
        "(the driver's gcsfuseMetadataPrefetchOnMount volume attribute; GKE 1.32.1-gke.1357001+).",
        default=False,
    )
    sidecar_cpu_limit: str = _doc('gke-gcsfuse/cpu-limit annotation; "0" = no limit.', default="0")
    sidecar_memory_limit: str = _doc('gke-gcsfuse/memory-limit annotation; "0" = no limit.', default="0")
    sidecar_ephemeral_storage_limit: str = _doc(
        'gke-gcsfuse/ephemeral-storage-limit annotation; "0" = no limit.', default="0"
    )

    identity_provider: str | None = _doc(
        "Host-network pods only: the identityProvider volume attribute, the cluster's Workload "
        "Identity provider URL (https://container.googleapis.com/v1/projects/PROJECT/locations/"
        "LOCATION/clusters/CLUSTER). Needed only with a self-deployed (open-source) driver; "
        "GKE's managed driver finds it itself.",
        default=None,
    )

    def __post_init__(self):
        if self.identity_provider is not None and not _IDENTITY_PROVIDER.fullmatch(self.identity_provider):
            raise SpecError(
                "identity_provider",
                f"{self.identity_provider!r} is not an https URL of letters, digits and . _ ~ - /",
                "Give the cluster's provider, e.g. https://container.googleapis.com/v1/"
                "projects/P/locations/L/clusters/C.",
            )
        if not _BUCKET.fullmatch(self.bucket):
            raise SpecError(
                "bucket",
                f"{self.bucket!r} is not a GCS bucket name ({_BUCKET_RULE})",
                "Give the bare bucket name, e.g. my-data (no gs://, no path).",
            )
        if self.only_dir is not None and not _GCSFUSE_DIR.fullmatch(self.only_dir):
            raise SpecError(
                "only_dir",
                f"{self.only_dir!r} must be a relative directory of letters, "
                "digits and . _ - / (no ',', ':', '=' or spaces)",
                "The driver splits mount options at ',' and at ':'.",
            )
        for i, option in enumerate(self.mount_options):
            if not _GCSFUSE_OPTION.fullmatch(option):
                raise SpecError(
                    f"mount_options[{i}]",
                    f"{option!r} is not a gcsfuse mount option in the key or key:value form (no ',', '=' or spaces)",
                    "Give one option per list item, e.g. implicit-dirs or metadata-cache:ttl-secs:-1.",
                )
            refuse("data.gcsfuse.mount_options", option, self, at=f"mount_options[{i}]")
        if self.file_cache_mb is not None and not 1 <= self.file_cache_mb <= INT32_MAX:
            raise SpecError(
                "file_cache_mb",
                f"must be at least 1 MiB, got {self.file_cache_mb}",
                "Leave it out to turn the file cache off.",
            )
        self._check_cache_options()
        for field in ("sidecar_cpu_limit", "sidecar_memory_limit", "sidecar_ephemeral_storage_limit"):
            _check_quantity(field, getattr(self, field))

    def _check_cache_options(self) -> None:
        """The file-cache options' types and ranges (gcsfuse's own checks, made offline)."""
        counts = {"parallel_downloads_per_file": 1, "max_parallel_downloads": -1, "download_chunk_size_mb": 1}
        for field, low in counts.items():
            value = getattr(self, field)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or not (low <= value <= INT32_MAX) or value == 0:
                allowed = "at least 1, or -1 for no limit" if low == -1 else "at least 1"
                raise SpecError(field, f"must be a whole number, {allowed}, got {value!r}")
            if not self.parallel_downloads:
                raise SpecError(field, "tunes parallel downloads, which are off", "Set parallel_downloads: true.")
        for field in ("file_cache_for_range_read", "parallel_downloads"):
            if getattr(self, field) and self.file_cache_mb is None:
                raise SpecError(field, "needs the file cache, which is off", "Set file_cache_mb.")

    def _cache_options(self) -> list[str]:
        """The file-cache mount options the spec's cache fields stand for, in gcsfuse's
        section:key:value form (gcsfuse's file-cache config; the GCS FUSE CSI driver's
        parallel-download test, test/e2e/testsuites/gcsfuse_integration_file_cache_parallel_downloads.go)."""
        if self.file_cache_mb is None:
            return []
        options = [f"file-cache:max-size-mb:{self.file_cache_mb}"]
        if self.file_cache_for_range_read:
            options.append("file-cache:cache-file-for-range-read:true")
        if self.parallel_downloads:
            options.append("file-cache:enable-parallel-downloads:true")
        for field, key in (
            ("parallel_downloads_per_file", "parallel-downloads-per-file"),
            ("max_parallel_downloads", "max-parallel-downloads"),
            ("download_chunk_size_mb", "download-chunk-size-mb"),
        ):
            if getattr(self, field) is not None:
                options.append(f"file-cache:{key}:{getattr(self, field)}")
        return options

    @property
    def cache_volume_mib(self) -> int | None:
        """Size of the gke-gcsfuse-cache volume in MiB: the bounded cache plus 10% (at least
        64 MiB) for gcsfuse's own files; None without a file cache."""
        if self.file_cache_mb is None:
            return None
        return self.file_cache_mb + max(self.file_cache_mb // 10, 64)

    @property
    def sidecar_requests(self) -> dict[str, Fraction]:
        """What the driver's sidecars request in each pod, summed, from the limits the renderer
        writes as annotations (:func:`gcsfuse_sidecar_requests`): with the default "0" limits,
        250m cpu, 256Mi memory and 5Gi ephemeral storage, plus the metadata-prefetch sidecar's
        10m, 10Mi and 10Mi with ``metadata_prefetch_on_mount``."""
        total = gcsfuse_sidecar_requests(
            {
                "gke-gcsfuse/cpu-limit": self.sidecar_cpu_limit,
                "gke-gcsfuse/memory-limit": self.sidecar_memory_limit,
                "gke-gcsfuse/ephemeral-storage-limit": self.sidecar_ephemeral_storage_limit,
            }
        )
        if self.metadata_prefetch_on_mount:
            for resource, amount in gcsfuse_sidecar_requests({}, GCSFUSE_METADATA_PREFETCH_SIDECAR).items():
                total[resource] = total.get(resource, Fraction(0)) + amount
        return total

    @property
    def cache_disk_bytes(self) -> int:
        """Bytes of the node's ephemeral storage the file cache volume takes (0 in memory)."""
        mib = self.cache_volume_mib
        return 0 if mib is None or self.file_cache_medium == "memory" else mib * 2**20

    def volume_attributes(self, host_network: bool) -> dict[str, str]:
        """The CSI volume's ``volumeAttributes``.

        Host-network pods get ``hostNetworkPodKSA: "true"`` (and ``identityProvider`` when
        given): without that opt-in the driver cannot get their Kubernetes service account's
        token (GoogleCloudPlatform/gcs-fuse-csi-driver docs/authentication.md and
        examples/multi-nic/cloudtpu.yaml at 5fcdc04a; GKE 1.33.3-gke.1226000+, Standard
        clusters only, docs/releases.md).
        """
        attributes = {"bucketName": self.bucket, "mountOptions": self.joined_options()}
        if self.metadata_prefetch_on_mount:
            # The driver's webhook adds its gke-gcsfuse-metadata-prefetch sidecar for it
            # (pkg/webhook/sidecar_spec.go, gcsfuseMetadataPrefetchOnMount).
            attributes["gcsfuseMetadataPrefetchOnMount"] = "true"
        if host_network:
            attributes["hostNetworkPodKSA"] = "true"
            if self.identity_provider is not None:
                attributes["identityProvider"] = self.identity_provider
        return attributes

    def joined_options(self) -> str:
        options = list(self.mount_options)
        if self.only_dir is not None:
            options.append(f"only-dir:{self.only_dir}")
        options += self._cache_options()
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
            raise SpecError(
                "path", f"{self.path!r} must be an absolute path without control characters, e.g. /vol1/data"
            )


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


@dataclasses.dataclass(frozen=True)
class EmptyDirSource:
    """A scratch directory: the node's ephemeral storage (a local SSD) or memory."""

    medium: Literal["disk", "memory"] = _doc("disk (node ephemeral storage) or memory (tmpfs).", default="disk")
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
        refuse("volumes[].name", self.name, self, at="name")
        if not self.mount_path.startswith("/") or _CONTROL.search(self.mount_path) or ":" in self.mount_path:
            raise SpecError(
                "mount_path", f"{self.mount_path!r} must be an absolute path without ':' or control characters"
            )
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
            source = {"nfs": {"server": self.nfs.server, "path": self.nfs.path, "readOnly": self.read_only}}
        elif self.empty_dir is not None:
            source = {"emptyDir": self.empty_dir.to_k8s()}
        else:  # __post_init__ requires exactly one source; a volume changed since is refused here
            raise SpecError("name", f"volume {self.name!r} has no source")
        return (
            {"name": self.name, **source},
            {"name": self.name, "mountPath": self.mount_path, "readOnly": self.read_only},
        )
