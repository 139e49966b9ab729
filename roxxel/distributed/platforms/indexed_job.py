"""A plain Indexed Job plus a headless Service: the Job controller sets ``JOB_COMPLETION_INDEX``
(``completionMode: Indexed``) and names each pod's host ``<job>-<index>`` once the pods set the
Service as ``spec.subdomain`` (Kubernetes Job documentation, "Completion mode").
"""

from __future__ import annotations

from collections.abc import Mapping

from roxxel.contract import ENV_JOB_COMPLETION_INDEX, ENV_JOB_NAME, ENV_NUM_PROCESSES, ENV_SERVICE_NAME
from roxxel.distributed.env import _CONTRACT, _check_consistent, _dns_label, _env_int, _env_port, _get, _has_any
from roxxel.distributed.identity import Detected
from roxxel.distributed.platforms.row import Platform, Reading

MARKERS = (ENV_JOB_NAME, ENV_SERVICE_NAME)
"""Either set: the environment is an Indexed Job pod's, and the required ones must all be set."""


def read(env: Mapping[str, str]) -> Reading:
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


PLATFORM = Platform(
    source="indexed-job",
    applies=lambda env: _has_any(env, MARKERS),
    read=read,
    convention=(
        "Kubernetes Indexed Job: JOB_COMPLETION_INDEX from the Job controller, pod hostname <job>-<index> "
        "under the headless Service set as spec.subdomain"
    ),
)
