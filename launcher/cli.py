"""The ``roxxel-launch`` command.

Only click is imported at module level so that ``roxxel-launch --help`` starts fast; each
command imports what it needs (YAML, jinja2, schemas, the kubernetes client).

Job commands (``submit``, ``status``, ``logs``, ``list``, ``delete``, ``resume``, ``wait``)
talk to a backend: the Kubernetes cluster of the current kubeconfig context by default
(``roxxel_launch.backends.kubernetes``, imported only then), or this machine with
``--local`` (``roxxel_launch.backends.local``). Exit codes of ``submit --local`` (in the
foreground), ``resume --local`` and ``wait``: the job's, as :mod:`roxxel.exit_codes`
defines them (0 done, 42 preempted after a checkpoint, else the failing worker's code);
1 for an error of roxxel-launch itself (invalid spec, unknown job, ...).
"""

from __future__ import annotations

import contextlib
import logging
import sys

import click

SET_HELP = ("Override a spec field: --set key.path=value (repeatable; escape dots in keys "
            "as '\\.', e.g. --set resources.limits.memory=64Gi).")


def _load(spec_path: str, overrides: tuple[str, ...]):
    from roxxel_launch.spec import SpecError, load_spec

    try:
        return load_spec(spec_path, overrides)
    except SpecError as err:
        raise click.ClickException(f"invalid job spec: {err}") from err


def _check_manifests(spec, schema: bool, kubernetes_version: str):
    from roxxel_launch.render import render
    from roxxel_launch.validate import ManifestError, validate

    rendered = render(spec)
    try:
        validate(rendered.objects, schema=schema, kubernetes_version=kubernetes_version)
    except ManifestError as err:
        raise click.ClickException(str(err)) from err
    return rendered


def _render_and_check(spec_path: str, overrides: tuple[str, ...], schema: bool,
                      kubernetes_version: str):
    return _check_manifests(_load(spec_path, overrides), schema, kubernetes_version)


_schema_option = click.option("--schema/--no-schema", default=True, show_default=True,
                              help="Check built-in kinds against the official Kubernetes "
                                   "schema (needs kubernetes-validate).")
_version_option = click.option("--kubernetes-version", default="1.30.0", show_default=True,
                               help="Kubernetes version whose schema to check against.")
_set_option = click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help=SET_HELP)


@click.group()
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
    rendered = _render_and_check(spec_path, overrides, schema, kubernetes_version)
    kinds = ", ".join(f"{o['kind']}/{o['metadata']['name']}" for o in rendered.objects)
    click.echo(f"ok: {kinds}")


@cli.command("schema")
def schema_command() -> None:
    """Print the job spec schema (JSON) from which the spec reference is generated."""
    import json

    from roxxel_launch.spec import spec_schema

    click.echo(json.dumps(spec_schema(), indent=2))


# ----------------------------------------------------------------------------- job commands

_local_option = click.option("--local", is_flag=True,
                             help="Run on this machine: one process per host of the spec "
                                  "(runs kept in $ROXXEL_LOCAL_ROOT, default ./runs/local).")
_context_option = click.option("--context", default=None,
                               help="kubeconfig context (Kubernetes only; default: the current one).")
_namespace_option = click.option("-n", "--namespace", default=None,
                                 help="Kubernetes namespace (Kubernetes only; default: the "
                                      "context's).")


def _backend(local: bool, *, namespace: str | None = None, context: str | None = None):
    """The local backend, or the Kubernetes one (imported only when needed)."""
    if local:
        if namespace is not None or context is not None:
            raise click.UsageError("--namespace and --context apply to Kubernetes, not to --local")
        from roxxel_launch.backends.local import LocalBackend

        return LocalBackend()
    try:
        from roxxel_launch.backends.kubernetes import KubernetesBackend
    except ImportError as err:
        raise click.ClickException(
            f"the Kubernetes backend is not available ({err}); check that roxxel-launch is fully "
            "installed with the kubernetes client, or run the job on this machine with --local"
        ) from err
    return KubernetesBackend(namespace=namespace, context=context)


@contextlib.contextmanager
def _backend_errors():
    """Backend errors (unknown job, job exists, ...) become one clean error line, exit 1."""
    from roxxel_launch.backends.base import BackendError

    try:
        yield
    except BackendError as err:
        raise click.ClickException(str(err)) from err


def _status_lines(status) -> list[str]:
    rows = [
        ("name", status.name),
        ("state", status.state.value),
        ("processes", status.processes),
        ("restarts", status.restarts),
        ("exit code", "-" if status.exit_code is None else status.exit_code),
        ("created", status.created or "-"),
    ]
    if status.run_dir:
        rows.append(("run dir", status.run_dir))
    lines = [f"{key + ':':<11} {value}" for key, value in rows]
    if status.message:
        first, *rest = status.message.splitlines()
        lines.append(f"{'message:':<11} {first}")
        lines.extend(f"{'':<11} {line}" for line in rest)
    return lines


def _status_json(status) -> dict:
    import dataclasses

    data = dataclasses.asdict(status)
    data["state"] = status.state.value
    return data


def _report_end(status) -> int:
    """Say how a job ended (on stderr) and return its exit code."""
    from roxxel.exit_codes import PREEMPTED_EXIT_CODE
    from roxxel_launch.backends.base import JobState

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


@cli.command()
@click.argument("spec_path", metavar="SPEC", type=click.Path(exists=True, dir_okay=False))
@_set_option
@_local_option
@click.option("--detach", is_flag=True,
              help="With --local: start the job in the background and return at once "
                   "(default: run it in the foreground, stream worker 0's output and exit "
                   "with the job's exit code).")
@click.option("--devices-per-worker", type=click.IntRange(min=1), default=None,
              help="With --local: CPU devices each worker's JAX sees "
                   "(XLA_FLAGS=--xla_force_host_platform_device_count=N).")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None,
              help="With --local: local directory the workers get as ROXXEL_DATA_DIR in place "
                   "of the spec's data volume (default: $ROXXEL_LOCAL_DATA_DIR).")
@click.option("--dry-run", is_flag=True, help="Check everything, start nothing.")
@_schema_option
@_version_option
@_context_option
@click.pass_context
def submit(ctx: click.Context, spec_path: str, overrides: tuple[str, ...], local: bool, detach: bool,
           devices_per_worker: int | None, data_dir: str | None, dry_run: bool, schema: bool,
           kubernetes_version: str, context: str | None) -> None:
    """Start a job: on the cluster, or as local processes with --local.

    The spec and the manifests it renders are validated before anything starts (for
    --local too: the local run is meant to be the pods' dress rehearsal).
    """
    if not local:
        for flag, given in (("--detach", detach), ("--devices-per-worker", devices_per_worker is not None),
                            ("--data-dir", data_dir is not None)):
            if given:
                raise click.UsageError(f"{flag} applies to --local runs only")
    spec = _load(spec_path, overrides)
    _check_manifests(spec, schema, kubernetes_version)
    backend = _backend(local, context=context)
    with _backend_errors():
        if not local:
            status = backend.submit(spec, dry_run=dry_run)
            verb = "would submit" if dry_run else "submitted"
            click.echo(f"{verb} {spec.workload} {spec.namespace}/{spec.name}: {status.processes} "
                       f"process(es), state {status.state.value}")
            return
        if dry_run:
            status = backend.submit(spec, dry_run=True, data_dir=data_dir,
                                    devices_per_worker=devices_per_worker)
            click.echo(status.message)
            return
        if detach:
            status = backend.submit(spec, data_dir=data_dir, devices_per_worker=devices_per_worker)
            click.echo(f"started local job {spec.name}: {status.processes} worker(s), run directory "
                       f"{status.run_dir}\nfollow it with `roxxel-launch logs {spec.name} --local -f`, "
                       f"wait for it with `roxxel-launch wait {spec.name} --local`")
            return
        status = backend.submit(spec, foreground=True, echo=sys.stdout, data_dir=data_dir,
                                devices_per_worker=devices_per_worker)
    ctx.exit(_report_end(status))


@cli.command()
@click.argument("name")
@_local_option
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@_namespace_option
@_context_option
def status(name: str, local: bool, as_json: bool, namespace: str | None, context: str | None) -> None:
    """Show a job's state, restarts, exit code and message."""
    backend = _backend(local, namespace=namespace, context=context)
    with _backend_errors():
        job = backend.status(name)
    if as_json:
        import json

        click.echo(json.dumps(_status_json(job), indent=2))
    else:
        click.echo("\n".join(_status_lines(job)))


@cli.command("list")
@_local_option
@click.option("--json", "as_json", is_flag=True, help="Print the jobs as JSON.")
@_namespace_option
@_context_option
def list_command(local: bool, as_json: bool, namespace: str | None, context: str | None) -> None:
    """List the jobs roxxel-launch started."""
    backend = _backend(local, namespace=namespace, context=context)
    with _backend_errors():
        jobs = backend.list()
    if as_json:
        import json

        click.echo(json.dumps([_status_json(j) for j in jobs], indent=2))
        return
    rows = [("NAME", "STATE", "PROCESSES", "RESTARTS", "EXIT", "CREATED")]
    rows += [(j.name, j.state.value, str(j.processes), str(j.restarts),
              "-" if j.exit_code is None else str(j.exit_code), j.created or "-") for j in jobs]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())


@cli.command()
@click.argument("name")
@_local_option
@click.option("-p", "--process", type=click.IntRange(min=0), default=0, show_default=True,
              help="Which worker (process id).")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new output until the job ends.")
@_namespace_option
@_context_option
def logs(name: str, local: bool, process: int, follow: bool, namespace: str | None,
         context: str | None) -> None:
    """Print one worker's output (worker 0 by default)."""
    backend = _backend(local, namespace=namespace, context=context)
    with _backend_errors():
        for line in backend.logs(name, process=process, follow=follow):
            click.echo(line.rstrip("\n"))


@cli.command()
@click.argument("name")
@_local_option
@_namespace_option
@_context_option
def delete(name: str, local: bool, namespace: str | None, context: str | None) -> None:
    """Stop a job and remove it (a local run's directory goes too, logs included)."""
    backend = _backend(local, namespace=namespace, context=context)
    with _backend_errors():
        backend.delete(name)
    click.echo(f"deleted {name}")


@cli.command()
@click.argument("name")
@_local_option
@click.option("--detach", is_flag=True,
              help="With --local: resume in the background (default: in the foreground, like submit).")
@_namespace_option
@_context_option
@click.pass_context
def resume(ctx: click.Context, name: str, local: bool, detach: bool, namespace: str | None,
           context: str | None) -> None:
    """Start a preempted or failed job again; it continues from its last checkpoint."""
    if detach and not local:
        raise click.UsageError("--detach applies to --local runs only")
    backend = _backend(local, namespace=namespace, context=context)
    with _backend_errors():
        if not local or detach:
            job = backend.resume(name)
            click.echo(f"resumed {name}: state {job.state.value}")
            return
        job = backend.resume(name, foreground=True, echo=sys.stdout)
    ctx.exit(_report_end(job))


@cli.command()
@click.argument("name")
@_local_option
@click.option("--poll", type=click.FloatRange(min=0.1), default=2.0, show_default=True,
              help="Seconds between status checks.")
@_namespace_option
@_context_option
@click.pass_context
def wait(ctx: click.Context, name: str, local: bool, poll: float, namespace: str | None,
         context: str | None) -> None:
    """Wait until a job ends; exit with its exit code (0 done, 42 preempted, else failed)."""
    backend = _backend(local, namespace=namespace, context=context)
    with _backend_errors():
        job = backend.wait(name, poll_seconds=poll)
    ctx.exit(_report_end(job))


def main(argv: list[str] | None = None) -> None:
    cli.main(args=argv, prog_name="roxxel-launch")


if __name__ == "__main__":
    sys.exit(main())
