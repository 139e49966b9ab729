"""The job commands of ``roxxel-launch`` end to end over HTTP, against a test double.

No Kubernetes API server runs here. ``tests/support/k8s_fake_server.py`` is a test double: an
HTTP server on 127.0.0.1 (a thread of this process) speaking the subset of the API the
Kubernetes backend uses, with scripted stand-ins for the JobSet, Job and Kueue controllers.
A kubeconfig written to a temporary directory points the official ``kubernetes`` client at
it, so everything from the CLI down to the HTTP requests is the production code: commands
run through click's CliRunner (and one through a real subprocess, for its exit status).
Every object the backend sends is checked offline with launcher/roxxel_launch/validate.py's checks
(kubernetes-validate strict; the JobSet CRD schema with unknown fields rejected).
Connections go to loopback only.

The last section runs ``resume --until-done`` with ``--local`` (processes on this machine).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap

import pytest
import yaml
from click.testing import CliRunner

from roxxel_launch import render as R
from roxxel_launch import spec as S
from roxxel_launch import validate as V
from roxxel_launch.backends.kubernetes import backend as K
from roxxel_launch.backends.base import JobState
from roxxel_launch.cli import EXIT_FAILED, EXIT_PREEMPTED, EXIT_TIMED_OUT, cli

from support.k8s_fake_server import TOKEN, FakeKubernetes, count_preemptions, use_cluster
from support.paths import JOBSET_CRD as CRD
from support.specs import TPU_V5P, spec_dict

pytestmark = pytest.mark.timeout(60)

NS = "team-a"
POLL = "0.1"

SPEC = spec_dict(
    namespace=NS,
    accelerator=TPU_V5P,
    num_slices=2,
    checkpoint_dir="gs://ckpt/lm",
    run_name="lm-run-1",
    service_account="trainer",
)
INDEXED = {**SPEC, "accelerator": {"cpu": {"hosts": 4}}, "num_slices": 1, "workload": "indexed-job"}


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch):
    """Nothing here may connect anywhere but this machine."""
    real = socket.socket.connect

    def connect(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in ("127.0.0.1", "::1"):
            raise AssertionError(f"a test tried to connect to {address}; loopback only")
        return real(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)


@pytest.fixture(scope="module")
def crd_schema() -> dict:
    return V.jobset_crd_schema(yaml.safe_load(CRD.read_text()))


@pytest.fixture
def fake(tmp_path, monkeypatch, crd_schema):
    with FakeKubernetes(namespace=NS) as server:
        use_cluster(server, tmp_path, monkeypatch)  # simulated delays
        server.kueue("team-a-queue")  # Kueue installed, with the queue the specs use
        yield server
        for request in server.calls("POST"):  # everything sent passed the offline checks
            if request.resource == "pods":  # the admission dry run's worker pod, made from the rendered template
                assert request.dry_run, "a pod was created for real"
                continue
            assert_valid(request.body, crd_schema)


def assert_valid(obj: dict, crd_schema: dict) -> None:
    assert V.check_objects([obj]) == []
    assert V.check_schemas([obj]) == []
    if obj["kind"] == "JobSet":
        assert V.check_jobset_crd(obj, crd_schema) == []


def spec_file(tmp_path, data=SPEC, **changes) -> str:
    path = tmp_path / f"{changes.get('name', data['name'])}-{len(list(tmp_path.iterdir()))}.yaml"
    path.write_text(yaml.safe_dump({**data, **changes}))
    return str(path)


def run(*args: str, code: int = 0):
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert result.exit_code == code, (result.exit_code, result.output, result.exception)
    return result


def submit(tmp_path, data=SPEC, **changes):
    return run("submit", spec_file(tmp_path, data, **changes))


# ----------------------------------------------------------------------------- submit


def test_submit_dry_runs_then_creates_and_refuses_an_existing_name(fake, tmp_path):
    result = submit(tmp_path)
    assert "submitted jobset team-a/lm: 8 processes, state Pending" in result.output
    posts = fake.calls("POST")
    # One worker pod is dry-run first (admission), then the job's NetworkPolicy goes first, so
    # that no pod ever runs unprotected.
    assert [(r.resource, r.dry_run) for r in posts] == [
        ("pods", True),
        ("networkpolicies", True),
        ("jobsets", True),
        ("networkpolicies", False),
        ("jobsets", False),
    ]
    policy, expected = R.render(S.spec_from_dict(SPEC)).objects
    assert posts[2].body == posts[4].body == expected and posts[1].body == posts[3].body == policy
    assert posts[4].query["fieldManager"] == "roxxel-launch"
    assert len(fake.pods("lm")) == 8  # the fake JobSet controller started 2 slices x 4 hosts

    again = run("submit", spec_file(tmp_path), code=1)
    # The dry run of the first object (the NetworkPolicy) finds it; the error names the job.
    assert "JobSet team-a/lm already exists" in again.output
    assert "roxxel-launch delete lm" in again.output and "roxxel-launch resume lm" in again.output
    assert [(r.resource, r.dry_run) for r in fake.calls("POST")][5:] == [("pods", True), ("networkpolicies", True)]

    dry = run("submit", spec_file(tmp_path, name="other"), "--dry-run")
    assert "would submit jobset team-a/other" in dry.output
    assert fake.get("jobsets", "other") is None and fake.submissions("other") == 0


def test_submit_indexed_job_creates_its_service_first(fake, tmp_path):
    submit(tmp_path, INDEXED)
    real = [r for r in fake.calls("POST") if not r.dry_run]
    assert [r.resource for r in real] == ["services", "networkpolicies", "jobs"]
    assert fake.get("services", "lm")["spec"]["clusterIP"] == "None"
    assert len(fake.pods("lm")) == 4


@pytest.mark.parametrize(
    "fault, fragment",
    [
        (
            dict(
                code=422,
                reason="Invalid",
                message='JobSet.jobset.x-k8s.io "lm" is invalid: spec.replicatedJobs[0]'
                ".template.spec.template.spec.containers[0].image: Required value",
            ),
            'the API server rejected JobSet team-a/lm (create (dry run)): JobSet.jobset.x-k8s.io "lm" is invalid',
        ),
        (
            dict(
                code=403,
                reason="Forbidden",
                message='jobsets.jobset.x-k8s.io is forbidden: User "dev" cannot create resource "jobsets"',
            ),
            "kubectl auth can-i create jobsets.jobset.x-k8s.io -n team-a",
        ),
        (
            dict(code=404, reason="NotFound", message="the server could not find the requested resource"),
            "the JobSet API (jobset.x-k8s.io/v1alpha2) is not installed",
        ),
    ],
)
def test_server_errors_are_named_and_nothing_is_left_behind(fake, tmp_path, fault, fragment):
    fake.fail("POST", "jobsets", dry_run=True, **fault)
    result = run("submit", spec_file(tmp_path), code=1)
    assert fragment in result.output
    assert fake.objects == {}


def test_a_half_made_indexed_job_is_rolled_back(fake, tmp_path):
    fake.fail("POST", "jobs", 500, "etcdserver: request timed out", dry_run=False, times=100)
    result = run("submit", spec_file(tmp_path, INDEXED), code=1)
    assert "HTTP 500" in result.output and "Rolled back: deleted NetworkPolicy/lm, Service/lm" in result.output
    assert fake.objects == {}


def test_wrong_credentials(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(fake.write_kubeconfig(tmp_path / "bad", token="expired")))
    result = run("status", "lm", code=1)
    assert "rejected the credentials" in result.output and "get-credentials" in result.output
    assert TOKEN not in result.output


# ----------------------------------------------------------------------------- status


def test_status_shows_conditions_and_per_slice_pod_phases(fake, tmp_path):
    submit(tmp_path)
    result = run("status", "lm")
    lines = result.output.splitlines()
    assert "state:      Running" in lines and "object:     JobSet team-a/lm" in lines
    assert "processes:  8 (2 slices x 4 hosts)" in lines
    assert "SLICE  PODS  PENDING  RUNNING  SUCCEEDED  FAILED  UNKNOWN" in lines
    assert "0-1    4/4   0        4        0          0       0" in lines  # alike slices share a row

    pod = fake.pods("lm")[5]  # slice 1, host 1 waits for its image
    stored = fake.objects[("pods", NS, pod["metadata"]["name"])]
    stored["status"]["phase"] = "Pending"
    stored["status"]["containerStatuses"][0]["state"] = {
        "waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}
    }
    result = run("status", "lm", "--workers")
    lines = result.output.splitlines()
    assert "state:      Pending" in lines
    assert [line.split() for line in lines if line[:1].isdigit() and "/4" in line] == [
        ["0", "4/4", "0", "4", "0", "0", "0"],
        ["1", "4/4", "1", "3", "0", "0", "0"],
    ]
    (row,) = [line for line in lines if line.startswith("5 ")]  # the --workers row of process 5
    assert row.split()[:5] == ["5", "1", "1", pod["metadata"]["name"], "Pending"]
    assert "ImagePullBackOff: Back-off pulling image" in row

    as_json = json.loads(run("status", "lm", "--json").output)
    assert (as_json["state"], as_json["processes"], as_json["slices"], as_json["hosts_per_slice"]) == (
        "Pending",
        8,
        2,
        4,
    )
    assert len(as_json["workers"]) == 8 and as_json["kind"] == "JobSet"


def test_status_after_a_preemption_shows_the_free_restart(fake, tmp_path):
    """The JobSet controller restarts the gang in place on a preemption (the rendered rule
    ``preemption``, RestartJobSetAndIgnoreMaxRestarts): the JobSet goes on, Running again,
    with one free restart and its RestartingJobSet condition (until it was a scripted
    Failed, which a real controller never makes of this manifest)."""
    fake.plan("lm", "preempt", after=1)
    submit(tmp_path)
    result = run("status", "lm")
    lines = result.output.splitlines()
    assert "state:      Running" in lines and "restarts:   1" in lines
    assert "1 restarts, 0 counted toward max_restarts=3, 1 free (preemption or eviction)" in result.output
    assert any(line.split()[:3] == ["RestartingJobSet", "True", "FailurePolicy_preemption"] for line in lines)


def test_status_of_a_preempted_job_shows_its_condition(fake, tmp_path, monkeypatch):
    """Preempted is a JobSet that a preemption ended: one whose preemption rule counts
    (``count_preemptions``) ran out of ``maxRestarts`` (ReachedMaxRestarts)."""
    count_preemptions(monkeypatch)
    fake.plan("lm", "preempt", after=1)
    submit(tmp_path)
    result = run("status", "lm")
    lines = result.output.splitlines()
    assert "state:      Preempted" in lines and "exit code:  42" in lines and "restarts:   3" in lines
    assert any(line.split()[:3] == ["Failed", "True", "ReachedMaxRestarts"] for line in lines)
    assert "CONDITION  STATUS  REASON" in result.output
    assert "roxxel-launch resume lm" in result.output


def test_status_and_list_of_unknown_jobs(fake):
    assert "no job 'nope' (JobSet or Job) in namespace team-a" in run("status", "nope", code=1).output
    assert run("list").output.splitlines() == ["NAME  STATE  PROCESSES  RESTARTS  EXIT  CREATED"]


# ----------------------------------------------------------------------------- logs


def test_logs_of_a_rank(fake, tmp_path):
    submit(tmp_path)
    pods = {
        int(p["metadata"]["labels"][K.JOB_INDEX_LABEL]) * 4 + int(p["metadata"]["labels"][K.COMPLETION_INDEX_KEY]): p[
            "metadata"
        ]["name"]
        for p in fake.pods("lm")
    }
    fake.log(pods[5], "process 5: step 1", "process 5: step 2")
    fake.log(pods[0], "process 0: hello")
    assert run("logs", "lm", "--rank", "5").output == "process 5: step 1\nprocess 5: step 2\n"
    assert run("logs", "lm", "-p", "5").output == run("logs", "lm", "--process", "5").output
    assert run("logs", "lm").output == "process 0: hello\n"
    (log, *_) = fake.calls("GET", "log")
    assert log.query == {"container": "worker", "follow": "false"}
    assert "has processes 0..7; there is no process 8" in run("logs", "lm", "--rank", "8", code=1).output


def test_logs_follow_streams_until_the_pod_ends(fake, tmp_path):
    submit(tmp_path, INDEXED)
    pod = fake.pods("lm")[0]["metadata"]["name"]
    fake.log(pod, "first")
    with K.KubernetesBackend(poll_seconds=0.05) as backend:
        lines = backend.logs("lm", process=0, follow=True)
        assert next(lines) == "first"
        fake.log(pod, "second", "third")  # written while the stream is open
        assert next(lines) == "second" and next(lines) == "third"
        with fake._lock:  # the job ends (its pods' streams with it): so does the follow
            fake._apply(("jobs", NS, "lm"), "succeed")
        assert list(lines) == []
    assert fake.calls("GET", "log")[0].query["follow"] == "true"
    # Through the CLI, on a pod that has ended: what there is, then the command returns.
    fake.log(pod, "fourth")
    assert run("logs", "lm", "-f").output == "first\nsecond\nthird\nfourth\n"


# ----------------------------------------------------------------------------- delete


def test_delete_uses_foreground_propagation(fake, tmp_path):
    submit(tmp_path, INDEXED)
    lines = run("delete", "lm").output.splitlines()
    assert lines[0] == "deleted lm" and "so `resume` cannot continue it" in lines[1] and len(lines) == 2
    assert [(r.resource, r.query) for r in fake.calls("DELETE")] == [
        ("jobs", {"propagationPolicy": "Foreground"}),
        ("services", {"propagationPolicy": "Foreground"}),
        ("networkpolicies", {"propagationPolicy": "Foreground"}),
    ]
    assert fake.objects == {}  # the Job, its pods, the Service and the NetworkPolicy
    assert "no job 'lm'" in run("delete", "lm", code=1).output


def test_a_succeeded_job_is_not_offered_to_resume(fake, tmp_path):
    """Issue 51: `suspend` of a finished job said to resume it, then `resume` said there was
    nothing to resume; `delete` of a succeeded job warned that `resume` could not continue it."""
    submit(tmp_path, INDEXED)
    with fake._lock:
        fake._apply(("jobs", NS, "lm"), "succeed")
    suspended = run("suspend", "lm", code=1).output
    assert "has ended (Succeeded); there is nothing to suspend or resume" in suspended, suspended
    assert "roxxel-launch resume" not in suspended
    assert "already succeeded; nothing to resume" in run("resume", "lm", "--until-done").output
    assert run("delete", "lm").output.splitlines() == ["deleted lm"]


# ----------------------------------------------------------------------------- wait


@pytest.mark.parametrize("data", [SPEC, INDEXED], ids=["jobset", "indexed-job"])
@pytest.mark.parametrize(
    "outcome, code, fragment",
    [
        ("succeed", 0, "job lm succeeded"),
        ("fail", EXIT_FAILED, "job lm failed (worker exit code 1; exit 125)"),
        ("preempt", EXIT_PREEMPTED, "job lm preempted (exit 42)"),
    ],
)
def test_wait_exit_codes(fake, tmp_path, monkeypatch, data, outcome, code, fragment):
    """A JobSet ends preempted only when its preemption rule counts (``count_preemptions``):
    the rendered rule restarts it in place (tests/launcher/kubernetes/test_k8s_preemption.py)."""
    if outcome == "preempt" and data is SPEC:
        count_preemptions(monkeypatch)
    fake.plan("lm", outcome)
    submit(tmp_path, data)
    result = run("wait", "lm", "--poll", POLL, code=code)
    assert fragment in result.stderr
    if outcome == "fail":
        assert "ValueError: the loss is NaN" in result.stderr  # the error, not a pointer to it
    if outcome == "preempt":
        assert "roxxel-launch resume lm" in result.stderr


def test_wait_times_out_with_124_and_leaves_the_job_running(fake, tmp_path):
    submit(tmp_path)
    result = run("wait", "lm", "--poll", POLL, "--timeout", "0.3", code=EXIT_TIMED_OUT)
    assert "timed out after 0.3 s waiting for job lm: still Running" in result.stderr
    assert fake.calls("DELETE") == [] and len(fake.calls("GET", "jobsets")) >= 2


def test_wait_keeps_roxxels_preemption_code():
    from roxxel import exit_codes

    assert EXIT_PREEMPTED == exit_codes.PREEMPTED_EXIT_CODE
    assert len({0, EXIT_PREEMPTED, EXIT_TIMED_OUT, EXIT_FAILED, 1, 2}) == 6


def test_wait_for_an_unknown_job_is_an_error(fake):
    assert "no job 'lm'" in run("wait", "lm", "--poll", POLL, code=1).output


@pytest.mark.slow
def test_wait_exit_code_of_a_real_process(fake, tmp_path, monkeypatch):
    """The status a shell sees, from a separate `python -m roxxel_launch.cli` process (a
    JobSet whose preemption rule counts: ``count_preemptions``)."""
    count_preemptions(monkeypatch)
    fake.plan("lm", "preempt")
    submit(tmp_path)
    out = subprocess.run(
        [sys.executable, "-m", "roxxel_launch.cli", "wait", "lm", "--poll", POLL],
        capture_output=True,
        text=True,
        timeout=50,
    )
    assert out.returncode == EXIT_PREEMPTED, out.stderr
    assert "preempted" in out.stderr


# ----------------------------------------------------------------------------- resume


def test_resume_after_a_simulated_preemption(fake, tmp_path, monkeypatch):
    """Preempted (DisruptionTarget, every worker exited 42; under a preemption rule that
    counts, ``count_preemptions``, since the rendered one restarts the JobSet in place and
    never ends it): resume deletes and re-creates the JobSet from its stored spec, same run
    name and checkpoint_dir."""
    count_preemptions(monkeypatch)  # a JobSet ends preempted only so: see count_preemptions
    fake.plan("lm", "preempt", "succeed")
    submit(tmp_path)
    first = fake.get("jobsets", "lm")
    run("wait", "lm", "--poll", POLL, code=EXIT_PREEMPTED)
    before = len(fake.requests)
    result = run("resume", "lm", "--poll", POLL)
    assert "resumed lm: state Pending" in result.output
    calls = [(r.method, r.resource, r.dry_run) for r in fake.requests[before:]]
    delete = calls.index(("DELETE", "jobsets", False))
    assert fake.requests[before + delete].query == {"propagationPolicy": "Foreground"}
    # The checks before deleting anything: the JobSet CRD (does it serve every field the JobSet
    # uses?) and the fit check (can a node hold a worker?); a refusal leaves the job as it was.
    checks = [
        r.path
        for r in fake.requests[before : before + delete]
        if r.path
        in ("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/jobsets.jobset.x-k8s.io", "/api/v1/nodes")
    ]
    assert checks == [
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/jobsets.jobset.x-k8s.io",
        "/api/v1/nodes",
    ]
    assert calls[delete + 1 :] == [
        ("DELETE", "networkpolicies", False),
        ("GET", "jobsets", False),
        ("GET", "networkpolicies", False),  # both gone (404) before re-creating
        ("POST", "networkpolicies", True),
        ("POST", "jobsets", True),
        ("POST", "networkpolicies", False),
        ("POST", "jobsets", False),
    ]
    second = fake.get("jobsets", "lm")
    assert second["metadata"]["uid"] != first["metadata"]["uid"] and "status" not in second
    for key in ("labels", "annotations"):
        assert second["metadata"][key] == first["metadata"][key]  # run name, stored spec
    assert second["spec"] == first["spec"]  # ROXXEL_RUN_NAME, ROXXEL_CHECKPOINT_DIR, everything
    env = {
        e["name"]: e.get("value")
        for e in second["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert (env["ROXXEL_RUN_NAME"], env["ROXXEL_CHECKPOINT_DIR"]) == ("lm-run-1", "gs://ckpt/lm")
    assert fake.submissions("lm") == 2
    run("wait", "lm", "--poll", POLL)  # the second submission completes


def test_resume_refuses_a_running_job(fake, tmp_path):
    submit(tmp_path)
    result = run("resume", "lm", code=1)
    assert "lm is Running" in result.output and "roxxel-launch wait lm" in result.output
    assert fake.calls("DELETE") == []


def test_resume_until_done_through_preemptions_and_an_eviction(fake, tmp_path, monkeypatch):
    """A Kueue eviction is left to Kueue: the fake's Kueue re-admits the same JobSet (not
    re-created, so it keeps its place in the queue), then the next outcome applies to it.
    The eviction counts against --max-resumes between the two re-submissions."""
    count_preemptions(monkeypatch)  # a JobSet ends preempted only so: see count_preemptions
    fake.plan("lm", "preempt", "evict", "preempt", "succeed")
    submit(tmp_path, queue="team-a-queue")
    result = run("resume", "lm", "--until-done", "--poll", POLL)
    assert fake.submissions("lm") == 3
    err = result.stderr
    assert "lm is Running" in err  # watched first: it was running when the command started
    assert "resuming lm (Preempted" in err and "resuming lm (Suspended" not in err
    assert "lm is Suspended" in err and fake._real.readmissions == 1
    assert "resume 1 of at most 20" in err
    assert (
        "Kueue evicted lm (queue team-a-queue) and re-admits it as a new attempt; counted as resume 2 of at most 20"
        in err
    )
    assert "resume 3 of at most 20" in err and "resume 4" not in err
    assert "job lm succeeded" in err
    assert [r.resource for r in fake.calls("DELETE")] == ["jobsets", "networkpolicies"] * 2


def test_resume_until_done_gives_up_when_kueue_evictions_use_up_max_resumes(fake, tmp_path):
    """Kueue evicts the job a third time with --max-resumes 2: the wait ends with one line
    that says so and what still happens (Kueue re-admits it), exit 42; nothing is re-created."""
    fake.plan("lm", "evict", "evict", "evict", "succeed")  # (succeeds if the third were missed)
    submit(tmp_path, queue="team-a-queue")
    result = run("resume", "lm", "--until-done", "--max-resumes", "2", "--poll", POLL, code=EXIT_PREEMPTED)
    err = result.stderr
    assert "counted as resume 1 of at most 2" in err and "counted as resume 2 of at most 2" in err
    (line,) = [x for x in err.splitlines() if "giving up" in x]
    assert line == (
        "roxxel-launch: giving up on lm: evicted by Kueue again after 2 resumes (--max-resumes 2); Kueue "
        "still re-admits it from queue team-a-queue: follow it with `roxxel-launch wait lm`, or stop it with "
        "`roxxel-launch delete lm`"
    )
    assert "job lm evicted (Suspended; exit 42)" in err
    (evictions,) = fake._real.evictions.values()  # of the one JobSet, never re-created
    assert len(evictions) == 3 and fake.submissions("lm") == 1 and fake.calls("DELETE") == []


def test_resume_until_done_counts_preemptions_and_evictions_in_one_budget(fake, tmp_path, monkeypatch):
    """A re-submission after a preemption and a Kueue eviction are one resume each: with
    --max-resumes 2 the second preemption, after one of each, is the one too many."""
    count_preemptions(monkeypatch)  # a JobSet ends preempted only so: see count_preemptions
    fake.plan("lm", "preempt", "evict", "preempt")
    submit(tmp_path, queue="team-a-queue")
    result = run("resume", "lm", "--until-done", "--max-resumes", "2", "--poll", POLL, code=EXIT_PREEMPTED)
    err = result.stderr
    assert "resume 1 of at most 2" in err and "counted as resume 2 of at most 2" in err
    assert "giving up on lm: Preempted again after 2 resumes (--max-resumes 2)" in err
    assert fake.submissions("lm") == 2


def test_resume_until_done_of_an_indexed_job(fake, tmp_path):
    fake.plan("lm", "preempt", "succeed")
    submit(tmp_path, INDEXED)
    run("wait", "lm", "--poll", POLL, code=EXIT_PREEMPTED)
    run("resume", "lm", "--until-done", "--poll", POLL)
    assert fake.submissions("lm") == 2
    assert [r.resource for r in fake.calls("DELETE")] == ["jobs", "services", "networkpolicies"]
    assert fake.get("services", "lm") is not None  # re-created with the Job


def test_resume_until_done_gives_up_after_max_resumes(fake, tmp_path, monkeypatch):
    count_preemptions(monkeypatch)  # a JobSet ends preempted only so: see count_preemptions
    fake.plan("lm", "preempt", "preempt", "preempt", "preempt")
    submit(tmp_path)
    result = run("resume", "lm", "--until-done", "--max-resumes", "2", "--poll", POLL, code=EXIT_PREEMPTED)
    assert "giving up on lm: Preempted again after 2 resumes (--max-resumes 2)" in result.stderr
    assert fake.submissions("lm") == 3


def test_resume_until_done_does_not_retry_a_real_failure(fake, tmp_path, monkeypatch):
    count_preemptions(monkeypatch)  # a JobSet ends preempted only so: see count_preemptions
    fake.plan("lm", "preempt", "fail")
    submit(tmp_path)
    result = run("resume", "lm", "--until-done", "--poll", POLL, code=EXIT_FAILED)
    assert "not resuming lm again: it failed" in result.stderr
    assert "ValueError: the loss is NaN" in result.stderr
    assert fake.submissions("lm") == 2


def test_resume_until_done_of_a_job_that_succeeded(fake, tmp_path):
    fake.plan("lm", "succeed", after=1)
    submit(tmp_path)
    result = run("resume", "lm", "--until-done", "--poll", POLL)
    assert "already succeeded; nothing to resume" in result.stderr
    assert fake.submissions("lm") == 1 and fake.calls("DELETE") == []


def test_resume_until_done_options(fake):
    assert "--detach applies to --local runs only" in run("resume", "lm", "--until-done", "--detach", code=2).output
    result = run("resume", "lm", "--local", "--until-done", "--detach", code=2)
    assert "cannot be combined with --detach" in result.output


# ----------------------------------------------------------------------------- the same with --local

PREEMPTED_TWICE = textwrap.dedent("""\
    import os, pathlib, sys
    runs = pathlib.Path(os.environ["ROXXEL_CHECKPOINT_DIR"]) / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    n = len(list(runs.iterdir()))
    (runs / str(n)).write_text("")
    print(f"run {n}", flush=True)
    sys.exit(42 if n < 2 else 0)  # 42: preempted after a checkpoint (roxxel.exit_codes)
""")


def test_local_resume_until_done(tmp_path, monkeypatch):
    root = tmp_path / "runs"
    monkeypatch.setenv("ROXXEL_LOCAL_ROOT", str(root))
    program = tmp_path / "program.py"
    program.write_text(PREEMPTED_TWICE)
    spec = spec_file(
        tmp_path,
        {
            **SPEC,
            "name": "spot",
            "accelerator": "cpu",
            "num_slices": 1,
            "command": [sys.executable, str(program)],
            "checkpoint_dir": str(tmp_path / "ckpt"),
            "max_restarts": 0,
            # An Indexed Job ends Preempted on 42 (a JobSet restarts in place).
            "workload": "indexed-job",
        },
    )
    monkeypatch.chdir(tmp_path)
    run("submit", spec, "--local", code=EXIT_PREEMPTED)
    result = run("resume", "spot", "--local", "--until-done")
    assert "resume 2 of at most 20" in result.stderr and "resume 3" not in result.stderr
    assert "job spot succeeded" in result.stderr
    assert sorted(p.name for p in (tmp_path / "ckpt" / "runs").iterdir()) == ["0", "1", "2"]
    status = json.loads(run("status", "spot", "--local", "--json").output)
    assert (status["state"], status["exit_code"]) == (JobState.SUCCEEDED.value, 0)
