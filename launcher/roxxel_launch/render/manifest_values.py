"""Every value the templates place (:func:`template_values`), computed from a valid spec."""

from __future__ import annotations

import json
from typing import Any

from roxxel_launch import contract, gpu_networking

# The level a pod template is written for (security.profile): validation reads it to tell a
# chosen level from a control that something else breaks.
from roxxel_launch.pod_security import POD_SECURITY_ANNOTATION
from roxxel_launch.render import pod_env, pod_values, render_checks
from roxxel_launch.render.manifest_keys import (
    DEFAULT_CONTAINER_ANNOTATION,
    EXCLUSIVE_TOPOLOGY_ANNOTATION,
    JOB_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    NODEPOOL_LABEL,
    RUN_NAME_LABEL,
    SPEC_ANNOTATION,
)
from roxxel_launch.render.pod_security import security_values
from roxxel_launch.render.render_checks import check_spec
from roxxel_launch.spec import (
    PRIORITY_CLASS_LABEL,
    QUEUE_LABEL,
    REPLICATED_JOB_NAME,
    JobSpec,
    ObjectMetadata,
    spec_to_dict,
)

# A Job's failure message when podFailurePolicy rule 0 (exit code CONFIG_ERROR_EXIT_CODE)
# fails it, as the Job controller writes it: "Container worker for pod NS/POD failed with
# exit code 78 matching FailJob rule at index 0".
CONFIG_ERROR_MESSAGE_PATTERN = (
    f"failed with exit code {contract.CONFIG_ERROR_EXIT_CODE} matching FailJob rule at index 0"
)


def template_values(spec: JobSpec, *, cluster: bool = True) -> dict[str, Any]:
    """Every value the templates place, computed from a (valid) spec.

    Args:
        spec: the job.
        cluster: the manifests go to a cluster (not ``--local``): a local ``checkpoint_dir``
            then needs a writable persistent volume behind it.

    Raises:
        SpecError: the spec cannot run as manifests (annotations over Kubernetes' limit, a
            local checkpoint directory with nothing durable behind it on a cluster, an env
            variable that the GPU networking preset sets).
    """
    if cluster:
        check_spec(
            "checkpoint_dir",
            render_checks.checkpoint_problem(spec),
            "Write checkpoints to gs://BUCKET/PATH, or mount a pvc or nfs volume "
            "(read_only: false) under volumes and put checkpoint_dir inside it.",
        )
        if spec.compilation_cache not in (None, "off"):  # its default place is checkpoint_dir's, checked above
            check_spec(
                "compilation_cache",
                render_checks.checkpoint_problem(spec, spec.compilation_cache_dir),
                "Give a gs://BUCKET/PATH, or a path inside a pvc or nfs volume (read_only: false), or `off`.",
            )
    render_checks.warn(spec)
    networking = pod_env.gpu_networking_additions(spec)
    return {
        **_object_values(spec),
        **_controller_values(spec),
        **_container_values(spec, networking, cluster=cluster),
        **_pod_values(spec, networking),
    }


def _object_values(spec: JobSpec) -> dict[str, Any]:
    """The job object's name, namespace, labels (its own and its child Jobs') and annotations."""
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
    return {
        "name": spec.name,
        "namespace": spec.namespace,
        "labels": labels,
        "job_labels": job_labels,
        "annotations": _object_annotations(spec, metadata),
    }


def _object_annotations(spec: JobSpec, metadata: ObjectMetadata) -> dict[str, str]:
    """The user's, Kueue's provisioning parameters, the whole spec, exclusive placement."""
    # Kueue reads provreq.kueue.x-k8s.io/* (ProvisioningRequest parameters) from the job object.
    provisioning = spec.queue_provisioning.job_annotations() if spec.queue_provisioning is not None else {}
    annotations = {
        **metadata.annotations,
        **provisioning,
        SPEC_ANNOTATION: json.dumps(spec_to_dict(spec), sort_keys=True, separators=(",", ":")),
    }
    # Exclusive placement (a slice's followers pinned to its leader's node pool, other jobs kept
    # out) is JobSet's own placement; where Kueue places the pods by topology (spec.topology),
    # Kueue's assignment decides the nodes, and the two may disagree: left out, as #50 found
    # xpk doing when Kueue places pods.
    if (
        spec.workload == "jobset"
        and spec.accelerator.kind == "tpu"
        and spec.hosts_per_slice > 1
        and spec.topology is None
    ):
        annotations[EXCLUSIVE_TOPOLOGY_ANNOTATION] = NODEPOOL_LABEL
    check_spec(
        "",
        render_checks.size_problem(annotations),
        "Make the spec smaller (move large values into a ConfigMap and read them with env_from).",
    )
    return annotations


def _controller_values(spec: JobSpec) -> dict[str, Any]:
    """What the JobSet or Job controller reads: shape, restarts, failure policy, Service."""
    jobset = spec.workload == "jobset"
    return {
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
        # The JobSet controller sets the pods' subdomain itself; a bare Job needs it here.
        "pod_subdomain": None if jobset else spec.name,
    }


def _container_values(spec: JobSpec, networking: gpu_networking.PodAdditions, *, cluster: bool) -> dict[str, Any]:
    """The worker container: image, command, env, resources, mounts, ports, security."""
    data = pod_values.data_volume(spec)
    _, fuse_volumes = pod_values.gcsfuse_extras(spec)
    writable = pod_values.writable_dirs(spec)
    check_spec("env", render_checks.networking_env_problem(spec, networking), "Remove it.")
    env = pod_env.worker_env(spec, networking, has_data=data is not None, writable_env=writable["env"], cluster=cluster)
    limits, requests = pod_values.container_resources(spec)
    volumes, mounts = pod_values.volumes_and_mounts(spec, data, fuse_volumes, networking)
    return {
        "container_name": contract.CONTAINER_NAME,
        "coordinator_port": contract.DEFAULT_COORDINATOR_PORT,
        "tpu_runtime_ports": pod_values.tpu_runtime_ports(spec),
        "image": spec.image,
        "command": pod_env.worker_command(spec, networking),
        "args": [pod_env.literal(item) for item in spec.command],
        "env": env,
        "env_from": [source.to_k8s() for source in spec.env_from],
        "limits": limits,
        "requests": requests,
        "volumes": volumes,
        "volume_mounts": mounts,
        "init_containers": networking.init_containers,
        **security_values(spec, networking.capabilities),
        "writable_volumes": writable["volumes"],
        "writable_mounts": writable["mounts"],
    }


def _pod_values(spec: JobSpec, networking: gpu_networking.PodAdditions) -> dict[str, Any]:
    """The pod around the worker: labels, annotations, placement, identity, network."""
    return {
        # JOB_LABEL selects the job's pods: the Service of an indexed job, the NetworkPolicy.
        # The user's labels come first and cannot replace ours (their prefixes are refused).
        "pod_labels": {**spec.labels, RUN_NAME_LABEL: spec.run_name, JOB_LABEL: spec.name},
        "pod_annotations": _pod_annotations(spec, networking),
        "pod_template": None,
        "host_network": spec.uses_host_network,
        "image_pull_secrets": [{"name": n} for n in spec.image_pull_secrets],
        "affinity": None if spec.affinity is None else dict(spec.affinity),
        "termination_grace_period": spec.termination_grace_period,
        "service_account": spec.service_account,
        "priority_class": spec.priority_class,
        "node_selector": pod_values.node_selector(spec),
        "tolerations": pod_values.tolerations(spec),
    }


def _pod_annotations(spec: JobSpec, networking: gpu_networking.PodAdditions) -> dict[str, str]:
    """kubectl's default container, the Pod Security level, GCS FUSE's and the networking
    preset's, the spec's, then Kueue's topology request."""
    fuse_annotations, _ = pod_values.gcsfuse_extras(spec)
    annotations = {
        DEFAULT_CONTAINER_ANNOTATION: contract.CONTAINER_NAME,
        POD_SECURITY_ANNOTATION: spec.security_profile,
        **fuse_annotations,
        **networking.annotations,
        **spec.annotations,
    }
    # Kueue's topology-aware scheduling reads the pod template's annotations (its PodSet).
    if spec.topology is not None:
        annotations.update(spec.topology.pod_annotations())
    check_spec("annotations", render_checks.size_problem(annotations))
    return annotations
