"""Which source of the contract applies (explicit arguments first, then the first row of the platform
table, :data:`roxxel.distributed.platforms.PLATFORMS`, that applies to the environment), and the
coordinator address through ``ROXXEL_HOST_ALIASES``. Pure: no JAX, no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from roxxel.contract import ENV_HOST_ALIASES
from roxxel.distributed.env import _check_address, _check_consistent, _check_explicit_int, _get
from roxxel.distributed.identity import Detected
from roxxel.distributed.platforms import COORDINATOR_FROM_JAX, read_platform


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
            no coordinator for more than one process, a partial JobSet, Indexed Job or Slurm
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
            raise TypeError(f"coordinator_address must be a 'host:port' string, got {coordinator_address!r}")
        _check_address(coordinator_address, "argument coordinator_address")

    if not given:
        return _detect_env(env)

    base: Detected | None
    origins: dict[str, str]
    if (
        num_processes is not None and process_id is not None and (coordinator_address is not None or num_processes == 1)
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
        coordinator_from_jax=base is not None and base.source in COORDINATOR_FROM_JAX,
    )
    return Detected(merged_coord, merged_count, merged_id, "explicit")


def _detect_env(env: Mapping[str, str]) -> Detected:
    return _detect_env_with_origins(env)[0]


def _detect_env_with_origins(env: Mapping[str, str]) -> tuple[Detected, dict[str, str]]:
    """Read the first platform that applies; return values and their origins
    (the coordinator address looked up in ``ROXXEL_HOST_ALIASES`` when set)."""
    detected, origins = read_platform(env)
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
