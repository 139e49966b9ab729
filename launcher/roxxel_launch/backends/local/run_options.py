"""How a local run is made (:class:`LocalOptions`: what a cluster would decide for the
pods), and the checks of those options against a spec before anything starts."""

from __future__ import annotations

import dataclasses
import os
from typing import IO

from roxxel_launch.backends.base import BackendError
from roxxel_launch.backends.local.runtimes import RUNTIMES

DEFAULT_MAX_WORKERS = 64
"""The most workers a local run starts unless told otherwise (``--max-workers``,
``$ROXXEL_LOCAL_MAX_WORKERS``): every worker is a Python process with JAX loaded."""
MAX_WORKERS_ENV = "ROXXEL_LOCAL_MAX_WORKERS"
"""Environment variable: the local worker cap (see :data:`DEFAULT_MAX_WORKERS`)."""
NETWORKS = ("loopback", "netns")
"""Values of :attr:`LocalOptions.network`: every worker on loopback, or each in its own network
namespace (:mod:`roxxel_launch.backends.local.netns`)."""


@dataclasses.dataclass(frozen=True)
class LocalOptions:
    """How the local backend runs its jobs: what a cluster would decide for the pods.

    Attributes:
        foreground: ``submit`` and ``resume`` run the supervisor in this process (main
            thread only) and return when the job is terminal; otherwise they start a
            detached supervisor and return once it runs.
        echo: with ``foreground``, a text stream that gets worker 0's output, each line
            prefixed ``[worker 0] ``; None: logs only.
        data_dir: local directory given to the workers as ``ROXXEL_DATA_DIR`` (see
            :func:`~roxxel_launch.backends.local.pods.resolve_data_dir`).
        devices_per_worker: CPU devices per worker (``XLA_FLAGS``), >= 1; None: JAX's default.
        cwd: the workers' working directory; default the current directory at ``submit``.
        network: one of :data:`NETWORKS`: ``loopback``, or ``netns`` for a network
            namespace per worker (needs root; loopback with a warning otherwise).
        max_workers: the most worker processes this machine may start for one job;
            None: ``$ROXXEL_LOCAL_MAX_WORKERS``, else :data:`DEFAULT_MAX_WORKERS`.
        stop_timeout: seconds ``delete`` waits for a running supervisor to stop its workers
            before it SIGKILLs them; None: the job's grace period (capped at
            :data:`~roxxel_launch.backends.local.rundir.GRACE_CAP_SECONDS`) + 30.
        runtime: one of :data:`~roxxel_launch.backends.local.runtimes.RUNTIMES`: ``process``
            (each worker a process of this machine's Python), or ``podman`` (each a
            container of the manifest's image:
            :mod:`roxxel_launch.backends.local.containers`).
    """

    foreground: bool = False
    echo: IO[str] | None = None
    data_dir: str | None = None
    devices_per_worker: int | None = None
    cwd: str | None = None
    network: str = "loopback"
    max_workers: int | None = None
    stop_timeout: float | None = None
    runtime: str = "process"


def check_options(spec, opts: LocalOptions) -> None:
    """Refuses options that cannot run ``spec`` here, before anything is written or started.

    Raises:
        BackendError: devices per worker below 1, an unknown network, pods that a network
            namespace each cannot hold, a container runtime that cannot run the spec, or
            more workers than the cap (:func:`check_worker_count`).
    """
    if opts.devices_per_worker is not None and opts.devices_per_worker < 1:
        raise BackendError(f"devices per worker must be at least 1, got {opts.devices_per_worker}")
    if opts.network not in NETWORKS:
        raise BackendError(f"network must be one of {', '.join(NETWORKS)}, got {opts.network!r}")
    if opts.network == "netns":
        from roxxel_launch.backends.local import netns

        netns.pod_hosts(spec)  # the pods' names and coordinator, checked before anything starts
    if opts.runtime != "process":
        _check_container_runtime(spec, opts)
    check_worker_count(spec, opts.max_workers)


def _check_container_runtime(spec, opts: LocalOptions) -> None:
    """A container run: the runtime known and installed, no --netns, the image built."""
    from roxxel_launch.backends.local import containers

    if opts.runtime not in RUNTIMES:
        raise BackendError(f"the local runtime must be one of {', '.join(RUNTIMES)}, got {opts.runtime!r}")
    if (reason := containers.unavailable_reason(opts.runtime)) is not None:
        raise BackendError(f"--runtime {opts.runtime}: {reason}")
    if opts.network == "netns":
        raise BackendError(
            f"--netns and --runtime {opts.runtime} do not go together: each container has a network of its own already"
        )
    if spec.checkpoint_dir and not spec.checkpoint_dir.startswith(("/", "gs://")):
        raise BackendError(
            f"checkpoint_dir {spec.checkpoint_dir!r}: a container run binds a local "
            "checkpoint directory at its own path, which must be absolute"
        )
    containers.check_image(opts.runtime, spec.image)


def max_workers_setting(max_workers: int | None = None) -> int:
    """The local worker cap: ``max_workers``, else ``$ROXXEL_LOCAL_MAX_WORKERS``, else the default.

    Raises:
        BackendError: the cap (or the variable) is not a positive integer.
    """
    if max_workers is None:
        text = os.environ.get(MAX_WORKERS_ENV)
        if text is None:
            return DEFAULT_MAX_WORKERS
        try:
            max_workers = int(text)
        except ValueError:
            raise BackendError(f"${MAX_WORKERS_ENV}={text!r} is not an integer") from None
    if max_workers < 1:
        raise BackendError(f"the local worker cap must be at least 1, got {max_workers}")
    return max_workers


def check_worker_count(spec, max_workers: int | None = None) -> None:
    """Refuses a spec with more processes than a local run may start (each is a Python + JAX).

    Raises:
        BackendError: naming the count, the cap and how to raise it.
    """
    cap = max_workers_setting(max_workers)
    if spec.num_processes > cap:
        raise BackendError(
            f"{spec.name}: {spec.num_processes} worker processes is more than the local cap of {cap}; "
            f"shrink the job for a local run (e.g. --set accelerator=cpu) or raise the cap with "
            f"--max-workers N (or ${MAX_WORKERS_ENV})"
        )
