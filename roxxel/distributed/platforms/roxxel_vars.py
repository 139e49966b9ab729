"""roxxel-launch's own variables: ``ROXXEL_NUM_PROCESSES``, ``ROXXEL_PROCESS_ID`` and
``ROXXEL_COORDINATOR_ADDRESS``, computed by the launcher (the local backend, or any template that
computes the values itself). Two rows of the table: the id or the address decide before every
platform; the count alone only after the Kubernetes rows, which read it too.
"""

from __future__ import annotations

from collections.abc import Mapping

from roxxel.contract import ENV_COORDINATOR_ADDRESS, ENV_NUM_PROCESSES, ENV_PROCESS_ID
from roxxel.distributed.env import _check_address, _check_consistent, _env_int, _get, _has_any
from roxxel.distributed.identity import Detected
from roxxel.distributed.platforms.row import Platform, Reading

CONVENTION = "roxxel-launch's contract (roxxel.contract): the launcher computes the three values itself"


def read(env: Mapping[str, str]) -> Reading:
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


PLATFORM = Platform(
    source="roxxel",
    applies=lambda env: _has_any(env, (ENV_PROCESS_ID, ENV_COORDINATOR_ADDRESS)),
    read=read,
    convention=CONVENTION,
)
"""``ROXXEL_PROCESS_ID`` or ``ROXXEL_COORDINATOR_ADDRESS`` set: the launcher's values win over any
platform's (a local run inside a pod or a Slurm step is the launcher's, not the platform's)."""

COUNT_ONLY = Platform(
    source="roxxel",
    applies=lambda env: _get(env, ENV_NUM_PROCESSES) is not None,
    read=read,
    convention=CONVENTION,
)
"""``ROXXEL_NUM_PROCESSES`` alone, without a JobSet's or an Indexed Job's variables (which use it as
their count or its cross-check): the launcher's contract, incomplete unless the count is 1."""
