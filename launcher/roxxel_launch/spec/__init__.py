"""The versioned job spec (``roxxel.dev/v1alpha1``, kind ``RoxxelJob``).

A job spec is a YAML file plus ``--set key.path=value`` overrides. It is parsed and
validated once, here, into frozen dataclasses; rendering and the backends trust it. Every
error is a :class:`SpecError` that names the field (``accelerator.tpu.topology``), says what
is wrong with the value and how to fix it.

The dataclasses are also the schema: :func:`spec_schema` turns their type hints and field
docs into a JSON-schema-like dict from which reference docs can be generated.

The package's modules: :mod:`~roxxel_launch.spec.model` (the root object, :class:`JobSpec`)
with its parts in :mod:`~roxxel_launch.spec.accelerators`, :mod:`~roxxel_launch.spec.storage`
and :mod:`~roxxel_launch.spec.pod`; :mod:`~roxxel_launch.spec.queueing` (Kueue: workload priority,
topology-aware scheduling,
queued provisioning); :mod:`~roxxel_launch.spec.metadata` (the job object's own labels and
annotations); :mod:`~roxxel_launch.spec.owned` (what a spec may not set
because roxxel-launch sets it); :mod:`~roxxel_launch.spec.loading` (YAML, ``--set``, error
positions); :mod:`~roxxel_launch.spec.schema`; :mod:`~roxxel_launch.spec.errors` and
:mod:`~roxxel_launch.spec.fields` (what the others share). Import from the package.
"""

from roxxel_launch.spec.accelerators import (
    GPU_ACCELERATOR_SELECTOR,
    GPU_RESOURCE,
    MACHINE_TYPE_SELECTOR,
    MAX_HOSTS_PER_SLICE,
    PLACEMENT_POLICY_SELECTOR,
    TPU_ACCELERATOR_SELECTOR,
    TPU_RESOURCE,
    TPU_TOPOLOGY_SELECTOR,
    Accelerator,
    CpuAccelerator,
    GpuAccelerator,
    TpuAccelerator,
    accelerator_node_selectors,
)
from roxxel_launch.spec.errors import SpecError
from roxxel_launch.spec.fields import INT32_MAX, image_is_pinned, image_reference_problem, parse_quantity
from roxxel_launch.spec.loading import (
    MAX_SPEC_BYTES,
    MAX_SPEC_DEPTH,
    apply_overrides,
    load_spec,
    parse_yaml,
    read_spec_text,
    spec_from_dict,
    spec_to_dict,
)
from roxxel_launch.spec.metadata import ObjectMetadata
from roxxel_launch.spec.model import (
    API_VERSION,
    DEFAULT_NODE_EPHEMERAL_STORAGE,
    EPHEMERAL_STORAGE,
    KIND,
    MAX_SLICES,
    REPLICATED_JOB_NAME,
    JobSpec,
    default_security_profile,
    longest_pod_name,
    max_name_length,
)
from roxxel_launch.spec.owned import RESERVED_KEYS, RESERVED_PREFIXES, RESERVED_VOLUME_NAMES
from roxxel_launch.spec.pod import (
    POD_SECURITY_LEVELS,
    RESOURCES_FIX,
    EnvFromSource,
    KeyRef,
    Resources,
    Security,
    Toleration,
    resource_requirements_problems,
)
from roxxel_launch.spec.queueing import (
    MAX_RUN_DURATION_ANNOTATION,
    PREFERRED_TOPOLOGY_ANNOTATION,
    PRIORITY_CLASS_LABEL,
    PROVREQ_PREFIX,
    QUEUE_LABEL,
    QUEUED_NODE_KEY,
    REQUIRED_TOPOLOGY_ANNOTATION,
    SLICE_REQUIRED_TOPOLOGY_ANNOTATION,
    SLICE_SIZE_ANNOTATION,
    QueueProvisioning,
    Topology,
)
from roxxel_launch.spec.schema import spec_schema
from roxxel_launch.spec.storage import (
    DEFAULT_GCSFUSE_MOUNT_OPTIONS,
    DataMount,
    EmptyDirSource,
    ExtraVolume,
    GcsFuseMount,
    NfsMount,
    PvcMount,
)

__all__ = [
    "API_VERSION",
    "DEFAULT_GCSFUSE_MOUNT_OPTIONS",
    "DEFAULT_NODE_EPHEMERAL_STORAGE",
    "EPHEMERAL_STORAGE",
    "GPU_ACCELERATOR_SELECTOR",
    "GPU_RESOURCE",
    "INT32_MAX",
    "KIND",
    "MAX_HOSTS_PER_SLICE",
    "MAX_SLICES",
    "MAX_SPEC_BYTES",
    "MAX_SPEC_DEPTH",
    "POD_SECURITY_LEVELS",
    "MAX_RUN_DURATION_ANNOTATION",
    "PREFERRED_TOPOLOGY_ANNOTATION",
    "PRIORITY_CLASS_LABEL",
    "PROVREQ_PREFIX",
    "QUEUE_LABEL",
    "QUEUED_NODE_KEY",
    "REPLICATED_JOB_NAME",
    "REQUIRED_TOPOLOGY_ANNOTATION",
    "SLICE_REQUIRED_TOPOLOGY_ANNOTATION",
    "SLICE_SIZE_ANNOTATION",
    "RESERVED_KEYS",
    "RESERVED_PREFIXES",
    "RESERVED_VOLUME_NAMES",
    "RESOURCES_FIX",
    "TPU_ACCELERATOR_SELECTOR",
    "TPU_RESOURCE",
    "TPU_TOPOLOGY_SELECTOR",
    "MACHINE_TYPE_SELECTOR",
    "PLACEMENT_POLICY_SELECTOR",
    "Accelerator",
    "CpuAccelerator",
    "DataMount",
    "EmptyDirSource",
    "EnvFromSource",
    "ExtraVolume",
    "GcsFuseMount",
    "GpuAccelerator",
    "JobSpec",
    "KeyRef",
    "NfsMount",
    "ObjectMetadata",
    "PvcMount",
    "QueueProvisioning",
    "Resources",
    "Security",
    "SpecError",
    "Toleration",
    "Topology",
    "TpuAccelerator",
    "accelerator_node_selectors",
    "apply_overrides",
    "default_security_profile",
    "image_is_pinned",
    "image_reference_problem",
    "load_spec",
    "longest_pod_name",
    "max_name_length",
    "parse_quantity",
    "parse_yaml",
    "read_spec_text",
    "resource_requirements_problems",
    "spec_from_dict",
    "spec_schema",
    "spec_to_dict",
]
