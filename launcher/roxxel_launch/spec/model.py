"""The job spec's root object, :class:`JobSpec`, and the checks that span its fields.

Its parts live beside it: accelerators, storage (data and extra volumes), pod (scheduling,
security, environment sources); what users may not set is in :mod:`roxxel_launch.spec.owned`.

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

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

from roxxel.run import branch_overlap
from roxxel_launch import contract, gpu_networking, names
from roxxel_launch.spec.accelerators import Accelerator
from roxxel_launch.spec.errors import SpecError, _check, _Problems
from roxxel_launch.spec.fields import INT32_MAX, _check_quantity, _doc, _freeze, image_reference_problem, parse_quantity
from roxxel_launch.spec.metadata import ObjectMetadata
from roxxel_launch.spec.owned import refuse
from roxxel_launch.spec.pod import EnvFromSource, KeyRef, Resources, Security, Toleration
from roxxel_launch.spec.queueing import QueueProvisioning, Topology, check_queueing
from roxxel_launch.spec.storage import _BUCKET, _BUCKET_RULE, DataMount, ExtraVolume
from roxxel_launch.spec.training import Watchdog, check_parallelism

API_VERSION = "roxxel.dev/v1alpha1"
KIND = "RoxxelJob"
# Slices of one JobSet (replicas of its replicated job, an int32; JAX's process ids too).
MAX_SLICES = 100_000
# The default compilation cache's folder inside checkpoint_dir (no digits: the Checkpointer's
# steps are the folders whose names are numbers, roxxel/train/checkpoint/directory.py).
COMPILATION_CACHE_SUBDIR = "compilation-cache"
# Ephemeral storage a GKE node with the default 100 GB boot disk offers pods (its
# allocatable, in bytes): GKE's example node in "Plan GKE Standard node sizes"
# (docs/kubernetes.md, "Storage"). TPU and GPU node pools get that boot disk by default.
DEFAULT_NODE_EPHEMERAL_STORAGE = 47_060_071_478
EPHEMERAL_STORAGE = "ephemeral-storage"


@dataclasses.dataclass(frozen=True)
class JobSpec:
    """A multi-host JAX training job: what runs, where, on what, and how it restarts."""

    api_version: str = _doc(f"Spec version; must be {API_VERSION}.", metadata={"key": "apiVersion"})
    kind: str = _doc(f"Must be {KIND}.")
    name: str = _doc("Name of the JobSet (or Job and Service): a DNS-1035 label.")
    image: str = _doc("Worker image; its entrypoint is roxxel-worker.")
    command: tuple[str, ...] = _doc(
        "The training command, run as `roxxel-worker -- COMMAND...`; passed literally (no $(VAR) expansion)."
    )
    accelerator: Accelerator = _doc("Exactly one of tpu, gpu, cpu.")
    namespace: str = _doc("Kubernetes namespace.", default="default")
    num_slices: int = _doc("Slices (replicas of the per-slice job); TPU multislice when > 1.", default=1)
    env: Mapping[str, str] = _doc("Extra environment variables (values are strings).", default_factory=dict)
    data: DataMount | None = _doc(f"Read-only data volume, mounted at {contract.DATA_MOUNT_PATH}.", default=None)
    checkpoint_dir: str | None = _doc(
        "gs://BUCKET/PATH (Orbax writes directly) or an absolute path on a writable mount.", default=None
    )
    compilation_cache: str | None = _doc(
        "Where JAX's persistent compilation cache lives (JAX_COMPILATION_CACHE_DIR), shared by every "
        "attempt and resume of the job, so that a restarted gang reuses the programs the last one "
        "compiled instead of compiling them again: gs://BUCKET/PATH, or an absolute path on a writable "
        "mount (as checkpoint_dir). Default: CHECKPOINT_DIR/compilation-cache when checkpoint_dir is "
        "set, else each pod's own emptyDir (lost with the pod); `off` keeps the emptyDir.",
        default=None,
    )
    watchdog: Watchdog = _doc(
        "The progress watchdog: a worker that stops making progress ends the job "
        "(exit 43, a counted gang restart) after these bounds.",
        default_factory=Watchdog,
    )
    parallelism: Mapping[str, int] | None = _doc(
        "The device mesh: sizes of its axes data, fsdp, tensor, sequence (outer to inner), e.g. "
        "{fsdp: 4, tensor: 2}; missing axes are 1, one axis may be -1 to take what the others leave, "
        "and data fills when none is -1, so one spec serves any number of hosts and slices. data spans "
        "the slices (DCN), the other axes stay inside one (ICI). Rendered as ROXXEL_PARALLELISM "
        "(fsdp=4,tensor=2) for roxxel.sharding.default_mesh(); unset or empty: one data axis over every device.",
        default=None,
    )
    restore_from: str | None = _doc(
        "Another run's checkpoint directory (gs://BUCKET/PATH or an absolute path) to branch "
        "from: read, never written, while checkpoint_dir holds no step.",
        default=None,
    )
    run_name: str | None = _doc("Run identity kept across resumes (label value); defaults to name.", default=None)
    service_account: str | None = _doc("Kubernetes service account (Workload Identity).", default=None)
    queue: str | None = _doc("Kueue LocalQueue (kueue.x-k8s.io/queue-name label).", default=None)
    workload_priority_class: str | None = _doc(
        "Kueue WorkloadPriorityClass (kueue.x-k8s.io/priority-class label on the JobSet / Job): orders and "
        "preempts the job in its queue, leaving the pods' priority_class alone; needs queue.",
        default=None,
    )
    topology: Topology | None = _doc(
        "Kueue topology-aware scheduling, whole PodSet and/or slices of it "
        "(annotations on the pod template); needs queue.",
        default=None,
    )
    queue_provisioning: QueueProvisioning | None = _doc(
        "GKE flex-start with queued provisioning through Kueue's ProvisioningRequest admission check: "
        "the pods tolerate and select queued-provisioning nodes (cloud.google.com/gke-queued), "
        "max_run_duration_seconds becomes the JobSet / Job's provreq.kueue.x-k8s.io/maxRunDurationSeconds "
        "annotation; needs queue.",
        default=None,
    )
    priority_class: str | None = _doc("PriorityClass name.", default=None)
    max_restarts: int = _doc("Gang restarts for failures other than preemption (JobSet only).", default=3)
    max_preemptions: int = _doc(
        "Free gang restarts (preemption, eviction, exit 42) on top of max_restarts (JobSet "
        "only): a pod of a later restart exits 78 before starting, failing the JobSet.",
        default=100,
    )
    termination_grace_period: int = _doc(
        "Seconds between SIGTERM and SIGKILL: enough to save a checkpoint.", default=300
    )
    spot_grace_period: int | None = _doc(
        "Seconds GKE gives the pods when their Spot or preemptible node is reclaimed (the kubelet's "
        "graceful node shutdown for non-system pods): 15 when unset; set it (at most 120) for a node "
        "pool whose shutdown setting gives more. Used only when node_selectors target Spot or "
        "preemptible nodes: the workers are then told the smaller of this and termination_grace_period "
        "(ROXXEL_TERMINATION_GRACE_S), so that a preemption save is planned on what GKE gives.",
        default=None,
    )
    log_format: Literal["json", "text"] | None = _doc(
        "How the worker, the Trainer's Logger and roxxel's logging write their lines (rendered as "
        "ROXXEL_LOG_FORMAT): json, one JSON object a line with severity, message, time and "
        "process_index, which Cloud Logging reads as the entry's severity (log-based alerts on "
        "severity>=ERROR), or text. Default: json on Kubernetes, text for --local; `logs` shows "
        "JSON lines as text.",
        default=None,
    )
    workload: Literal["jobset", "indexed-job"] = _doc(
        "Object kind: jobset (gang restarts, multislice) or indexed-job (Job + headless Service, "
        "no JobSet controller needed, no gang restart).",
        default="jobset",
    )
    resources: Resources = _doc("Extra container requests/limits.", default_factory=Resources)
    node_selectors: Mapping[str, str] = _doc("Extra node selectors.", default_factory=dict)
    node_ephemeral_storage: str | None = _doc(
        "Ephemeral storage one node of the pool offers pods, as a quantity: its allocatable "
        "(kubectl get node NODE -o jsonpath='{.status.allocatable.ephemeral-storage}'), e.g. "
        "1400Gi on nodes with local SSDs (--ephemeral-storage-local-ssd). The disk file cache "
        "and the ephemeral-storage request must fit in it, or the spec is refused. Unknown "
        "(default): a warning when they need more than a default 100 GB boot disk offers "
        f"({DEFAULT_NODE_EPHEMERAL_STORAGE} bytes, about 43 GiB).",
        default=None,
    )
    tolerations: tuple[Toleration, ...] = _doc("Extra tolerations.", default=())
    security: Security = _doc(
        "Pod Security profile (restricted, baseline, privileged), user, API token, NetworkPolicy.",
        default_factory=Security,
    )
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = _doc(
        "Container imagePullPolicy; default Always for a tag (tags are mutable), IfNotPresent "
        "for an image pinned by @sha256 digest.",
        default=None,
    )
    image_pull_secrets: tuple[str, ...] = _doc(
        "Secrets for pulling the image from a private registry (imagePullSecrets).", default=()
    )
    env_from: tuple[EnvFromSource, ...] = _doc(
        "Whole Secrets / ConfigMaps as environment variables (envFrom).", default=()
    )
    env_refs: Mapping[str, KeyRef] = _doc(
        "Variables read from one key of a Secret or ConfigMap (valueFrom).", default_factory=dict
    )
    volumes: tuple[ExtraVolume, ...] = _doc("Extra volumes and their mounts in the worker.", default=())
    labels: Mapping[str, str] = _doc("Extra labels on the workload object and its pods.", default_factory=dict)
    annotations: Mapping[str, str] = _doc("Extra annotations on the pods.", default_factory=dict)
    metadata: ObjectMetadata | None = _doc(
        "Labels and annotations of the JobSet / Job object itself, not its pods.", default=None
    )
    affinity: Mapping[str, Any] | None = _doc(
        "Pod affinity, as Kubernetes' Affinity object (checked against the official schema).", default=None
    )
    host_network: bool | None = _doc(
        "Run the pods on the node's network (hostNetwork + dnsPolicy ClusterFirstWithHostNet): "
        "TPU slices and GPU hosts, under security.profile privileged (unset: it then defaults "
        "to privileged). With data.gcsfuse the volume gets the driver's hostNetworkPodKSA "
        "opt-in (GKE 1.33.3-gke.1226000+, Standard clusters). Default: true for TPU multislice "
        "(DCN traffic) without data.gcsfuse, unless security.profile is restricted or baseline, as GKE's reference TPU JobSets "
        "do; false otherwise.",
        default=None,
    )
    ttl_seconds_after_finished: int | None = _doc(
        "Delete the finished JobSet / Job (and its pods' logs) this many seconds after it "
        "ends; `resume` cannot read a deleted job's spec.",
        default=None,
    )
    pod_patch: Mapping[str, Any] | None = _doc(
        "Last resort: a strategic-merge patch of the rendered pod template (metadata + spec); "
        "the result is validated like everything else.",
        default=None,
    )

    def __post_init__(self):
        # Independent checks: every failing one is reported (checks of one field stop at its first).
        problems = _Problems()
        with problems.check():
            if self.api_version != API_VERSION:
                raise SpecError(
                    "apiVersion", f"{self.api_version!r} is not supported", f"Use apiVersion: {API_VERSION}."
                )
        with problems.check():
            if self.kind != KIND:
                raise SpecError("kind", f"{self.kind!r} is not a job spec kind", f"Use kind: {KIND}.")
        with problems.check():
            _check("name", names.dns1035_label_problem(self.name))
        with problems.check():
            _check("namespace", names.dns1123_label_problem(self.namespace))
        with problems.check():
            _check(
                "image",
                image_reference_problem(self.image),
                "Use e.g. us-docker.pkg.dev/PROJECT/REPO/IMAGE:TAG, or pin a digest: "
                "us-docker.pkg.dev/PROJECT/REPO/IMAGE@sha256:<64 hex digits>.",
            )
        with problems.check():
            if not self.command:
                raise SpecError("command", "must not be empty", "Give e.g. [python, examples/lm/train.py].")
        with problems.check():
            self._check_num_slices()
        for key in self.env:
            with problems.check():
                _check(f"env.{key}", names.env_var_name_problem(key))
                refuse("env", key, self, at=f"env.{key}")
        object.__setattr__(self, "env", _freeze(self.env))
        if self.parallelism is not None:
            with problems.check():
                if not problems.failed("num_slices"):
                    check_parallelism(self)
            object.__setattr__(self, "parallelism", _freeze(self.parallelism))
        with problems.check():
            self._check_checkpoint_dir()
        with problems.check():
            self._check_restore_from()
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
            check_queueing(self)
        with problems.check():
            if self.priority_class is not None:
                _check("priority_class", names.dns1123_subdomain_problem(self.priority_class))
        with problems.check():
            cache = self.compilation_cache
            if cache not in (None, "off") and not (cache.startswith("gs://") or cache.startswith("/")):
                raise SpecError(
                    "compilation_cache",
                    f"{cache!r} is neither gs://BUCKET/PATH nor an absolute path",
                    "Give a gs:// path or an absolute path on a writable mount, or `off`.",
                )
        with problems.check():
            if self.spot_grace_period is not None and not 1 <= self.spot_grace_period <= 120:
                raise SpecError(
                    "spot_grace_period",
                    f"must be between 1 and 120 seconds (GKE's longest graceful node shutdown for Spot pods), "
                    f"got {self.spot_grace_period}",
                )
        for field, value, most, unit in (
            ("max_restarts", self.max_restarts, 10_000, ""),
            ("max_preemptions", self.max_preemptions, 100_000, ""),
            ("termination_grace_period", self.termination_grace_period, 86_400, " seconds"),
        ):
            with problems.check():
                if not 0 <= value <= most:
                    raise SpecError(field, f"must be between 0 and {most}{unit}, got {value}")
        for key, value in self.node_selectors.items():
            with problems.check():
                _check(f"node_selectors.{key}", names.qualified_name_problem(key))
                _check(f"node_selectors.{key}", names.label_value_problem(value))
                refuse("node_selectors", key, self, at=f"node_selectors.{key}")
        object.__setattr__(self, "node_selectors", _freeze(self.node_selectors))
        with problems.check():
            self._check_escape_hatches()
        with problems.check():
            self._check_ephemeral_storage()
        with problems.check():
            self._check_security()
        problems.raise_any()
        # Needs a valid name and slice count: after the others.
        _check(
            "name",
            names.pod_name_problem(longest_pod_name(self)),
            f"Shorten name to at most {max_name_length(self)} characters.",
        )

    def _check_num_slices(self) -> None:
        if not 1 <= self.num_slices <= MAX_SLICES:
            raise SpecError("num_slices", f"must be at least 1 and at most {MAX_SLICES}, got {self.num_slices}")
        if self.num_processes > INT32_MAX:
            raise SpecError(
                "num_slices",
                f"{self.num_slices} slices of {self.hosts_per_slice} hosts "
                f"are {self.num_processes} processes, more than fit in an int32",
            )
        if self.workload == "indexed-job" and self.num_slices != 1:
            raise SpecError(
                "num_slices", "an indexed-job runs a single slice", "Use workload: jobset for several slices."
            )

    def _check_escape_hatches(self) -> None:
        for i, secret in enumerate(self.image_pull_secrets):
            _check(f"image_pull_secrets[{i}]", names.dns1123_subdomain_problem(secret))
        for key in self.env_refs:
            _check(f"env_refs.{key}", names.env_var_name_problem(key))
            refuse("env_refs", key, self, at=f"env_refs.{key}")
        object.__setattr__(self, "env_refs", _freeze(self.env_refs))
        paths = [v.mount_path.rstrip("/") for v in self.volumes]
        for i, volume in enumerate(self.volumes):
            refuse("volumes[].mount_path", volume.mount_path, self, at=f"volumes[{i}].mount_path")
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
                refuse(section, key, self, at=f"{section}.{key}")
            object.__setattr__(self, section, _freeze(getattr(self, section)))
        for section in ("labels", "annotations"):
            for key in getattr(self.metadata, section) if self.metadata is not None else ():
                refuse(f"metadata.{section}", key, self, at=f"metadata.{section}.{key}")
                if section == "labels" and key in self.labels:
                    raise SpecError(
                        f"metadata.labels.{key}",
                        "is also in labels, which sets it on the JobSet / Job too",
                        "Keep it in one of them.",
                    )
        if self.ttl_seconds_after_finished is not None and self.ttl_seconds_after_finished < 0:
            raise SpecError(
                "ttl_seconds_after_finished", f"must be 0 or more seconds, got {self.ttl_seconds_after_finished}"
            )
        refuse("host_network", self.host_network, self)
        if self.data is not None and self.data.gcsfuse is not None:
            refuse("data.gcsfuse.identity_provider", self.data.gcsfuse.identity_provider, self)

    @property
    def disk_cache_bytes(self) -> int:
        """Bytes of node ephemeral storage the GCS FUSE file cache volume takes (0: none, or
        in memory)."""
        fuse = self.data.gcsfuse if self.data is not None else None
        return 0 if fuse is None else fuse.cache_disk_bytes

    @property
    def sidecar_ephemeral_bytes(self) -> int:
        """Bytes of node ephemeral storage the GCS FUSE sidecar requests in each pod (5 GiB
        with the default "0" limit: :attr:`GcsFuseMount.sidecar_requests`); 0 without it."""
        fuse = self.data.gcsfuse if self.data is not None else None
        return 0 if fuse is None else int(fuse.sidecar_requests.get(EPHEMERAL_STORAGE, 0))

    @property
    def ephemeral_storage_bytes(self) -> int:
        """Bytes of node ephemeral storage one pod requests: the worker's ephemeral-storage
        request (its limit when only that is given: the request defaults to it), the disk
        file cache, which the renderer adds to the request, and the GCS FUSE sidecar's
        request, which the driver's webhook adds to the pod."""
        own = self.resources.requests.get(EPHEMERAL_STORAGE, self.resources.limits.get(EPHEMERAL_STORAGE))
        return (0 if own is None else int(parse_quantity(own))) + self.disk_cache_bytes + self.sidecar_ephemeral_bytes

    def _check_ephemeral_storage(self) -> None:
        if self.node_ephemeral_storage is None:
            return
        _check_quantity("node_ephemeral_storage", self.node_ephemeral_storage)
        node = parse_quantity(self.node_ephemeral_storage)
        need = self.ephemeral_storage_bytes
        if need <= node:
            return
        cache = self.disk_cache_bytes
        sidecar = self.sidecar_ephemeral_bytes
        field = "data.gcsfuse.file_cache_mb" if cache else f"resources.requests.{EPHEMERAL_STORAGE}"
        if not cache and need == sidecar:
            field = "data.gcsfuse.sidecar_ephemeral_storage_limit"
        raise SpecError(
            field,
            f"each pod needs {need / 2**30:.1f} GiB of node ephemeral storage "
            f"({cache / 2**30:.1f} GiB of it the gcsfuse file cache volume"
            + (f", {sidecar / 2**30:.1f} GiB the GCS FUSE sidecar's request" if sidecar else "")
            + f") but a node offers {float(node) / 2**30:.1f} GiB (node_ephemeral_storage "
            f"{self.node_ephemeral_storage}): the pods would never be scheduled",
            "Lower file_cache_mb or the ephemeral-storage request, use file_cache_medium: memory, "
            "or run on nodes with more (local SSD: --ephemeral-storage-local-ssd) and set "
            "node_ephemeral_storage to their allocatable"
            + (
                f"; or set data.gcsfuse.sidecar_ephemeral_storage_limit, which the GCS FUSE sidecar then requests "
                f"(now {sidecar / 2**30:.1f} GiB)."
                if sidecar
                else "."
            ),
        )

    @property
    def uses_host_network(self) -> bool:
        """hostNetwork: as given, else on for TPU multislice (the reference TPU JobSets do)
        unless the pods mount GCS FUSE (the driver's host-network support needs GKE
        1.33.3-gke.1226000+ on a Standard cluster, which a default cannot know: opt in with
        host_network: true), or security.profile names a level that forbids host namespaces
        (restricted, baseline)."""
        if self.host_network is not None:
            return self.host_network
        return self.multislice_host_network_fits and not self.mounts_gcsfuse

    @property
    def multislice_host_network_fits(self) -> bool:
        """TPU multislice, under a profile that allows host namespaces (none given, or
        privileged): the pods the reference TPU JobSets (GKE's, JobSet's, xpk's) put on the
        host network for their DCN traffic. :attr:`uses_host_network` defaults to it, less
        GCS FUSE pods; the cluster preflight names ``host_network: true`` for those."""
        return self.accelerator.kind == "tpu" and self.num_slices > 1 and self.security.profile in (None, "privileged")

    @property
    def compilation_cache_dir(self) -> str | None:
        """The persistent compilation cache every attempt shares: ``compilation_cache``, or
        ``CHECKPOINT_DIR/compilation-cache`` by default (the checkpoint directory already
        outlives the pods); None with ``off`` or without a checkpoint_dir (each pod's emptyDir)."""
        if self.compilation_cache == "off":
            return None
        if self.compilation_cache is not None:
            return self.compilation_cache
        if self.checkpoint_dir is None:
            return None
        return self.checkpoint_dir.rstrip("/") + "/" + COMPILATION_CACHE_SUBDIR

    @property
    def mounts_gcsfuse(self) -> bool:
        """The pods mount ``data.gcsfuse`` (the GCS FUSE CSI driver's sidecar)."""
        return self.data is not None and self.data.gcsfuse is not None

    @property
    def security_profile(self) -> str:
        """The Pod Security Standards level the pods are written for: ``security.profile``,
        else :func:`default_security_profile`."""
        return self.security.profile or default_security_profile(self)

    def _check_security(self) -> None:
        if self.security_profile != "restricted":
            return
        mode = (self.accelerator.gpu.networking if self.accelerator.gpu is not None else None) or "none"
        added = gpu_networking.WORKER_CAPABILITIES.get(mode, ())
        if added:
            raise SpecError(
                "security.profile",
                f"restricted forbids adding {', '.join(added)}, which "
                f"accelerator.gpu.networking: {mode} gives the worker (GKE's GPUDirect "
                "manifests; Pod Security Standards, Capabilities)",
                "Set security.profile: baseline (the preset's default) or privileged.",
            )
        for name in ("run_as_user", "run_as_group"):
            if getattr(self.security, name) == 0:
                raise SpecError(
                    f"security.{name}",
                    "is 0 (root), which the restricted profile forbids",
                    f"Use a non-root ID (the image's: {contract.WORKER_UID}), or set "
                    "security.profile: baseline to run as root.",
                )

    def _check_checkpoint_dir(self) -> None:
        path = self.checkpoint_dir
        if path is None or _check_storage_path("checkpoint_dir", path):
            return
        data = contract.DATA_MOUNT_PATH
        if self.data is not None and (path == data or path.startswith(data + "/")):
            raise SpecError(
                "checkpoint_dir",
                f"{path!r} is on the read-only data mount {data}",
                "Write checkpoints to gs://... or another, writable path.",
            )

    def _check_restore_from(self) -> None:
        path = self.restore_from
        if path is None:
            return
        _check_storage_path("restore_from", path)
        if self.checkpoint_dir is None:
            raise SpecError(
                "restore_from",
                "is given without checkpoint_dir: the branch would have nowhere of its own to save",
                "Give checkpoint_dir too (a new directory for this run).",
            )
        overlap = branch_overlap(self.checkpoint_dir, path)
        if overlap == "same":
            raise SpecError(
                "restore_from",
                f"{path!r} is checkpoint_dir itself",
                "Leave restore_from out to resume this run, or give the other run's directory.",
            )
        if overlap == "nested":
            raise SpecError(
                "restore_from",
                f"{path!r} and checkpoint_dir {self.checkpoint_dir!r} are nested: the "
                "branch would write inside the other run's directory",
                "Give them separate directories.",
            )

    @property
    def hosts_per_slice(self) -> int:
        return self.accelerator.hosts_per_slice

    @property
    def num_processes(self) -> int:
        return self.num_slices * self.hosts_per_slice


def default_security_profile(spec: JobSpec) -> str:
    """The Pod Security level a spec without ``security.profile`` gets, as the references run
    such pods (docs/kubernetes.md, "Pod security", cites each):

    * privileged: host-network pods (the JobSet project's TPU multislice example, xpk, and
      Google's A3 Mega / A3 Ultra / A4 GPU recipes run them with ``privileged: true``);
    * baseline: TPU (GKE's TPU manifests run the image's root user and need no privileged
      mode from GKE 1.28) and GPU networking presets (GKE's GPUDirect manifests run the
      worker as the image's root user);
    * restricted: CPU, and GPU without a preset (the device plugin's device nodes and driver
      libraries need no privilege).
    """
    if spec.uses_host_network:
        return "privileged"
    gpu = spec.accelerator.gpu
    if spec.accelerator.kind == "tpu" or (gpu is not None and gpu.networking not in (None, "none")):
        return "baseline"
    return "restricted"


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


def _check_storage_path(field: str, path: str) -> bool:
    """Refuse what is neither ``gs://BUCKET/...`` nor an absolute path; True for gs://."""
    if path.startswith("gs://"):
        bucket = path[len("gs://") :].split("/", 1)[0]
        if not _BUCKET.fullmatch(bucket):
            raise SpecError(field, f"{bucket!r} in {path!r} is not a GCS bucket name ({_BUCKET_RULE})")
        return True
    if "://" in path:
        raise SpecError(field, f"{path!r}: only gs:// URLs are supported", "Use gs://BUCKET/PATH or an absolute path.")
    if not path.startswith("/"):
        raise SpecError(
            field, f"{path!r} is neither gs://... nor an absolute path", "Use gs://BUCKET/PATH or an absolute path."
        )
    return False
