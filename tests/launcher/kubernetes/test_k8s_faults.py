"""The Kubernetes verbs that run for days, through the faults of a real cluster, in seconds.

No Kubernetes API server runs here. ``tests/support/k8s_fake_server.py`` is a test double
(real HTTP through the official client) that injects what an hour of a busy cluster brings:
429 storms with ``Retry-After``, 500s, connections dropped with no answer, watches that
expire (410) or break mid-stream, gang restarts. Backoff delays are simulated
(``support.fake_clock``: the policy's sleeps advance a clock instead of sleeping), so an
hour of retries takes no wall time, while the retry deadlines are checked against the time
that would have passed. Connections go to loopback only.
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.error
import urllib.request

import pytest
import yaml
from click.testing import CliRunner

from roxxel_launch import spec as S
from roxxel_launch.backends.kubernetes import backend as K
from roxxel_launch.backends.base import BackendError, JobState
from roxxel_launch.cli import EXIT_SUCCEEDED, cli

from support.fake_clock import FakeClock, fast_retry
from support.k8s_fake_server import TOKEN, FakeKubernetes, count_preemptions, use_cluster
from support.specs import spec_dict

pytestmark = pytest.mark.timeout(60)

NS = "team-a"
SPEC = spec_dict(
    namespace=NS,
    accelerator={"cpu": {"hosts": 2}},
    num_slices=2,
    checkpoint_dir="gs://ckpt/lm",
    run_name="lm-run-1",
    service_account="trainer",
)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def fake(tmp_path, monkeypatch, clock):
    with FakeKubernetes(namespace=NS) as server:
        yield use_cluster(server, tmp_path, monkeypatch, fast_retry(clock))


def backend() -> K.KubernetesBackend:
    return K.KubernetesBackend(poll_seconds=0.05, delete_timeout=10)


def retry_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "retry" in r.getMessage()]


def test_retry_honours_retry_after_and_backs_off_with_a_cap(clock):
    policy = fast_retry(clock, base=0.5, cap=8.0)
    assert [policy.delay(n) for n in (1, 2, 3, 4, 5, 6)] == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]
    assert policy.delay(1, retry_after=5) == 5.0  # Retry-After wins over a shorter backoff
    assert policy.delay(1, retry_after=600) == 8.0  # ... up to the cap
    jittered = fast_retry(clock, jitter=lambda: 0.0)
    assert jittered.delay(3) == 1.0  # full jitter draws in [delay/2, delay]


def test_an_hour_of_faults_wait_and_resume_until_done_end_right(fake, clock, tmp_path, caplog, monkeypatch):
    """The done-when of issue 17: 429 storms, 500s, resets, expired and broken watches and
    two gang restarts mid-stream, then a preemption and a resume: `wait` follows the job to
    its end and `resume --until-done` exits 0 once it succeeded. The preemption ends the
    JobSet because its rule counts here with ``max_restarts: 0`` (``count_preemptions``);
    the rendered rule would restart it in place (test_k8s_preemption.py)."""
    count_preemptions(monkeypatch)
    spec = S.spec_from_dict({**SPEC, "max_restarts": 0})
    fake.plan("lm", "preempt", "succeed", after=4)
    fake.plan_restarts("lm", 3, 3)
    with backend() as b:
        b.submit(spec)
    fake.storm("GET", "jobsets", 3, retry_after=7)
    fake.fail("GET", "pods", 500, times=2)
    fake.drop("GET", "jobsets")
    fake.expire_watches(1)
    fake.break_watches(1, after_events=1)
    seen = []
    with backend() as b, caplog.at_level(logging.WARNING):
        status = b.wait("lm", poll_seconds=0.05, on_change=seen.append)
    assert status.state is JobState.PREEMPTED and status.restarts == 2
    # Between them it may be seen Restarting: the pods changed before the JobSet's status
    # did (the controller's restart condition flips on its own reconcile), as on a cluster.
    states = [s.state for s in seen]
    assert states[0] is JobState.RUNNING and states[-1] is JobState.PREEMPTED
    assert set(states[1:-1]) <= {JobState.RESTARTING}
    assert fake._real.gang_restarts == 2 and fake._real.watches >= 3
    assert 7.0 in clock.slept  # Retry-After honoured (simulated seconds)
    lines = retry_lines(caplog)
    assert len(lines) == 3 + 2 + 1 and all("\n" not in line for line in lines)
    assert any("HTTP 429" in line for line in lines) and any("HTTP 500" in line for line in lines)
    assert any("RemoteDisconnected" in line or "ProtocolError" in line for line in lines)
    assert any("watch of lm broke" in r.getMessage() for r in caplog.records)
    # No GET+LIST every poll_seconds: the object was watched, pods listed on changes only.
    assert len(fake.calls("GET", "jobsets")) < 20

    fake.storm("POST", "jobsets", 2, retry_after=1)  # creates retry 429 too
    fake.fail("DELETE", "jobsets", 503, times=1)
    result = CliRunner().invoke(cli, ["resume", "lm", "--until-done", "--poll", "0.1"])
    assert result.exit_code == EXIT_SUCCEEDED, result.output
    assert "job lm succeeded" in result.stderr and "Traceback" not in result.output
    assert fake.submissions("lm") == 2


def test_a_black_holed_api_server_ends_within_the_deadline(fake, clock, monkeypatch):
    """Every attempt times out: the call gives up at the policy's deadline, in one line."""
    fake.drop("GET", "jobsets", times=1000)
    with K.KubernetesBackend(retry=fast_retry(clock, deadline=30.0)) as b:
        with pytest.raises(BackendError) as info:
            b.status("lm")
    message = str(info.value)
    assert "cannot reach the Kubernetes API server" in message and "\n" not in message
    assert "gave up after" in message and "retry deadline 30 s" in message
    assert sum(clock.slept) <= 30.0


def test_a_create_that_happened_before_its_answer_was_lost_is_not_an_error(fake, clock):
    """A 500 after the object was stored (etcd wrote it, the answer was lost): the retried
    create's 409 is resolved by reading the object back."""
    real = fake._create

    def create_then_fail(request):
        code, body = real(request)
        if not request.dry_run and request.resource == "jobsets" and code == 201:
            return 500, {"kind": "Status", "code": 500, "message": "etcdserver: leader changed"}
        return code, body

    fake._create = create_then_fail
    with K.KubernetesBackend(retry=fast_retry(clock)) as b:
        b.submit(S.spec_from_dict(SPEC))
    fake._create = real
    assert fake.submissions("lm") == 1 and fake.get("jobsets", "lm") is not None


def test_lists_page_through_every_item(fake, clock, monkeypatch):
    monkeypatch.setattr("roxxel_launch.backends.kubernetes.api.LIST_PAGE_SIZE", 2)
    with K.KubernetesBackend(retry=fast_retry(clock)) as b:
        for n in range(3):
            b.submit(S.spec_from_dict({**SPEC, "name": f"lm{n}"}))
        assert [s.name for s in b.list()] == ["lm0", "lm1", "lm2"]
        assert len(b.api.list("Pod", "")) == 12
    assert fake._real.pages >= 2 + 6  # 3 JobSets in 2 pages, 12 pods in 6


def spec_yaml(tmp_path, **changes) -> str:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({**SPEC, **changes}))
    return str(path)


# ----------------------------------------------------------------------------- before the first create


@pytest.mark.parametrize("field", ["restartStrategy", "rules"])
def test_an_older_jobset_crd_is_refused_before_anything_is_created(fake, clock, field):
    """An older JobSet would drop failurePolicy.{rules,restartStrategy} silently."""
    fake.serve_jobset_crd(without=(field,))
    with K.KubernetesBackend(retry=fast_retry(clock)) as b:
        with pytest.raises(BackendError) as info:
            b.submit(S.spec_from_dict(SPEC))
    message = str(info.value)
    assert f"spec.failurePolicy.{field}" in message and "Upgrade JobSet" in message
    assert fake.calls("POST") == []
    # The hint names a release whose CRD has every rendered field (before: v0.8.0, which lacks
    # onJobFailureMessagePatterns, so following it led to the next refusal).
    assert "install JobSet v0.10.0 or newer" in message and "download/v0.12.0/manifests.yaml" in message


def sent_jobset(fake) -> dict:
    """The JobSet body of the (dry-run) creates the launcher sent."""
    return [c.body for c in fake.calls("POST", "jobsets")][-1]


@pytest.mark.parametrize("release", ["v0.8.0", "v0.9.1"])
def test_a_jobset_older_than_v0_10_gets_the_reduced_failure_policy(fake, clock, release, caplog):
    """JobSet v0.8.0 and v0.9.1 serve no ``onJobFailureMessagePatterns`` (their own CRDs,
    tests/fixtures/k8s): the JobSet is created without the configError rule and with the
    Job's exit-78 rule Count, and one warning says what that costs. Before, every submit to
    these clusters was refused."""
    fake.serve_jobset_crd(release=release)
    with caplog.at_level(logging.WARNING), K.KubernetesBackend(retry=fast_retry(clock)) as b:
        b.submit(S.spec_from_dict(SPEC))
    jobset = fake.get("jobsets", "lm")
    assert jobset is not None
    rules = jobset["spec"]["failurePolicy"]["rules"]
    assert [r["name"] for r in rules] == ["preemption"]
    pod_rules = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["podFailurePolicy"]["rules"]
    assert [r["action"] for r in pod_rules] == ["Count", "FailJob", "FailJob"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("older than v0.10.0" in w and "counts as a restart" in w for w in warnings), warnings


@pytest.mark.parametrize("release", ["v0.10.0", None])
def test_jobset_v0_10_and_newer_get_the_full_failure_policy(fake, clock, release):
    fake.serve_jobset_crd(release=release)
    with K.KubernetesBackend(retry=fast_retry(clock)) as b:
        b.submit(S.spec_from_dict(SPEC))
    rules = fake.get("jobsets", "lm")["spec"]["failurePolicy"]["rules"]
    assert [r["name"] for r in rules] == ["configError", "preemption"]
    assert rules[0]["onJobFailureMessagePatterns"]


def test_an_older_jobset_unread_gets_the_reduced_policy_after_strict_validation_refuses(fake, clock, caplog):
    """Without permission to read CRDs, the server's strict refusal of
    ``onJobFailureMessagePatterns`` alone leads to the same reduced JobSet."""
    fake.serve_jobset_crd(release="v0.9.1")
    fake.set_role([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}])  # no ClusterRole
    with caplog.at_level(logging.WARNING), K.KubernetesBackend(retry=fast_retry(clock)) as b:
        b.submit(S.spec_from_dict(SPEC))
    assert [r["name"] for r in fake.get("jobsets", "lm")["spec"]["failurePolicy"]["rules"]] == ["preemption"]
    assert any("older than v0.10.0" in r.getMessage() for r in caplog.records)


def test_strict_field_validation_catches_what_the_crd_check_cannot_read(fake, clock):
    """Without permission to read CRDs, the server's strict field validation refuses."""
    fake.serve_jobset_crd(without=("restartStrategy",))
    fake.set_role([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}])  # no ClusterRole
    with K.KubernetesBackend(retry=fast_retry(clock)) as b:
        with pytest.raises(
            BackendError,
            match=r"failurePolicy.restartStrategy: field not "
            r"declared in schema",
        ):
            b.submit(S.spec_from_dict(SPEC))
    assert fake.get("jobsets", "lm") is None


def test_a_missing_local_queue_is_refused(fake, clock):
    fake.kueue("other-queue")
    with K.KubernetesBackend(retry=fast_retry(clock)) as b:
        with pytest.raises(
            BackendError,
            match=r"no LocalQueue 'team-a-queue' in namespace "
            r"team-a.*kubectl get localqueues -n team-a",
        ):
            b.submit(S.spec_from_dict({**SPEC, "queue": "team-a-queue"}))
    fake.kueue()
    fake._real.local_queues = None  # no Kueue at all
    with K.KubernetesBackend(retry=fast_retry(clock)) as b:
        with pytest.raises(BackendError, match=r"Kueue is not installed"):
            b.submit(S.spec_from_dict({**SPEC, "queue": "team-a-queue"}))
    assert fake.calls("POST") == []


@pytest.mark.parametrize("kueue", [True, False])
def test_a_missing_pod_priority_class_is_refused_before_anything_is_created(fake, clock, kueue):
    """Kueue takes a workload's priority from the pods' PriorityClass when there is no
    WorkloadPriorityClass, and creates no Workload (nor an event) when it is missing; without
    Kueue the pods are refused by the Priority admission plugin. Before, the job was created
    and stayed suspended (status: "waiting for Kueue to admit it") or had FailedCreate only."""
    changes: dict = {"priority_class": "training"}
    if kueue:
        fake.kueue("team-a-queue")
        changes["queue"] = "team-a-queue"
    with K.KubernetesBackend(retry=fast_retry(clock)) as b:
        with pytest.raises(BackendError) as info:
            b.submit(S.spec_from_dict({**SPEC, **changes}))
    message = str(info.value)
    assert "\n" not in message and "no PriorityClass 'training'" in message
    assert "kubectl create priorityclass training" in message
    assert ("Kueue would create no Workload" in message) is kueue
    assert fake.calls("POST") == []
    fake.add_priority_class("training")
    with K.KubernetesBackend(retry=fast_retry(clock)) as b:
        b.submit(S.spec_from_dict({**SPEC, **changes}))
    assert fake.get("jobsets", "lm") is not None


TPU = {"tpu": {"type": "v5p", "topology": "2x2x4"}}


@pytest.mark.parametrize(
    "setup, changes, said, fix",
    [
        (
            lambda f: f.set_service_accounts("other"),
            {},
            'serviceaccount "trainer" not found',
            "kubectl create serviceaccount trainer -n team-a",
        ),
        (
            lambda f: f.enforce_pod_security("restricted"),
            {"accelerator": TPU, "security": {"profile": "privileged"}},
            'violates PodSecurity "restricted:latest"',
            "pod-security.kubernetes.io/enforce",
        ),
        (
            lambda f: f.autopilot(),
            {"accelerator": TPU, "host_network": True},
            "[denied by autogke-disallow-hostnamespaces]",
            "puts the pods on the host network: set host_network: false",
        ),
        (
            lambda f: f.autopilot(),
            {"security": {"profile": "privileged"}},
            "not allowed to be privileged in Autopilot",
            "security.profile: privileged makes the worker container privileged: set security.profile: baseline",
        ),
    ],
    ids=["service-account", "restricted-tpu", "autopilot-host-network", "autopilot-privileged"],
)
def test_pod_admission_refuses_before_anything_is_created(fake, clock, setup, changes, said, fix):
    """A server-side dry run of one worker pod meets the admission the Job controller's creates
    would meet; before, the job was created and its pods failed with FailedCreate events only."""
    setup(fake)
    with K.KubernetesBackend(retry=fast_retry(clock)) as b:
        with pytest.raises(BackendError) as info:
            b.submit(S.spec_from_dict({**SPEC, **changes}))
    message = str(info.value)
    assert "\n" not in message and said in message and fix in message and "Nothing was created" in message
    assert [c for c in fake.calls("POST") if not c.dry_run] == [] and fake.get("jobsets", "lm") is None
    assert [c.resource for c in fake.calls("POST")] == ["pods"]  # the pod before any other dry run


def test_pod_admission_unchecked_without_permission_says_so(fake, clock, caplog):
    role = [{"apiGroups": ["*"], "resources": ["jobsets", "services", "networkpolicies", "jobs"], "verbs": ["*"]}]
    fake.set_role(role, [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}])
    with caplog.at_level(logging.WARNING), K.KubernetesBackend(retry=fast_retry(clock)) as b:
        b.submit(S.spec_from_dict(SPEC))
    assert fake.get("jobsets", "lm") is not None
    (line,) = [r.getMessage() for r in caplog.records if "pod admission was not checked" in r.getMessage()]
    assert "FailedCreate" in line


def test_the_indexed_jobs_service_is_owned_by_its_job(fake, clock):
    """`kubectl delete job` (the garbage collector) removes the headless Service too."""
    with K.KubernetesBackend(retry=fast_retry(clock)) as b:
        b.submit(S.spec_from_dict({**SPEC, "num_slices": 1, "workload": "indexed-job"}))
    job, service = fake.get("jobs", "lm"), fake.get("services", "lm")
    (owner,) = service["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Job", "lm", job["metadata"]["uid"])
    with fake._lock:  # kubectl delete job lm
        fake._remove(("jobs", NS, "lm"))
    fake.calls()  # any request lets the garbage collector run
    with K.KubernetesBackend(retry=fast_retry(clock)) as b:
        b.list()
    assert fake.get("services", "lm") is None


# ----------------------------------------------------------------------------- logs -f


def _rank0_pod(fake, attempt: int) -> str:
    (pod,) = [
        p["metadata"]["name"]
        for p in fake.pods("lm")
        if p["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] == str(attempt)
        and p["metadata"]["labels"]["jobset.sigs.k8s.io/job-index"] == "0"
        and p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == "0"
    ]
    return pod


def test_logs_follow_the_job_across_a_gang_restart(fake, clock):
    """`logs -f` re-attaches to the new attempt's pod, marks the attempt, and ends with the
    job; a 429 storm on the log requests is retried."""
    with K.KubernetesBackend(retry=fast_retry(clock), poll_seconds=0.05) as b:
        b.submit(S.spec_from_dict(SPEC))
        fake.log(_rank0_pod(fake, 0), "step 1", "step 2")
        fake.storm("GET", "log", 2)
        seen = []
        for line in b.logs("lm", process=0, follow=True):
            seen.append(line)
            if line == "step 2":
                fake.restart("lm")  # a preemption: the gang restarts in place
                fake.log(_rank0_pod(fake, 1), "restored step 2", "step 3")
            if line == "step 3":
                with fake._lock:
                    fake._apply(("jobsets", NS, "lm"), "succeed")
    assert seen == ["step 1", "step 2", "── attempt 2 (restart 1) ──", "restored step 2", "step 3"]


def test_logs_previous_prints_the_container_before_a_restart(fake, clock):
    """`logs --previous` reads ``previous=true``: the lines of the container the kubelet
    restarted in place (its ``lastState.terminated``), not the running one's
    (https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/pod-v1/#get-read-log-of-the-specified-pod).
    Before any restart the kubelet's 400 is shown with why: the launcher's workers run with
    ``restartPolicy: Never`` (the Job's podFailurePolicy requires it), so on a cluster a
    failed worker comes back as a new pod of the next attempt (not "fix the job spec", as
    any other 400 reads)."""
    with K.KubernetesBackend(retry=fast_retry(clock)) as b:
        b.submit(S.spec_from_dict(SPEC))
    pod = _rank0_pod(fake, 0)
    fake.log(pod, "step 1", "step 2: loss is NaN")
    refused = CliRunner().invoke(cli, ["logs", "lm", "--previous"])
    assert refused.exit_code == 1, refused.output
    assert f'previous terminated container "worker" in pod "{pod}" not found' in refused.output
    assert "process 0 of lm has no previous container" in refused.output
    assert "restartPolicy: Never" in refused.output and "job spec" not in refused.output
    fake.restart_container(pod, code=1)
    fake.log(pod, "restored step 1")
    previous = CliRunner().invoke(cli, ["logs", "lm", "--previous"])
    assert (previous.exit_code, previous.output) == (0, "step 1\nstep 2: loss is NaN\n")
    current = CliRunner().invoke(cli, ["logs", "lm"])
    assert (current.exit_code, current.output) == (0, "restored step 1\n")
    assert [r.query.get("previous") for r in fake.calls("GET", "log")] == ["true", "true", None]


def test_logs_of_every_rank_are_prefixed_and_since_is_passed_on(fake, clock):
    with K.KubernetesBackend(retry=fast_retry(clock)) as b:
        b.submit(S.spec_from_dict(SPEC))
        for pod in fake.pods("lm"):
            labels = pod["metadata"]["labels"]
            rank = int(labels["jobset.sigs.k8s.io/job-index"]) * 2 + int(
                labels["batch.kubernetes.io/job-completion-index"]
            )
            fake.log(pod["metadata"]["name"], f"hello from {rank}")
        result = CliRunner().invoke(cli, ["logs", "lm", "--all", "--since", "1h30m"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [f"[rank {r}] hello from {r}" for r in range(4)]
    # The same instant for every pod (5400 s before the command started).
    assert all(5400 <= int(r.query["sinceSeconds"]) < 5410 for r in fake.calls("GET", "log"))
    bad = CliRunner().invoke(cli, ["logs", "lm", "--since", "soon"])
    assert bad.exit_code == 2 and "not a duration" in bad.output


# ----------------------------------------------------------------------------- Kueue


def test_status_reports_the_queue_state_from_kueues_workload(fake, clock):
    fake.kueue("team-a-queue")
    with K.KubernetesBackend(retry=fast_retry(clock)) as b:
        b.submit(S.spec_from_dict({**SPEC, "queue": "team-a-queue"}))
        assert "queue team-a-queue: admitted" in b.details("lm").status.message
        with fake._lock:
            fake._apply(("jobsets", NS, "lm"), "evict")
        details = b.details("lm")
    assert details.status.state is JobState.SUSPENDED
    assert (
        "queue team-a-queue: evicted (Preempted: Preempted to accommodate a workload" in details.status.message
        and "Kueue requeues it" in details.status.message
    )


def test_a_server_that_never_answers_ends_status_within_its_timeout(tmp_path, monkeypatch, clock):
    """A real socket that accepts connections and never answers (a black hole behind a
    load balancer): each attempt ends at the read timeout, the call at its deadline."""
    import socket
    import time

    sink = socket.socket()
    sink.bind(("127.0.0.1", 0))
    sink.listen(64)  # the kernel completes the handshakes; nobody ever reads or answers
    try:
        host, port = sink.getsockname()
        config = tmp_path / "kubeconfig"
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "hole",
                    "clusters": [{"name": "hole", "cluster": {"server": f"http://{host}:{port}"}}],
                    "users": [{"name": "u", "user": {"token": "t"}}],
                    "contexts": [{"name": "hole", "context": {"cluster": "hole", "user": "u", "namespace": NS}}],
                }
            )
        )
        monkeypatch.setenv("KUBECONFIG", str(config))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        policy = fast_retry(clock, connect_timeout=0.2, read_timeout=0.2, deadline=20.0)
        started = time.monotonic()
        with K.KubernetesBackend(retry=policy) as b:
            with pytest.raises(BackendError) as info:
                b.status("lm")
        took = time.monotonic() - started
    finally:
        sink.close()
    message = str(info.value)
    assert "ReadTimeoutError" in message and "gave up after" in message and "\n" not in message
    attempts = len(clock.slept) + 1
    assert took < attempts * 0.2 + 5  # read timeouts only: nothing hangs


def _watch_events(fake: FakeKubernetes, query: str) -> tuple[int, list[dict]]:
    """The events of a raw watch request (as kubectl sends it), read to its end."""
    url = f"{fake.url}/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NS}/jobsets?watch=true&{query}"
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, [json.loads(line) for line in answer.read().splitlines()]
    except urllib.error.HTTPError as err:
        return err.code, [json.loads(err.read())]


def test_one_watch_serves_kubectl_and_the_launcher(fake):
    """The fake's one watch, as the API server's
    (https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes):
    without a resourceVersion every object comes first as ADDED; from one, only what changed
    after it; an object that goes is DELETED with its last state; a field selector on a field
    the kind does not support is 400 BadRequest."""
    for name in ("a", "b"):
        fake.put(
            "jobsets",
            {
                "apiVersion": "jobset.x-k8s.io/v1alpha2",
                "kind": "JobSet",
                "metadata": {"name": name, "labels": {"app": name}},
                "spec": {},
            },
        )
    code, events = _watch_events(fake, "timeoutSeconds=1")
    assert code == 200
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "a"), ("ADDED", "b")]
    version = events[0]["object"]["metadata"]["resourceVersion"]
    timer = threading.Timer(0.3, lambda: fake.settle("jobsets", "a", "evict"))
    timer.start()
    code, events = _watch_events(fake, f"fieldSelector=metadata.name%3Da&resourceVersion={version}&timeoutSeconds=1")
    timer.join()
    assert [(e["type"], e["object"]["spec"].get("suspend")) for e in events] == [("MODIFIED", True)]

    def remove_b() -> None:
        with fake._lock:
            fake._remove(("jobsets", NS, "b"))

    timer = threading.Timer(0.3, remove_b)
    timer.start()
    version = events[0]["object"]["metadata"]["resourceVersion"]
    code, events = _watch_events(fake, f"resourceVersion={version}&timeoutSeconds=1")
    timer.join()
    assert [(e["type"], e["object"]["metadata"]["labels"]) for e in events] == [("DELETED", {"app": "b"})]
    code, (answer,) = _watch_events(fake, "fieldSelector=spec.suspend%3Dtrue")
    assert (code, answer["reason"], answer["message"]) == (400, "BadRequest", "field label not supported: spec.suspend")
