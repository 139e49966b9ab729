"""Commands that watch a job: ``status``, ``list``, ``logs``, ``wait``."""

from __future__ import annotations

import re

import click

from roxxel.log_format import as_text
from roxxel_launch.backends.base import JobState, JobStatus, WaitTimeout
from roxxel_launch.cli import backend_choice
from roxxel_launch.cli.backend_choice import backend_errors, backend_option
from roxxel_launch.cli.job_output import (
    EXIT_TIMED_OUT,
    details_lines,
    events_lines,
    one_line,
    print_events,
    report_outcome,
    status_json,
    status_lines,
    table,
)
from roxxel_launch.cli.options import (
    container_option,
    context_option,
    namespace_option,
    poll_option,
)
from roxxel_launch.cli.run_goodput import goodput_json, goodput_lines, job_goodput


@click.command()
@click.argument("name")
@backend_option
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@click.option(
    "-w",
    "--workers",
    "show_workers",
    is_flag=True,
    help="Also list every worker pod of the current attempt (Kubernetes only).",
)
@click.option(
    "--events",
    "all_events",
    is_flag=True,
    help="Every event of the job, its Jobs, Workload and pods, as kubectl describe shows them (Kubernetes only).",
)
@namespace_option
@context_option
def status(
    name: str,
    backend_name: str,
    as_json: bool,
    show_workers: bool,
    all_events: bool,
    namespace: str | None,
    context: str | None,
) -> None:
    """Show a job's state, restarts, exit code and message.

    When the job's run logs goodput (roxxel.train.callbacks.Goodput), its totals over every
    attempt: the productive share of the time, the largest kinds of badput, redone steps and
    attempts, from the run's metrics file (a local container run's outputs) or its newest
    checkpoint (a local checkpoint_dir, or gs://); a place that cannot be read is one line.

    On Kubernetes also, as tables: the JobSet's (or Job's) conditions and the pod phases of
    each slice (consecutive slices alike share a row); --workers adds one row per pod. While
    the job is Pending, Restarting or Suspended, the Warning events that say why (pods that
    cannot be scheduled, a volume that cannot be mounted, an image that cannot be pulled);
    --events shows every event instead.
    """
    local = backend_name == "local"
    if (show_workers or all_events) and local:
        raise click.UsageError("--workers and --events apply to Kubernetes jobs, not to --local")
    backend = backend_choice.make_backend(backend_name, namespace=namespace, context=context)
    with backend_errors():
        details = backend.details(name, all_events=all_events)
        job = details.status if details is not None else backend.status(name)
        goodput = job_goodput(backend, job)
    if as_json:
        import json

        click.echo(json.dumps({**status_json(job, details), **goodput_json(goodput)}, indent=2))
        return
    lines = status_lines(job, details) + goodput_lines(goodput)
    if details is not None:
        lines += details_lines(details, show_workers) + events_lines(details.events)
    click.echo("\n".join(lines))


@click.command("list")
@backend_option
@click.option("--json", "as_json", is_flag=True, help="Print the jobs as JSON.")
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice([s.value for s in JobState], case_sensitive=False),
    help="Only jobs in this state (repeatable).",
)
@click.option(
    "-A",
    "--all-namespaces",
    is_flag=True,
    help="The jobs of every namespace this account may list, with a NAMESPACE column "
    "(as kubectl get -A; Kubernetes only).",
)
@namespace_option
@context_option
def list_command(
    backend_name: str,
    as_json: bool,
    states: tuple[str, ...],
    all_namespaces: bool,
    namespace: str | None,
    context: str | None,
) -> None:
    """List the jobs roxxel-launch started."""
    local = backend_name == "local"
    if all_namespaces and namespace is not None:
        raise click.UsageError("-A lists every namespace; it contradicts --namespace (give one or the other)")
    backend = backend_choice.make_backend(backend_name, namespace=namespace, context=context)
    with backend_errors():
        jobs = _in_states(backend.list(all_namespaces=all_namespaces), states)
    if as_json:
        import json

        click.echo(json.dumps([status_json(j) for j in jobs], indent=2))
        return
    rows: list[tuple] = [("NAME", "STATE", "PROCESSES", "RESTARTS", "EXIT", "CREATED")]
    rows += [
        (
            j.name,
            j.state.value,
            str(j.processes),
            str(j.restarts),
            "-" if j.exit_code is None else str(j.exit_code),
            j.created or "-",
        )
        for j in jobs
    ]
    if all_namespaces:  # first, as kubectl get -A prints it
        rows = [("NAMESPACE", *rows[0]), *((j.namespace or "-", *row) for j, row in zip(jobs, rows[1:]))]
    for line in table(rows):
        click.echo(line)
    if local:  # local state is per directory: say which one, above all when it holds no job
        from roxxel_launch.backends.local.backend import ROOT_ENV

        root = getattr(backend, "root", "?")
        if jobs:
            click.echo(f"(local jobs kept in {root})", err=True)
        else:
            click.echo(
                f"no local jobs in {root}: local jobs are kept in ./runs/local of the directory "
                f"they were submitted from, or in ${ROOT_ENV} when it is set",
                err=True,
            )


def _in_states(jobs: list[JobStatus], states: tuple[str, ...]) -> list[JobStatus]:
    """The jobs in one of ``states`` (JobState values, any case); all of them when none is given."""
    wanted = {s.lower() for s in states}
    return [j for j in jobs if not wanted or j.state.value.lower() in wanted]


@click.command()
@click.argument("name")
@backend_option
@click.option(
    "-p",
    "--process",
    "--rank",
    "process",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Which worker: its JAX process id (rank); --rank is the same option. On a "
    "JobSet, process = slice * hosts_per_slice + host.",
)
@click.option(
    "-f",
    "--follow",
    is_flag=True,
    help="Keep printing new output until the job ends. On Kubernetes it follows the "
    "job across gang restarts and Kueue readmissions: it re-attaches to each new attempt's "
    "pod and prints a line between attempts, '── attempt N (restart N-1) ──' or "
    "'── attempt N: re-admitted by Kueue after eviction K (reason) ──'.",
)
@click.option(
    "--all",
    "all_processes",
    is_flag=True,
    help="Every worker's output, each line prefixed with '[rank N] ' (Kubernetes).",
)
@click.option(
    "--since", metavar="DURATION", default=None, help="Only output newer than this: 30s, 10m, 2h (Kubernetes)."
)
@click.option(
    "--previous",
    is_flag=True,
    help="The previous terminated container of the pod, as `kubectl logs --previous` (Kubernetes).",
)
@container_option
@namespace_option
@context_option
def logs(
    name: str,
    backend_name: str,
    process: int,
    follow: bool,
    all_processes: bool,
    since: str | None,
    previous: bool,
    container: str | None,
    namespace: str | None,
    context: str | None,
) -> None:
    """Print one worker's output (rank 0 by default; on Kubernetes, of the newest attempt).
    JSON log lines (log_format: json) are shown as text: TIME SEVERITY [process N] MESSAGE."""
    since_seconds = _duration_seconds(since) if since is not None else None
    backend = backend_choice.make_backend(backend_name, namespace=namespace, context=context)
    with backend_errors():
        for line in backend.logs(
            name,
            process=process,
            follow=follow,
            all_processes=all_processes,
            since_seconds=since_seconds,
            previous=previous,
            container=container,
        ):
            click.echo(_as_text(line.rstrip("\n")))


def _as_text(line: str) -> str:
    """A worker's line as text: a JSON log line (after --all's '[rank N] ') as roxxel.log_format.as_text
    words it; any other line unchanged."""
    match = _RANK_PREFIX.match(line)
    prefix = match.group(0) if match else ""
    return prefix + as_text(line[len(prefix) :])


_RANK_PREFIX = re.compile(r"\[rank \d+\] ")


def _duration_seconds(text: str) -> int:
    """Seconds of a duration such as 45s, 10m, 2h or 1h30m (as kubectl's --since takes)."""
    import re

    match = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", text.strip())
    if not text.strip() or match is None:
        raise click.BadParameter(f"{text!r} is not a duration; use e.g. 30s, 10m, 2h or 1h30m", param_hint="--since")
    hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return hours * 3600 + minutes * 60 + seconds


@click.command()
@click.argument("name")
@backend_option
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=None,
    metavar="SECONDS",
    help="Give up after this many seconds, with exit code 124 (the job keeps running). "
    "Default: wait as long as it takes.",
)
@poll_option
@namespace_option
@context_option
@click.pass_context
def wait(
    ctx: click.Context,
    name: str,
    backend_name: str,
    timeout: float | None,
    poll: float,
    namespace: str | None,
    context: str | None,
) -> None:
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
    backend = backend_choice.make_backend(backend_name, namespace=namespace, context=context)
    with backend_errors():
        try:
            job = backend.wait(name, timeout=timeout, poll_seconds=poll, on_events=print_events)
        except WaitTimeout as err:  # before backend_errors: a timeout has its own exit code
            last = err.status
            click.echo(
                f"roxxel-launch: {err}" + (f" ({one_line(last.message, 200)})" if last.message else ""), err=True
            )
            ctx.exit(EXIT_TIMED_OUT)
    ctx.exit(report_outcome(job))
