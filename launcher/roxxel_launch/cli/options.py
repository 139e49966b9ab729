"""The click options that several commands share (one definition, one help text each), and
the options that belong to one backend (:class:`BackendOption`, listed by its row in
:data:`roxxel_launch.cli.backend_choice.BACKENDS`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import click


@dataclasses.dataclass(frozen=True)
class BackendOption:
    """A command-line option that belongs to one backend: a decorator as ``click.option(*decls,
    **attrs)`` is, that also names its parameter, flag and default for the messages that refuse
    it under another backend.

    Attributes:
        decls: click's parameter declarations (flags, and the parameter name where it is not
            the longest flag's).
        attrs: ``click.option``'s keywords (``type``, ``default``, ``help``, ...).
    """

    decls: tuple[str, ...]
    attrs: Mapping[str, Any]

    def __call__(self, command):
        return click.option(*self.decls, **self.attrs)(command)

    @property
    def _param(self) -> click.Option:
        return click.Option(self.decls, **self.attrs)

    @property
    def name(self) -> str:
        """The parameter's name: the command's keyword and the backend factory's."""
        return str(self._param.name)

    @property
    def flag(self) -> str:
        """The flag as messages name it (the longest: ``--namespace``, not ``-n``)."""
        return max(self._param.opts, key=len)

    @property
    def default(self) -> Any:
        """Its value when not given, as click resolves it (False for a flag)."""
        return self._param.get_default(click.Context(click.Command(None)))


def for_backend(*decls: str, **attrs: Any) -> BackendOption:
    """A :class:`BackendOption` declared as ``click.option`` takes it."""
    return BackendOption(decls, attrs)


SET_HELP = (
    "Override a spec field: --set key.path=value (repeatable; escape dots in keys "
    "as '\\.', e.g. --set resources.limits.memory=64Gi)."
)


skip_fit_option = for_backend(
    "--skip-fit-check",
    is_flag=True,
    help="Do not compare the workers' requests with the cluster's nodes before submitting: for an "
    "account that may not list nodes, or a node pool scaled to zero that would hold the job "
    '(docs/kubernetes.md, "Fit check").',
)
schema_option = click.option(
    "--schema/--no-schema",
    default=True,
    show_default=True,
    help="Check built-in kinds against the official Kubernetes schema (needs kubernetes-validate).",
)
version_option = click.option(
    "--kubernetes-version",
    default="1.30.0",
    show_default=True,
    help="Kubernetes version whose schema to check against.",
)
set_option = click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help=SET_HELP)


context_option = for_backend(
    "--context", default=None, help="kubeconfig context (Kubernetes only; default: the current one)."
)
namespace_option = for_backend(
    "-n", "--namespace", default=None, help="Kubernetes namespace (Kubernetes only; default: the context's)."
)

# The local backend's options (what a cluster would decide for the pods: LocalOptions).
detach_option = for_backend(
    "--detach",
    is_flag=True,
    help="With --local: run the job in the background and return at once (default: in the "
    "foreground, streaming worker 0's output, exiting with the job's exit code).",
)
devices_option = for_backend(
    "--devices-per-worker",
    type=click.IntRange(min=1),
    default=None,
    help="With --local: CPU devices each worker's JAX sees (XLA_FLAGS=--xla_force_host_platform_device_count=N).",
)
data_dir_option = for_backend(
    "--data-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="With --local: local directory the workers get as ROXXEL_DATA_DIR, in place "
    "of the spec's data volume when it has one (default: $ROXXEL_LOCAL_DATA_DIR).",
)
netns_option = for_backend(
    "--netns",
    is_flag=True,
    help="With --local: run each worker in its own network namespace, with its pod's hostname "
    "and the manifest's DNS names (needs root; loopback otherwise).",
)
max_workers_option = for_backend(
    "--max-workers",
    type=click.IntRange(min=1),
    default=None,
    help="With --local: the most worker processes to start (default $ROXXEL_LOCAL_MAX_WORKERS, else 64).",
)
runtime_option = for_backend(
    "--runtime",
    type=click.Choice(["process", "podman", "docker"]),  # backends/local/runtimes.py's RUNTIMES
    default="process",
    show_default=True,
    help="With --local: run each pod's worker as a process of this machine's Python, or as a "
    "container of the spec's image with podman or docker (its user, read-only root, resources, "
    "emptyDirs, own network; the image must be in the engine's local store).",
)


container_option = click.option(
    "-c",
    "--container",
    default=None,
    help="Another container of the worker's pod than the worker, e.g. the GCS FUSE sidecar "
    "gke-gcsfuse-sidecar (Kubernetes only; an unknown name lists the pod's containers).",
)


pod_option = click.option(
    "-p",
    "--pod",
    "--process",
    "process",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Which worker's pod: its JAX process id (on a JobSet, slice * hosts_per_slice + completion index).",
)


poll_option = click.option(
    "--poll", type=click.FloatRange(min=0.1), default=2.0, show_default=True, help="Seconds between status checks."
)
