"""Which backend a job command talks to: ``--backend NAME`` / ``--local``, and the one place
where the CLI makes a backend (its module imported only then, so ``--help`` stays light)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable

import click

from roxxel_launch.backends.base import Backend


def _kubernetes_backend(
    *, namespace: str | None, context: str | None, poll: float | None, local_options, fit_check: bool = True
) -> Backend:
    try:
        from roxxel_launch.backends.kubernetes.backend import KubernetesBackend
    except ImportError as err:
        raise click.ClickException(
            f"the Kubernetes backend is not available ({err}); check that roxxel-launch is fully "
            "installed with the kubernetes client, or run the job on this machine with --local"
        ) from err
    if poll is None:
        return KubernetesBackend(namespace=namespace, context=context, fit_check=fit_check)
    return KubernetesBackend(namespace=namespace, context=context, poll_seconds=poll, fit_check=fit_check)


def _local_backend(
    *, namespace: str | None, context: str | None, poll: float | None, local_options, fit_check: bool = True
) -> Backend:
    if namespace is not None or context is not None:
        raise click.UsageError("--namespace and --context apply to Kubernetes, not to --local")
    from roxxel_launch.backends.local.backend import LocalBackend

    return LocalBackend(options=local_options)


BACKENDS: dict[str, Callable[..., Backend]] = {"kubernetes": _kubernetes_backend, "local": _local_backend}
"""The backends by name (``--backend``): each makes its backend, importing it only then."""
DEFAULT_BACKEND = "kubernetes"


def backend_option(command):
    """``--backend NAME`` and its short form ``--local`` (``--backend local``); the command
    gets the chosen name as ``backend_name``. Both given, and different: a usage error."""

    @functools.wraps(command)
    def run(*args, backend_name: str | None, local: bool, **kwargs):
        if local and backend_name not in (None, "local"):
            raise click.UsageError(f"--local is short for --backend local; it contradicts --backend {backend_name}")
        return command(*args, backend_name="local" if local else backend_name or DEFAULT_BACKEND, **kwargs)

    run = click.option(
        "--local",
        is_flag=True,
        help="Run on this machine: one process per host of the spec "
        "(runs kept in $ROXXEL_LOCAL_ROOT, default ./runs/local); "
        "short for --backend local.",
    )(run)
    return click.option(
        "--backend",
        "backend_name",
        type=click.Choice(list(BACKENDS)),
        default=None,
        help=f"Where the job runs (default: {DEFAULT_BACKEND}).",
    )(run)


def make_backend(
    name: str,
    *,
    namespace: str | None = None,
    context: str | None = None,
    poll: float | None = None,
    local_options=None,
    fit_check: bool = True,
) -> Backend:
    """The backend ``name`` of :data:`BACKENDS` (its module imported only now); the only
    place where the CLI makes one.

    ``poll``: seconds between the Kubernetes backend's own polls (resume waiting for the old
    objects to go, logs -f waiting for a pod); None keeps its default.
    ``local_options``: the local backend's ``LocalOptions`` (None: its defaults).
    ``fit_check``: the Kubernetes backend compares workers with the cluster's nodes before a
    create (``--skip-fit-check`` turns it off).
    """
    return BACKENDS[name](
        namespace=namespace, context=context, poll=poll, local_options=local_options, fit_check=fit_check
    )


@contextlib.contextmanager
def backend_errors():
    """Backend errors (unknown job, job exists, ...) become one clean error line, exit 1."""
    from roxxel_launch.backends.base import BackendError

    try:
        yield
    except BackendError as err:
        raise click.ClickException(str(err)) from err
