"""A JobSet (``jobset.x-k8s.io/v1alpha2``) with one replicated job: one child Job per slice, one pod
per host. The pod hostname pattern ``<jobset>-<rjob>-<jobIndex>-<podIndex>`` is the JobSet API's
(with ``spec.network.enableDNSHostnames: true``); the labels reach the pod through the downward API
(:data:`roxxel.contract.JOBSET_DOWNWARD_API`); the Job controller sets ``JOB_COMPLETION_INDEX``.
"""

from __future__ import annotations

from collections.abc import Mapping

from roxxel.contract import (
    ENV_HOSTS_PER_SLICE,
    ENV_JOB_COMPLETION_INDEX,
    ENV_JOB_INDEX,
    ENV_JOBSET_NAME,
    ENV_JOBSET_SUBDOMAIN,
    ENV_NUM_SLICES,
    ENV_REPLICATED_JOB_NAME,
    ENV_REPLICATED_JOB_REPLICAS,
)
from roxxel.distributed.env import (
    _CONTRACT,
    _check_cross_count,
    _dns_label,
    _env_int,
    _env_port,
    _get,
    _has_any,
)
from roxxel.distributed.identity import Detected
from roxxel.distributed.platforms.row import Platform, Reading

MARKERS = (
    ENV_JOBSET_NAME,
    ENV_REPLICATED_JOB_NAME,
    ENV_JOB_INDEX,
    ENV_REPLICATED_JOB_REPLICAS,
    ENV_HOSTS_PER_SLICE,
    ENV_NUM_SLICES,
)
"""Any one of these set: the environment is a JobSet pod's, and the required ones must all be set."""


def read(env: Mapping[str, str]) -> Reading:
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
        present = [n for n in (*MARKERS, ENV_JOB_COMPLETION_INDEX) if _get(env, n) is not None]
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


PLATFORM = Platform(
    source="jobset",
    applies=lambda env: _has_any(env, MARKERS),
    read=read,
    convention=(
        "JobSet API: pod hostname <jobset>-<rjob>-<jobIndex>-<podIndex> under the JobSet's subdomain; "
        "labels jobset.sigs.k8s.io/* through the downward API; JOB_COMPLETION_INDEX from the Job controller"
    ),
)
