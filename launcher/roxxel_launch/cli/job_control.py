"""Commands that start and stop a job: ``submit``, ``resume``, ``suspend``, ``delete``."""

from __future__ import annotations

import click

from roxxel.wording import count
from roxxel_launch.backends.base import Backend, BackendError, JobNotFoundError, JobState, JobStatus, StopReason
from roxxel_launch.cli.backend_choice import BackendChoice, backend_errors, backend_options
from roxxel_launch.cli.job_output import (
    announce,
    one_line,
    print_events,
    report_end,
    report_outcome,
)
from roxxel_launch.cli.options import poll_option, schema_option, set_option, version_option
from roxxel_launch.cli.spec_checks import check_manifests, load_spec_arg

DEFAULT_MAX_RESUMES = 20


@click.command()
@click.argument("spec_path", metavar="SPEC", type=click.Path(exists=True, dir_okay=False))
@set_option
@backend_options(
    "detach", "devices_per_worker", "data_dir", "netns", "max_workers", "runtime", "skip_fit_check", "context"
)
@click.option("--dry-run", is_flag=True, help="Check everything, start nothing.")
@schema_option
@version_option
@click.pass_context
def submit(
    ctx: click.Context,
    spec_path: str,
    overrides: tuple[str, ...],
    choice: BackendChoice,
    dry_run: bool,
    schema: bool,
    kubernetes_version: str,
) -> None:
    """Start a job: on the cluster, or as local processes with --local.

    The spec and the manifests it renders are validated before anything starts (for
    --local too: the local run is meant to be the pods' dress rehearsal).
    """
    local = choice.name == "local"
    spec = load_spec_arg(spec_path, overrides)
    check_manifests(spec, schema, kubernetes_version, cluster=choice.row.cluster)
    if local and spec.checkpoint_dir and "://" in spec.checkpoint_dir:
        click.echo(
            f"roxxel-launch: note: checkpoint_dir is {spec.checkpoint_dir}: the local workers will write "
            "there (with this machine's credentials); for a local run give a local directory, e.g. "
            f"--set checkpoint_dir=$PWD/runs/{spec.name}/checkpoints",
            err=True,
        )
    backend = choice.make(dry_run=dry_run)
    with backend_errors():
        status = backend.submit(spec, dry_run=dry_run)
    if status.state.terminal:  # a job run in the foreground (local)
        ctx.exit(report_end(status))
    if local and dry_run:
        click.echo(status.message)
    elif local:
        click.echo(_local_job_started("started", spec.name, status))
    else:
        verb = "would submit" if dry_run else "submitted"
        click.echo(
            f"{verb} {spec.workload} {spec.namespace}/{spec.name}: "
            f"{count(status.processes, 'process')}, state {status.state.value}"
        )
        if not dry_run:  # the commands by name use the kubeconfig's namespace unless told
            click.echo(
                f"follow it with `roxxel-launch status {spec.name} -n {spec.namespace}` and "
                f"`roxxel-launch logs {spec.name} -n {spec.namespace} -f`"
            )


@click.command()
@click.argument("name")
@backend_options("namespace", "context")
def delete(name: str, choice: BackendChoice) -> None:
    """Stop a job and remove it (a local run's directory goes too, logs included).

    This removes what `resume` needs (the stored spec, the job's object or run directory);
    the checkpoints stay. `suspend` stops a job and keeps it resumable.
    """
    backend = choice.make()
    with backend_errors():
        try:
            succeeded = backend.status(name).state is JobState.SUCCEEDED
        except JobNotFoundError:
            raise
        except BackendError:  # a status that cannot be read does not stop the delete
            succeeded = False
        backend.delete(name)
    click.echo(f"deleted {name}")
    if succeeded:  # nothing to resume was lost
        return
    click.echo(
        f"roxxel-launch: {name}'s stored spec went with it, so `resume` cannot continue it; submit its spec "
        "again to go on from its checkpoints (`roxxel-launch suspend` stops a job and keeps it)",
        err=True,
    )


@click.command()
@click.argument("name")
@backend_options("namespace", "context")
def suspend(name: str, choice: BackendChoice) -> None:
    """Stop a job's workers and keep the job: `roxxel-launch resume NAME` starts it again.

    On Kubernetes this sets the JobSet's (or Job's) spec.suspend: the controllers delete the
    pods, each worker gets SIGTERM and its grace period to checkpoint, and the object with
    its stored spec stays (a job with a Kueue queue is stopped through its Workload instead).
    With --local the supervisor is stopped as by Ctrl-C and the run directory stays.
    """
    backend = choice.make()
    with backend_errors():
        job = backend.suspend(name)
    click.echo(f"suspended {name}: state {job.state.value}; `roxxel-launch resume {name}` continues it")


@click.command()
@click.argument("name")
@backend_options("detach", "skip_fit_check", "namespace", "context")
@click.option(
    "--until-done",
    is_flag=True,
    help="Stay until the job succeeds: watch it and re-submit it each time it ends "
    "preempted or is evicted (Suspended again after it had been admitted), at "
    "most --max-resumes times. A job Kueue evicts is left to Kueue, which "
    "re-admits it as a new attempt; each such eviction counts as a resume. A real "
    "failure is not retried.",
)
@click.option(
    "--max-resumes",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_RESUMES,
    show_default=True,
    help="With --until-done: the most resumes before giving up: re-submissions after a "
    "preemption and Kueue evictions count alike.",
)
@click.option(
    "--spec",
    "spec_path",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Resume under this fixed job spec instead of the stored one (after editing the YAML). "
    "It must keep name, run_name, checkpoint_dir and workload; the rest may change "
    "(each change is logged). Whether the batches already trained stay as they were is "
    "checked by the training program when it restores (a changed curriculum exits 78).",
)
@set_option
@poll_option
@click.pass_context
def resume(
    ctx: click.Context,
    name: str,
    choice: BackendChoice,
    until_done: bool,
    max_resumes: int,
    spec_path: str | None,
    overrides: tuple[str, ...],
    poll: float,
) -> None:
    """Start a suspended, preempted, failed or evicted job again; it continues from its last checkpoint.

    A job stopped by `roxxel-launch suspend` (on Kubernetes: spec.suspend set, no Kueue
    queue) is un-suspended in place. Any other is re-created from the spec it was submitted
    with: same name, run name and checkpoint_dir, so training restores its last checkpoint. After editing the YAML, give
    it with --spec FILE: resume then runs the fixed spec (name, run_name, checkpoint_dir and
    workload must stay; another one is a new run: delete the job and submit it).

    With --until-done, a job that still runs is watched first, and one that has succeeded
    is left alone. A Kueue eviction is Kueue's to undo (it re-admits the job as a new
    attempt) and counts as a resume. Exit codes with --until-done, as for `wait`: 0
    succeeded; 42 still preempted or evicted after --max-resumes resumes; 125 failed (a failure of the
    program is not retried after the first resume: fix it first); 1 roxxel-launch could not
    go on (e.g. the job was deleted meanwhile). Without it: 0 once re-submitted (Kubernetes,
    --detach), or the job's own exit code (--local in the foreground).
    """
    local = choice.name == "local"
    if overrides and spec_path is None:
        raise click.UsageError(
            "--set applies to the --spec file: give --spec FILE (the stored spec is resumed as it is)"
        )
    new_spec = load_spec_arg(spec_path, overrides) if spec_path is not None else None
    if until_done and choice.settings.get("detach"):
        raise click.UsageError("--until-done stays to watch the job; it cannot be combined with --detach")
    backend = choice.make(poll=poll)
    with backend_errors():
        if until_done:
            ctx.exit(_resume_until_done(backend, name, max_resumes=max_resumes, poll=poll, new_spec=new_spec))
        job = backend.resume(name, new_spec=new_spec)
    if job.state.terminal:  # resumed in the foreground (local)
        ctx.exit(report_end(job))
    click.echo(_local_job_started("resumed", name, job) if local else f"resumed {name}: state {job.state.value}")


def _local_job_started(verb: str, name: str, status: JobStatus) -> str:
    """What a detached local submit or resume says: its workers, run directory, and how to follow it."""
    return (
        f"{verb} local job {name}: {count(status.processes, 'worker')}, run directory "
        f"{status.run_dir}\nfollow it with `roxxel-launch logs {name} --local -f`, "
        f"wait for it with `roxxel-launch wait {name} --local`"
    )


class _OutOfResumes(Exception):
    """A Kueue eviction came after the last of --max-resumes (it ends the wait)."""

    def __init__(self, status: JobStatus):
        super().__init__(status.name)
        self.status = status


def _resume_until_done(backend: Backend, name: str, *, max_resumes: int, poll: float, new_spec=None) -> int:
    """Resume, watch, and resume again after each preemption or eviction; the `wait` code.
    ``new_spec`` replaces the stored spec at the first resume (the later ones find it stored).

    A job that Kueue evicts (Suspended again after it ran, with a queue) is not re-created:
    Kueue re-admits it, which starts a new attempt. That eviction counts against
    ``max_resumes`` as a re-submission does, so a job preempted again and again ends within
    the same budget whether the cluster or Kueue preempts it."""
    status = backend.status(name)
    resumes = 0
    first = True
    admitted = False  # seen not Suspended since the wait began or Kueue last evicted it

    def watch(seen: JobStatus) -> None:
        """``announce``, and count a Kueue eviction as a resume (see above)."""
        nonlocal resumes, admitted
        announce(seen)
        if seen.state is not JobState.SUSPENDED:
            admitted = True
            return
        if not (admitted and seen.queue):
            return
        admitted = False
        if resumes >= max_resumes:
            raise _OutOfResumes(seen)
        resumes += 1
        click.echo(
            f"roxxel-launch: Kueue evicted {name} (queue {seen.queue}) and re-admits it as a new attempt; "
            f"counted as resume {resumes} of at most {max_resumes}",
            err=True,
        )

    while True:
        state = status.state
        if state is JobState.SUCCEEDED:
            if first:
                click.echo(f"roxxel-launch: {name} has already succeeded; nothing to resume", err=True)
            return report_outcome(status)
        # A job stopped on request (Ctrl-C / SIGTERM to a local run) may save a checkpoint and
        # end Preempted: the user asked it to stop, so it is not resumed again.
        stopped = not first and status.reason is StopReason.STOPPED_BY_USER
        if (state is JobState.FAILED and not first) or stopped:
            click.echo(
                f"roxxel-launch: not resuming {name} again: it {'was stopped on request' if stopped else 'failed'}",
                err=True,
            )
            return report_outcome(status)
        if state in (JobState.PREEMPTED, JobState.SUSPENDED, JobState.FAILED):
            if resumes >= max_resumes:
                click.echo(
                    f"roxxel-launch: giving up on {name}: {state.value} again after "
                    f"{count(resumes, 'resume')} (--max-resumes {max_resumes})",
                    err=True,
                )
                return report_outcome(status)
            resumes += 1
            click.echo(
                f"roxxel-launch: resuming {name} ({state.value}"
                + (f": {one_line(status.message, 160)}" if status.message else "")
                + f"); resume {resumes} of at most {max_resumes}",
                err=True,
            )
            status = backend.resume(name, new_spec=new_spec)
            new_spec = None
            first = False
            if status.state.terminal:  # resumed in the foreground (local)
                continue
        first = False
        # A queued job that is not suspended has been admitted: an eviction seen first thing
        # in the wait counts too.
        admitted = status.state is not JobState.SUSPENDED
        try:
            status = backend.wait(name, poll_seconds=poll, evicted_ends=True, on_change=watch, on_events=print_events)
        except _OutOfResumes as out:
            click.echo(
                f"roxxel-launch: giving up on {name}: evicted by Kueue again after "
                f"{count(resumes, 'resume')} (--max-resumes {max_resumes}); Kueue still re-admits it from "
                f"queue {out.status.queue}: follow it with `roxxel-launch wait {name}`, or stop it with "
                f"`roxxel-launch delete {name}`",
                err=True,
            )
            return report_outcome(out.status)
