"""Joining the JAX cluster: :func:`initialize` (detection, timeouts, ``jax.distributed.initialize``,
once per process) and :func:`shutdown`; the thin seams through which they call JAX.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from roxxel.contract import (
    DEFAULT_HEARTBEAT_TIMEOUT,
    DEFAULT_INIT_TIMEOUT,
    ENV_HEARTBEAT_TIMEOUT,
    ENV_INIT_TIMEOUT,
    ENV_JOB_COMPLETION_INDEX,
)
from roxxel.distributed.detection import detect
from roxxel.distributed.env import _CONTRACT, _check_explicit_int, _get, _parse_int
from roxxel.distributed.identity import ProcessInfo
from roxxel.distributed.leaving import _end_at_once_on_uncaught_errors, _jax_shutdown
from roxxel.distributed.platforms import COORDINATOR_FROM_JAX

logger = logging.getLogger("roxxel.distributed")


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

        detected = detect(
            env, coordinator_address=coordinator_address, num_processes=num_processes, process_id=process_id
        )
        if detected.source == "single" and _get(env, ENV_JOB_COMPLETION_INDEX) is not None:
            logger.warning(
                "%s=%s is set but nothing says how many processes there are: running as a single "
                "process. For a multi-host job set the variables of %s",
                ENV_JOB_COMPLETION_INDEX,
                env[ENV_JOB_COMPLETION_INDEX],
                _CONTRACT,
            )
        initialized_jax = detected.num_processes > 1
        if initialized_jax:
            kwargs: dict[str, Any] = {
                "initialization_timeout": init_timeout,
                "heartbeat_timeout_seconds": heartbeat,
            }
            if local_device_ids is not None:
                kwargs["local_device_ids"] = local_device_ids
            if detected.source not in COORDINATOR_FROM_JAX:
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


def _resolve_timeout(value: int | None, env: Mapping[str, str], env_name: str, arg_name: str, default: int) -> int:
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
        what,
        info.source,
        info.coordinator_address,
        info.num_processes,
        info.process_id,
        info.local_device_count,
        info.global_device_count,
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
                jax.__version__,
                name,
                name,
                value,
            )
    return kept


# --- thin JAX seams (monkeypatched in tests) -----------------------------------------


def _jax_initialize(**kwargs: Any) -> None:
    import jax

    jax.distributed.initialize(**kwargs)


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
