"""Each environment a process can find itself in, read into a :class:`Detected` and where each value
came from: roxxel-launch's own variables, a JobSet, an Indexed Job with a headless Service, a GKE
TPU pod (sources 1-4 of the contract in :mod:`roxxel.distributed`).
"""

from __future__ import annotations

from collections.abc import Mapping

from roxxel.contract import (
    ENV_COORDINATOR_ADDRESS,
    ENV_HOSTS_PER_SLICE,
    ENV_JOB_COMPLETION_INDEX,
    ENV_JOB_INDEX,
    ENV_JOB_NAME,
    ENV_JOBSET_NAME,
    ENV_JOBSET_SUBDOMAIN,
    ENV_MEGASCALE_NUM_SLICES,
    ENV_MEGASCALE_SLICE_ID,
    ENV_NUM_PROCESSES,
    ENV_NUM_SLICES,
    ENV_PROCESS_ID,
    ENV_REPLICATED_JOB_NAME,
    ENV_REPLICATED_JOB_REPLICAS,
    ENV_SERVICE_NAME,
    ENV_TPU_PROCESS_ADDRESSES,
    ENV_TPU_WORKER_HOSTNAMES,
    ENV_TPU_WORKER_ID,
)
from roxxel.distributed.env import (
    _CONTRACT,
    _check_address,
    _check_consistent,
    _check_cross_count,
    _dns_label,
    _env_int,
    _env_port,
    _get,
)
from roxxel.distributed.identity import Detected

_JOBSET_MARKERS = (
    ENV_JOBSET_NAME,
    ENV_REPLICATED_JOB_NAME,
    ENV_JOB_INDEX,
    ENV_REPLICATED_JOB_REPLICAS,
    ENV_HOSTS_PER_SLICE,
    ENV_NUM_SLICES,
)
_INDEXED_JOB_MARKERS = (ENV_JOB_NAME, ENV_SERVICE_NAME)


def _from_roxxel(env: Mapping[str, str]) -> tuple[Detected, dict[str, str]]:
    hint = f"roxxel-launch sets {ENV_NUM_PROCESSES}, {ENV_PROCESS_ID} and {ENV_COORDINATOR_ADDRESS} together"
    count = _env_int(env, ENV_NUM_PROCESSES, minimum=1, hint=hint)
    pid = _env_int(env, ENV_PROCESS_ID, minimum=0, hint=hint)
    coord = _get(env, ENV_COORDINATOR_ADDRESS)
    if coord is not None:
        _check_address(coord, ENV_COORDINATOR_ADDRESS)
    origins = {
        "coordinator_address": ENV_COORDINATOR_ADDRESS,
        "num_processes": ENV_NUM_PROCESSES,
        "process_id": ENV_PROCESS_ID,
    }
    _check_consistent(coord, count, pid, origins)
    return Detected(coord, count, pid, "roxxel"), origins


def _from_jobset(env: Mapping[str, str]) -> tuple[Detected, dict[str, str]]:
    required = (
        ENV_JOBSET_NAME,
        ENV_REPLICATED_JOB_NAME,
        ENV_JOB_INDEX,
        ENV_JOB_COMPLETION_INDEX,
        ENV_HOSTS_PER_SLICE,
    )
    missing = [name for name in required if _get(env, name) is None]
    if _get(env, ENV_NUM_SLICES) is None and _get(env, ENV_REPLICATED_JOB_REPLICAS) is None:
        missing.append(f"{ENV_NUM_SLICES} (or {ENV_REPLICATED_JOB_REPLICAS})")
    if missing:
        present = [n for n in (*_JOBSET_MARKERS, ENV_JOB_COMPLETION_INDEX) if _get(env, n) is not None]
        raise ValueError(
            f"incomplete JobSet environment: {', '.join(present)} set but {', '.join(missing)} "
            f"missing. Add the missing variables to the pod template ({ENV_JOBSET_NAME}, "
            f"{ENV_REPLICATED_JOB_NAME}, {ENV_JOB_INDEX} from the jobset.sigs.k8s.io labels through "
            f"the downward API; {ENV_HOSTS_PER_SLICE} and {ENV_NUM_SLICES} as values); {_CONTRACT}"
        )
    jobset = _dns_label(env, ENV_JOBSET_NAME)
    rjob = _dns_label(env, ENV_REPLICATED_JOB_NAME)
    subdomain = _dns_label(env, ENV_JOBSET_SUBDOMAIN) if _get(env, ENV_JOBSET_SUBDOMAIN) else jobset
    hosts = _env_int(env, ENV_HOSTS_PER_SLICE, minimum=1)
    if _get(env, ENV_NUM_SLICES) is not None:
        slices = _env_int(env, ENV_NUM_SLICES, minimum=1)
        slices_name = ENV_NUM_SLICES
        if _get(env, ENV_REPLICATED_JOB_REPLICAS) is not None:
            replicas = _env_int(env, ENV_REPLICATED_JOB_REPLICAS, minimum=1)
            if replicas != slices:
                raise ValueError(
                    f"{ENV_NUM_SLICES}={slices} disagrees with {ENV_REPLICATED_JOB_REPLICAS}={replicas} "
                    f"(the replicated job's replicas): make {ENV_NUM_SLICES} equal the replicas, or drop it"
                )
    else:
        slices = _env_int(env, ENV_REPLICATED_JOB_REPLICAS, minimum=1)
        slices_name = ENV_REPLICATED_JOB_REPLICAS
    job_index = _env_int(env, ENV_JOB_INDEX, minimum=0)
    completion = _env_int(env, ENV_JOB_COMPLETION_INDEX, minimum=0)
    if job_index >= slices:
        raise ValueError(
            f"{ENV_JOB_INDEX}={job_index} must be < {slices_name}={slices}: "
            f"set {slices_name} to the replicated job's replicas"
        )
    if completion >= hosts:
        raise ValueError(
            f"{ENV_JOB_COMPLETION_INDEX}={completion} must be < {ENV_HOSTS_PER_SLICE}={hosts}: "
            f"set {ENV_HOSTS_PER_SLICE} to the Job's parallelism (= completions)"
        )
    count = slices * hosts
    pid = job_index * hosts + completion
    _check_cross_count(env, count, f"{slices_name} * {ENV_HOSTS_PER_SLICE} = {slices} * {hosts}")
    port = _env_port(env)
    coord = f"{jobset}-{rjob}-0-0.{subdomain}:{port}"
    origins = {
        "coordinator_address": f"{ENV_JOBSET_NAME}, {ENV_REPLICATED_JOB_NAME}, {ENV_JOBSET_SUBDOMAIN}",
        "num_processes": f"{slices_name} * {ENV_HOSTS_PER_SLICE}",
        "process_id": f"{ENV_JOB_INDEX} * {ENV_HOSTS_PER_SLICE} + {ENV_JOB_COMPLETION_INDEX}",
    }
    return Detected(coord, count, pid, "jobset"), origins


def _from_indexed_job(env: Mapping[str, str]) -> tuple[Detected, dict[str, str]]:
    required = (ENV_JOB_COMPLETION_INDEX, ENV_JOB_NAME, ENV_SERVICE_NAME, ENV_NUM_PROCESSES)
    missing = [name for name in required if _get(env, name) is None]
    if missing:
        present = [name for name in required if name not in missing]
        raise ValueError(
            f"incomplete Indexed Job environment: {', '.join(present)} set but {', '.join(missing)} "
            f"missing. An Indexed Job needs completionMode: Indexed (for {ENV_JOB_COMPLETION_INDEX}), "
            f"{ENV_JOB_NAME} (the Job name), {ENV_SERVICE_NAME} (the headless Service, also the pods' "
            f"spec.subdomain) and {ENV_NUM_PROCESSES} (its parallelism); {_CONTRACT}"
        )
    job = _dns_label(env, ENV_JOB_NAME)
    service = _dns_label(env, ENV_SERVICE_NAME)
    count = _env_int(env, ENV_NUM_PROCESSES, minimum=1)
    pid = _env_int(env, ENV_JOB_COMPLETION_INDEX, minimum=0)
    coord = f"{job}-0.{service}:{_env_port(env)}"
    origins = {
        "coordinator_address": f"{ENV_JOB_NAME}, {ENV_SERVICE_NAME}",
        "num_processes": ENV_NUM_PROCESSES,
        "process_id": ENV_JOB_COMPLETION_INDEX,
    }
    _check_consistent(coord, count, pid, origins)
    return Detected(coord, count, pid, "indexed-job"), origins


def _from_gke_tpu(env: Mapping[str, str]) -> tuple[Detected, dict[str, str]]:
    # Same preference and arithmetic as JAX's GkeTpuCluster (jax/_src/clusters/cloud_tpu_cluster.py).
    if _get(env, ENV_TPU_PROCESS_ADDRESSES) is not None:
        hosts_var = ENV_TPU_PROCESS_ADDRESSES
    else:
        hosts_var = ENV_TPU_WORKER_HOSTNAMES
    hosts = len(env[hosts_var].split(","))
    slices = 1
    if _get(env, ENV_MEGASCALE_NUM_SLICES) is not None:
        slices = _env_int(env, ENV_MEGASCALE_NUM_SLICES, minimum=1)
    slice_id = 0
    if _get(env, ENV_MEGASCALE_SLICE_ID) is not None:
        slice_id = _env_int(env, ENV_MEGASCALE_SLICE_ID, minimum=0)
    if slice_id >= slices:
        raise ValueError(f"{ENV_MEGASCALE_SLICE_ID}={slice_id} must be < {ENV_MEGASCALE_NUM_SLICES}={slices}")
    if _get(env, ENV_TPU_WORKER_ID) is not None:
        worker = _env_int(env, ENV_TPU_WORKER_ID, minimum=0)
    elif hosts == 1:
        worker = 0
    else:
        raise ValueError(
            f"{hosts_var} lists {hosts} hosts but {ENV_TPU_WORKER_ID} is not set: GKE sets it on TPU "
            f"pods of multi-host slices; set it to this host's index in {hosts_var}"
        )
    if worker >= hosts:
        raise ValueError(f"{ENV_TPU_WORKER_ID}={worker} must be < the {hosts} hosts in {hosts_var}")
    origins = {
        "coordinator_address": "JAX's TPU cluster detection",
        "num_processes": f"len({hosts_var}) * {ENV_MEGASCALE_NUM_SLICES}",
        "process_id": f"{ENV_MEGASCALE_SLICE_ID} * len({hosts_var}) + {ENV_TPU_WORKER_ID}",
    }
    return Detected(None, hosts * slices, slice_id * hosts + worker, "gke-tpu"), origins
