"""What a job spec may not set because roxxel-launch sets or uses it itself.

The spec's escape hatches (env, labels, annotations, node selectors, resources, extra
volumes, gcsfuse mount options, host_network under the security profile) reach parts of
the pod that the renderer also writes. :data:`RULES` lists, in one place, every value they refuse: the field it
applies to, why it is refused and what to do instead; :func:`refuse` applies them. The
rest of a field's checks (its syntax, its duplicates) stay with the field's dataclass.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from roxxel_launch import contract, gpu_networking
from roxxel_launch.spec.accelerators import GPU_RESOURCE, TPU_RESOURCE, accelerator_node_selectors
from roxxel_launch.spec.errors import SpecError
from roxxel_launch.spec.queueing import (
    MAX_RUN_DURATION_ANNOTATION,
    PRIORITY_CLASS_LABEL,
    PROVREQ_PREFIX,
    QUEUE_LABEL,
    QUEUED_NODE_KEY,
)

# The job object's keys that a spec field sets (render/ writes them): {key: field}.
OBJECT_LABELS_SET_BY = {QUEUE_LABEL: "queue", PRIORITY_CLASS_LABEL: "workload_priority_class"}
OBJECT_ANNOTATIONS_SET_BY = {MAX_RUN_DURATION_ANNOTATION: "queue_provisioning.max_run_duration_seconds"}

# Volume names the renderer uses itself: shared memory, data, the GCS FUSE file cache and
# the writable emptyDirs of the read-only root filesystem (contract.WRITABLE_DIRS).
RESERVED_VOLUME_NAMES = frozenset(
    {"dshm", "data", "gke-gcsfuse-cache", *contract.WRITABLE_DIRS, *gpu_networking.VOLUME_NAMES}
)
# Label/annotation prefixes users may not set: ours and the controllers'.
RESERVED_PREFIXES = frozenset(
    {
        "roxxel.dev",
        "jobset.sigs.k8s.io",
        "alpha.jobset.sigs.k8s.io",
        "batch.kubernetes.io",
        "kueue.x-k8s.io",
        "gke-gcsfuse",
    }
)
# Keys under shared prefixes that the renderer sets itself (render.MANAGED_BY_LABEL,
# render.DEFAULT_CONTAINER_ANNOTATION); the rest of Kubernetes' recommended labels
# (app.kubernetes.io/name, part-of, component, ...) are the user's.
RESERVED_KEYS = frozenset({"app.kubernetes.io/managed-by", "kubectl.kubernetes.io/default-container"})
# gcsfuse mount options the renderer writes from file_cache_mb and only_dir.
RESERVED_GCSFUSE_OPTIONS = frozenset({"file-cache", "cache-dir", "only-dir"})


@dataclasses.dataclass(frozen=True)
class Rule:
    """A value that ``field`` may not hold.

    Attributes:
        field: The spec field the rule applies to, as written in the spec (``volumes[].name``).
        refuses: Whether the rule refuses a value, given the value (a key, a name, a path)
            and the object that holds it (the JobSpec, or the nested dataclass being checked).
        why: The problem; ``{value!r}`` in it stands for the refused value.
        instead: What to do instead ("" if the problem says it).
    """

    field: str
    refuses: Callable[[Any, Any], bool]
    why: str
    instead: str = ""


def _owned_key(key: str, _spec: Any) -> bool:
    return key.split("/", 1)[0] in RESERVED_PREFIXES or key in RESERVED_KEYS


def _launcher_mount_paths(spec: Any) -> list[str]:
    """Where roxxel-launch mounts volumes of its own in the worker container."""
    return (
        [contract.SHM_MOUNT_PATH]
        + ([contract.DATA_MOUNT_PATH] if spec.data else [])
        + [path for path, _ in contract.WRITABLE_DIRS.values()]
    )


def _is(owned: str) -> Callable[[Any, Any], bool]:
    return lambda key, _spec: key == owned


def _set_by(field: str, keys: dict[str, str]) -> tuple[Rule, ...]:
    return tuple(
        Rule(field, _is(key), f"is set from {source}", f"Set {source} instead.") for key, source in keys.items()
    )


# The job object's own labels and annotations (``metadata``): a key a spec field sets names
# the field, Kueue's ProvisioningRequest parameters need a queue, then the owned prefixes.
_OBJECT_RULES: tuple[Rule, ...] = (
    *_set_by("metadata.labels", OBJECT_LABELS_SET_BY),
    *_set_by("metadata.annotations", OBJECT_ANNOTATIONS_SET_BY),
    Rule(
        "metadata.annotations",
        lambda key, spec: key.startswith(PROVREQ_PREFIX) and spec.queue is None,
        "is read by Kueue only from a job it manages (one with queue): it would do nothing",
        "Set queue to your LocalQueue too, or remove it.",
    ),
    *(
        Rule(
            field,
            _owned_key,
            "uses a key or prefix that roxxel-launch or its controllers own",
            "Pick a key under your own prefix.",
        )
        for field in ("metadata.labels", "metadata.annotations")
    ),
)


RULES: tuple[Rule, ...] = (
    *_OBJECT_RULES,
    Rule(
        "env", lambda name, spec: name in contract.RESERVED_ENV_NAMES, "is set by roxxel-launch", "Remove it from env."
    ),
    Rule(
        "env_refs",
        lambda name, spec: name in contract.RESERVED_ENV_NAMES or name in spec.env,
        "is already set (by roxxel-launch or in env)",
    ),
    Rule(
        "node_selectors",
        lambda key, spec: key in accelerator_node_selectors(spec.accelerator),
        "is set from the accelerator block",
        "Remove it from node_selectors.",
    ),
    Rule(
        "node_selectors",
        lambda key, spec: key == QUEUED_NODE_KEY and spec.queue_provisioning is not None,
        "is set from queue_provisioning",
        "Remove it from node_selectors.",
    ),
    Rule(
        "resources",
        lambda name, resources: name in (TPU_RESOURCE, GPU_RESOURCE),
        "is set from the accelerator block",
        "Remove it; set accelerator.tpu or accelerator.gpu.count instead.",
    ),
    Rule(
        "labels",
        _owned_key,
        "uses a key or prefix that roxxel-launch or its controllers own",
        "Pick a key under your own prefix.",
    ),
    Rule(
        "annotations",
        _owned_key,
        "uses a key or prefix that roxxel-launch or its controllers own",
        "Pick a key under your own prefix.",
    ),
    Rule(
        "volumes[].name",
        lambda name, volume: name in RESERVED_VOLUME_NAMES,
        "{value!r} is used by roxxel-launch",
        "Pick another name.",
    ),
    Rule(
        "volumes[].mount_path",
        lambda path, spec: path.rstrip("/") in _launcher_mount_paths(spec),
        "{value!r} is where roxxel-launch mounts a volume of its own",
        "Pick another path.",
    ),
    Rule(
        "data.gcsfuse.mount_options",
        lambda option, mount: option.split(":", 1)[0] in RESERVED_GCSFUSE_OPTIONS,
        "{value!r} is set by roxxel-launch",
        "Use file_cache_mb, its cache fields (file_cache_for_range_read, parallel_downloads, ...) or only_dir instead.",
    ),
    Rule(
        "host_network",
        lambda on, spec: bool(on) and spec.accelerator.kind == "cpu",
        "is offered for TPU slices and GPU hosts only",
        "Remove it.",
    ),
    # The references run host-network pods privileged: the JobSet TPU multislice example,
    # xpk, and Google's A3 Mega / A3 Ultra / A4 GPU recipes (docs/kubernetes.md, "Pod security").
    Rule(
        "host_network",
        lambda on, spec: bool(on) and spec.security_profile != "privileged",
        "needs security.profile: privileged (host-network pods break Pod Security baseline, Host "
        "Namespaces, and the TPU and GPU references run them privileged)",
        "Set security.profile: privileged, or remove host_network.",
    ),
    # GCS FUSE CSI driver docs/authentication.md: identityProvider is read only with the
    # host-network opt-in (hostNetworkPodKSA), which roxxel-launch renders for host-network pods.
    Rule(
        "data.gcsfuse.identity_provider",
        lambda url, spec: url is not None and not spec.uses_host_network,
        "is read only for host-network pods (the GCS FUSE CSI driver's hostNetworkPodKSA opt-in)",
        "Remove it, or set host_network: true.",
    ),
    Rule(
        "host_network",
        lambda on, spec: bool(on) and spec.workload != "jobset",
        "needs workload: jobset (an indexed-job's headless Service DNS names do not cover host-network pods)",
    ),
)


def refuse(field: str, value: Any, owner: Any, at: str | None = None) -> None:
    """Raises the error of the first rule of ``field`` that refuses ``value``.

    Args:
        field: The rule's field (:attr:`Rule.field`).
        value: The value to check (a key, a name, a path, a flag).
        owner: The object holding it, passed to the rule (the JobSpec or a nested dataclass).
        at: The field path the error names, if not ``field`` (``labels.roxxel.dev/x``).

    Raises:
        SpecError: a rule refuses the value.
        KeyError: no rule is about ``field`` (a misspelt field would otherwise refuse nothing).
    """
    rules = [rule for rule in RULES if rule.field == field]
    if not rules:
        raise KeyError(f"no rule of roxxel_launch.spec.owned is about {field!r}")
    for rule in rules:
        if rule.refuses(value, owner):
            raise SpecError(field if at is None else at, rule.why.format(value=value), rule.instead)
