"""The worker container's command and env: the contract's variables, the spec's, the GPU
networking preset's, each written so that Kubernetes' ``$(VAR)`` expansion leaves it as is."""

from __future__ import annotations

from roxxel_launch import contract, gpu_networking
from roxxel_launch.render.manifest_keys import GKE_NVIDIA_LIB_DIR, worker_grace_seconds
from roxxel_launch.spec import JobSpec
from roxxel_launch.spec.training import parallelism_env_value


def literal(text: str) -> str:
    """``text`` as a command, args or env value that Kubernetes passes unchanged."""
    # Kubernetes expands $(VAR) in command, args and env values; $$ is its escape for '$'.
    return text.replace("$", "$$")


def gpu_networking_additions(spec: JobSpec) -> gpu_networking.PodAdditions:
    """What the spec's GPU networking preset adds to the pod (nothing without a GPU)."""
    gpu = spec.accelerator.gpu
    if gpu is None:
        return gpu_networking.PodAdditions()
    return gpu_networking.pod_additions(
        gpu.networking or "none", gpu.network_names, gpu.daemon_image, host_network=spec.uses_host_network
    )


def worker_command(spec: JobSpec, networking: gpu_networking.PodAdditions) -> list[str]:
    """The worker's command: roxxel-worker, or, for a GPU networking preset whose NCCL
    environment comes from a script, bash sourcing it first (the spec's env keeps its values)."""
    if networking.init_script is None:
        return list(contract.WORKER_ENTRYPOINT)
    keep = tuple(sorted({*spec.env, *spec.env_refs}))
    return [
        literal(part)
        for part in gpu_networking.worker_command(networking.init_script, contract.WORKER_ENTRYPOINT, keep)
    ]


def worker_env(
    spec: JobSpec,
    networking: gpu_networking.PodAdditions,
    *,
    has_data: bool,
    writable_env: list[dict],
    cluster: bool = True,
) -> list[dict]:
    """The worker's env entries, in order: the contract's (distributed, then run), the spec's
    env and env_refs, ``writable_env``, the networking preset's, its NCCL tuning (unless the
    spec sets the variable), then LD_LIBRARY_PATH on GPU (unless the spec sets it)."""
    env = _contract_env(spec, has_data=has_data, cluster=cluster)
    env += [{"name": key, "value": literal(value)} for key, value in spec.env.items()]
    env += [{"name": key, "valueFrom": ref.to_k8s()} for key, ref in spec.env_refs.items()]
    env += writable_env
    env += [{"name": key, "value": value} for key, value in networking.env.items() if key != "LD_LIBRARY_PATH"]
    # The preset's recommended NCCL settings, unless the spec sets the variable itself.
    env += [
        {"name": key, "value": value}
        for key, value in networking.tuning.items()
        if key not in spec.env and key not in spec.env_refs
    ]
    return env + _library_path_env(spec, networking)


def _contract_env(spec: JobSpec, *, has_data: bool, cluster: bool) -> list[dict]:
    """What the training program reads (:mod:`roxxel_launch.contract`): who it is in the
    distributed job (from the JobSet's or the Indexed Job's labels), and the run's settings
    (the log format: the spec's, else json on a cluster, for Cloud Logging, and text for ``--local``)."""
    if spec.workload == "jobset":
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
    run = contract.run_env(
        run_name=spec.run_name or spec.name,
        checkpoint_dir=spec.checkpoint_dir,
        data_dir=contract.DATA_MOUNT_PATH if has_data else None,
        termination_grace_s=worker_grace_seconds(spec),
        restore_from=spec.restore_from,
        watchdog=spec.watchdog.env_value(),
        parallelism=parallelism_env_value(spec),
        log_format=spec.log_format or ("json" if cluster else "text"),
    )
    env = [var.to_k8s() for var in (*distributed, *run)]
    for var in env:
        if "value" in var:
            var["value"] = literal(var["value"])
    return env


def _library_path_env(spec: JobSpec, networking: gpu_networking.PodAdditions) -> list[dict]:
    """GPU: the driver's libraries on the loader path, unless the spec sets LD_LIBRARY_PATH
    (render_checks warns when the spec's value lacks them)."""
    if spec.accelerator.kind != "gpu" or "LD_LIBRARY_PATH" in spec.env_refs or "LD_LIBRARY_PATH" in spec.env:
        return []
    return [{"name": "LD_LIBRARY_PATH", "value": networking.env.get("LD_LIBRARY_PATH", GKE_NVIDIA_LIB_DIR)}]
