"""The local runtimes by name (``--runtime``): what runs each pod's worker.

``process`` (the default): :class:`~roxxel_launch.backends.local.runtime.ProcessRuntime`;
``podman`` and ``docker``: :class:`~roxxel_launch.backends.local.containers.ContainerRuntime`
with that engine.
"""

from __future__ import annotations

from pathlib import Path

from roxxel_launch.backends.base import BackendError
from roxxel_launch.backends.local.runtime import WorkerRuntime, default_runtime

__all__ = ["RUNTIMES", "runtime_for"]

RUNTIMES = ("process", "podman", "docker")
"""Names of the runtimes a local run can use; the first is the default."""


def runtime_for(name: str | None, run_dir: Path, python: str | None = None) -> WorkerRuntime:
    """The runtime called ``name`` (one of :data:`RUNTIMES`; None: the default) for the run
    in ``run_dir``; ``python`` runs the process runtime's shim (default: this interpreter).

    Raises:
        BackendError: an unknown name, or a container engine that is not installed.
    """
    if name in (None, "process"):
        return default_runtime(python)
    if name in ("podman", "docker"):
        from roxxel_launch.backends.local.containers import ContainerRuntime

        return ContainerRuntime(run_dir, engine=name)
    raise BackendError(f"the local runtime must be one of {', '.join(RUNTIMES)}, got {name!r}")
