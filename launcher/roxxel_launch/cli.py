"""The ``roxxel-launch`` command.

Only click is imported at module level so that ``roxxel-launch --help`` starts fast; each
command imports what it needs (YAML, jinja2, schemas, the kubernetes client).

Job commands (``submit``, ``status``, ``logs``, ``list``, ``delete``, ``suspend``, ``resume``,
``wait``, ``exec``, ``port-forward``)
talk to a backend chosen by name with ``--backend`` (:data:`BACKENDS`): ``kubernetes``, the
cluster of the current kubeconfig context, by default
(``roxxel_launch.backends.kubernetes``, imported only then), or ``local``, this machine
(``roxxel_launch.backends.local``); ``--local`` is short for ``--backend local``.

Exit codes:

* ``wait`` and ``resume --until-done`` say how the job ended: :data:`EXIT_SUCCEEDED` (0),
  :data:`EXIT_PREEMPTED` (42, the same code as :data:`roxxel.exit_codes.PREEMPTED_EXIT_CODE`:
  stopped after a checkpoint, evicted or preempted — ``resume`` continues it),
  :data:`EXIT_TIMED_OUT` (124, ``--timeout`` passed first; the job keeps running, as with
  coreutils' ``timeout``) and :data:`EXIT_FAILED` (125, any other end; the failing worker's
  own exit code is printed). A preempted job keeps its own code rather than 125 because
  "resume me" and "fix me" call for different actions in a script.
* ``exec``: the exit code of the command run in the pod (as ``kubectl exec``).
* ``submit --local`` (in the foreground) and ``resume --local`` without ``--until-done``:
  the job's own exit code, as :mod:`roxxel.exit_codes` defines it (0 done, 42 preempted
  after a checkpoint, else the failing worker's code), like running the program itself.
* 1 for an error of roxxel-launch itself (invalid spec, unknown job, no cluster access, ...);
  2 for a bad command line.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sys
from collections.abc import Callable
from pathlib import Path

import click

from roxxel.contract import PREEMPTED_EXIT_CODE  # dependency-free: --help stays light
from roxxel.wording import count  # dependency-free too
from roxxel_launch.backends.base import (  # dependency-free too
    Backend,
    JobState,
    JobStatus,
    StopReason,
    WaitTimeout,
)

# Exit codes of `wait` and `resume --until-done` (see the module docstring).
EXIT_SUCCEEDED = 0
EXIT_PREEMPTED = PREEMPTED_EXIT_CODE  # a preempted job keeps its own code
EXIT_TIMED_OUT = 124
EXIT_FAILED = 125
DEFAULT_MAX_RESUMES = 20

SET_HELP = ("Override a spec field: --set key.path=value (repeatable; escape dots in keys "
            "as '\\.', e.g. --set resources.limits.memory=64Gi).")


def _load(spec_path: str, overrides: tuple[str, ...]):
    from roxxel_launch.spec import SpecError, load_spec

    try:
        return load_spec(spec_path, overrides)
    except SpecError as err:
        raise click.ClickException(f"invalid job spec: {err}") from err


def _check_manifests(spec, schema: bool, kubernetes_version: str, *, cluster: bool = True):
    from roxxel_launch.render import render
    from roxxel_launch.spec import SpecError
    from roxxel_launch.validate import ManifestError, validate

    try:
        rendered = render(spec, cluster=cluster)
    except SpecError as err:
        raise click.ClickException(f"invalid job spec: {err}") from err
    try:
        validate(rendered.objects, schema=schema, kubernetes_version=kubernetes_version)
    except ManifestError as err:
        raise click.ClickException(str(err)) from err
    return rendered


def _render_and_check(spec_path: str, overrides: tuple[str, ...], schema: bool,
                      kubernetes_version: str):
    return _check_manifests(_load(spec_path, overrides), schema, kubernetes_version)


_skip_fit_option = click.option(
    "--skip-fit-check", is_flag=True,
    help="Do not compare the workers' requests with the cluster's nodes before submitting: for an "
         "account that may not list nodes, or a node pool scaled to zero that would hold the job "
         "(docs/kubernetes.md, \"Fit check\").")
_schema_option = click.option("--schema/--no-schema", default=True, show_default=True,
                              help="Check built-in kinds against the official Kubernetes "
                                   "schema (needs kubernetes-validate).")
_version_option = click.option("--kubernetes-version", default="1.30.0", show_default=True,
                               help="Kubernetes version whose schema to check against.")
_set_option = click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help=SET_HELP)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
def cli(verbose: int) -> None:
    """Render, validate and submit multi-host JAX training jobs on Kubernetes."""
    level = {0: logging.WARNING, 1: logging.INFO}.get(verbose, logging.DEBUG)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")


@cli.command()
@click.argument("spec_path", metavar="SPEC", type=click.Path(exists=True, dir_okay=False))
@_set_option
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True),
              help="Write the manifests to this file instead of standard output.")
@_schema_option
@_version_option
def render(spec_path: str, overrides: tuple[str, ...], output: str | None, schema: bool,
           kubernetes_version: str) -> None:
    """Print the manifests of a job spec, ready for `kubectl apply -f -`."""
    rendered = _render_and_check(spec_path, overrides, schema, kubernetes_version)
    if output is None:
        click.echo(rendered.yaml, nl=False)
    else:
        with open(output, "w", encoding="utf-8") as f:
            f.write(rendered.yaml)


@cli.command()
@click.argument("spec_path", metavar="SPEC", type=click.Path(exists=True, dir_okay=False))
@_set_option
@_schema_option
@_version_option
def validate(spec_path: str, overrides: tuple[str, ...], schema: bool,
             kubernetes_version: str) -> None:
    """Check a job spec and the manifests it renders, without contacting a cluster."""
    from roxxel_launch.validate import pod_security_line

    spec = _load(spec_path, overrides)
    rendered = _check_manifests(spec, schema, kubernetes_version)
    kinds = ", ".join(f"{o['kind']}/{o['metadata']['name']}" for o in rendered.objects)
    click.echo(f"ok: {kinds}")
    click.echo(pod_security_line(rendered.objects, _profile_source(spec)))


def _profile_source(spec) -> str:
    """The spec's Pod Security profile and where it comes from, e.g. "'baseline' (the TPU default)"."""
    if spec.security.profile is not None:
        return f"{spec.security.profile!r} (security.profile)"
    gpu = spec.accelerator.gpu
    what = ("host-network pods" if spec.uses_host_network else
            "GPU networking presets" if gpu is not None and gpu.networking not in (None, "none") else
            spec.accelerator.kind.upper())
    return f"{spec.security_profile!r} (the default for {what})"


@cli.command("schema")
def schema_command() -> None:
    """Print the job spec schema (JSON) from which the spec reference is generated."""
    import json

    from roxxel_launch.spec import spec_schema

    click.echo(json.dumps(spec_schema(), indent=2))


# ----------------------------------------------------------------------------- job commands

_context_option = click.option("--context", default=None,
                               help="kubeconfig context (Kubernetes only; default: the current one).")
_namespace_option = click.option("-n", "--namespace", default=None,
                                 help="Kubernetes namespace (Kubernetes only; default: the "
                                      "context's).")


def _kubernetes_backend(*, namespace: str | None, context: str | None, poll: float | None,
                        local_options, fit_check: bool = True) -> Backend:
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


def _local_backend(*, namespace: str | None, context: str | None, poll: float | None,
                   local_options, fit_check: bool = True) -> Backend:
    if namespace is not None or context is not None:
        raise click.UsageError("--namespace and --context apply to Kubernetes, not to --local")
    from roxxel_launch.backends.local.backend import LocalBackend

    return LocalBackend(options=local_options)


BACKENDS: dict[str, Callable[..., Backend]] = {"kubernetes": _kubernetes_backend, "local": _local_backend}
"""The backends by name (``--backend``): each makes its backend, importing it only then."""
DEFAULT_BACKEND = "kubernetes"


def _backend_option(command):
    """``--backend NAME`` and its short form ``--local`` (``--backend local``); the command
    gets the chosen name as ``backend_name``. Both given, and different: a usage error."""
    @functools.wraps(command)
    def run(*args, backend_name: str | None, local: bool, **kwargs):
        if local and backend_name not in (None, "local"):
            raise click.UsageError(f"--local is short for --backend local; it contradicts "
                                   f"--backend {backend_name}")
        return command(*args, backend_name="local" if local else backend_name or DEFAULT_BACKEND,
                       **kwargs)

    run = click.option("--local", is_flag=True,
                       help="Run on this machine: one process per host of the spec "
                            "(runs kept in $ROXXEL_LOCAL_ROOT, default ./runs/local); "
                            "short for --backend local.")(run)
    return click.option("--backend", "backend_name", type=click.Choice(list(BACKENDS)), default=None,
                        help=f"Where the job runs (default: {DEFAULT_BACKEND}).")(run)


def _backend(name: str, *, namespace: str | None = None, context: str | None = None,
             poll: float | None = None, local_options=None, fit_check: bool = True) -> Backend:
    """The backend ``name`` of :data:`BACKENDS` (its module imported only now); the only
    place where the CLI makes one.

    ``poll``: seconds between the Kubernetes backend's own polls (resume waiting for the old
    objects to go, logs -f waiting for a pod); None keeps its default.
    ``local_options``: the local backend's ``LocalOptions`` (None: its defaults).
    ``fit_check``: the Kubernetes backend compares workers with the cluster's nodes before a
    create (``--skip-fit-check`` turns it off).
    """
    return BACKENDS[name](namespace=namespace, context=context, poll=poll, local_options=local_options,
                          fit_check=fit_check)


@contextlib.contextmanager
def _backend_errors():
    """Backend errors (unknown job, job exists, ...) become one clean error line, exit 1."""
    from roxxel_launch.backends.base import BackendError

    try:
        yield
    except BackendError as err:
        raise click.ClickException(str(err)) from err


def _table(rows: list[tuple]) -> list[str]:
    """Left-aligned columns, two spaces apart (the first row is the header)."""
    cells = [tuple(str(c) for c in row) for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]


def _one_line(text: str, limit: int = 0) -> str:
    text = " ".join((text or "").split())
    return text if not limit or len(text) <= limit else text[: limit - 3] + "..."


def _status_lines(status, details=None) -> list[str]:
    rows = [
        ("name", status.name),
        ("state", status.state.value),
        ("processes", status.processes),
        ("restarts", status.restarts),
        ("exit code", "-" if status.exit_code is None else status.exit_code),
        ("created", status.created or "-"),
    ]
    if details is not None:
        rows.insert(1, ("object", f"{details.kind} {details.namespace}/{status.name}"))
        rows[3] = ("processes", f"{status.processes} ({count(details.slices, 'slice')} x "
                                f"{count(details.hosts_per_slice, 'host')})")
    if status.run_dir:
        rows.append(("run dir", status.run_dir))
    lines = [f"{key + ':':<11} {value}" for key, value in rows]
    if status.message:
        first, *rest = status.message.splitlines()
        lines.append(f"{'message:':<11} {first}")
        lines.extend(f"{'':<11} {line}" for line in rest)
    return lines


_PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")


def _slice_rows(details) -> list[tuple]:
    """One row per slice (consecutive slices alike share a row): pods and their phases."""
    counts = [dict.fromkeys(_PHASES, 0) for _ in range(details.slices)]
    for worker in details.workers:
        if 0 <= worker.slice < details.slices:
            phase = worker.phase if worker.phase in _PHASES else "Unknown"
            counts[worker.slice][phase] += 1
    rows: list[tuple] = []
    start = 0
    for s in range(1, details.slices + 1):
        if s < details.slices and counts[s] == counts[start]:
            continue
        label = str(start) if s - 1 == start else f"{start}-{s - 1}"
        phases = counts[start]
        rows.append((label, f"{sum(phases.values())}/{details.hosts_per_slice}",
                     *(phases[p] for p in _PHASES)))
        start = s
    return [("SLICE", "PODS", *(p.upper() for p in _PHASES)), *rows]


def _details_lines(details, show_workers: bool) -> list[str]:
    lines = []
    if details.conditions:
        rows: list[tuple] = [("CONDITION", "STATUS", "REASON", "SINCE", "MESSAGE")]
        rows += [(c.get("type", "?"), c.get("status", "?"), c.get("reason") or "-",
                  c.get("lastTransitionTime") or "-", _one_line(c.get("message") or "-", 100))
                 for c in details.conditions]
        lines += ["", *_table(rows)]
    lines += ["", *_table(_slice_rows(details))]
    if show_workers:
        rows = [("PROCESS", "SLICE", "INDEX", "POD", "PHASE", "EXIT", "REASON")]
        rows += [(w.process, w.slice, w.index, w.pod, w.phase + (" (terminating)" if w.terminating else ""),
                  "-" if w.exit_code is None else w.exit_code,
                  _one_line(": ".join(p for p in (w.reason, w.message) if p) or "-", 80))
                 for w in details.workers]
        lines += ["", *_table(rows)]
    return lines


def _status_json(status, details=None) -> dict:
    import dataclasses

    data = dataclasses.asdict(status)
    data["state"] = status.state.value
    data["reason"] = None if status.reason is None else status.reason.value
    if details is not None:
        data.update(kind=details.kind, namespace=details.namespace, slices=details.slices,
                    hosts_per_slice=details.hosts_per_slice,
                    conditions=[dict(c) for c in details.conditions],
                    workers=[dataclasses.asdict(w) for w in details.workers],
                    events=None if details.events is None
                    else [dataclasses.asdict(e) for e in details.events])
    return data


def _report_end(status) -> int:
    """Say how a job ended (on stderr) and return its exit code."""
    code = 1 if status.exit_code is None else status.exit_code
    if status.state is JobState.SUCCEEDED:
        click.echo(f"roxxel-launch: job {status.name} succeeded", err=True)
    elif status.state is JobState.PREEMPTED:
        click.echo(f"roxxel-launch: job {status.name} preempted (exit {PREEMPTED_EXIT_CODE}): "
                   f"{status.message}", err=True)
    else:
        click.echo(f"roxxel-launch: job {status.name} {status.state.value.lower()} (exit {code}): "
                   f"{status.message}", err=True)
    return code


def _report_outcome(status) -> int:
    """Say how a job ended (on stderr) and return the exit code of `wait` (0, 42 or 125)."""
    if status.state is JobState.SUCCEEDED:
        click.echo(f"roxxel-launch: job {status.name} succeeded", err=True)
        return EXIT_SUCCEEDED
    detail = f": {status.message}" if status.message else ""
    if status.state is JobState.PREEMPTED:
        click.echo(f"roxxel-launch: job {status.name} preempted (exit {EXIT_PREEMPTED}){detail}",
                   err=True)
        return EXIT_PREEMPTED
    if status.state is JobState.SUSPENDED:
        click.echo(f"roxxel-launch: job {status.name} evicted (Suspended; exit {EXIT_PREEMPTED})"
                   f"{detail}", err=True)
        return EXIT_PREEMPTED
    code = "unknown" if status.exit_code is None else status.exit_code
    click.echo(f"roxxel-launch: job {status.name} {status.state.value.lower()} (worker exit code "
               f"{code}; exit {EXIT_FAILED}){detail}", err=True)
    return EXIT_FAILED


def _announce(status: JobStatus) -> None:
    """Print a change of a watched job's state on stderr."""
    click.echo(f"roxxel-launch: {status.name} is {status.state.value}"
               + (f": {_one_line(status.message, 160)}" if status.message else ""), err=True)


@cli.command()
@click.argument("spec_path", metavar="SPEC", type=click.Path(exists=True, dir_okay=False))
@_set_option
@_backend_option
@click.option("--detach", is_flag=True,
              help="With --local: start the job in the background and return at once "
                   "(default: run it in the foreground, stream worker 0's output and exit "
                   "with the job's exit code).")
@click.option("--devices-per-worker", type=click.IntRange(min=1), default=None,
              help="With --local: CPU devices each worker's JAX sees "
                   "(XLA_FLAGS=--xla_force_host_platform_device_count=N).")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None,
              help="With --local: local directory the workers get as ROXXEL_DATA_DIR, in place "
                   "of the spec's data volume when it has one (default: $ROXXEL_LOCAL_DATA_DIR).")
@click.option("--netns", is_flag=True,
              help="With --local: run each worker in its own network namespace, with its pod's hostname "
                   "and the manifest's DNS names (needs root; loopback otherwise).")
@click.option("--max-workers", type=click.IntRange(min=1), default=None,
              help="With --local: the most worker processes to start (default "
                   "$ROXXEL_LOCAL_MAX_WORKERS, else 64).")
@click.option("--runtime", type=click.Choice(["process", "podman"]), default="process", show_default=True,
              help="With --local: run each pod's worker as a process of this machine's Python, or as a "
                   "container of the spec's image with podman (its user, read-only root, emptyDirs, own "
                   "network; the image must be in podman's local store).")
@click.option("--dry-run", is_flag=True, help="Check everything, start nothing.")
@_skip_fit_option
@_schema_option
@_version_option
@_context_option
@click.pass_context
def submit(ctx: click.Context, spec_path: str, overrides: tuple[str, ...], backend_name: str, detach: bool,
           devices_per_worker: int | None, data_dir: str | None, netns: bool, max_workers: int | None,
           runtime: str, dry_run: bool, skip_fit_check: bool, schema: bool, kubernetes_version: str,
           context: str | None) -> None:
    """Start a job: on the cluster, or as local processes with --local.

    The spec and the manifests it renders are validated before anything starts (for
    --local too: the local run is meant to be the pods' dress rehearsal).
    """
    local = backend_name == "local"
    if not local:
        for flag, given in (("--detach", detach), ("--devices-per-worker", devices_per_worker is not None),
                            ("--data-dir", data_dir is not None), ("--netns", netns),
                            ("--max-workers", max_workers is not None), ("--runtime", runtime != "process")):
            if given:
                raise click.UsageError(f"{flag} applies to --local runs only")
    elif skip_fit_check:
        raise click.UsageError("--skip-fit-check applies to Kubernetes, not to --local")
    spec = _load(spec_path, overrides)
    _check_manifests(spec, schema, kubernetes_version, cluster=not local)
    options = None
    if local:
        from roxxel_launch.backends.local.backend import LocalOptions

        foreground = not detach and not dry_run
        options = LocalOptions(foreground=foreground, echo=sys.stdout if foreground else None,
                               data_dir=data_dir, devices_per_worker=devices_per_worker,
                               network="netns" if netns and not dry_run else "loopback",
                               max_workers=max_workers, runtime=runtime)
        if spec.checkpoint_dir and "://" in spec.checkpoint_dir:
            click.echo(f"roxxel-launch: note: checkpoint_dir is {spec.checkpoint_dir}: the local workers will write "
                       "there (with this machine's credentials); for a local run give a local directory, e.g. "
                       f"--set checkpoint_dir=$PWD/runs/{spec.name}/checkpoints", err=True)
        if netns and detach:
            from roxxel_launch.backends.local.netns import unavailable_reason

            if (reason := unavailable_reason()) is not None:  # a foreground supervisor says it itself
                click.echo(f"roxxel-launch: --netns: {reason}; running the workers on loopback instead", err=True)
    backend = _backend(backend_name, context=context, local_options=options, fit_check=not skip_fit_check)
    with _backend_errors():
        status = backend.submit(spec, dry_run=dry_run)
    if status.state.terminal:  # a job run in the foreground (local)
        ctx.exit(_report_end(status))
    if local and dry_run:
        click.echo(status.message)
    elif local:
        click.echo(f"started local job {spec.name}: {count(status.processes, 'worker')}, run directory "
                   f"{status.run_dir}\nfollow it with `roxxel-launch logs {spec.name} --local -f`, "
                   f"wait for it with `roxxel-launch wait {spec.name} --local`")
    else:
        verb = "would submit" if dry_run else "submitted"
        click.echo(f"{verb} {spec.workload} {spec.namespace}/{spec.name}: "
                   f"{count(status.processes, 'process')}, state {status.state.value}")
        if not dry_run:  # the commands by name use the kubeconfig's namespace unless told
            click.echo(f"follow it with `roxxel-launch status {spec.name} -n {spec.namespace}` and "
                       f"`roxxel-launch logs {spec.name} -n {spec.namespace} -f`")


@cli.command()
@click.argument("name")
@_backend_option
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@click.option("-w", "--workers", "show_workers", is_flag=True,
              help="Also list every worker pod of the current attempt (Kubernetes only).")
@click.option("--events", "all_events", is_flag=True,
              help="Every event of the job, its Jobs, Workload and pods, as kubectl describe "
                   "shows them (Kubernetes only).")
@_namespace_option
@_context_option
def status(name: str, backend_name: str, as_json: bool, show_workers: bool, all_events: bool,
           namespace: str | None, context: str | None) -> None:
    """Show a job's state, restarts, exit code and message.

    On Kubernetes also, as tables: the JobSet's (or Job's) conditions and the pod phases of
    each slice (consecutive slices alike share a row); --workers adds one row per pod. While
    the job is Pending, Restarting or Suspended, the Warning events that say why (pods that
    cannot be scheduled, a volume that cannot be mounted, an image that cannot be pulled);
    --events shows every event instead.
    """
    local = backend_name == "local"
    if (show_workers or all_events) and local:
        raise click.UsageError("--workers and --events apply to Kubernetes jobs, not to --local")
    backend = _backend(backend_name, namespace=namespace, context=context)
    with _backend_errors():
        details = backend.details(name, all_events=all_events)
        job = details.status if details is not None else backend.status(name)
    if as_json:
        import json

        click.echo(json.dumps(_status_json(job, details), indent=2))
        return
    lines = _status_lines(job, details)
    if details is not None:
        lines += _details_lines(details, show_workers) + _events_lines(details.events)
    click.echo("\n".join(lines))


def _events_lines(events) -> list[str]:
    """The job's events as a table (Warnings first, merged across objects); none: no lines."""
    if not events:
        return []
    rows: list[tuple] = [("TYPE", "REASON", "COUNT", "LAST SEEN", "OBJECT", "MESSAGE")]
    for e in events:
        objects = e.objects[0] + (f" (+{len(e.objects) - 1})" if len(e.objects) > 1 else "") \
            if e.objects else "-"
        rows.append((e.type, e.reason, e.count, e.last_seen or "-", objects,
                     _one_line(e.message or "-")))  # whole: the cause is often last
    return ["", *_table(rows)]


def _print_events(events) -> None:
    """`wait`: the events of pods that stay Pending, each once, on stderr."""
    for event in events:
        click.echo(f"roxxel-launch: {event.describe()}", err=True)


@cli.command("list")
@_backend_option
@click.option("--json", "as_json", is_flag=True, help="Print the jobs as JSON.")
@click.option("--state", "states", multiple=True, type=click.Choice([s.value for s in JobState], case_sensitive=False),
              help="Only jobs in this state (repeatable).")
@click.option("-A", "--all-namespaces", is_flag=True,
              help="The jobs of every namespace this account may list, with a NAMESPACE column "
                   "(as kubectl get -A; Kubernetes only).")
@_namespace_option
@_context_option
def list_command(backend_name: str, as_json: bool, states: tuple[str, ...], all_namespaces: bool,
                 namespace: str | None, context: str | None) -> None:
    """List the jobs roxxel-launch started."""
    local = backend_name == "local"
    if all_namespaces and namespace is not None:
        raise click.UsageError("-A lists every namespace; it contradicts --namespace (give one or the other)")
    backend = _backend(backend_name, namespace=namespace, context=context)
    with _backend_errors():
        jobs = _in_states(backend.list(all_namespaces=all_namespaces), states)
    if as_json:
        import json

        click.echo(json.dumps([_status_json(j) for j in jobs], indent=2))
        return
    rows: list[tuple] = [("NAME", "STATE", "PROCESSES", "RESTARTS", "EXIT", "CREATED")]
    rows += [(j.name, j.state.value, str(j.processes), str(j.restarts),
              "-" if j.exit_code is None else str(j.exit_code), j.created or "-") for j in jobs]
    if all_namespaces:  # first, as kubectl get -A prints it
        rows = [("NAMESPACE", *rows[0]), *((j.namespace or "-", *row) for j, row in zip(jobs, rows[1:]))]
    for line in _table(rows):
        click.echo(line)
    if local:  # local state is per directory: say which one, above all when it holds no job
        from roxxel_launch.backends.local.backend import ROOT_ENV

        root = getattr(backend, "root", "?")
        if jobs:
            click.echo(f"(local jobs kept in {root})", err=True)
        else:
            click.echo(f"no local jobs in {root}: local jobs are kept in ./runs/local of the directory "
                       f"they were submitted from, or in ${ROOT_ENV} when it is set", err=True)


def _in_states(jobs: list[JobStatus], states: tuple[str, ...]) -> list[JobStatus]:
    """The jobs in one of ``states`` (JobState values, any case); all of them when none is given."""
    wanted = {s.lower() for s in states}
    return [j for j in jobs if not wanted or j.state.value.lower() in wanted]


_container_option = click.option(
    "-c", "--container", default=None,
    help="Another container of the worker's pod than the worker, e.g. the GCS FUSE sidecar "
         "gke-gcsfuse-sidecar (Kubernetes only; an unknown name lists the pod's containers).")


@cli.command()
@click.argument("name")
@_backend_option
@click.option("-p", "--process", "--rank", "process", type=click.IntRange(min=0), default=0,
              show_default=True,
              help="Which worker: its JAX process id (rank); --rank is the same option. On a "
                   "JobSet, process = slice * hosts_per_slice + host.")
@click.option("-f", "--follow", is_flag=True,
              help="Keep printing new output until the job ends. On Kubernetes it follows the "
                   "job across gang restarts: it re-attaches to each new attempt's pod and "
                   "prints a line '── attempt N (restart N-1) ──' between attempts.")
@click.option("--all", "all_processes", is_flag=True,
              help="Every worker's output, each line prefixed with '[rank N] ' (Kubernetes).")
@click.option("--since", metavar="DURATION", default=None,
              help="Only output newer than this: 30s, 10m, 2h (Kubernetes).")
@click.option("--previous", is_flag=True,
              help="The previous terminated container of the pod, as `kubectl logs --previous` "
                   "(Kubernetes).")
@_container_option
@_namespace_option
@_context_option
def logs(name: str, backend_name: str, process: int, follow: bool, all_processes: bool,
         since: str | None, previous: bool, container: str | None, namespace: str | None,
         context: str | None) -> None:
    """Print one worker's output (rank 0 by default; on Kubernetes, of the newest attempt)."""
    since_seconds = _duration_seconds(since) if since is not None else None
    backend = _backend(backend_name, namespace=namespace, context=context)
    with _backend_errors():
        for line in backend.logs(name, process=process, follow=follow,
                                 all_processes=all_processes, since_seconds=since_seconds,
                                 previous=previous, container=container):
            click.echo(line.rstrip("\n"))


_pod_option = click.option("-p", "--pod", "--process", "process", type=click.IntRange(min=0), default=0,
                           show_default=True,
                           help="Which worker's pod: its JAX process id (on a JobSet, slice * "
                                "hosts_per_slice + completion index).")


@cli.command("exec")
@click.argument("name")
@click.argument("command", nargs=-1, metavar="-- COMMAND [ARG]...")
@_backend_option
@_pod_option
@_container_option
@_namespace_option
@_context_option
@click.pass_context
def exec_command(ctx: click.Context, name: str, command: tuple[str, ...], backend_name: str, process: int,
                 container: str | None, namespace: str | None, context: str | None) -> None:
    """Run a command in a worker's pod, as `kubectl exec` (no shell, no stdin, no TTY).

    Its output is streamed; the exit code is the command's. For example, the GCS FUSE
    sidecar's view of the bucket: roxxel-launch exec NAME -c gke-gcsfuse-sidecar -- ls /data
    """
    if not command:
        raise click.UsageError("give the command after --, e.g. roxxel-launch exec NAME -- nvidia-smi")
    stdout, stderr = sys.stdout.buffer, sys.stderr.buffer

    def sink(stream):
        def write(data: bytes) -> None:
            stream.write(data)
            stream.flush()
        return write

    backend = _backend(backend_name, namespace=namespace, context=context)
    with _backend_errors():
        code = backend.exec(name, command, process=process, container=container, out=sink(stdout),
                            err=sink(stderr))
    ctx.exit(code)


def _ports(text: str) -> tuple[int, int]:
    """(local, remote) of PORT, LOCAL:REMOTE or :REMOTE (local 0: any free port), as kubectl
    port-forward takes them."""
    local, _, remote = text.rpartition(":") if ":" in text else (text, ":", text)
    try:
        ports = int(local or 0), int(remote)
    except ValueError:
        ports = (-1, -1)
    if not (0 <= ports[0] <= 65535 and 1 <= ports[1] <= 65535):
        raise click.BadParameter(f"{text!r} is not PORT, LOCAL:REMOTE or :REMOTE with ports 1-65535 "
                                 "(e.g. 6006 or 8080:6006)", param_hint="PORT")
    return ports


@cli.command("port-forward")
@click.argument("name")
@click.argument("ports", metavar="PORT[:REMOTE]")
@_backend_option
@_pod_option
@_namespace_option
@_context_option
def port_forward(name: str, ports: str, backend_name: str, process: int, namespace: str | None,
                 context: str | None) -> None:
    """Forward a local port to a worker pod's port until Ctrl-C, as `kubectl port-forward`.

    PORT listens on 127.0.0.1:PORT and reaches the same port of the pod; LOCAL:REMOTE maps
    one to the other, :REMOTE picks a free local port. E.g. TensorBoard or the JAX
    profiler of process 0: roxxel-launch port-forward NAME 6006
    """
    local_port, remote_port = _ports(ports)
    backend = _backend(backend_name, namespace=namespace, context=context)

    def listening(address: str) -> None:
        click.echo(f"forwarding {address} to port {remote_port} of {name}'s process {process}; "
                   "Ctrl-C stops", err=True)

    with _backend_errors(), contextlib.suppress(KeyboardInterrupt):
        backend.port_forward(name, local_port, remote_port, process=process, on_listen=listening)


def _duration_seconds(text: str) -> int:
    """Seconds of a duration such as 45s, 10m, 2h or 1h30m (as kubectl's --since takes)."""
    import re

    match = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", text.strip())
    if not text.strip() or match is None:
        raise click.BadParameter(f"{text!r} is not a duration; use e.g. 30s, 10m, 2h or 1h30m",
                                 param_hint="--since")
    hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return hours * 3600 + minutes * 60 + seconds


@cli.command()
@click.argument("name")
@_backend_option
@_namespace_option
@_context_option
def delete(name: str, backend_name: str, namespace: str | None, context: str | None) -> None:
    """Stop a job and remove it (a local run's directory goes too, logs included).

    This removes what `resume` needs (the stored spec, the job's object or run directory);
    the checkpoints stay. `suspend` stops a job and keeps it resumable.
    """
    backend = _backend(backend_name, namespace=namespace, context=context)
    with _backend_errors():
        backend.delete(name)
    click.echo(f"deleted {name}")
    click.echo(f"roxxel-launch: {name}'s stored spec went with it, so `resume` cannot continue it; submit its spec "
               "again to go on from its checkpoints (`roxxel-launch suspend` stops a job and keeps it)", err=True)


@cli.command()
@click.argument("name")
@_backend_option
@_namespace_option
@_context_option
def suspend(name: str, backend_name: str, namespace: str | None, context: str | None) -> None:
    """Stop a job's workers and keep the job: `roxxel-launch resume NAME` starts it again.

    On Kubernetes this sets the JobSet's (or Job's) spec.suspend: the controllers delete the
    pods, each worker gets SIGTERM and its grace period to checkpoint, and the object with
    its stored spec stays (a job with a Kueue queue is stopped through its Workload instead).
    With --local the supervisor is stopped as by Ctrl-C and the run directory stays.
    """
    backend = _backend(backend_name, namespace=namespace, context=context)
    with _backend_errors():
        job = backend.suspend(name)
    click.echo(f"suspended {name}: state {job.state.value}; `roxxel-launch resume {name}` continues it")


_poll_option = click.option("--poll", type=click.FloatRange(min=0.1), default=2.0, show_default=True,
                            help="Seconds between status checks.")


@cli.command()
@click.argument("name")
@_backend_option
@click.option("--detach", is_flag=True,
              help="With --local: resume in the background (default: in the foreground, like submit).")
@click.option("--until-done", is_flag=True,
              help="Stay until the job succeeds: watch it and re-submit it each time it ends "
                   "preempted or is evicted (Suspended again after it had been admitted), at "
                   "most --max-resumes times. A job Kueue suspended is left to Kueue, which "
                   "re-admits it. A real failure is not retried.")
@click.option("--max-resumes", type=click.IntRange(min=1), default=DEFAULT_MAX_RESUMES,
              show_default=True, help="With --until-done: the most re-submissions before giving up.")
@click.option("--spec", "spec_path", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Resume under this fixed job spec instead of the stored one (after editing the YAML). "
                   "It must keep name, run_name, checkpoint_dir and workload; the rest may change "
                   "(each change is logged). Whether the batches already trained stay as they were is "
                   "checked by the training program when it restores (a changed curriculum exits 78).")
@_set_option
@_poll_option
@_skip_fit_option
@_namespace_option
@_context_option
@click.pass_context
def resume(ctx: click.Context, name: str, backend_name: str, detach: bool, until_done: bool,
           max_resumes: int, spec_path: str | None, overrides: tuple[str, ...], poll: float,
           skip_fit_check: bool, namespace: str | None, context: str | None) -> None:
    """Start a suspended, preempted, failed or evicted job again; it continues from its last checkpoint.

    A job stopped by `roxxel-launch suspend` (on Kubernetes: spec.suspend set, no Kueue
    queue) is un-suspended in place. Any other is re-created from the spec it was submitted
    with: same name, run name and checkpoint_dir, so training restores its last checkpoint. After editing the YAML, give
    it with --spec FILE: resume then runs the fixed spec (name, run_name, checkpoint_dir and
    workload must stay; another one is a new run: delete the job and submit it).

    With --until-done, a job that still runs is watched first, and one that has succeeded
    is left alone. Exit codes with --until-done, as for `wait`: 0 succeeded; 42 still
    preempted or evicted after --max-resumes re-submissions; 125 failed (a failure of the
    program is not retried after the first resume: fix it first); 1 roxxel-launch could not
    go on (e.g. the job was deleted meanwhile). Without it: 0 once re-submitted (Kubernetes,
    --detach), or the job's own exit code (--local in the foreground).
    """
    local = backend_name == "local"
    if overrides and spec_path is None:
        raise click.UsageError("--set applies to the --spec file: give --spec FILE (the stored spec is resumed as it is)")
    new_spec = _load(spec_path, overrides) if spec_path is not None else None
    if detach and not local:
        raise click.UsageError("--detach applies to --local runs only")
    if skip_fit_check and local:
        raise click.UsageError("--skip-fit-check applies to Kubernetes, not to --local")
    if until_done and detach:
        raise click.UsageError("--until-done stays to watch the job; it cannot be combined with --detach")
    options = None
    if local:
        from roxxel_launch.backends.local.backend import LocalOptions

        options = LocalOptions(foreground=not detach, echo=None if detach else sys.stdout)
    backend = _backend(backend_name, namespace=namespace, context=context, poll=None if local else poll,
                       local_options=options, fit_check=not skip_fit_check)
    with _backend_errors():
        if until_done:
            ctx.exit(_resume_until_done(backend, name, max_resumes=max_resumes, poll=poll, new_spec=new_spec))
        job = backend.resume(name, new_spec=new_spec)
    if job.state.terminal:  # resumed in the foreground (local)
        ctx.exit(_report_end(job))
    click.echo(f"resumed {name}: state {job.state.value}")


def _resume_until_done(backend: Backend, name: str, *, max_resumes: int, poll: float, new_spec=None) -> int:
    """Resume, watch, and resume again after each preemption or eviction; the `wait` code.
    ``new_spec`` replaces the stored spec at the first resume (the later ones find it stored)."""
    status = backend.status(name)
    resumes = 0
    first = True
    while True:
        state = status.state
        if state is JobState.SUCCEEDED:
            if first:
                click.echo(f"roxxel-launch: {name} has already succeeded; nothing to resume", err=True)
            return _report_outcome(status)
        # A job stopped on request (Ctrl-C / SIGTERM to a local run) may save a checkpoint and
        # end Preempted: the user asked it to stop, so it is not resumed again.
        stopped = not first and status.reason is StopReason.STOPPED_BY_USER
        if (state is JobState.FAILED and not first) or stopped:
            click.echo(f"roxxel-launch: not resuming {name} again: it "
                       f"{'was stopped on request' if stopped else 'failed'}", err=True)
            return _report_outcome(status)
        if state in (JobState.PREEMPTED, JobState.SUSPENDED, JobState.FAILED):
            if resumes >= max_resumes:
                click.echo(f"roxxel-launch: giving up on {name}: {state.value} again after "
                           f"{count(resumes, 'resume')} (--max-resumes {max_resumes})", err=True)
                return _report_outcome(status)
            resumes += 1
            click.echo(f"roxxel-launch: resuming {name} ({state.value}"
                       + (f": {_one_line(status.message, 160)}" if status.message else "")
                       + f"); resume {resumes} of at most {max_resumes}", err=True)
            status = backend.resume(name, new_spec=new_spec)
            new_spec = None
            first = False
            if status.state.terminal:  # resumed in the foreground (local)
                continue
        first = False
        status = backend.wait(name, poll_seconds=poll, evicted_ends=True, on_change=_announce,
                              on_events=_print_events)


@cli.command()
@click.argument("name")
@_backend_option
@click.option("--timeout", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
              help="Give up after this many seconds, with exit code 124 (the job keeps running). "
                   "Default: wait as long as it takes.")
@_poll_option
@_namespace_option
@_context_option
@click.pass_context
def wait(ctx: click.Context, name: str, backend_name: str, timeout: float | None, poll: float,
         namespace: str | None, context: str | None) -> None:
    """Wait until a job ends; the exit code says how it ended.

    \b
      0    succeeded
      42   preempted, or stopped after a checkpoint: `roxxel-launch resume NAME`
           continues it (roxxel's preemption code, kept apart from 125 because it
           calls for a resume, not a fix)
      124  --timeout passed first; the job keeps running
      125  failed (the failing worker's own exit code is printed)
      1    roxxel-launch could not tell (unknown or deleted job, no cluster access)

    A Suspended job (queued, held or evicted by Kueue) has not ended: wait keeps waiting
    (bound it with --timeout, or use `resume --until-done`). On Kubernetes, a pod that stays
    Pending for a minute (unschedulable, a volume that cannot be mounted, an image that
    cannot be pulled) has its Warning events printed, each once.
    """
    backend = _backend(backend_name, namespace=namespace, context=context)
    with _backend_errors():
        try:
            job = backend.wait(name, timeout=timeout, poll_seconds=poll, on_events=_print_events)
        except WaitTimeout as err:  # before _backend_errors: a timeout has its own exit code
            last = err.status
            click.echo(f"roxxel-launch: {err}"
                       + (f" ({_one_line(last.message, 200)})" if last.message else ""), err=True)
            ctx.exit(EXIT_TIMED_OUT)
    ctx.exit(_report_outcome(job))


# ----------------------------------------------------------------------------- images


@cli.group()
def image() -> None:
    """Build the worker image, or your own code on top of it, with podman or docker."""


@image.command("build")
@click.option("--accelerator", type=click.Choice(["cpu", "tpu", "cuda"]), default="cpu", show_default=True,
              help="The JAX variant (the Dockerfile's ACCELERATOR build argument).")
@click.option("--tag", default=None,
              help="The image's name (default: roxxel/worker:ACCELERATOR; with --context, "
                   "roxxel/DIRNAME:ACCELERATOR).")
@click.option("--base", default=None,
              help="The image to build on: the worker image's Python base (default: the Dockerfile's "
                   "python:3.11-slim-bookworm; docker/make-base.sh makes a local one), or, with "
                   "--context, the worker image (default: roxxel/worker:ACCELERATOR).")
@click.option("--context", "context_dir", type=click.Path(exists=True, file_okay=False, path_type=Path),
              default=None,
              help="Build your code in DIR into an image FROM the worker image (DIR is copied to "
                   "its working directory, /home/roxxel) instead of building the worker image.")
@click.option("--push", is_flag=True, help="Push the tag after the build.")
@click.option("--source", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="Roxxel's source tree with the Dockerfile (default: the one roxxel-launch is "
                   "installed from, else the working directory or a parent).")
@click.option("--engine", type=click.Choice(["podman", "docker"]), default=None,
              help="Build with this engine (default: $ROXXEL_CONTAINER_ENGINE, else podman, else docker).")
@click.option("--pip-cert", type=click.Path(exists=True, dir_okay=False), default=None, envvar="PIP_CERT",
              help="A CA bundle for pip's downloads in the build (behind a TLS-intercepting proxy), "
                   "passed as a build secret and kept in no layer (default: $PIP_CERT).")
@click.option("--dry-run", is_flag=True, help="Print the commands, run nothing.")
def image_build(accelerator: str, tag: str | None, base: str | None, context_dir: Path | None, push: bool,
                source: Path | None, engine: str | None, pip_cert: str | None, dry_run: bool) -> None:
    """Build the worker image (or, with --context, your code on it); print the size and largest layers."""
    from roxxel_launch import image as images

    try:
        chosen = engine if dry_run and engine else images.find_engine(engine)
        if context_dir is not None:
            build = images.user_build(chosen, accelerator=accelerator, context=context_dir, tag=tag, base=base)
        else:
            build = images.worker_build(chosen, accelerator=accelerator, source=source or images.find_source(),
                                        tag=tag, base=base, pip_cert=pip_cert)
        images.run_build(build, push=push, dry_run=dry_run, echo=click.echo)
    except images.ImageError as err:
        raise click.ClickException(str(err)) from err


def main(argv: list[str] | None = None) -> None:
    cli.main(args=argv, prog_name="roxxel-launch")


if __name__ == "__main__":
    main()
