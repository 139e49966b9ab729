"""What a process is in a multi-host JAX job: the values found in its environment (:class:`Detected`)
and JAX's own view once it has joined (:class:`ProcessInfo`).
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Detected:
    """What the environment (and explicit arguments) say about this process.

    Attributes:
        coordinator_address: ``host:port`` of process 0's coordinator service, or
            ``None`` for a single process or when JAX finds it (``gke-tpu``).
        num_processes: total number of processes (>= 1).
        process_id: this process, ``0 <= process_id < num_processes``.
        source: where the values came from, one of :data:`roxxel.distributed.SOURCES`.
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
        source: one of :data:`roxxel.distributed.SOURCES`, or ``"external"`` when other code had already
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
