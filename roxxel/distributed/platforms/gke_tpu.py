"""A GKE TPU pod: GKE injects ``TPU_WORKER_HOSTNAMES`` (comma separated), ``TPU_WORKER_ID`` and, for
multislice, ``MEGASCALE_NUM_SLICES`` / ``MEGASCALE_SLICE_ID``. The coordinator, count and id are left
to JAX's own ``GkeTpuCluster`` (``jax/_src/clusters/cloud_tpu_cluster.py``); the values reported here
mirror its preference (``TPU_PROCESS_ADDRESSES`` over ``TPU_WORKER_HOSTNAMES``) and arithmetic.
"""

from __future__ import annotations

from collections.abc import Mapping

from roxxel.contract import (
    ENV_MEGASCALE_NUM_SLICES,
    ENV_MEGASCALE_SLICE_ID,
    ENV_TPU_PROCESS_ADDRESSES,
    ENV_TPU_WORKER_HOSTNAMES,
    ENV_TPU_WORKER_ID,
)
from roxxel.distributed.env import _env_int, _get, _has_any
from roxxel.distributed.identity import Detected
from roxxel.distributed.platforms.row import Platform, Reading


def read(env: Mapping[str, str]) -> Reading:
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


PLATFORM = Platform(
    source="gke-tpu",
    applies=lambda env: _has_any(env, (ENV_TPU_PROCESS_ADDRESSES, ENV_TPU_WORKER_HOSTNAMES)),
    read=read,
    convention="GKE's TPU pod variables, read by JAX's GkeTpuCluster (jax/_src/clusters/cloud_tpu_cluster.py)",
    coordinator_from_jax=True,
)
