"""The CLI uses backends only through the Backend contract.

`resume --until-done` decides from JobState and StopReason, never from message text; `status`
asks every backend for `details`. Uses an in-memory Backend, so no cluster or process is
involved.
"""

from __future__ import annotations

import inspect
from typing import Iterator

import pytest
from click.testing import CliRunner

from roxxel_launch import cli as C
from roxxel_launch.cli import backend_choice
from roxxel_launch.backends.base import (
    Backend,
    JobNotFoundError,
    JobState,
    JobStatus,
    StopReason,
    WaitProgress,
    WaitTimeout,
)
from roxxel_launch.backends.local.backend import LocalBackend


class ScriptedBackend(Backend):
    """Returns the given statuses in order: one before the first resume, one per resume."""

    def __init__(self, statuses: list[JobStatus]):
        self.statuses = list(statuses)
        self.resumes = 0

    def submit(self, spec, *, dry_run: bool = False) -> JobStatus:
        raise NotImplementedError

    def status(self, name: str) -> JobStatus:
        return self.statuses[min(self.resumes, len(self.statuses) - 1)]

    def logs(
        self,
        name: str,
        *,
        process: int = 0,
        follow: bool = False,
        all_processes: bool = False,
        since_seconds: int | None = None,
        previous: bool = False,
        container: str | None = None,
    ) -> Iterator[str]:
        return iter(())

    def list(self, *, all_namespaces: bool = False) -> list[JobStatus]:
        return [self.status("lm")]

    def delete(self, name: str, *, wait: bool = False) -> None:
        raise NotImplementedError

    def resume(self, name: str, *, spec=None, new_spec=None) -> JobStatus:
        self.resumes += 1
        return self.status(name)


def _preempted(reason: StopReason, message: str) -> JobStatus:
    return JobStatus(name="lm", state=JobState.PREEMPTED, processes=2, exit_code=42, message=message, reason=reason)


def _run(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    monkeypatch.setattr(backend_choice, "make_backend", lambda *args, **kwargs: backend)
    result = CliRunner().invoke(C.cli, ["resume", "lm", "--until-done", "--poll", "0.1"])
    return result.exit_code, result.output


def test_a_job_stopped_on_request_is_not_resumed_again_whatever_its_message(monkeypatch):
    backend = ScriptedBackend(
        [_preempted(StopReason.PREEMPTED, "preempted"), _preempted(StopReason.STOPPED_BY_USER, "the user asked")]
    )
    code, output = _run(backend, monkeypatch)
    assert (code, backend.resumes) == (C.EXIT_PREEMPTED, 1), output
    assert "was stopped on request" in output


def test_a_preemption_is_resumed_even_if_its_message_reads_stopped_by(monkeypatch):
    done = JobStatus(name="lm", state=JobState.SUCCEEDED, processes=2, exit_code=0)
    backend = ScriptedBackend(
        [
            _preempted(StopReason.PREEMPTED, "preempted"),
            _preempted(StopReason.PREEMPTED, "stopped by the cluster"),
            done,
        ]
    )
    code, output = _run(backend, monkeypatch)
    assert (code, backend.resumes) == (0, 2), output


def test_status_of_a_backend_without_details_shows_its_status(monkeypatch):
    backend = ScriptedBackend([_preempted(StopReason.STOPPED_BY_USER, "stopped on request")])
    monkeypatch.setattr(backend_choice, "make_backend", lambda *args, **kwargs: backend)
    result = CliRunner().invoke(C.cli, ["status", "lm", "--json"])
    assert result.exit_code == 0, result.output
    assert '"reason": "stopped_by_user"' in result.output and '"state": "Preempted"' in result.output


def test_details_of_an_unknown_local_job_is_an_error(tmp_path):
    with pytest.raises(JobNotFoundError):
        LocalBackend(root=tmp_path).details("nope")


@pytest.mark.parametrize("method", ["submit", "status", "details", "logs", "list", "delete", "resume", "wait"])
def test_both_backends_keep_the_contracts_signatures(method):
    """Backend-specific options go to the constructors: no backend widens a call."""
    from roxxel_launch.backends.kubernetes.backend import KubernetesBackend

    def params(cls):
        return [(p.name, p.kind, p.default) for p in inspect.signature(getattr(cls, method)).parameters.values()]

    assert params(LocalBackend) == params(Backend) == params(KubernetesBackend)


def test_wait_gives_up_after_its_timeout_with_the_last_status():
    running = JobStatus(name="lm", state=JobState.RUNNING, processes=2, message="2/2 running")
    with pytest.raises(WaitTimeout) as caught:
        ScriptedBackend([running]).wait("lm", timeout=0.2, poll_seconds=0.05)
    assert caught.value.status == running
    assert str(caught.value) == "timed out after 0.2 s waiting for job lm: still Running"


def test_wait_returns_an_evicted_job_only_when_asked():
    admitted = JobStatus(name="lm", state=JobState.RUNNING, processes=2)
    evicted = JobStatus(name="lm", state=JobState.SUSPENDED, processes=2)

    class Evicting(ScriptedBackend):
        def status(self, name: str) -> JobStatus:
            self.resumes += 1  # here: reads so far
            return self.statuses[min(self.resumes - 1, len(self.statuses) - 1)]

    seen: list[JobState] = []
    backend = Evicting([admitted, evicted])
    assert backend.wait("lm", poll_seconds=0, evicted_ends=True, on_change=lambda s: seen.append(s.state)) == evicted
    assert seen == [JobState.RUNNING, JobState.SUSPENDED]
    with pytest.raises(WaitTimeout):
        Evicting([admitted, evicted]).wait("lm", timeout=0.1, poll_seconds=0.02)


def test_wait_progress_is_the_one_decision_of_polling_and_watching():
    """Reports each state change once; over on a terminal state; a suspension ends it only
    after an admission, with ``evicted_ends``, and not while the queue re-admits the job."""

    def status(state: JobState) -> JobStatus:
        return JobStatus(name="lm", state=state, processes=2)

    seen: list[JobState] = []
    progress = WaitProgress(evicted_ends=True, on_change=lambda s: seen.append(s.state))
    assert not progress.over(status(JobState.SUSPENDED))  # queued, never admitted yet
    assert not progress.over(status(JobState.SUSPENDED))
    assert not progress.over(status(JobState.RUNNING))
    assert not progress.over(status(JobState.SUSPENDED), requeued=True)  # Kueue re-admits it
    assert progress.over(status(JobState.SUSPENDED))
    assert seen == [JobState.SUSPENDED, JobState.RUNNING, JobState.SUSPENDED]
    assert WaitProgress().over(status(JobState.PREEMPTED))
    admitted = WaitProgress()
    assert not admitted.over(status(JobState.RUNNING))
    assert not admitted.over(status(JobState.SUSPENDED))  # evicted_ends off
