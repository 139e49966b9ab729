"""What the job commands print: status and event tables, state changes, and how a job ended,
with the exit code that says so (see :mod:`roxxel_launch.cli` for the codes)."""

from __future__ import annotations

import click

from roxxel.contract import PREEMPTED_EXIT_CODE
from roxxel.wording import count
from roxxel_launch.backends.base import JobState, JobStatus

# Exit codes of `wait` and `resume --until-done` (see the module docstring).
EXIT_SUCCEEDED = 0
EXIT_PREEMPTED = PREEMPTED_EXIT_CODE  # a preempted job keeps its own code
EXIT_TIMED_OUT = 124
EXIT_FAILED = 125


def table(rows: list[tuple]) -> list[str]:
    """Left-aligned columns, two spaces apart (the first row is the header)."""
    cells = [tuple(str(c) for c in row) for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]


def one_line(text: str, limit: int = 0) -> str:
    text = " ".join((text or "").split())
    return text if not limit or len(text) <= limit else text[: limit - 3] + "..."


def status_lines(status, details=None) -> list[str]:
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
        rows[3] = (
            "processes",
            f"{status.processes} ({count(details.slices, 'slice')} x {count(details.hosts_per_slice, 'host')})",
        )
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
        rows.append((label, f"{sum(phases.values())}/{details.hosts_per_slice}", *(phases[p] for p in _PHASES)))
        start = s
    return [("SLICE", "PODS", *(p.upper() for p in _PHASES)), *rows]


def details_lines(details, show_workers: bool) -> list[str]:
    lines = []
    if details.conditions:
        rows: list[tuple] = [("CONDITION", "STATUS", "REASON", "SINCE", "MESSAGE")]
        rows += [
            (
                c.get("type", "?"),
                c.get("status", "?"),
                c.get("reason") or "-",
                c.get("lastTransitionTime") or "-",
                one_line(c.get("message") or "-", 100),
            )
            for c in details.conditions
        ]
        lines += ["", *table(rows)]
    lines += ["", *table(_slice_rows(details))]
    if show_workers:
        rows = [("PROCESS", "SLICE", "INDEX", "POD", "PHASE", "EXIT", "REASON")]
        rows += [
            (
                w.process,
                w.slice,
                w.index,
                w.pod,
                w.phase + (" (terminating)" if w.terminating else ""),
                "-" if w.exit_code is None else w.exit_code,
                one_line(": ".join(p for p in (w.reason, w.message) if p) or "-", 80),
            )
            for w in details.workers
        ]
        lines += ["", *table(rows)]
    return lines


def status_json(status, details=None) -> dict:
    import dataclasses

    data = dataclasses.asdict(status)
    data["state"] = status.state.value
    data["reason"] = None if status.reason is None else status.reason.value
    if details is not None:
        data.update(
            kind=details.kind,
            namespace=details.namespace,
            slices=details.slices,
            hosts_per_slice=details.hosts_per_slice,
            conditions=[dict(c) for c in details.conditions],
            workers=[dataclasses.asdict(w) for w in details.workers],
            events=None if details.events is None else [dataclasses.asdict(e) for e in details.events],
        )
    return data


def report_end(status) -> int:
    """Say how a job ended (on stderr) and return its exit code."""
    code = 1 if status.exit_code is None else status.exit_code
    if status.state is JobState.SUCCEEDED:
        click.echo(f"roxxel-launch: job {status.name} succeeded", err=True)
    elif status.state is JobState.PREEMPTED:
        click.echo(
            f"roxxel-launch: job {status.name} preempted (exit {PREEMPTED_EXIT_CODE}): {status.message}", err=True
        )
    else:
        click.echo(
            f"roxxel-launch: job {status.name} {status.state.value.lower()} (exit {code}): {status.message}", err=True
        )
    return code


def report_outcome(status) -> int:
    """Say how a job ended (on stderr) and return the exit code of `wait` (0, 42 or 125)."""
    if status.state is JobState.SUCCEEDED:
        click.echo(f"roxxel-launch: job {status.name} succeeded", err=True)
        return EXIT_SUCCEEDED
    detail = f": {status.message}" if status.message else ""
    if status.state is JobState.PREEMPTED:
        click.echo(f"roxxel-launch: job {status.name} preempted (exit {EXIT_PREEMPTED}){detail}", err=True)
        return EXIT_PREEMPTED
    if status.state is JobState.SUSPENDED:
        click.echo(f"roxxel-launch: job {status.name} evicted (Suspended; exit {EXIT_PREEMPTED}){detail}", err=True)
        return EXIT_PREEMPTED
    code = "unknown" if status.exit_code is None else status.exit_code
    click.echo(
        f"roxxel-launch: job {status.name} {status.state.value.lower()} (worker exit code "
        f"{code}; exit {EXIT_FAILED}){detail}",
        err=True,
    )
    return EXIT_FAILED


def announce(status: JobStatus) -> None:
    """Print a change of a watched job's state on stderr."""
    click.echo(
        f"roxxel-launch: {status.name} is {status.state.value}"
        + (f": {one_line(status.message, 160)}" if status.message else ""),
        err=True,
    )


def events_lines(events) -> list[str]:
    """The job's events as a table (Warnings first, merged across objects); none: no lines."""
    if not events:
        return []
    rows: list[tuple] = [("TYPE", "REASON", "COUNT", "LAST SEEN", "OBJECT", "MESSAGE")]
    for e in events:
        objects = e.objects[0] + (f" (+{len(e.objects) - 1})" if len(e.objects) > 1 else "") if e.objects else "-"
        rows.append(
            (e.type, e.reason, e.count, e.last_seen or "-", objects, one_line(e.message or "-"))
        )  # whole: the cause is often last
    return ["", *table(rows)]


def print_events(events) -> None:
    """`wait`: the events of pods that stay Pending, each once, on stderr."""
    for event in events:
        click.echo(f"roxxel-launch: {event.describe()}", err=True)
