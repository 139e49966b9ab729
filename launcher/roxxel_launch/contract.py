"""The contract between rendered pods and the worker: entrypoint, exit codes, environment.

Every environment variable a pod gets is declared here once, as a row of a table; the
renderer turns the rows into ``env`` entries and the templates never spell a name.
The variable names, the coordinator port and the preemption exit code come from the
dependency-free :mod:`roxxel.contract`, which the worker side reads too.
"""

from __future__ import annotations

import dataclasses

from roxxel import contract as shared  # the names the worker side reads
from roxxel.contract import CONFIG_ERROR_EXIT_CODE as CONFIG_ERROR_EXIT_CODE  # re-exported
from roxxel.contract import DEFAULT_COORDINATOR_PORT as DEFAULT_COORDINATOR_PORT  # re-exported
from roxxel.contract import PREEMPTED_EXIT_CODE as PREEMPTED_EXIT_CODE  # re-exported

# The image entrypoint: forwards SIGTERM to the trainer and keeps its exit code.
WORKER_ENTRYPOINT = ("roxxel-worker", "--")
CONTAINER_NAME = "worker"
# PREEMPTED_EXIT_CODE: exit code of a worker that saved a checkpoint after SIGTERM (preemption,
# maintenance); CONFIG_ERROR_EXIT_CODE: a worker that found a configuration error before its
# first step (final); DEFAULT_COORDINATOR_PORT: process 0's coordinator port (all roxxel.contract).

# Where the read-only data volume is mounted in every pod.
DATA_MOUNT_PATH = "/data"
SHM_MOUNT_PATH = "/dev/shm"

# Worker environment: every name is roxxel.contract's (``shared.ENV_*``), read by roxxel.distributed
# and roxxel-worker; this module only says which pods get which. JOB_COMPLETION_INDEX is set by
# the Job controller itself in every Indexed Job pod and never rendered; the coordinator address,
# process id and host aliases only by the local backend.
RESTART_ATTEMPT_FIELD = "metadata.annotations['jobset.sigs.k8s.io/restart-attempt']"


@dataclasses.dataclass(frozen=True)
class EnvVar:
    """One ``env`` entry: a literal ``value`` or a downward-API ``field_path``."""

    name: str
    value: str | None = None
    field_path: str | None = None

    def __post_init__(self):
        if (self.value is None) == (self.field_path is None):
            raise ValueError(f"env var {self.name}: give exactly one of value and field_path")

    def literal(self) -> str:
        """The literal value; ``ValueError`` for a downward-API entry (only a pod can resolve it)."""
        if self.value is None:
            raise ValueError(f"env var {self.name} comes from the downward API ({self.field_path}), not a literal")
        return self.value

    def to_k8s(self) -> dict:
        if self.field_path is not None:
            return {"name": self.name, "valueFrom": {"fieldRef": {"fieldPath": self.field_path}}}
        return {"name": self.name, "value": self.value}


def jobset_env(
    *,
    subdomain: str,
    hosts_per_slice: int,
    num_slices: int,
    coordinator_port: int = DEFAULT_COORDINATOR_PORT,
    max_restart_attempt: int | None = None,
) -> tuple[EnvVar, ...]:
    """The distributed-runtime variables of a JobSet pod (JOB_COMPLETION_INDEX comes from the Job),
    and with ``max_restart_attempt`` the restart budget roxxel-worker enforces."""
    budget = (
        ()
        if max_restart_attempt is None
        else (
            EnvVar(shared.ENV_RESTART_ATTEMPT, field_path=RESTART_ATTEMPT_FIELD),
            EnvVar(shared.ENV_MAX_RESTART_ATTEMPT, value=str(max_restart_attempt)),
        )
    )
    return budget + (
        EnvVar(shared.ENV_JOBSET_NAME, field_path=shared.JOBSET_DOWNWARD_API[shared.ENV_JOBSET_NAME]),
        EnvVar(shared.ENV_REPLICATED_JOB_NAME, field_path=shared.JOBSET_DOWNWARD_API[shared.ENV_REPLICATED_JOB_NAME]),
        EnvVar(shared.ENV_JOB_INDEX, field_path=shared.JOBSET_DOWNWARD_API[shared.ENV_JOB_INDEX]),
        EnvVar(shared.ENV_JOBSET_SUBDOMAIN, value=subdomain),
        EnvVar(shared.ENV_HOSTS_PER_SLICE, value=str(hosts_per_slice)),
        EnvVar(shared.ENV_NUM_SLICES, value=str(num_slices)),
        EnvVar(shared.ENV_COORDINATOR_PORT, value=str(coordinator_port)),
    )


def indexed_job_env(*, job_name: str, service_name: str, num_processes: int) -> tuple[EnvVar, ...]:
    """The distributed-runtime variables of an Indexed Job pod (JOB_COMPLETION_INDEX comes from the Job)."""
    return (
        EnvVar(shared.ENV_JOB_NAME, value=job_name),
        EnvVar(shared.ENV_SERVICE_NAME, value=service_name),
        EnvVar(shared.ENV_NUM_PROCESSES, value=str(num_processes)),
    )


def run_env(
    *,
    run_name: str,
    checkpoint_dir: str | None,
    data_dir: str | None,
    termination_grace_s: int,
    restore_from: str | None = None,
    watchdog: str | None = None,
    parallelism: str | None = None,
    log_format: str | None = None,
) -> tuple[EnvVar, ...]:
    """What the training command reads to find its run, checkpoints and data (and the
    watchdog's bounds, the mesh's layout, the log lines' format), and what ``roxxel-worker`` reads to bound its wait after SIGTERM (the pod's grace period)."""
    env = [
        EnvVar(shared.ENV_RUN_NAME, value=run_name),
        EnvVar(shared.ENV_TERMINATION_GRACE, value=str(termination_grace_s)),
    ]
    if checkpoint_dir is not None:
        env.append(EnvVar(shared.ENV_CHECKPOINT_DIR, value=checkpoint_dir))
    if data_dir is not None:
        env.append(EnvVar(shared.ENV_DATA_DIR, value=data_dir))
    if restore_from is not None:
        env.append(EnvVar(shared.ENV_RESTORE_FROM, value=restore_from))
    if watchdog is not None:
        env.append(EnvVar(shared.ENV_WATCHDOG, value=watchdog))
    if parallelism is not None:
        env.append(EnvVar(shared.ENV_PARALLELISM, value=parallelism))
    if log_format is not None:
        env.append(EnvVar(shared.ENV_LOG_FORMAT, value=log_format))
    return tuple(env)


# Names a user's ``env`` may not set: the launcher or Kubernetes owns them.
RESERVED_ENV_NAMES = frozenset(
    {
        shared.ENV_JOBSET_NAME,
        shared.ENV_REPLICATED_JOB_NAME,
        shared.ENV_JOB_INDEX,
        shared.ENV_JOBSET_SUBDOMAIN,
        shared.ENV_HOSTS_PER_SLICE,
        shared.ENV_NUM_SLICES,
        shared.ENV_COORDINATOR_PORT,
        shared.ENV_JOB_NAME,
        shared.ENV_SERVICE_NAME,
        shared.ENV_NUM_PROCESSES,
        shared.ENV_JOB_COMPLETION_INDEX,
        shared.ENV_COORDINATOR_ADDRESS,
        shared.ENV_PROCESS_ID,
        shared.ENV_RUN_NAME,
        shared.ENV_CHECKPOINT_DIR,
        shared.ENV_DATA_DIR,
        shared.ENV_RESTART_ATTEMPT,
        shared.ENV_MAX_RESTART_ATTEMPT,
        shared.ENV_REPLICATED_JOB_REPLICAS,
        shared.ENV_HOST_ALIASES,
        shared.ENV_TERMINATION_GRACE,
        shared.ENV_RESTORE_FROM,
        shared.ENV_WATCHDOG,
        shared.ENV_PARALLELISM,
        shared.ENV_LOG_FORMAT,
    }
)


# ----------------------------------------------------------------------------- pod security
# The worker image's user (Dockerfile: `useradd --uid 10001`, `USER 10001:10001`); pods run
# as it with a read-only root filesystem. tests/launcher/checks/test_pod_security.py checks the Dockerfile.
WORKER_UID = 10001
WORKER_GID = 10001

# What the worker writes, each an emptyDir (the root filesystem is read-only):
# name -> (mount path, environment variables pointing at it). XDG_CACHE_HOME collects the
# caches of pip, JAX/XLA helpers and most libraries; JAX_COMPILATION_CACHE_DIR turns on
# JAX's persistent compilation cache there (a user's env setting wins).
TMP_MOUNT_PATH = "/tmp"
CACHE_MOUNT_PATH = "/var/cache/roxxel"
JAX_CACHE_MOUNT_PATH = "/var/cache/roxxel-jax"
# JAX's persistent compilation cache directory (its config jax_compilation_cache_dir): the pod's
# emptyDir above, or the job's shared cache (spec compilation_cache) that outlives the pods.
JAX_CACHE_VARIABLE = "JAX_COMPILATION_CACHE_DIR"
# HOME: what gcloud (~/.config/gcloud), W&B (~/.netrc, ~/.config/wandb), matplotlib
# (~/.config/matplotlib) and git write to. Not the image's home directory /home/roxxel
# (Dockerfile useradd --home-dir), which is also the WORKDIR holding examples/: an emptyDir
# there would hide them.
HOME_MOUNT_PATH = "/var/lib/roxxel-home"
WRITABLE_DIRS = {
    "tmp": (TMP_MOUNT_PATH, {"TMPDIR": TMP_MOUNT_PATH}),
    "cache": (CACHE_MOUNT_PATH, {"XDG_CACHE_HOME": CACHE_MOUNT_PATH}),
    "jax-cache": (JAX_CACHE_MOUNT_PATH, {JAX_CACHE_VARIABLE: JAX_CACHE_MOUNT_PATH}),
    "home": (HOME_MOUNT_PATH, {"HOME": HOME_MOUNT_PATH}),
}

# Ports TPU pods are known to use between the hosts of a job, besides roxxel's coordinator
# port, declared as named container ports (as xpk and GKE's TPU examples declare them); the
# job's NetworkPolicy admits every port between its own pods, not these only, since no
# reference publishes a complete list of what libtpu opens (docs/kubernetes.md). On GKE
# TPU, jax.distributed.initialize() detects the cluster itself (GkeTpuCluster) and puts its
# coordinator on port 8482 (jax/_src/clusters/cloud_tpu_cluster.py). xpk, Google's GKE
# launcher, opens 8471 and 8080 on TPU workers ("slice builder and megascale container
# ports"); GKE's TPU examples name 8471 the port TPU VMs communicate on.
TPU_RUNTIME_PORTS = {"jax-coordinator": 8482, "tpu-runtime": 8471, "megascale": 8080}
