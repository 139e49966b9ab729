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
and the later ones are not consulted.

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

Local runs (``roxxel-launch submit --local``) execute the rendered manifest, so sources 2
and 3 derive the cluster's DNS name of the coordinator. Without network namespaces no
resolver on this machine knows that name: the launcher then sets ``ROXXEL_HOST_ALIASES``
(comma-separated ``NAME=ADDRESS``, or ``NAME:PORT=ADDRESS:PORT`` for a pod port that every
process on one loopback cannot share), and the derived coordinator address is looked up
there, ``NAME:PORT`` first, then ``NAME``. Only the coordinator's DNS name (and, for a
shared loopback, its port) changes; every other value is the manifest's.

5. **single** -- none of the above: one process; ``jax.distributed`` is not
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

import dataclasses
import inspect
import logging
import os
import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any

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

logger = logging.getLogger("roxxel.distributed")


SOURCES = ("explicit", "roxxel", "jobset", "indexed-job", "gke-tpu", "single")
"""Possible values of :attr:`Detected.source`."""

_JOBSET_MARKERS = (
    ENV_JOBSET_NAME,
    ENV_REPLICATED_JOB_NAME,
    ENV_JOB_INDEX,
    ENV_REPLICATED_JOB_REPLICAS,
    ENV_HOSTS_PER_SLICE,
    ENV_NUM_SLICES,
)
_INDEXED_JOB_MARKERS = (ENV_JOB_NAME, ENV_SERVICE_NAME)
# RFC 1123 DNS label: what Kubernetes accepts for object names that become hostnames.
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_CONTRACT = "see the environment contract in the roxxel.distributed module docstring"


@dataclasses.dataclass(frozen=True)
class Detected:
    """What the environment (and explicit arguments) say about this process.

    Attributes:
        coordinator_address: ``host:port`` of process 0's coordinator service, or
            ``None`` for a single process or when JAX finds it (``gke-tpu``).
        num_processes: total number of processes (>= 1).
        process_id: this process, ``0 <= process_id < num_processes``.
        source: where the values came from, one of :data:`SOURCES`.
    """

    coordinator_address: str | None
    num_processes: int
    process_id: int
    source: str


@dataclasses.dataclass(frozen=True)
class ProcessInfo:
    """This process's place in the running JAX cluster, as JAX reports it.

    Attributes:
        process_id: ``jax.process_index()``.
        num_processes: ``jax.process_count()``.
        coordinator_address: ``host:port`` of the coordinator, ``None`` for a single process.
        source: one of :data:`SOURCES`, or ``"external"`` when other code had already
            initialised ``jax.distributed``.
        local_device_count: ``jax.local_device_count()``.
        global_device_count: ``jax.device_count()``.
    """

    process_id: int
    num_processes: int
    coordinator_address: str | None
    source: str
    local_device_count: int
    global_device_count: int


# ------------------------------------------------------------------------------------
# Detection (pure)
# ------------------------------------------------------------------------------------


def detect(
    env: Mapping[str, str],
    *,
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
) -> Detected:
    """Work out coordinator, process count and process id without touching JAX.

    Args:
        env: environment variables, e.g. ``os.environ`` (see the module docstring
            for the contract and the order of precedence).
        coordinator_address: ``host:port``; overrides the environment.
        num_processes: total process count (>= 1); overrides the environment.
        process_id: this process's id (>= 0); overrides the environment.

    Returns:
        A :class:`Detected`.

    Raises:
        TypeError: an explicit argument has the wrong type.
        ValueError: the values are missing, malformed or inconsistent (non-integer,
            negative, ``process_id >= num_processes``, a coordinator without a port,
            no coordinator for more than one process, a partial JobSet or Indexed Job
            environment); the message names the variable and the fix.
    """
    explicit = {
        "coordinator_address": coordinator_address,
        "num_processes": num_processes,
        "process_id": process_id,
    }
    given = {k: v for k, v in explicit.items() if v is not None}
    if num_processes is not None:
        _check_explicit_int("num_processes", num_processes, minimum=1)
    if process_id is not None:
        _check_explicit_int("process_id", process_id, minimum=0)
    if coordinator_address is not None:
        if not isinstance(coordinator_address, str):
            raise TypeError(
                f"coordinator_address must be a 'host:port' string, got {coordinator_address!r}"
            )
        _check_address(coordinator_address, "argument coordinator_address")

    if not given:
        return _detect_env(env)

    base: Detected | None
    origins: dict[str, str]
    if num_processes is not None and process_id is not None and (
        coordinator_address is not None or num_processes == 1
    ):  # complete: the environment is not read
        base, origins = None, {}
        merged_count, merged_id = num_processes, process_id
    else:
        base, origins = _detect_env_with_origins(env)
        merged_count = num_processes if num_processes is not None else base.num_processes
        merged_id = process_id if process_id is not None else base.process_id
    merged_coord = coordinator_address
    if merged_coord is None and base is not None:
        merged_coord = base.coordinator_address
    name = {k: f"argument {k}" if k in given else origins.get(k, f"{k} (not set)") for k in explicit}
    _check_consistent(
        merged_coord,
        merged_count,
        merged_id,
        name,
        coordinator_from_jax=base is not None and base.source == "gke-tpu",
    )
    return Detected(merged_coord, merged_count, merged_id, "explicit")


def _detect_env(env: Mapping[str, str]) -> Detected:
    return _detect_env_with_origins(env)[0]


def _detect_env_with_origins(env: Mapping[str, str]) -> tuple[Detected, dict[str, str]]:
    """Pick the first environment source that applies; return values and their origins
    (the coordinator address looked up in ``ROXXEL_HOST_ALIASES`` when set)."""
    detected, origins = _detect_source(env)
    aliases = _get(env, ENV_HOST_ALIASES)
    if aliases is None or detected.coordinator_address is None:
        return detected, origins
    address = _aliased(detected.coordinator_address, aliases)
    if address != detected.coordinator_address:
        origins = {**origins, "coordinator_address": f"{origins['coordinator_address']} via {ENV_HOST_ALIASES}"}
    return dataclasses.replace(detected, coordinator_address=address), origins


def _aliased(address: str, aliases: str) -> str:
    """``address`` (``host:port``) as ``ROXXEL_HOST_ALIASES`` maps it; unchanged when absent."""
    table = {}
    for entry in filter(None, (e.strip() for e in aliases.split(","))):
        name, sep, target = entry.partition("=")
        if not sep or not name or not target:
            raise ValueError(f"{ENV_HOST_ALIASES}: {entry!r} is not NAME=ADDRESS or NAME:PORT=ADDRESS:PORT")
        table[name] = target
    host, _, port = address.rpartition(":")
    if address in table:
        return table[address]
    if host in table:
        return f"{table[host]}:{port}"
    return address


def _detect_source(env: Mapping[str, str]) -> tuple[Detected, dict[str, str]]:
    if _has_any(env, (ENV_PROCESS_ID, ENV_COORDINATOR_ADDRESS)):
        return _from_roxxel(env)
    if _has_any(env, _JOBSET_MARKERS):
        return _from_jobset(env)
    if _has_any(env, _INDEXED_JOB_MARKERS):
        return _from_indexed_job(env)
    if _get(env, ENV_NUM_PROCESSES) is not None:
        return _from_roxxel(env)
    if _has_any(env, (ENV_TPU_PROCESS_ADDRESSES, ENV_TPU_WORKER_HOSTNAMES)):
        return _from_gke_tpu(env)
    single = Detected(None, 1, 0, "single")
    return single, {"num_processes": "default (single process)", "process_id": "default"}


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
        raise ValueError(
            f"{ENV_MEGASCALE_SLICE_ID}={slice_id} must be < {ENV_MEGASCALE_NUM_SLICES}={slices}"
        )
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


# --- validation helpers -------------------------------------------------------------


def _get(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name)
    if value is None or not value.strip():
        return None
    return value.strip()


def _has_any(env: Mapping[str, str], names: Sequence[str]) -> bool:
    return any(_get(env, name) is not None for name in names)


def _parse_int(text: str, name: str, *, minimum: int, hint: str = "") -> int:
    suffix = f" ({hint})" if hint else ""
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        raise ValueError(f"{name}={text!r} is not an integer: set it to a whole number >= {minimum}{suffix}")
    value = int(text)
    if value < minimum:
        raise ValueError(f"{name}={value} must be >= {minimum}{suffix}")
    return value


def _env_int(env: Mapping[str, str], name: str, *, minimum: int, hint: str = "") -> int:
    text = _get(env, name)
    if text is None:
        suffix = f" ({hint})" if hint else ""
        raise ValueError(f"{name} is not set: set it to a whole number >= {minimum}{suffix}; {_CONTRACT}")
    return _parse_int(text, name, minimum=minimum, hint=hint)


def _env_port(env: Mapping[str, str]) -> int:
    text = _get(env, ENV_COORDINATOR_PORT)
    if text is None:
        return DEFAULT_COORDINATOR_PORT
    port = _parse_int(text, ENV_COORDINATOR_PORT, minimum=1)
    if port > 65535:
        raise ValueError(f"{ENV_COORDINATOR_PORT}={port} is not a TCP port: use 1..65535")
    return port


def _dns_label(env: Mapping[str, str], name: str) -> str:
    value = _get(env, name)
    if value is None or not _DNS_LABEL.fullmatch(value) or len(value) > 63:
        raise ValueError(
            f"{name}={value!r} is not a valid Kubernetes name (RFC 1123 label: lower-case letters, "
            f"digits and '-', at most 63 characters): it must be the object's metadata.name"
        )
    return value


def _check_address(address: str, origin: str) -> None:
    if address.startswith("["):  # [IPv6]:port
        host, _, rest = address.partition("]")
        sep, port = rest[:1], rest[1:]
        has_port = sep == ":"
    else:
        host, sep, port = address.rpartition(":")
        has_port = bool(sep) and ":" not in host
    if not has_port or host in ("", "["):
        missing = "port" if not has_port else "host"
        raise ValueError(
            f"coordinator address {address!r} from {origin} has no {missing}: use host:port, e.g. "
            f"'trainer-0.trainer:{DEFAULT_COORDINATOR_PORT}' (an IPv6 address goes in brackets: '[::1]:8476')"
        )
    if not re.fullmatch(r"[0-9]{1,5}", port) or not 1 <= int(port) <= 65535:
        raise ValueError(
            f"coordinator address {address!r} from {origin} has an invalid port {port!r}: use 1..65535"
        )


def _check_explicit_int(name: str, value: Any, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {value!r} of type {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"argument {name}={value} must be >= {minimum}")


def _check_cross_count(env: Mapping[str, str], count: int, derivation: str) -> None:
    text = _get(env, ENV_NUM_PROCESSES)
    if text is None:
        return
    declared = _parse_int(text, ENV_NUM_PROCESSES, minimum=1)
    if declared != count:
        raise ValueError(
            f"{ENV_NUM_PROCESSES}={declared} disagrees with {derivation} = {count}: "
            f"fix the template so that both describe the same number of hosts"
        )


def _check_consistent(
    coordinator: str | None,
    count: int,
    pid: int,
    origins: Mapping[str, str],
    *,
    coordinator_from_jax: bool = False,
) -> None:
    if pid >= count:
        raise ValueError(
            f"process id {pid} (from {origins['process_id']}) must be < the process count {count} "
            f"(from {origins['num_processes']}): ids run from 0 to count - 1"
        )
    if count > 1 and coordinator is None and not coordinator_from_jax:
        raise ValueError(
            f"{count} processes (from {origins['num_processes']}) but no coordinator address: "
            f"set {ENV_COORDINATOR_ADDRESS}=host:port of process 0 (or pass coordinator_address)"
        )


# ------------------------------------------------------------------------------------
# Initialisation
# ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Record:
    info: ProcessInfo
    initialized_jax: bool


_lock = threading.Lock()
_record: _Record | None = None


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    local_device_ids: int | Sequence[int] | None = None,
    initialization_timeout: int | None = None,
    heartbeat_timeout_seconds: int | None = None,
    env: Mapping[str, str] | None = None,
) -> ProcessInfo:
    """Detect this process's place in the job and initialise ``jax.distributed``.

    Call it before any other JAX call (JAX refuses to join a cluster once its
    backend is up). Detection follows :func:`detect`; ``jax.distributed.initialize``
    is called only for more than one process, and for ``gke-tpu`` without an
    address, count or id so that JAX detects them itself. Calling it again
    returns the first result; if other code already initialised
    ``jax.distributed``, that runtime is used (``source == "external"``).
    Process 0 logs the result at INFO on the ``roxxel.distributed`` logger.

    Args:
        coordinator_address: ``host:port`` of process 0; overrides the environment.
        num_processes: total process count; overrides the environment.
        process_id: this process's id; overrides the environment.
        local_device_ids: passed to ``jax.distributed.initialize`` when not ``None``.
        initialization_timeout: seconds to keep trying to reach the coordinator;
            default ``ROXXEL_INIT_TIMEOUT`` or 300.
        heartbeat_timeout_seconds: seconds without a heartbeat before a peer is
            declared dead; default ``ROXXEL_HEARTBEAT_TIMEOUT`` or 100. Ignored with a
            warning by JAX versions that do not accept it.
        env: environment to read; default ``os.environ``.

    Returns:
        A :class:`ProcessInfo` with JAX's own view of the cluster.

    Raises:
        TypeError, ValueError: as :func:`detect`, or for a timeout that is not a
            positive whole number of seconds.
        RuntimeError: a second call asks for a different identity than the first; or
            from ``jax.distributed.initialize`` (e.g. JAX's backend is already in use).

    A coordinator or peer that cannot be reached within ``initialization_timeout``
    is not an exception: JAX (0.10) aborts the process natively (SIGABRT, exit code
    134 through ``roxxel-worker``) after logging ``DEADLINE_EXCEEDED``.
    """
    global _record
    env = os.environ if env is None else env
    init_timeout = _resolve_timeout(
        initialization_timeout, env, ENV_INIT_TIMEOUT, "initialization_timeout", DEFAULT_INIT_TIMEOUT
    )
    heartbeat = _resolve_timeout(
        heartbeat_timeout_seconds,
        env,
        ENV_HEARTBEAT_TIMEOUT,
        "heartbeat_timeout_seconds",
        DEFAULT_HEARTBEAT_TIMEOUT,
    )
    requested = {
        "coordinator_address": coordinator_address,
        "num_processes": num_processes,
        "process_id": process_id,
    }

    with _lock:
        if _record is not None and _record.initialized_jax and not _jax_is_initialized():
            logger.warning("jax.distributed was shut down by other code; initialising again")
            _record = None
        if _record is not None:
            _check_same_identity(_record.info, requested, "initialize() was already called")
            logger.debug("already initialised: %s", _record.info)
            return _record.info

        if _jax_is_initialized():
            info = _process_info("external", None)
            _check_same_identity(info, requested, "jax.distributed was already initialised by other code")
            _record = _Record(info, initialized_jax=False)
            _log_info(info, "using the jax.distributed runtime that other code initialised")
            return info

        detected = detect(env, coordinator_address=coordinator_address, num_processes=num_processes,
                          process_id=process_id)
        if detected.source == "single" and _get(env, ENV_JOB_COMPLETION_INDEX) is not None:
            logger.warning(
                "%s=%s is set but nothing says how many processes there are: running as a single "
                "process. For a multi-host job set the variables of %s",
                ENV_JOB_COMPLETION_INDEX, env[ENV_JOB_COMPLETION_INDEX], _CONTRACT,
            )
        initialized_jax = detected.num_processes > 1
        if initialized_jax:
            kwargs: dict[str, Any] = {
                "initialization_timeout": init_timeout,
                "heartbeat_timeout_seconds": heartbeat,
            }
            if local_device_ids is not None:
                kwargs["local_device_ids"] = local_device_ids
            if detected.source != "gke-tpu":
                kwargs["coordinator_address"] = detected.coordinator_address
                kwargs["num_processes"] = detected.num_processes
                kwargs["process_id"] = detected.process_id
            logger.debug("calling jax.distributed.initialize(%s) for %s", kwargs, detected)
            _jax_initialize(**_supported_kwargs(kwargs))
        info = _process_info(detected.source, detected.coordinator_address)
        if (info.process_id, info.num_processes) != (detected.process_id, detected.num_processes):
            logger.warning(
                "JAX reports process %d of %d but the environment (%s) says %d of %d; using JAX's values",
                info.process_id,
                info.num_processes,
                detected.source,
                detected.process_id,
                detected.num_processes,
            )
        _record = _Record(info, initialized_jax=initialized_jax)
        if initialized_jax:
            _end_at_once_on_uncaught_errors(info.process_id)
        _log_info(info, "initialised")
        return info


def _end_at_once_on_uncaught_errors(process_id: int) -> None:
    """After an uncaught exception, report it and end the process at once.

    Left alone, a process of a multi-process job that raises waits at JAX's shutdown barrier
    (``shutdown_timeout_seconds``, 300 s by default) for peers that wait in turn for it in
    the step's collective: the whole gang hung for 5 minutes, then died by SIGABRT (seen in
    a container run whose process 0 could not create its log directory). Python's exit
    functions still run (loggers flush), except JAX's own, which would wait at that barrier;
    JAX's C++ shutdown does not run either. The exit status stays
    Python's for an uncaught exception (1); a configuration error has been recorded by the
    hook this one wraps (:func:`roxxel.exit_codes.report_configuration_errors`).
    """
    import atexit
    import sys

    previous = sys.excepthook

    def hook(kind, value, tb):
        previous(kind, value, tb)
        sys.stderr.write(f"roxxel: process {process_id} ends now (exit 1) after an uncaught {kind.__name__}, "
                         "without waiting for the other processes at JAX's shutdown barrier\n")
        try:
            _skip_jax_shutdown_at_exit()
            atexit._run_exitfuncs()
            logging.shutdown()
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
            os._exit(1)

    sys.excepthook = hook


def _skip_jax_shutdown_at_exit() -> None:
    """Unregisters JAX's exit function (``jax._src.api.clean_up``, private: no public way),
    which shuts ``jax.distributed`` down and so waits at its shutdown barrier."""
    import atexit

    from jax._src import api as jax_api

    clean_up = getattr(jax_api, "clean_up", None)
    if clean_up is not None:
        atexit.unregister(clean_up)


def shutdown() -> None:
    """Shut down ``jax.distributed`` if :func:`initialize` started it; otherwise do nothing.

    A runtime that other code initialised (``source == "external"``) is left alone.
    After this, :func:`initialize` detects afresh (but JAX itself cannot join a
    cluster again in the same process once its backend is up).

    Raises:
        RuntimeError: what ``jax.distributed.shutdown`` raises (e.g. a peer is gone).
    """
    global _record
    with _lock:
        record, _record = _record, None
        if record is not None and record.initialized_jax:
            logger.debug("shutting down jax.distributed")
            _jax_shutdown()


def _resolve_timeout(
    value: int | None, env: Mapping[str, str], env_name: str, arg_name: str, default: int
) -> int:
    if value is not None:
        _check_explicit_int(arg_name, value, minimum=1)
        return value
    text = _get(env, env_name)
    if text is None:
        return default
    return _parse_int(text, env_name, minimum=1, hint="seconds")


def _check_same_identity(info: ProcessInfo, requested: Mapping[str, Any], what: str) -> None:
    conflicts = [
        f"{name}={value!r} (running: {getattr(info, name)!r})"
        for name, value in requested.items()
        if value is not None and value != getattr(info, name)
    ]
    if conflicts:
        raise RuntimeError(
            f"{what} as process {info.process_id} of {info.num_processes}; cannot switch to "
            f"{', '.join(conflicts)}: a process joins one JAX cluster, once"
        )


def _log_info(info: ProcessInfo, what: str) -> None:
    level = logging.INFO if info.process_id == 0 else logging.DEBUG
    logger.log(
        level,
        "%s: source=%s coordinator=%s processes=%d process_id=%d local_devices=%d global_devices=%d",
        what, info.source, info.coordinator_address, info.num_processes, info.process_id,
        info.local_device_count, info.global_device_count,
    )


def _supported_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Drop keyword arguments the installed ``jax.distributed.initialize`` does not accept."""
    import jax

    params = inspect.signature(jax.distributed.initialize).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return kwargs
    kept = {}
    for name, value in kwargs.items():
        if name in params:
            kept[name] = value
        else:
            logger.warning(
                "jax %s's jax.distributed.initialize does not accept %s; ignoring %s=%r",
                jax.__version__, name, name, value,
            )
    return kept


# --- thin JAX seams (monkeypatched in tests) -----------------------------------------


def _jax_initialize(**kwargs: Any) -> None:
    import jax

    jax.distributed.initialize(**kwargs)


_SHUTDOWN_BARRIER_MS = 60_000
_DRAIN_SECONDS = 60.0


def _finish_local_work(timeout: float = _DRAIN_SECONDS) -> None:
    """Wait (at most ``timeout`` seconds) until every live ``jax.Array`` of this process is computed.

    JAX dispatches asynchronously, and a local device runs its work independently of the
    others: a collective may still be running (or waiting for its peers to join) on one
    device when the program leaves. A process that exits then drops its part, and its peers
    wait for it: seen as a process of a 2-process CPU job hung forever in its exit (the CPU
    client's destructor joining a device thread that waited in Gloo's connect for the
    departed peer). Waiting for every live array, on every process before the shutdown
    barrier, makes each one finish its collectives while its peers are still there. A
    result the program has already dropped without waiting for it cannot be waited for:
    block on results (``jax.block_until_ready``) before leaving.
    """
    import threading

    import jax

    def drain() -> None:
        jax.block_until_ready(jax.live_arrays())

    worker = threading.Thread(target=drain, name="roxxel-drain", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        logger.warning("this process's arrays are still being computed after %g s; leaving without them", timeout)


def _jax_shutdown() -> None:
    """Finish this process's device work, meet every process at a barrier, then shut down.

    A process that shuts down (and exits) while the coordinator's process is still busy
    can leave the coordinator waiting in its own shutdown for a peer that is gone: seen as
    a rank-0 hang after all work was done. Meeting first makes them leave together; a
    peer that never comes only costs the barrier's timeout. Before meeting, each process
    waits for its arrays still being computed (:func:`_finish_local_work`).
    """
    import jax
    from jax._src import distributed as jax_distributed

    client = jax_distributed.global_state.client
    if client is not None and jax.process_count() > 1:
        _finish_local_work()
        try:
            client.wait_at_barrier("roxxel_shutdown", _SHUTDOWN_BARRIER_MS)
        except Exception as e:  # a missing peer: shut down anyway, as JAX would
            logger.warning("not every process reached shutdown within %d s: %s", _SHUTDOWN_BARRIER_MS // 1000, e)
    jax.distributed.shutdown()


def _jax_is_initialized() -> bool:
    import jax

    is_initialized = getattr(jax.distributed, "is_initialized", None)
    if is_initialized is not None:
        return bool(is_initialized())
    from jax._src import distributed as jax_distributed  # older jax: no public API

    return jax_distributed.global_state.client is not None


def _process_info(source: str, coordinator: str | None) -> ProcessInfo:
    import jax

    if _jax_is_initialized():
        from jax._src import distributed as jax_distributed

        coordinator = getattr(jax_distributed.global_state, "coordinator_address", None) or coordinator
    return ProcessInfo(
        process_id=jax.process_index(),
        num_processes=jax.process_count(),
        coordinator_address=coordinator,
        source=source,
        local_device_count=jax.local_device_count(),
        global_device_count=jax.device_count(),
    )
