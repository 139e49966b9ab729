"""Process identity for multi-host JAX: find the coordinator, process count and process id
in a pod's environment, then call :func:`jax.distributed.initialize`.

:func:`detect` is a pure function of an environment mapping (no JAX, no I/O);
:func:`initialize` runs it and wires up JAX; :func:`shutdown` undoes what
:func:`initialize` did.

Environment contract
====================

This is the contract the launcher's templates (``roxxel-launch``: JobSet,
Indexed Job + headless Service, local backend) must honour. Every variable
name is a module constant, so the launcher imports the names instead of
spelling them. An empty value counts as unset: the downward API yields an
empty string for a label that is missing.

Values are resolved in this order; the first source that applies is used
and the later ones are not consulted. Sources 1-6 are the rows of the platform
table, :data:`roxxel.distributed.platforms.PLATFORMS`, which says why the order
is what it is (``ROXXEL_NUM_PROCESSES`` alone is read after sources 2 and 3).

0. **Explicit arguments** of :func:`initialize` / :func:`detect`
   (``coordinator_address``, ``num_processes``, ``process_id``). Each one
   overrides the corresponding value from the environment individually;
   when all that are needed are given, the environment is not read.
   ``source == "explicit"`` whenever at least one was given.

1. **roxxel** -- set by ``roxxel-launch`` (local backend, or any template
   that computes the values itself). Applies when ``ROXXEL_PROCESS_ID`` or
   ``ROXXEL_COORDINATOR_ADDRESS`` is set, or ``ROXXEL_NUM_PROCESSES`` is set
   without the JobSet or Indexed Job variables below.

   - ``ROXXEL_COORDINATOR_ADDRESS``: ``host:port`` of process 0's coordinator
     service; required when the count is > 1.
   - ``ROXXEL_NUM_PROCESSES``: total number of processes, >= 1 (required).
   - ``ROXXEL_PROCESS_ID``: this process, ``0 <= id < count`` (required).

2. **jobset** -- a JobSet (``jobset.x-k8s.io/v1alpha2``) with one replicated
   job; one child Job per slice, one pod per host. Applies when any of
   ``JOBSET_NAME``, ``REPLICATED_JOB_NAME``, ``JOB_INDEX``,
   ``REPLICATED_JOB_REPLICAS``, ``ROXXEL_HOSTS_PER_SLICE``,
   ``ROXXEL_NUM_SLICES`` is set; then all required ones must be.

   - ``JOBSET_NAME``: downward API, label ``jobset.sigs.k8s.io/jobset-name``.
   - ``REPLICATED_JOB_NAME``: downward API, label
     ``jobset.sigs.k8s.io/replicatedjob-name``.
   - ``JOB_INDEX``: downward API, label ``jobset.sigs.k8s.io/job-index`` (the slice).
   - ``JOB_COMPLETION_INDEX``: set by the Job controller (``completionMode:
     Indexed``): the host within the slice.
   - ``ROXXEL_HOSTS_PER_SLICE``: template value, ``parallelism == completions`` of
     each child Job.
   - ``ROXXEL_NUM_SLICES``: template value, ``replicas`` of the replicated job; or
     else ``REPLICATED_JOB_REPLICAS`` (downward API, label
     ``jobset.sigs.k8s.io/replicatedjob-replicas``). When both are set they must agree.
   - ``ROXXEL_COORDINATOR_PORT``: optional, default ``8476``.
   - ``JOBSET_SUBDOMAIN``: optional ``spec.network.subdomain``; default the JobSet
     name (the JobSet controller's default).
   - ``ROXXEL_NUM_PROCESSES``: optional cross-check; must equal slices x hosts.

   ``process_id = JOB_INDEX * ROXXEL_HOSTS_PER_SLICE + JOB_COMPLETION_INDEX``,
   ``num_processes = num_slices * ROXXEL_HOSTS_PER_SLICE``, coordinator
   ``<JOBSET_NAME>-<REPLICATED_JOB_NAME>-0-0.<subdomain>:<port>`` (pod hostname
   pattern ``<jobset>-<rjob>-<jobIndex>-<podIndex>`` from the JobSet API,
   which requires ``spec.network.enableDNSHostnames: true``).
   :data:`JOBSET_DOWNWARD_API` maps each downward-API variable to its
   ``fieldRef.fieldPath``.

3. **indexed-job** -- a plain Indexed Job plus a headless Service. Applies
   when ``ROXXEL_JOB_NAME`` or ``ROXXEL_SERVICE_NAME`` is set.

   - ``JOB_COMPLETION_INDEX``: set by the Job controller: the process id.
   - ``ROXXEL_JOB_NAME``: ``metadata.name`` of the Job.
   - ``ROXXEL_SERVICE_NAME``: the headless Service, also the pods' ``spec.subdomain``.
   - ``ROXXEL_NUM_PROCESSES``: ``parallelism == completions``.
   - ``ROXXEL_COORDINATOR_PORT``: optional, default ``8476``.

   Coordinator ``<ROXXEL_JOB_NAME>-0.<ROXXEL_SERVICE_NAME>:<port>`` (hostname
   ``<job>-<index>`` of Indexed Job pods that set a subdomain, Kubernetes Job
   documentation).

4. **gke-tpu** -- GKE injects ``TPU_WORKER_HOSTNAMES`` (comma separated),
   ``TPU_WORKER_ID`` and, for multislice, ``MEGASCALE_NUM_SLICES`` /
   ``MEGASCALE_SLICE_ID`` into TPU pods. Detection is left to JAX
   (``jax.distributed.initialize()`` without address, count or id); the values
   reported here mirror JAX's ``GkeTpuCluster`` (which prefers
   ``TPU_PROCESS_ADDRESSES`` over ``TPU_WORKER_HOSTNAMES``):
   ``num_processes = len(hosts) * MEGASCALE_NUM_SLICES``,
   ``process_id = MEGASCALE_SLICE_ID * len(hosts) + TPU_WORKER_ID``; the
   coordinator is JAX's choice (``None`` here).

5. **slurm** -- a task started by ``srun``. Applies when ``SLURM_PROCID`` and
   ``SLURM_STEP_NODELIST`` are both set (a batch script's own shell, which has no step,
   stays a single process). Read as JAX's ``SlurmCluster`` reads it
   (``jax/_src/clusters/slurm_cluster.py``):

   - ``SLURM_PROCID``: the process id; ``SLURM_NTASKS``: the process count.
   - ``SLURM_STEP_NODELIST``: the coordinator is its first host (``node[001-016]``
     gives ``node001``).
   - Port: ``ROXXEL_COORDINATOR_PORT``, else ``JAX_COORDINATOR_PORT``, else JAX's
     ``61440 + SLURM_JOB_ID % 4096``.

Local runs (``roxxel-launch submit --local``) execute the rendered manifest, so sources 2
and 3 derive the cluster's DNS name of the coordinator. Without network namespaces no
resolver on this machine knows that name: the launcher then sets ``ROXXEL_HOST_ALIASES``
(comma-separated ``NAME=ADDRESS``, or ``NAME:PORT=ADDRESS:PORT`` for a pod port that every
process on one loopback cannot share), and the derived coordinator address is looked up
there, ``NAME:PORT`` first, then ``NAME``. Only the coordinator's DNS name (and, for a
shared loopback, its port) changes; every other value is the manifest's.

6. **single** -- none of the above: one process; ``jax.distributed`` is not
   initialised. (A lone ``JOB_COMPLETION_INDEX`` lands here too, with a warning
   from :func:`initialize`.)

``jax.distributed.initialize`` is called only when the process count is
greater than one. Timeouts (seconds): ``ROXXEL_INIT_TIMEOUT`` (default 300)
and ``ROXXEL_HEARTBEAT_TIMEOUT`` (default 100), overridden by the arguments
of :func:`initialize`. The heartbeat timeout bounds how long a lost host goes
unnoticed: the coordination service declares a process dead after that long
without its heartbeat (and a process whose heartbeats to process 0 go
unanswered that long gives up), and every process then aborts (exit 134), so
that the gang restarts (measured in docs/troubleshooting.md, "A host lost
mid-training").
"""

from __future__ import annotations

# The environment contract's names live in the dependency-free roxxel.contract (the launcher
# imports them from there); re-exported here, where they are read.
from roxxel.contract import (
    DEFAULT_COORDINATOR_PORT,
    DEFAULT_HEARTBEAT_TIMEOUT,
    DEFAULT_INIT_TIMEOUT,
    ENV_COORDINATOR_ADDRESS,
    ENV_COORDINATOR_PORT,
    ENV_HEARTBEAT_TIMEOUT,
    ENV_HOST_ALIASES,
    ENV_HOSTS_PER_SLICE,
    ENV_INIT_TIMEOUT,
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
    JOBSET_DOWNWARD_API,
)
from roxxel.distributed.detection import detect
from roxxel.distributed.identity import Detected, ProcessInfo
from roxxel.distributed.platforms import SOURCES
from roxxel.distributed.runtime import initialize, shutdown

__all__ = [
    "DEFAULT_COORDINATOR_PORT",
    "DEFAULT_HEARTBEAT_TIMEOUT",
    "DEFAULT_INIT_TIMEOUT",
    "Detected",
    "ENV_COORDINATOR_ADDRESS",
    "ENV_COORDINATOR_PORT",
    "ENV_HEARTBEAT_TIMEOUT",
    "ENV_HOST_ALIASES",
    "ENV_HOSTS_PER_SLICE",
    "ENV_INIT_TIMEOUT",
    "ENV_JOBSET_NAME",
    "ENV_JOBSET_SUBDOMAIN",
    "ENV_JOB_COMPLETION_INDEX",
    "ENV_JOB_INDEX",
    "ENV_JOB_NAME",
    "ENV_MEGASCALE_NUM_SLICES",
    "ENV_MEGASCALE_SLICE_ID",
    "ENV_NUM_PROCESSES",
    "ENV_NUM_SLICES",
    "ENV_PROCESS_ID",
    "ENV_REPLICATED_JOB_NAME",
    "ENV_REPLICATED_JOB_REPLICAS",
    "ENV_SERVICE_NAME",
    "ENV_TPU_PROCESS_ADDRESSES",
    "ENV_TPU_WORKER_HOSTNAMES",
    "ENV_TPU_WORKER_ID",
    "JOBSET_DOWNWARD_API",
    "ProcessInfo",
    "SOURCES",
    "detect",
    "initialize",
    "shutdown",
]
