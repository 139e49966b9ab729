"""Which backend a job command talks to: ``--backend NAME`` / ``--local``, the backends as rows
(:data:`BACKENDS`), and the one place where the CLI makes a backend (its module imported only
then, so ``--help`` stays light).

Each row declares the command-line options that belong to its backend
(:class:`~roxxel_launch.cli.options.BackendOption`) and a factory that takes only those (and
the settings it shares with the commands, :attr:`BackendRow.uses`). A command offers the
options it has a use for (:func:`backend_options`); it gets the chosen backend's, and one
that belongs to another backend is a usage error naming that backend. A new backend is one
row here plus its package under ``roxxel_launch/backends/``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import sys
from collections.abc import Callable, Mapping
from typing import Any

import click
from click.core import ParameterSource

from roxxel_launch.backends.base import Backend
from roxxel_launch.cli import options as O


@dataclasses.dataclass(frozen=True)
class BackendRow:
    """One backend the job commands can talk to.

    Attributes:
        name: its ``--backend`` value.
        chosen_by: how a command line chooses it (``--backend kubernetes``, ``--local``).
        jobs: how messages name its jobs (``Kubernetes jobs``, ``--local runs``).
        help: one line for ``--backend``'s help: where its jobs run, after whose convention.
        options: the options that belong to it; a command offers those it uses
            (:func:`backend_options`).
        uses: settings a command shares with it besides its options (resume's ``--poll`` is
            also the Kubernetes backend's own poll interval).
        make: its factory, taking only the keywords of ``options`` and ``uses``; it imports
            the backend's module only when called.
        cluster: its manifests go to a Kubernetes API server, so they are rendered and checked
            with the rules only a cluster needs (a durable checkpoint volume, ...).
    """

    name: str
    chosen_by: str
    jobs: str
    help: str
    options: tuple[O.BackendOption, ...]
    uses: tuple[str, ...]
    make: Callable[..., Backend]
    cluster: bool

    @property
    def takes(self) -> frozenset[str]:
        """Every keyword its factory takes."""
        return frozenset(o.name for o in self.options) | frozenset(self.uses)


def _kubernetes_backend(
    *, namespace: str | None = None, context: str | None = None, skip_fit_check: bool = False, poll: float | None = None
) -> Backend:
    try:
        from roxxel_launch.backends.kubernetes.backend import KubernetesBackend
    except ImportError as err:
        raise click.ClickException(
            f"the Kubernetes backend is not available ({err}); check that roxxel-launch is fully "
            "installed with the kubernetes client, or run the job on this machine with --local"
        ) from err
    if poll is None:  # its own default
        return KubernetesBackend(namespace=namespace, context=context, fit_check=not skip_fit_check)
    return KubernetesBackend(namespace=namespace, context=context, fit_check=not skip_fit_check, poll_seconds=poll)


def _local_backend(
    *,
    detach: bool = False,
    devices_per_worker: int | None = None,
    data_dir: str | None = None,
    netns: bool = False,
    max_workers: int | None = None,
    runtime: str = "process",
    dry_run: bool = False,
) -> Backend:
    from roxxel_launch.backends.local.backend import LocalBackend
    from roxxel_launch.backends.local.run_options import LocalOptions

    foreground = not detach and not dry_run  # submit and resume only: the other verbs read the run directory
    if netns and detach and not dry_run:
        from roxxel_launch.backends.local.netns import unavailable_reason

        if (reason := unavailable_reason()) is not None:  # a foreground supervisor says it itself
            click.echo(f"roxxel-launch: --netns: {reason}; running the workers on loopback instead", err=True)
    options = LocalOptions(
        foreground=foreground,
        echo=sys.stdout if foreground else None,
        data_dir=data_dir,
        devices_per_worker=devices_per_worker,
        network="netns" if netns and not dry_run else "loopback",
        max_workers=max_workers,
        runtime=runtime,
    )
    return LocalBackend(options=options)


KUBERNETES = BackendRow(
    name="kubernetes",
    chosen_by="--backend kubernetes",
    jobs="Kubernetes jobs",
    help="the kubeconfig context's cluster, a JobSet (jobset.x-k8s.io) or Indexed Job per job",
    options=(O.namespace_option, O.context_option, O.skip_fit_option),
    uses=("poll",),
    make=_kubernetes_backend,
    cluster=True,
)
LOCAL = BackendRow(
    name="local",
    chosen_by="--local",
    jobs="--local runs",
    help="this machine, each pod of the same manifest a process or container, as the kubelet runs it",
    options=(
        O.detach_option,
        O.devices_option,
        O.data_dir_option,
        O.netns_option,
        O.max_workers_option,
        O.runtime_option,
    ),
    uses=("dry_run",),
    make=_local_backend,
    cluster=False,
)
BACKENDS: dict[str, BackendRow] = {row.name: row for row in (KUBERNETES, LOCAL)}
"""The backends by name (``--backend``), each a :class:`BackendRow`."""
DEFAULT_BACKEND = "kubernetes"


def refusal(option: O.BackendOption, owner: BackendRow, chosen: BackendRow) -> str:
    """The one-line usage error for ``option`` (``owner``'s) given to a command run on ``chosen``."""
    return f"{option.flag} applies to {owner.jobs} only, not to {chosen.jobs}: drop it, or choose {owner.chosen_by}"


def _owner(name: str) -> tuple[BackendRow, O.BackendOption] | None:
    """The row whose option has parameter ``name``, and that option."""
    return next(((row, o) for row in BACKENDS.values() for o in row.options if o.name == name), None)


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
    where = "; ".join(f"{row.name}: {row.help}" for row in BACKENDS.values())
    return click.option(
        "--backend",
        "backend_name",
        type=click.Choice(list(BACKENDS)),
        default=None,
        help=f"Where the job runs (default: {DEFAULT_BACKEND}). {where}.",
    )(run)


@dataclasses.dataclass(frozen=True)
class BackendChoice:
    """The backend a command line chose, with the options of its row that the command offers.

    Attributes:
        name: a key of :data:`BACKENDS`.
        settings: the chosen row's options, as given or defaulted, by parameter name; the
            other rows' are not here.
    """

    name: str
    settings: Mapping[str, Any]

    @property
    def row(self) -> BackendRow:
        return BACKENDS[self.name]

    def make(self, **shared: Any) -> Backend:
        """The backend, through :func:`make_backend`; ``shared``: settings the command shares
        with the backends (:attr:`BackendRow.uses`), which a row without use for them drops."""
        return make_backend(self.name, **self.settings, **shared)


def backend_options(*names: str):
    """``--backend`` / ``--local`` (:func:`backend_option`) plus the options of the backends'
    rows named ``names`` (parameter names); the command gets a :class:`BackendChoice` as
    ``choice`` in place of them.

    Raises (when the command runs):
        click.UsageError: an option given on the command line that belongs to another
            backend than the chosen one (:func:`refusal`).
    """
    offered = []
    for name in names:
        if (found := _owner(name)) is None:
            raise ValueError(f"no backend row has an option {name!r}; declare it in its row of BACKENDS")
        offered.append(found)

    def decorate(command):
        @functools.wraps(command)
        def run(*args, backend_name: str, **kwargs):
            chosen, given = BACKENDS[backend_name], click.get_current_context().get_parameter_source
            settings = {}
            for owner, option in offered:
                value = kwargs.pop(option.name)
                if owner is chosen:
                    settings[option.name] = value
                elif given(option.name) not in (None, ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP):
                    raise click.UsageError(refusal(option, owner, chosen))
            return command(*args, choice=BackendChoice(backend_name, settings), **kwargs)

        for _, option in reversed(offered):
            run = option(run)
        return backend_option(run)

    return decorate


def make_backend(name: str, **settings: Any) -> Backend:
    """The backend ``name`` of :data:`BACKENDS` (its module imported only now); the only
    place where the CLI makes one.

    ``settings``: keywords of the row's factory (its options' parameter names and its
    :attr:`BackendRow.uses`), e.g. ``namespace``, ``context``, ``skip_fit_check`` and ``poll``
    (seconds between the Kubernetes backend's own polls; None keeps its default), or the local
    run's ``detach``, ``data_dir``, ``runtime``, ... Another row's option left at None or its
    default is dropped, as is a setting another row uses.

    Raises:
        click.UsageError: another row's option given a value (:func:`refusal`).
        TypeError: a setting no row takes (a mistake in the command).
    """
    row = BACKENDS[name]
    own = {}
    for key, value in settings.items():
        if key in row.takes:
            own[key] = value
        elif (found := _owner(key)) is not None:
            owner, option = found
            if value is not None and value != option.default:
                raise click.UsageError(refusal(option, owner, row))
        elif not any(key in other.uses for other in BACKENDS.values()):
            raise TypeError(f"make_backend: no backend takes the setting {key!r}")
    return row.make(**own)


@contextlib.contextmanager
def backend_errors():
    """Backend errors (unknown job, job exists, ...) become one clean error line, exit 1."""
    from roxxel_launch.backends.base import BackendError

    try:
        yield
    except BackendError as err:
        raise click.ClickException(str(err)) from err
