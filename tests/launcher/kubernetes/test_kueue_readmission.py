"""A Kueue eviction and readmission is a new attempt, as the cluster counts it.

Kueue evicts a job by suspending it (its pods are deleted) and re-admits it by un-suspending
it: new pods in the same JobSet restart attempt. The Workload records each eviction
(``status.schedulingStats.evictions``, the ``Evicted`` condition; kubernetes-sigs/kueue
``pkg/workload/evict/evict.go`` and ``pkg/workload/workload.go``, as the simulated cluster's
``support.k8s_sim.kueue`` follows them). ``status`` counts the attempts from it, and
``logs -f`` marks the readmission's attempt. The ``resume --until-done`` budget is tested
with the other resume tests (tests/launcher/kubernetes/test_http.py).
"""

from __future__ import annotations

import threading
import time

import pytest
from click.testing import CliRunner

from roxxel_launch import spec as S
from roxxel_launch.backends.base import JobState
from roxxel_launch.backends.kubernetes import backend as K
from roxxel_launch.backends.kubernetes import logs
from roxxel_launch.backends.kubernetes.status import kueue_evictions, queue_state
from roxxel_launch.cli import cli

from support.fake_clock import FakeClock, fast_retry
from support.k8s_fake_server import FakeKubernetes, use_cluster
from support.k8s_sim.kueue import EVICTED_DEACTIVATED, EVICTED_PREEMPTED
from support.specs import spec_dict

pytestmark = pytest.mark.timeout(60)

NS = "team-a"
QUEUE = "team-a-queue"
PREEMPTED = "Preempted: " + EVICTED_PREEMPTED[1]


@pytest.fixture
def fake(tmp_path, monkeypatch):
    with FakeKubernetes(namespace=NS) as server:
        server.kueue(QUEUE)
        yield use_cluster(server, tmp_path, monkeypatch, fast_retry(FakeClock()))


@pytest.fixture
def backend(fake) -> K.KubernetesBackend:
    return K.KubernetesBackend(poll_seconds=0.05, delete_timeout=10)


def make_spec() -> S.JobSpec:
    return S.spec_from_dict(
        spec_dict(
            namespace=NS,
            accelerator={"cpu": {"hosts": 2}},
            num_slices=2,
            checkpoint_dir="gs://ckpt/lm",
            queue=QUEUE,
        )
    )


def rank0(fake) -> str:
    (pod,) = [
        p["metadata"]["name"]
        for p in fake.pods("lm")
        if p["metadata"]["labels"]["jobset.sigs.k8s.io/job-index"] == "0"
        and p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == "0"
    ]
    return pod


def message(backend) -> str:
    return backend.details("lm").status.message


# ----------------------------------------------------------------------------- the Workload read


def workload(conditions: list[dict], evictions: list[dict] | None = None) -> dict:
    status: dict = {"conditions": conditions}
    if evictions is not None:
        status["schedulingStats"] = {"evictions": evictions}
    return {"kind": "Workload", "status": status}


ADMITTED = {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "The workload is admitted"}


def test_evictions_are_counted_from_the_workloads_scheduling_stats():
    evicted = {"type": "Evicted", "status": "True", "reason": "Preempted", "message": "Preempted to accommodate"}
    stats = [{"reason": "Preempted", "underlyingCause": "", "count": 2}]
    assert kueue_evictions([workload([evicted], stats)]) == (2, "Preempted: Preempted to accommodate")
    # Re-admitted: Evicted False (reason QuotaReserved, 'Previously: ...'); the reason from the
    # counts when they name one only.
    readmitted = {
        "type": "Evicted",
        "status": "False",
        "reason": "QuotaReserved",
        "message": "Previously: Preempted to accommodate",
    }
    assert kueue_evictions([workload([ADMITTED, readmitted], stats)]) == (2, "Preempted: Preempted to accommodate")
    mixed = [*stats, {"reason": "Deactivated", "underlyingCause": "", "count": 1}]
    assert kueue_evictions([workload([ADMITTED, readmitted], mixed)]) == (3, "Preempted to accommodate")


def test_a_kueue_without_scheduling_stats_counts_the_evicted_condition_once():
    evicted = {"type": "Evicted", "status": "True", "reason": "PodsReadyTimeout", "message": "Exceeded the timeout"}
    assert kueue_evictions([workload([evicted])]) == (1, "PodsReadyTimeout: Exceeded the timeout")
    assert kueue_evictions([workload([ADMITTED])]) == (0, "")
    assert kueue_evictions(None) == (0, "") and kueue_evictions([]) == (0, "")


def test_the_queue_state_counts_restarts_and_evictions_as_attempts():
    readmitted = {"type": "Evicted", "status": "False", "reason": "QuotaReserved", "message": "Previously: gone"}
    stats = [{"reason": "Preempted", "underlyingCause": "", "count": 1}]
    note = queue_state(QUEUE, False, [workload([ADMITTED, readmitted], stats)], restarts=2)
    assert note == f"queue {QUEUE}: admitted; attempt 4, re-admitted after eviction 1 (Preempted: gone)"


# ----------------------------------------------------------------------------- the simulated cluster


def test_status_shows_a_readmission_as_a_new_attempt(fake, backend):
    backend.submit(make_spec())
    assert message(backend).endswith(f"queue {QUEUE}: admitted")
    fake.exit_worker("lm", 42, process=1, disrupted=True)  # a gang restart: attempt 2
    fake.kueue_evict("lm")
    details = backend.details("lm")
    assert details.status.state is JobState.SUSPENDED and details.status.restarts == 1
    assert details.status.message.endswith(
        f"queue {QUEUE}: evicted ({PREEMPTED}); Kueue requeues it: eviction 1 ended attempt 2, "
        "attempt 3 starts when it is re-admitted"
    )
    fake.kueue_readmit("lm")
    result = CliRunner().invoke(cli, ["status", "lm"])
    assert result.exit_code == 0, result.output
    assert "restarts:   1" in result.output.splitlines()  # the JobSet's own count is unchanged
    assert f"queue {QUEUE}: admitted; attempt 3, re-admitted after eviction 1 ({PREEMPTED})" in result.output
    fake.kueue_evict("lm", EVICTED_DEACTIVATED)
    fake.kueue_readmit("lm")
    assert message(backend).endswith(
        f"queue {QUEUE}: admitted; attempt 4, re-admitted after eviction 2 (The workload is deactivated)"
    )  # two reasons counted: the message alone names the last


def test_a_job_created_again_starts_with_no_evictions(fake, backend):
    """The Workload belongs to the object (label kueue.x-k8s.io/job-uid): a job re-created
    under the same name starts at attempt 1."""
    backend.submit(make_spec())
    fake.kueue_evict("lm")
    fake.kueue_readmit("lm")
    assert "re-admitted after eviction 1" in message(backend)
    backend.delete("lm")
    backend.submit(make_spec())
    assert message(backend).endswith(f"queue {QUEUE}: admitted")


def test_logs_follow_marks_the_attempt_kueue_re_admitted(fake, backend, monkeypatch):
    """Kueue evicts and re-admits the job right after ``logs -f`` opened the first pod's
    stream: the first pod's lines come unmarked (the evictions are counted as they were
    when that pod was looked up), then the marker, then the new pod's lines."""
    backend.submit(make_spec())
    first = rank0(fake)
    fake.log(first, "fresh start at step 0", "saved step 2")
    opened = logs._RankReader.open_stream
    evicted: list[str] = []

    def open_then_evict(reader, follow):
        response = opened(reader, follow)
        if follow and not evicted:  # once, before a line of it is read
            fake.kueue_evict("lm")
            fake.kueue_readmit("lm")
            evicted.append(rank0(fake))
            fake.log(evicted[0], "restored step 2", "saved step 4")
        return response

    monkeypatch.setattr(logs._RankReader, "open_stream", open_then_evict)

    def cluster():
        deadline = time.monotonic() + 30
        while not (evicted and any(r.name == evicted[0] and r.query.get("follow") for r in fake.calls("GET", "log"))):
            if time.monotonic() > deadline:
                return
            time.sleep(0.02)
        fake.settle("jobsets", "lm", "succeed")

    thread = threading.Thread(target=cluster, daemon=True)
    thread.start()
    result = CliRunner().invoke(cli, ["logs", "lm", "-f"])
    thread.join(timeout=30)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "fresh start at step 0",
        "saved step 2",
        f"── attempt 2: re-admitted by Kueue after eviction 1 ({PREEMPTED}) ──",
        "restored step 2",
        "saved step 4",
    ]
    # Started after the readmission: the first line says which attempt it is.
    late = CliRunner().invoke(cli, ["logs", "lm", "-f"])
    assert late.output.splitlines() == [
        "── attempt 2 (restart 0, 1 Kueue eviction) ──",
        "restored step 2",
        "saved step 4",
    ]
