"""The contract between ``roxxel-launch`` and the workers it starts: environment variable
names, the coordinator port, and exit codes.

Dependency-free on purpose (standard library only, no numpy, no JAX): the launcher imports
it to render pods and judge exit codes without loading the training stack, and the worker
side (:mod:`roxxel.distributed`, :mod:`roxxel.exit_codes`, :mod:`roxxel.train.checkpoint`)
imports the same names, so that no name or code is spelled twice. The meaning of each
variable, and the order in which they are read, is documented in :mod:`roxxel.distributed`;
the meaning of each exit code in :mod:`roxxel.exit_codes`.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

# --- 1. Set by roxxel-launch -------------------------------------------------------
ENV_COORDINATOR_ADDRESS = "ROXXEL_COORDINATOR_ADDRESS"
"""``host:port`` of the coordinator service (process 0)."""
ENV_NUM_PROCESSES = "ROXXEL_NUM_PROCESSES"
"""Total number of processes (>= 1)."""
ENV_PROCESS_ID = "ROXXEL_PROCESS_ID"
"""This process's id, ``0 <= id < ROXXEL_NUM_PROCESSES``."""
ENV_HOST_ALIASES = "ROXXEL_HOST_ALIASES"
"""Set by ``roxxel-launch --local`` only: where the pods' DNS names point on this machine,
``NAME=ADDRESS`` or ``NAME:PORT=ADDRESS:PORT`` entries separated by commas (what a pod's
``hostAliases`` and cluster DNS would answer; see :func:`roxxel.distributed.detect`)."""

# --- 2. JobSet (downward API + template values) -------------------------------------
ENV_JOBSET_NAME = "JOBSET_NAME"
ENV_REPLICATED_JOB_NAME = "REPLICATED_JOB_NAME"
ENV_JOB_INDEX = "JOB_INDEX"
ENV_REPLICATED_JOB_REPLICAS = "REPLICATED_JOB_REPLICAS"
ENV_JOB_COMPLETION_INDEX = "JOB_COMPLETION_INDEX"
"""Set by the Kubernetes Job controller on pods of ``completionMode: Indexed`` Jobs."""
ENV_HOSTS_PER_SLICE = "ROXXEL_HOSTS_PER_SLICE"
ENV_NUM_SLICES = "ROXXEL_NUM_SLICES"
ENV_JOBSET_SUBDOMAIN = "JOBSET_SUBDOMAIN"
ENV_COORDINATOR_PORT = "ROXXEL_COORDINATOR_PORT"

# --- 3. Indexed Job + headless Service --------------------------------------------
ENV_JOB_NAME = "ROXXEL_JOB_NAME"
ENV_SERVICE_NAME = "ROXXEL_SERVICE_NAME"

# --- 4. GKE TPU (injected by GKE; read by JAX's GkeTpuCluster) ----------------------
ENV_TPU_WORKER_HOSTNAMES = "TPU_WORKER_HOSTNAMES"
ENV_TPU_PROCESS_ADDRESSES = "TPU_PROCESS_ADDRESSES"
ENV_TPU_WORKER_ID = "TPU_WORKER_ID"
ENV_MEGASCALE_NUM_SLICES = "MEGASCALE_NUM_SLICES"
ENV_MEGASCALE_SLICE_ID = "MEGASCALE_SLICE_ID"

# --- Timeouts ------------------------------------------------------------------------
ENV_INIT_TIMEOUT = "ROXXEL_INIT_TIMEOUT"
"""Seconds JAX keeps retrying to reach the coordinator (``initialization_timeout``)."""
ENV_HEARTBEAT_TIMEOUT = "ROXXEL_HEARTBEAT_TIMEOUT"
"""Seconds without heartbeat before a peer is declared dead (``heartbeat_timeout_seconds``)."""

DEFAULT_COORDINATOR_PORT = 8476
DEFAULT_INIT_TIMEOUT = 300
"""Seconds; the default of ``jax.distributed.initialize``."""
DEFAULT_HEARTBEAT_TIMEOUT = 100
"""Seconds; the default of ``jax.distributed.initialize``."""

JOBSET_DOWNWARD_API: Mapping[str, str] = MappingProxyType(
    {
        ENV_JOBSET_NAME: "metadata.labels['jobset.sigs.k8s.io/jobset-name']",
        ENV_REPLICATED_JOB_NAME: "metadata.labels['jobset.sigs.k8s.io/replicatedjob-name']",
        ENV_JOB_INDEX: "metadata.labels['jobset.sigs.k8s.io/job-index']",
        ENV_REPLICATED_JOB_REPLICAS: "metadata.labels['jobset.sigs.k8s.io/replicatedjob-replicas']",
    }
)
"""Environment variable -> ``valueFrom.fieldRef.fieldPath`` for the JobSet labels
(label keys from the JobSet API, ``jobset.x-k8s.io/v1alpha2``)."""

# --- Launcher-defined, every kind of pod: what the training command needs to resume the run
ENV_RUN_NAME = "ROXXEL_RUN_NAME"
"""The job's name: the same across restarts of the job, so a run resumes under it."""
ENV_CHECKPOINT_DIR = "ROXXEL_CHECKPOINT_DIR"
"""The job spec's ``checkpoint_dir`` (local path or ``gs://`` URL); unset when the spec has none."""
ENV_WATCHDOG = "ROXXEL_WATCHDOG"
"""The progress watchdog's bounds for the Trainer: a JSON object of some of
:data:`WATCHDOG_FIELDS` (seconds; ``step_multiple`` a factor), or ``off``; unset: its defaults.
The job spec's ``watchdog`` section renders it."""
WATCHDOG_FIELDS = ("step_floor_s", "step_multiple", "first_step_s", "eval_s", "save_s", "poll_s")
"""The fields of ``roxxel.train.watchdog.WatchdogBounds``, named here for the launcher."""
ENV_PARALLELISM = "ROXXEL_PARALLELISM"
"""The device mesh's layout, from the job spec's ``parallelism``: ``AXIS=SIZE`` entries
separated by commas (``fsdp=4,tensor=2``; axes ``data``, ``fsdp``, ``tensor``, ``sequence``;
one size may be ``-1``, which fills), read by :func:`roxxel.sharding.default_mesh`; unset:
a 1-D ``data`` mesh over every device."""
ENV_RESTORE_FROM = "ROXXEL_RESTORE_FROM"
"""The job spec's ``restore_from``: another run's checkpoint directory to branch from while
this run's own holds no step (read only); unset when the spec has none."""
PREEMPTION_FILE = "roxxel_preemption.json"
"""The record, in a checkpoint directory, of its last preemption save: ``{"step", "save_s"
(seconds from the agreed step to the complete save), "state_bytes", "process_count", "at"}``;
``roxxel-launch validate`` compares ``save_s`` with the spec's grace period."""
OWNER_FILE = "roxxel_run.json"
"""The record, in a checkpoint directory, of the run it belongs to (``{"run": NAME, ...}``)."""
ENV_LOG_FORMAT = "ROXXEL_LOG_FORMAT"
"""How roxxel-worker, the Trainer's Logger and roxxel's :mod:`logging` write their lines:
``json`` (one JSON object a line, with ``severity``, ``message``, ``time`` and
``process_index``, for Cloud Logging; see :mod:`roxxel.log_format`) or ``text``; unset: text.
The job spec's ``log_format`` renders it (json on Kubernetes, text for ``--local``)."""
LOG_FORMATS = ("json", "text")
"""The values of :data:`ENV_LOG_FORMAT`."""
ENV_OUTPUT_DIR = "ROXXEL_OUTPUT_DIR"
"""Where the training command writes what a person reads after the job (logs, metrics,
TensorBoard, plots): a directory every pod may write that outlives the pods, at the same path
as on the machine that reads it. Set by ``roxxel-launch submit --local --runtime podman`` (a
host directory of the run bound into every container); unset otherwise, where the program
keeps its own default (a process run's working directory)."""
ENV_DATA_DIR = "ROXXEL_DATA_DIR"
"""Where the job's datasets are mounted (read-only) in the pod; unset when the spec has no data."""
ENV_RESTART_ATTEMPT = "ROXXEL_RESTART_ATTEMPT"
"""JobSet pods: the gang restart this pod belongs to (its ``jobset.sigs.k8s.io/restart-attempt``)."""
ENV_TERMINATION_GRACE = "ROXXEL_TERMINATION_GRACE_S"
"""The pod's ``terminationGracePeriodSeconds``: after forwarding SIGTERM, ``roxxel-worker``
kills its command this long minus :data:`GRACE_MARGIN_S` (a quarter of a shorter period) later
if it has not exited (a process
blocked in a collective never reaches the agreed step), instead of hanging until the kubelet's
SIGKILL; unset: no such bound."""
GRACE_MARGIN_S = 5
"""Seconds before the end of the grace period at which ``roxxel-worker`` ends a command that
ignored SIGTERM (its own exit and the pod's shutdown fit in them)."""
ENV_MAX_RESTART_ATTEMPT = "ROXXEL_MAX_RESTART_ATTEMPT"
"""JobSet pods: the last restart attempt allowed to run (``max_restarts + max_preemptions``);
``roxxel-worker`` exits with :data:`CONFIG_ERROR_EXIT_CODE` in a later one."""

ENV_CONFIG_ERROR_FILE = "ROXXEL_CONFIG_ERROR_FILE"
"""Set by ``roxxel-worker`` for its child: where the child records an uncaught
:class:`roxxel.exit_codes.ConfigurationError` (one line), so that the worker exits with
:data:`CONFIG_ERROR_EXIT_CODE` instead of passing the child's failure on."""

# --- Exit codes (see roxxel.exit_codes for the convention) -------------------------------
SUCCESS = 0
"""Training finished; nothing to restart."""
PREEMPTED_EXIT_CODE = 42
"""Stopped on request after a complete checkpoint: restart the job to resume."""
STALLED_EXIT_CODE = 43
"""No step (evaluation, save) finished within the progress watchdog's bound: the process wrote
its threads' stacks and exited; an ordinary failure, so a counted gang restart
(:mod:`roxxel.train.watchdog`)."""
CONFIG_ERROR_EXIT_CODE = 78
"""A configuration error before the first step: final, do not restart (``EX_CONFIG`` of BSD's
``sysexits.h``)."""
USAGE_ERROR = 2
"""Bad command line (the convention of shells and ``argparse``)."""
SIGNAL_EXIT_BASE = 128
"""A process killed by signal ``N`` is reported as ``128 + N`` (shell convention)."""
