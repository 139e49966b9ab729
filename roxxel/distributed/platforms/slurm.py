"""Slurm: a task that ``srun`` started, read as JAX's own ``SlurmCluster`` reads it
(``jax/_src/clusters/slurm_cluster.py``, jax 0.10.2; the variables are srun's, listed in srun(1),
"OUTPUT ENVIRONMENT VARIABLES"):

- ``SLURM_PROCID``: the task's rank in the step: the process id.
- ``SLURM_NTASKS``: the step's number of tasks: the process count.
- ``SLURM_STEP_NODELIST``: the step's nodes in Slurm's host list syntax (``node[001-016],gpu7``);
  the coordinator is on the first one, where task 0 runs (Slurm's default block distribution).
- The coordinator's port is JAX's choice, ``61440 + SLURM_JOB_ID % 4096`` (the top 4,096 ports),
  so that two jobs that share a node rarely want the same port, unless ``ROXXEL_COORDINATOR_PORT``
  (else JAX's ``JAX_COORDINATOR_PORT``) names one.

The row applies when ``SLURM_PROCID`` and ``SLURM_STEP_NODELIST`` are both set: in a task of a job
step. The batch script's own shell has ``SLURM_PROCID=0``, ``SLURM_NTASKS`` and
``SLURM_JOB_NODELIST`` too, but no step (as in JAX, which requires ``SLURM_STEP_NODELIST``): a
``python train.py`` run there is one process, and reading the job's task count would have it wait
for tasks that nobody started. So ``SLURM_JOB_NODELIST`` is not a fallback for the step's list.

JAX, seeing these variables, also gives each process only the local device ``SLURM_LOCALID``
(one GPU per task) unless ``local_device_ids`` is passed to :func:`roxxel.distributed.initialize`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from roxxel.contract import ENV_COORDINATOR_PORT
from roxxel.distributed.env import _CONTRACT, _check_consistent, _env_int, _env_port, _get, _parse_int
from roxxel.distributed.identity import Detected
from roxxel.distributed.platforms.row import Platform, Reading

ENV_SLURM_PROCID = "SLURM_PROCID"
ENV_SLURM_NTASKS = "SLURM_NTASKS"
ENV_SLURM_STEP_NODELIST = "SLURM_STEP_NODELIST"
ENV_SLURM_JOB_ID = "SLURM_JOB_ID"
ENV_JAX_COORDINATOR_PORT = "JAX_COORDINATOR_PORT"

PORT_BASE = 65535 - 2**12 + 1
"""61440: JAX's coordinator port on Slurm is ``PORT_BASE + SLURM_JOB_ID % 4096``."""

# A bracketed group of a host list: numbers and ranges, "001-016,020".
_RANGES = re.compile(r"[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*")
_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")


def first_host(nodelist: str, name: str = ENV_SLURM_STEP_NODELIST) -> str:
    """The first host of a Slurm host list: ``node[001-016],gpu7`` gives ``node001``.

    Agrees with JAX's ``SlurmCluster`` on the forms it handles (``node001``, ``node001,host2``,
    ``node[001-0015],host2``, ``node[001,007-015],host2``) and also keeps what follows a bracket
    (``gpu[1-4]-ib`` gives ``gpu1-ib``; ``rack[1-2]-node[01-04]`` gives ``rack1-node01``).
    """
    depth, end = 0, len(nodelist)
    for i, ch in enumerate(nodelist):  # the first entry ends at a comma outside brackets
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            end = i
            break
    groups = re.findall(r"\[([^\[\]]*)\]", nodelist[:end])
    host = re.sub(r"\[([^\[\]]*)\]", lambda m: re.split(r"[,-]", m.group(1))[0], nodelist[:end])
    if not all(_RANGES.fullmatch(g) for g in groups) or not _HOST.fullmatch(host):
        raise ValueError(
            f"{name}={nodelist!r} is not a Slurm host list (e.g. 'node[001-016],gpu7'): srun sets it "
            f"for each task of a job step; unset it to run a single process"
        )
    return host


def _port(env: Mapping[str, str]) -> tuple[int, str]:
    if _get(env, ENV_COORDINATOR_PORT) is not None:
        return _env_port(env), ENV_COORDINATOR_PORT
    text = _get(env, ENV_JAX_COORDINATOR_PORT)
    if text is not None:
        port = _parse_int(text, ENV_JAX_COORDINATOR_PORT, minimum=1)
        if port > 65535:
            raise ValueError(f"{ENV_JAX_COORDINATOR_PORT}={port} is not a TCP port: use 1..65535")
        return port, ENV_JAX_COORDINATOR_PORT
    hint = f"srun sets it; or set {ENV_COORDINATOR_PORT} to choose the coordinator's port"
    job = _env_int(env, ENV_SLURM_JOB_ID, minimum=0, hint=hint)
    return PORT_BASE + job % 2**12, f"{ENV_SLURM_JOB_ID} % 4096 + {PORT_BASE}"


def read(env: Mapping[str, str]) -> Reading:
    if _get(env, ENV_SLURM_NTASKS) is None:
        raise ValueError(
            f"incomplete Slurm environment: {ENV_SLURM_PROCID} and {ENV_SLURM_STEP_NODELIST} set but "
            f"{ENV_SLURM_NTASKS} missing. srun sets all three for each task of a job step; start the "
            f"processes with srun, or unset them to run a single process; {_CONTRACT}"
        )
    count = _env_int(env, ENV_SLURM_NTASKS, minimum=1)
    pid = _env_int(env, ENV_SLURM_PROCID, minimum=0)
    host = first_host(_get(env, ENV_SLURM_STEP_NODELIST) or "")  # set: the row applies
    port, port_origin = _port(env)
    origins = {
        "coordinator_address": f"the first host of {ENV_SLURM_STEP_NODELIST}, port {port_origin}",
        "num_processes": ENV_SLURM_NTASKS,
        "process_id": ENV_SLURM_PROCID,
    }
    coord = f"{host}:{port}"
    _check_consistent(coord, count, pid, origins)
    return Detected(coord, count, pid, "slurm"), origins


PLATFORM = Platform(
    source="slurm",
    applies=lambda env: _get(env, ENV_SLURM_PROCID) is not None and _get(env, ENV_SLURM_STEP_NODELIST) is not None,
    read=read,
    convention=(
        "srun's task variables (srun(1)), read as JAX's SlurmCluster reads them "
        "(jax/_src/clusters/slurm_cluster.py): coordinator on the step's first host, port 61440 + job id % 4096"
    ),
)
