"""`resume --until-done` decides from JobState and StopReason, never from message text.

Uses an in-memory Backend (the CLI's only view of a backend is the Backend contract), so no
cluster or process is involved.
"""

from __future__ import annotations

from typing import Iterator

import pytest
from click.testing import CliRunner

from roxxel_launch import cli as C
from roxxel_launch.backends.base import Backend, JobState, JobStatus, StopReason


class ScriptedBackend(Backend):
    """Returns the given statuses in order: one before the first resume, one per resume."""

    def __init__(self, statuses: list[JobStatus]):
        self.statuses = list(statuses)
        self.resumes = 0

    def submit(self, spec, *, dry_run: bool = False) -> JobStatus:
        raise NotImplementedError

    def status(self, name: str) -> JobStatus:
        return self.statuses[min(self.resumes, len(self.statuses) - 1)]

    def logs(self, name: str, *, process: int = 0, follow: bool = False) -> Iterator[str]:
        return iter(())

    def list(self) -> list[JobStatus]:
        return [self.status("lm")]

    def delete(self, name: str) -> None:
        raise NotImplementedError

    def resume(self, name: str) -> JobStatus:
        self.resumes += 1
        return self.status(name)


def _preempted(reason: StopReason, message: str) -> JobStatus:
    return JobStatus(name="lm", state=JobState.PREEMPTED, processes=2, exit_code=42,
                     message=message, reason=reason)


def _run(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    monkeypatch.setattr(C, "_backend", lambda *args, **kwargs: backend)
    result = CliRunner().invoke(C.cli, ["resume", "lm", "--until-done", "--poll", "0.1"])
    return result.exit_code, result.output


def test_a_job_stopped_on_request_is_not_resumed_again_whatever_its_message(monkeypatch):
    backend = ScriptedBackend([_preempted(StopReason.PREEMPTED, "preempted"),
                               _preempted(StopReason.STOPPED_BY_USER, "the user asked")])
    code, output = _run(backend, monkeypatch)
    assert (code, backend.resumes) == (C.EXIT_PREEMPTED, 1), output
    assert "was stopped on request" in output


def test_a_preemption_is_resumed_even_if_its_message_reads_stopped_by(monkeypatch):
    done = JobStatus(name="lm", state=JobState.SUCCEEDED, processes=2, exit_code=0)
    backend = ScriptedBackend([_preempted(StopReason.PREEMPTED, "preempted"),
                               _preempted(StopReason.PREEMPTED, "stopped by the cluster"), done])
    code, output = _run(backend, monkeypatch)
    assert (code, backend.resumes) == (0, 2), output
