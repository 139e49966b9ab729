"""The worker platforms, a table in order of precedence: the first row whose ``applies`` holds for the
environment is read, and the later ones are not consulted (explicit arguments come before every row,
in :func:`roxxel.distributed.detect`). Each platform is one module with one reader; a new one is one
module and one row here.

Why this order:

1. ``roxxel`` (id or address set): the launcher's values are the most deliberate; a local run
   started inside a pod or a Slurm step keeps its own identity.
2. ``jobset``, 3. ``indexed-job``: variables the pod template sets on purpose; the launcher
   renders one workload or the other, never both.
4. ``roxxel`` (the count alone): after the Kubernetes rows, which read ``ROXXEL_NUM_PROCESSES``
   as their count or cross-check.
5. ``gke-tpu``: GKE injects these into every TPU pod, also those of a JobSet or an Indexed Job,
   whose own variables say more (the slice and host by the template's layout).
6. ``slurm``: Slurm's variables are inherited by everything started inside a job step (a
   container, ``roxxel-launch submit --local`` run from an ``srun`` shell), so they are the weakest
   evidence and give way to every variable set for the process on purpose. (JAX's own registry
   asks Slurm before the TPU clusters; the two do not meet on one host.)
7. ``single``: nothing applies: one process, ``jax.distributed`` is not initialised.
"""

from __future__ import annotations

from collections.abc import Mapping

from roxxel.distributed.identity import Detected
from roxxel.distributed.platforms import gke_tpu, indexed_job, jobset, roxxel_vars, slurm
from roxxel.distributed.platforms.row import Platform, Reading

SINGLE = Platform(
    source="single",
    applies=lambda env: True,
    read=lambda env: (
        Detected(None, 1, 0, "single"),
        {"num_processes": "default (single process)", "process_id": "default"},
    ),
    convention="none: a process started by hand is one process",
)

PLATFORMS: tuple[Platform, ...] = (
    roxxel_vars.PLATFORM,
    jobset.PLATFORM,
    indexed_job.PLATFORM,
    roxxel_vars.COUNT_ONLY,
    gke_tpu.PLATFORM,
    slurm.PLATFORM,
    SINGLE,
)
"""Every worker platform, in order of precedence (see the module docstring); the last always applies."""

SOURCES: tuple[str, ...] = ("explicit", *dict.fromkeys(p.source for p in PLATFORMS))
"""Possible values of :attr:`Detected.source`: ``"explicit"``, then each platform's, in precedence order."""

COORDINATOR_FROM_JAX = frozenset(p.source for p in PLATFORMS if p.coordinator_from_jax)
"""The sources whose coordinator, count and id ``jax.distributed.initialize()`` finds by itself."""


def platform_for(env: Mapping[str, str]) -> Platform:
    """The first platform in :data:`PLATFORMS` that applies to ``env``."""
    return next(p for p in PLATFORMS if p.applies(env))


def read_platform(env: Mapping[str, str]) -> Reading:
    """The values of the first platform that applies, and where each came from."""
    return platform_for(env).read(env)


__all__ = ["COORDINATOR_FROM_JAX", "PLATFORMS", "SOURCES", "Platform", "Reading", "platform_for", "read_platform"]
