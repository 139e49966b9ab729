"""Reading and checking the environment's values: integers, ports, Kubernetes names, ``host:port``
addresses, and the checks across them. Every error is a ``ValueError`` (``TypeError`` for an argument
of the wrong type) naming the variable and the fix.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from roxxel.contract import (
    DEFAULT_COORDINATOR_PORT,
    ENV_COORDINATOR_ADDRESS,
    ENV_COORDINATOR_PORT,
    ENV_NUM_PROCESSES,
)

# RFC 1123 DNS label: what Kubernetes accepts for object names that become hostnames.
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_CONTRACT = "see the environment contract in the roxxel.distributed module docstring"


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
        raise ValueError(f"coordinator address {address!r} from {origin} has an invalid port {port!r}: use 1..65535")


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
