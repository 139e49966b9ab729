"""The Kubernetes backend, driven through the real ``kubernetes`` client against the simulated cluster.

No Kubernetes API server runs here (none can be installed, and the network is closed).
Each test builds the backend with the official client exactly as in production — a real
kubeconfig file loaded by ``kubernetes.config``, the real ``ApiClient``, ``CustomObjectsApi``,
``BatchV1Api`` and ``CoreV1Api`` with their URL building, query parameters, JSON bodies and
error handling — talking real HTTP on loopback to ``support.k8s_fake_server.FakeKubernetes``,
the one test double of the API server that every launcher test uses (Status objects for
errors, 201 for creates, ``dryRun=All`` persisting nothing, schema validation, foreground
deletion that keeps the object for a while, watches, faults). Every object the backend sends
is also checked offline against the schemas used in launcher/roxxel_launch/validate.py: the
JobSet CRD schema from tests/fixtures/k8s (unknown fields rejected) and kubernetes-validate
(strict) for built-in kinds. A socket guard fails any test that connects beyond loopback.
"""

from __future__ import annotations

import copy
import socket

import pytest
import urllib3
import yaml
from kubernetes import config as k8s_config

from roxxel_launch import render as R
from roxxel_launch import spec as S
from roxxel_launch import validate as V
from roxxel_launch.backends.kubernetes import backend as K
from roxxel_launch.backends.kubernetes import api as KA
from roxxel_launch.backends.base import (
    BackendError,
    JobExistsError,
    JobNotFoundError,
    JobState,
    StopReason,
)

from support.fake_clock import fast_retry
from support.k8s_fake_server import TOKEN, FakeKubernetes
from support.paths import JOBSET_CRD as CRD
from support.specs import spec_dict

NS = "team-a"


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch):
    """Nothing in these tests may connect beyond loopback (the simulated cluster)."""
    real = socket.socket.connect

    def connect(self, address):
        if isinstance(address, tuple) and address[0] not in ("127.0.0.1", "::1", "localhost"):
            raise AssertionError(f"a test tried to connect to {address}")
        return real(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)


@pytest.fixture(scope="module")
def crd_schema() -> dict:
    return V.jobset_crd_schema(yaml.safe_load(CRD.read_text()))


def write_kubeconfig(path, url: str) -> None:
    """A kubeconfig with two contexts: ``work`` (namespace team-a, current) and ``plain``."""
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "work",
                "clusters": [{"name": "fake", "cluster": {"server": url}}],
                "users": [{"name": "dev", "user": {"token": TOKEN}}],
                "contexts": [
                    {"name": "work", "context": {"cluster": "fake", "user": "dev", "namespace": NS}},
                    {"name": "plain", "context": {"cluster": "fake", "user": "dev"}},
                ],
            }
        )
    )


@pytest.fixture
def server(monkeypatch, tmp_path, crd_schema):
    """The simulated cluster (Kueue installed, with the LocalQueue team-a), and a kubeconfig
    pointing at it; afterwards, every object sent must have passed the offline schema checks."""
    with FakeKubernetes(namespace=NS) as fake:
        fake.kueue("team-a")
        path = tmp_path / "kubeconfig"
        write_kubeconfig(path, fake.url)
        monkeypatch.setenv("KUBECONFIG", str(path))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
            monkeypatch.delenv(var, raising=False)  # loopback goes direct
        yield fake
        for request in fake.calls("POST"):
            assert_valid(request.body, crd_schema)


@pytest.fixture
def backend(server) -> K.KubernetesBackend:
    return K.KubernetesBackend(poll_seconds=0, delete_timeout=5, retry=fast_retry())


def stored(server: FakeKubernetes, resource: str, name: str) -> dict:
    """The object as the server stores it (edits act as a controller's would)."""
    return server.objects[(resource, NS, name)]


def make_spec(**changes) -> S.JobSpec:
    # The NetworkPolicy's own create/delete tests are in test_pod_security.py.
    data = spec_dict(namespace=NS, checkpoint_dir="gs://ckpt/lm", security={"network_policy": False})
    data.update(changes)
    return S.spec_from_dict(data)


SPECS = {
    "cpu-jobset": make_spec(),
    "tpu-v5p-2-slices": make_spec(
        accelerator={"tpu": {"type": "v5p", "topology": "2x2x4"}},
        num_slices=2,
        queue="team-a",
        service_account="trainer",
    ),
    "gpu-2-hosts": make_spec(
        accelerator={"gpu": {"type": "nvidia-h100-80gb", "count": 8, "hosts": 2}},
        data={"nfs": {"server": "10.0.0.2", "path": "/vol1/data"}},
    ),
    "indexed-job": make_spec(accelerator={"cpu": {"hosts": 4}}, workload="indexed-job"),
}


def object_posts(server: FakeKubernetes) -> list:
    """The creates (dry runs included) of the job's objects: every POST but the dry run of one
    worker pod that checks admission first."""
    return [r for r in server.calls("POST") if r.resource != "pods"]


def assert_valid(obj: dict, crd_schema: dict) -> None:
    """The offline checks of launcher/roxxel_launch/validate.py (no API server here); for the
    admission check's worker pod, Kubernetes' own Pod schema."""
    if obj["kind"] == "Pod":
        assert V.check_schemas([obj]) == []
        return
    assert V.check_objects([obj]) == []
    assert V.check_schemas([obj]) == []  # kubernetes-validate strict (JobSet: its child Jobs)
    if obj["kind"] == "JobSet":
        assert V.check_jobset_crd(obj, crd_schema) == []


def submitted(server: FakeKubernetes, spec: S.JobSpec) -> None:
    """Puts the rendered objects of ``spec`` into the server, as a successful submit would."""
    for obj in R.render(spec).objects:
        server.put(
            {"JobSet": "jobsets", "Job": "jobs", "Service": "services", "NetworkPolicy": "networkpolicies"}[
                obj["kind"]
            ],
            obj,
        )


def pod(
    name: str,
    *,
    jobset: str | None = None,
    job: str | None = None,
    slice_index: int = 0,
    index: int = 0,
    attempt: int = 0,
    phase: str = "Running",
    state: dict | None = None,
    conditions: list | None = None,
    created: str = "2025-01-01T00:00:00Z",
    deleting: bool = False,
    index_as_annotation: bool = False,
) -> dict:
    """A pod as the JobSet/Job controllers and the kubelet leave it (canned JSON)."""
    labels = {R.RUN_NAME_LABEL: jobset or job}
    annotations = {}
    index_keys = annotations if index_as_annotation else labels
    index_keys[K.COMPLETION_INDEX_KEY] = str(index)
    annotations[K.COMPLETION_INDEX_KEY] = str(index)
    if jobset:
        labels.update(
            {
                K.JOBSET_NAME_LABEL: jobset,
                "jobset.sigs.k8s.io/replicatedjob-name": "slice",
                K.JOB_INDEX_LABEL: str(slice_index),
                K.RESTART_ATTEMPT_KEY: str(attempt),
                K.JOB_NAME_LABEL: f"{jobset}-slice-{slice_index}",
            }
        )
        annotations[K.RESTART_ATTEMPT_KEY] = str(attempt)
    else:
        labels.update({K.JOB_NAME_LABEL: job, "batch.kubernetes.io/job-name": job, R.JOB_LABEL: job})
    if state is None:
        state = (
            {"running": {"startedAt": "2025-01-01T00:01:00Z"}}
            if phase == "Running"
            else {"waiting": {"reason": "ContainerCreating"}}
        )
    meta = {"name": name, "namespace": NS, "labels": labels, "annotations": annotations, "creationTimestamp": created}
    if deleting:
        meta["deletionTimestamp"] = "2025-03-03T00:00:00Z"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "status": {
            "phase": phase,
            "conditions": conditions or [],
            "containerStatuses": [
                {
                    "name": "worker",
                    "state": state,
                    "ready": phase == "Running",
                    "restartCount": 0,
                    "image": "x",
                    "imageID": "",
                    "started": phase == "Running",
                }
            ],
        },
    }


def jobset_pods(
    name: str, slices: int, hosts: int, *, attempt: int = 0, phase: str = "Running", **kwargs
) -> list[dict]:
    return [
        pod(
            f"{name}-slice-{s}-{i}-a{attempt}x",
            jobset=name,
            slice_index=s,
            index=i,
            attempt=attempt,
            phase=phase,
            **kwargs,
        )
        for s in range(slices)
        for i in range(hosts)
    ]


def terminated(code: int, reason: str = "Error", message: str = "", finished: str = "2025-01-01T01:00:00Z"):
    return {
        "terminated": {
            "exitCode": code,
            "reason": reason,
            "message": message,
            "finishedAt": finished,
            "startedAt": "2025-01-01T00:01:00Z",
        }
    }


# ----------------------------------------------------------------------------- configuration


def test_constructing_does_no_io_and_the_first_call_loads_the_kubeconfig(server, monkeypatch):
    """Constructing reads no file and sends nothing; the first API call loads credentials once."""
    loads = []
    real_load = k8s_config.load_kube_config
    monkeypatch.setattr(KA.k8s_config, "load_kube_config", lambda *a, **kw: loads.append(kw) or real_load(*a, **kw))
    monkeypatch.setattr(
        KA.k8s_config, "load_incluster_config", lambda *a, **kw: pytest.fail("in-cluster config outside a pod")
    )
    opened = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda *a, **kw: opened.append(a) or real_open(*a, **kw))
    backend = K.KubernetesBackend(namespace="elsewhere", context="plain")
    assert loads == [] and server.requests == [] and opened == []
    monkeypatch.setattr("builtins.open", real_open)
    assert backend.list() == []
    assert [kw["context"] for kw in loads] == ["plain"]
    assert {r.namespace for r in server.requests} == {"elsewhere"}
    backend.list()
    assert len(loads) == 1


def test_namespace_comes_from_the_kubeconfig_context(server):
    assert K.KubernetesBackend().namespace == NS  # context "work" names it
    assert K.KubernetesBackend(context="plain").namespace == "default"
    assert K.KubernetesBackend(namespace="x", context="plain").namespace == "x"
    assert server.requests == []


def test_in_cluster_config_comes_first_in_a_pod(server, monkeypatch, tmp_path):
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    namespace_file = tmp_path / "namespace"
    namespace_file.write_text("ml-jobs\n")
    monkeypatch.setattr(KA, "INCLUSTER_NAMESPACE_FILE", str(namespace_file))

    def incluster(client_configuration):
        client_configuration.host = server.url
        client_configuration.api_key = {"authorization": f"Bearer {TOKEN}"}

    monkeypatch.setattr(KA.k8s_config, "load_incluster_config", incluster)
    monkeypatch.setattr(KA.k8s_config, "load_kube_config", lambda *a, **kw: pytest.fail("kubeconfig used inside a pod"))
    backend = K.KubernetesBackend()
    assert backend.list() == []
    assert backend.namespace == "ml-jobs"
    assert server.calls("GET", "jobsets")[0].namespace == "ml-jobs"


def test_in_cluster_failure_falls_back_to_the_kubeconfig(server, monkeypatch):
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")

    def incluster(client_configuration):
        raise k8s_config.ConfigException("Service token file does not exist.")

    monkeypatch.setattr(KA.k8s_config, "load_incluster_config", incluster)
    assert K.KubernetesBackend().list() == []
    assert server.requests


def test_missing_kubeconfig_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "nope"))
    backend = K.KubernetesBackend()  # still fine: nothing is loaded yet
    with pytest.raises(BackendError, match=r"cannot load Kubernetes credentials.*KUBECONFIG.*--context") as err:
        backend.status("lm")
    # One sentence end after the client's own message (which ends with a period), and the way
    # out for a user who meant a job on this machine.
    assert ".." not in str(err.value) and "add --local" in str(err.value)


# ----------------------------------------------------------------------------- submit


@pytest.mark.parametrize("case", SPECS)
def test_submit_dry_runs_every_object_then_creates_them_in_order(case, server, backend, crd_schema):
    spec = SPECS[case]
    expected = sorted(R.render(spec).objects, key=lambda o: o["kind"] != "Service")
    status = backend.submit(spec)
    pod, *posts = server.calls("POST")
    # First the admission check: a dry run of one worker pod made from the pod template.
    template = expected[-1]["spec"]
    template = (template["replicatedJobs"][0]["template"]["spec"] if "replicatedJobs" in template else template)[
        "template"
    ]
    assert (pod.body["kind"], pod.dry_run, pod.body["spec"]) == ("Pod", True, template["spec"])
    kinds = [o["kind"] for o in expected]
    assert [(r.body["kind"], r.dry_run) for r in posts] == [(k, True) for k in kinds] + [(k, False) for k in kinds]
    for request, obj in zip(posts, expected + expected):
        assert request.body == obj  # exactly the rendered object
        assert request.query["fieldManager"] == "roxxel-launch"
        assert request.query["fieldValidation"] == "Strict"  # an unknown field is an error
        assert_valid(request.body, crd_schema)
    # Nothing but the creates, after the reads of the JobSet CRD, the Nodes (the fit check), the
    # ResourceQuotas (the gang's quota), the API discovery (Kueue's served version) and the Kueue
    # LocalQueue.
    reads = [r for r in server.requests if r.method == "GET"]
    assert [r.path for r in reads if r.resource == "nodes"] == ["/api/v1/nodes"]
    # ... and, for an indexed job, the patch that makes its Job the owner of its Service.
    patches = [r for r in server.requests if r.method == "PATCH"]
    assert [r.resource for r in patches] == (["services"] if spec.workload == "indexed-job" else [])
    assert len(server.requests) == 1 + len(posts) + len(reads) + len(patches)
    # The namespace's ResourceQuotas, once (the gang's quota, backends/kubernetes/quota.py).
    assert [r.resource for r in reads if r.resource == "resourcequotas"] == ["resourcequotas"]
    assert {r.path.rsplit("/", 2)[-2] for r in reads if r.resource not in ("nodes", "resourcequotas")} <= {
        "customresourcedefinitions",
        "apis",
        "localqueues",
    }
    assert status.state is JobState.PENDING and status.processes == spec.num_processes
    kept = server.get("jobsets" if spec.workload == "jobset" else "jobs", "lm")
    assert status.created == kept["metadata"]["creationTimestamp"]  # the server's, from its answer
    assert kept["metadata"]["annotations"][R.SPEC_ANNOTATION]


def test_submit_dry_run_creates_nothing(server, backend):
    status = backend.submit(SPECS["indexed-job"], dry_run=True)
    assert [(r.method, r.resource, r.dry_run) for r in server.requests] == [
        ("GET", "nodes", False),
        ("GET", "resourcequotas", False),
        ("POST", "pods", True),
        ("POST", "services", True),
        ("POST", "jobs", True),
    ]
    assert server.objects == {}
    assert "dry run" in status.message and status.state is JobState.PENDING


def test_submit_validates_offline_before_sending_anything(server, backend, monkeypatch):
    def broken(spec):
        rendered = R.render(spec)
        obj = copy.deepcopy(rendered.objects[0])
        obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
        return R.Rendered(objects=(obj,), yaml="")

    monkeypatch.setattr(K, "render", broken)
    with pytest.raises(BackendError, match="(?s)nothing was sent.*restartPolicy.*'OnFailure'"):
        backend.submit(SPECS["cpu-jobset"])
    assert server.requests == []


def test_submit_places_the_job_in_the_backends_namespace(server, crd_schema):
    K.KubernetesBackend(namespace="team-b").submit(SPECS["cpu-jobset"])
    (dry, real) = object_posts(server)
    assert real.namespace == "team-b" and real.body["metadata"]["namespace"] == "team-b"
    assert_valid(real.body, crd_schema)


def test_existing_name_is_found_by_the_dry_run(server, backend):
    submitted(server, SPECS["cpu-jobset"])
    with pytest.raises(JobExistsError, match=r"JobSet team-a/lm already exists.*delete.*resume"):
        backend.submit(SPECS["cpu-jobset"])
    assert [r.dry_run for r in object_posts(server)] == [True]


def test_partial_failure_rolls_back_what_was_created(server, backend):
    """Service created, Job refused: the Service is deleted again (never half a job)."""
    server.fail(
        "POST",
        "jobs",
        422,
        'Job.batch "lm" is invalid: spec.template.spec.containers[0].image: Required value',
        reason="Invalid",
        dry_run=False,
    )
    with pytest.raises(BackendError) as info:
        backend.submit(SPECS["indexed-job"])
    message = str(info.value)
    assert "spec.template.spec.containers[0].image: Required value" in message
    assert "Rolled back: deleted Service/lm" in message
    (delete,) = server.calls("DELETE")
    assert delete.resource == "services" and delete.query["propagationPolicy"] == "Foreground"
    assert server.objects == {}


def test_a_failed_rollback_says_what_is_left_and_how_to_remove_it(server, backend):
    server.fail("POST", "jobs", 500, dry_run=False, times=100)  # past the retries' deadline
    server.fail("DELETE", "services", 500, times=100)
    with pytest.raises(BackendError, match=r"Could NOT roll back: Service/lm .*kubectl delete service lm -n team-a"):
        backend.submit(SPECS["indexed-job"])


def test_an_interrupted_submit_rolls_back_too(server, backend, monkeypatch):
    real = KA.KubernetesApi.create

    def create(self, obj, *, dry_run):
        if obj["kind"] == "Job" and not dry_run:
            raise KeyboardInterrupt
        return real(self, obj, dry_run=dry_run)

    monkeypatch.setattr(KA.KubernetesApi, "create", create)
    with pytest.raises(KeyboardInterrupt):
        backend.submit(SPECS["indexed-job"])
    assert server.objects == {}


# ----------------------------------------------------------------------------- API errors


@pytest.mark.parametrize(
    "fault, error, pattern",
    [
        (
            dict(
                code=403,
                reason="Forbidden",
                message='jobsets.jobset.x-k8s.io is forbidden: User "dev" '
                'cannot create resource "jobsets" in API group "jobset.x-k8s.io"',
            ),
            BackendError,
            r"forbidden to create \(dry run\) JobSet team-a/lm: jobsets.jobset.x-k8s.io is forbidden.*"
            r"RBAC.*kubectl auth can-i create jobsets.jobset.x-k8s.io -n team-a.*--namespace",
        ),
        (
            dict(code=404, raw=b"404 page not found\n"),
            BackendError,
            r"JobSet API \(jobset.x-k8s.io/v1alpha2\) is not installed.*install JobSet.*kubectl apply --server-side -f "
            r"https://github.com/kubernetes-sigs/jobset/releases/download/v0.12.0/manifests.yaml.*indexed-job",
        ),
        (
            dict(code=404, reason="NotFound", message="the server could not find the requested resource"),
            BackendError,
            r"JobSet API .* is not installed.*install JobSet",
        ),
        (
            dict(
                code=409,
                reason="AlreadyExists",
                message='jobsets.jobset.x-k8s.io "lm" already exists',
                name="lm",
                kind="jobsets",
            ),
            JobExistsError,
            r"already exists",
        ),
        (
            dict(
                code=422,
                reason="Invalid",
                message='JobSet.jobset.x-k8s.io "lm" is invalid: spec.replicatedJobs[0].'
                'name: Invalid value: "slice": must be no more than 63 characters',
            ),
            BackendError,
            r"rejected JobSet team-a/lm.*spec.replicatedJobs\[0\].name: Invalid value",
        ),
        (
            dict(code=401, reason="Unauthorized", message="Unauthorized"),
            BackendError,
            r"rejected the credentials.*get-credentials",
        ),
        (
            dict(code=500, reason="InternalError", message="etcdserver: request timed out"),
            BackendError,
            r"failed to create \(dry run\) JobSet team-a/lm: HTTP 500.*etcdserver: request timed out.*Retry",
        ),
    ],
)
def test_api_errors_become_clear_backend_errors(server, backend, fault, error, pattern):
    server.fail("POST", "jobsets", **{"times": 100, **fault})  # a 500 persists past the retries
    with pytest.raises(error, match=pattern) as info:
        backend.submit(SPECS["cpu-jobset"])
    assert isinstance(info.value.__cause__, KA.ApiException)
    assert server.objects == {}


def test_missing_namespace_is_named(server, backend):
    server.namespaces = {"default"}
    with pytest.raises(BackendError, match=r"namespace 'team-a' does not exist.*kubectl create namespace team-a"):
        backend.submit(SPECS["indexed-job"])


def test_unreachable_api_server(server, backend, tmp_path, monkeypatch):
    """A kubeconfig naming a loopback port where nothing listens: connection refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    down = f"http://127.0.0.1:{port}"
    write_kubeconfig(tmp_path / "down", down)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "down"))
    with pytest.raises(BackendError, match=rf"cannot reach the Kubernetes API server at {down}"):
        backend.status("lm")
    assert server.requests == []


# ----------------------------------------------------------------------------- status


def _jobset(server, spec=None, *, status: dict | None = None, suspend: bool = False) -> dict:
    spec = spec or SPECS["tpu-v5p-2-slices"]
    submitted(server, spec)
    obj = stored(server, "jobsets", spec.name)
    obj["status"] = status or {}
    if suspend:
        obj["spec"]["suspend"] = True
    return obj


def test_status_jobset_pending_until_every_worker_runs(server, backend):
    _jobset(server, status={"restarts": 0})
    assert backend.status("lm").state is JobState.PENDING  # no pods yet
    for p in jobset_pods("lm", 2, 4)[:6]:
        server.put("pods", p)
    server.put(
        "pods",
        pod(
            "lm-slice-1-2-z",
            jobset="lm",
            slice_index=1,
            index=2,
            phase="Pending",
            state={"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}},
        ),
    )
    status = backend.status("lm")
    assert status.state is JobState.PENDING and status.processes == 8
    assert "6/8 workers running" in status.message
    assert "slice 1: 1 Pending, 2 Running" in status.message
    assert "process 6 (pod lm-slice-1-2-z) Pending (ImagePullBackOff: Back-off pulling image)" in status.message
    assert server.calls("GET", "pods")[0].query["labelSelector"] == "jobset.sigs.k8s.io/jobset-name=lm"


def test_status_jobset_unschedulable_reason_is_surfaced(server, backend):
    _jobset(server)
    server.put(
        "pods",
        pod(
            "lm-slice-0-0-q",
            jobset="lm",
            phase="Pending",
            state={},
            conditions=[
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/3 nodes are available: 3 Insufficient google.com/tpu.",
                }
            ],
        ),
    )
    assert "Unschedulable: 0/3 nodes are available: 3 Insufficient google.com/tpu." in backend.status("lm").message


def test_status_jobset_running(server, backend):
    _jobset(
        server,
        status={
            "restarts": 0,
            "replicatedJobsStatus": [
                {"name": "slice", "ready": 2, "active": 2, "succeeded": 0, "failed": 0, "suspended": 0}
            ],
        },
    )
    for p in jobset_pods("lm", 2, 4):
        server.put("pods", p)
    status = backend.status("lm")
    assert (status.state, status.restarts, status.exit_code) == (JobState.RUNNING, 0, None)
    assert status.created == "2025-01-01T00:00:00Z"


def test_status_jobset_restarting_after_a_gang_restart(server, backend):
    _jobset(server, status={"restarts": 2, "restartsCountTowardsMax": 1})
    for p in jobset_pods("lm", 2, 4, attempt=1, deleting=True)[:3] + jobset_pods("lm", 2, 4, attempt=2)[:5]:
        server.put("pods", p)
    status = backend.status("lm")
    assert status.state is JobState.RESTARTING and status.restarts == 2
    assert "3 pods of the previous attempt still terminating" in status.message
    assert "2 restarts, 1 counted toward max_restarts=3, 1 free (preemption or eviction)" in status.message
    # Once every worker of the new attempt runs and the old pods are gone: Running again.
    for key in [k for k in server.objects if k[0] == "pods"]:
        del server.objects[key]
    for p in jobset_pods("lm", 2, 4, attempt=2):
        server.put("pods", p)
    status = backend.status("lm")
    assert (status.state, status.restarts) == (JobState.RUNNING, 2)


def test_status_counts_free_restarts_when_the_controller_omits_a_zero_count(server, backend):
    """``restartsCountTowardsMax`` is ``omitempty`` in the JobSet API (v1alpha2 JobSetStatus):
    after free restarts only, a controller that has the field leaves it out. It came with
    ``failurePolicy.rules``, so a JobSet whose rules were kept reads it as 0; one without
    rules (an older controller dropped them) may lack the field, and gets no split."""
    obj = _jobset(server, status={"restarts": 2})
    for p in jobset_pods("lm", 2, 4, attempt=2):
        server.put("pods", p)
    assert (
        "2 restarts, 0 counted toward max_restarts=3, 2 free (preemption or eviction)" in backend.status("lm").message
    )
    del obj["spec"]["failurePolicy"]["rules"]
    assert "counted toward" not in backend.status("lm").message


def test_status_jobset_succeeded(server, backend):
    _jobset(
        server,
        status={
            "restarts": 1,
            "terminalState": "Completed",
            "conditions": [
                {
                    "type": "Completed",
                    "status": "True",
                    "reason": "AllJobsCompleted",
                    "message": "jobset completed successfully",
                }
            ],
        },
    )
    status = backend.status("lm")
    assert (status.state, status.exit_code, status.restarts) == (JobState.SUCCEEDED, 0, 1)
    assert status.state.terminal


def test_status_jobset_failed_names_the_first_failed_worker(server, backend):
    _jobset(
        server,
        status={
            "restarts": 3,
            "restartsCountTowardsMax": 3,
            "terminalState": "Failed",
            "conditions": [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "ReachedMaxRestarts",
                    "message": "jobset failed due to reaching max number of restarts",
                }
            ],
        },
    )
    pods = jobset_pods("lm", 2, 4, attempt=3)
    pods[5] = pod(
        "lm-slice-1-1-boom",
        jobset="lm",
        slice_index=1,
        index=1,
        attempt=3,
        phase="Failed",
        state=terminated(1, "Error", "ValueError: NaN loss", "2025-01-01T01:00:00Z"),
    )
    pods[2] = pod(
        "lm-slice-0-2-later",
        jobset="lm",
        slice_index=0,
        index=2,
        attempt=3,
        phase="Failed",
        state=terminated(137, "Error", "", "2025-01-01T01:00:09Z"),
    )
    for p in pods:
        server.put("pods", p)
    status = backend.status("lm")
    assert (status.state, status.exit_code, status.restarts) == (JobState.FAILED, 1, 3)
    assert status.reason is StopReason.RESTARTS_EXHAUSTED
    assert "ReachedMaxRestarts: jobset failed due to reaching max number of restarts" in status.message
    assert (
        "first failure: process 5 (pod lm-slice-1-1-boom) exited with code 1 (Error: ValueError: NaN loss)"
        in status.message
    )


def test_status_jobset_suspended_by_kueue(server, backend):
    _jobset(
        server,
        suspend=True,
        status={
            "conditions": [
                {"type": "Suspended", "status": "True", "reason": "SuspendedJobs", "message": "jobset is suspended"}
            ]
        },
    )
    status = backend.status("lm")
    assert status.state is JobState.SUSPENDED and not status.state.terminal
    assert "waiting for Kueue to admit it (queue team-a)" in status.message


def _job(server, *, conditions=(), suspend=False) -> dict:
    submitted(server, SPECS["indexed-job"])
    obj = stored(server, "jobs", "lm")
    obj["status"] = {"conditions": list(conditions)}
    obj["spec"]["suspend"] = suspend
    return obj


def _job_pods(phase="Running", **overrides) -> list[dict]:
    pods = [pod(f"lm-{i}-x", job="lm", index=i, phase=phase) for i in range(4)]
    for i, p in overrides.items():
        pods[int(i[1:])] = p
    return pods


@pytest.mark.parametrize(
    "conditions, pods, state, exit_code, fragment",
    [
        ([], _job_pods(), JobState.RUNNING, None, "4/4 workers running"),
        ([], _job_pods(phase="Pending"), JobState.PENDING, None, "0/4 workers running"),
        ([{"type": "Complete", "status": "True", "reason": "CompletionsReached"}], [], JobState.SUCCEEDED, 0, ""),
        (
            [
                {
                    "type": "FailureTarget",
                    "status": "True",
                    "reason": "PodFailurePolicy",
                    "message": "Pod team-a/lm-2-x has condition DisruptionTarget matching FailJob rule at index 0",
                },
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "PodFailurePolicy",
                    "message": "Pod team-a/lm-2-x has condition DisruptionTarget matching FailJob rule at index 0",
                },
            ],
            _job_pods(
                p2=pod(
                    "lm-2-x",
                    job="lm",
                    index=2,
                    phase="Failed",
                    state=terminated(143),
                    conditions=[{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}],
                )
            ),
            JobState.PREEMPTED,
            42,
            "roxxel-launch resume lm",
        ),
        (
            [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "PodFailurePolicy",
                    "message": "Container worker for pod team-a/lm-1-x failed with exit code 42 matching FailJob rule at index 1",
                }
            ],
            _job_pods(p1=pod("lm-1-x", job="lm", index=1, phase="Failed", state=terminated(42))),
            JobState.PREEMPTED,
            42,
            "exit code 42",
        ),
        (
            [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                }
            ],
            _job_pods(p3=pod("lm-3-x", job="lm", index=3, phase="Failed", state=terminated(137, "OOMKilled"))),
            JobState.FAILED,
            137,
            "first failure: process 3 (pod lm-3-x) exited with code 137 (OOMKilled)",
        ),
    ],
    ids=["running", "pending", "succeeded", "preempted-disruption", "preempted-exit-42", "failed"],
)
def test_status_indexed_job(server, backend, conditions, pods, state, exit_code, fragment):
    _job(server, conditions=conditions)
    for p in pods:
        server.put("pods", p)
    status = backend.status("lm")
    assert (status.state, status.exit_code, status.processes, status.restarts) == (state, exit_code, 4, 0)
    assert fragment in status.message
    assert [r.query.get("labelSelector") for r in server.calls("GET", "pods")] == ["job-name=lm"]


def test_status_indexed_job_suspended(server, backend):
    _job(server, suspend=True)
    assert backend.status("lm").state is JobState.SUSPENDED


def test_status_of_unknown_foreign_and_child_objects(server, backend):
    with pytest.raises(JobNotFoundError, match="no job 'lm'.*roxxel-launch list.*--namespace"):
        backend.status("lm")
    server.put(
        "jobs",
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "lm-slice-0", "labels": {K.JOBSET_NAME_LABEL: "lm", R.MANAGED_BY_LABEL: R.MANAGED_BY}},
        },
    )
    with pytest.raises(JobNotFoundError, match="child of JobSet lm"):
        backend.status("lm-slice-0")
    server.put("jobs", {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "theirs"}})
    with pytest.raises(BackendError, match="not created by roxxel-launch"):
        backend.delete("theirs")
    assert server.calls("DELETE") == []


def test_status_without_the_jobset_api_still_finds_indexed_jobs(server, backend):
    server.jobset_api = False
    _job(server)
    assert backend.status("lm").processes == 4


def test_wait_polls_when_the_server_refuses_watches(server, backend, caplog):
    """A server (or Role) without watches: wait falls back to polling, with one warning."""
    obj = _jobset(server, status={"restarts": 0})
    server.fail(
        "GET", "jobsets", 405, "the server does not allow this method", reason="MethodNotAllowed", watch=True, times=100
    )
    real = server.answer

    def answer(request, authorization):
        if (
            request.method == "GET" and request.resource == "jobsets" and len(server.calls("GET", "jobsets")) == 3
        ):  # this is the fourth
            obj["status"] = {"terminalState": "Completed"}
        return real(request, authorization)

    server.answer = answer  # type: ignore[method-assign]
    assert backend.wait("lm", poll_seconds=0).state is JobState.SUCCEEDED
    assert len(server.calls("GET", "jobsets")) == 4  # the read, the refused watch, two polls
    assert sum("polling every" in r.message for r in caplog.records) == 1


# ----------------------------------------------------------------------------- list


def test_list_shows_roxxel_jobs_only(server, backend):
    submitted(server, SPECS["tpu-v5p-2-slices"])
    submitted(server, make_spec(name="small", accelerator={"cpu": {"hosts": 2}}, workload="indexed-job"))
    # The JobSet's child Job carries the JobSet's labels; it is not a job of its own.
    server.put(
        "jobs",
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "lm-slice-0", "labels": {K.JOBSET_NAME_LABEL: "lm", R.MANAGED_BY_LABEL: R.MANAGED_BY}},
        },
    )
    server.put("jobs", {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "other"}})
    for p in jobset_pods("lm", 2, 4) + [pod(f"small-{i}", job="small", index=i) for i in range(2)]:
        server.put("pods", p)
    statuses = backend.list()
    assert [(s.name, s.state, s.processes) for s in statuses] == [
        ("lm", JobState.RUNNING, 8),
        ("small", JobState.RUNNING, 2),
    ]
    selectors = {r.resource: r.query.get("labelSelector") for r in server.calls("GET")}
    assert selectors == {
        "jobsets": "app.kubernetes.io/managed-by=roxxel-launch",
        "jobs": "app.kubernetes.io/managed-by=roxxel-launch",
        "pods": "roxxel.dev/run-name",
    }


def test_list_without_the_jobset_api(server, backend):
    server.jobset_api = False
    submitted(server, make_spec(name="small", workload="indexed-job"))
    assert [s.name for s in backend.list()] == ["small"]


def test_list_passes_other_errors_on(server, backend):
    server.fail("GET", "jobsets", 403, "forbidden", reason="Forbidden")
    with pytest.raises(BackendError, match="forbidden to list JobSets in namespace team-a"):
        backend.list()


# ----------------------------------------------------------------------------- logs


def test_logs_picks_the_pod_of_the_process_in_the_newest_attempt(server, backend):
    _jobset(server, status={"restarts": 1})
    pods = jobset_pods("lm", 2, 4, attempt=0) + jobset_pods("lm", 2, 4, attempt=1)
    for p in pods:
        server.put("pods", p)
    server.log_bytes("lm-slice-1-2-a1x", b"step 1 loss 2.0\nstep 2 ", b"loss 1.9\r\n", b"done")
    lines = backend.logs("lm", process=6)  # slice 6 // 4 = 1, index 6 % 4 = 2
    (pods_query,) = [r for r in server.calls("GET", "pods")]
    assert pods_query.query["labelSelector"] == "jobset.sigs.k8s.io/jobset-name=lm,jobset.sigs.k8s.io/job-index=1"
    assert list(lines) == ["step 1 loss 2.0", "step 2 loss 1.9", "done"]
    (log,) = server.calls("GET", "log")
    assert log.name == "lm-slice-1-2-a1x"
    assert log.query == {"container": "worker", "follow": "false"}


def test_logs_finds_the_completion_index_in_an_annotation_too(server, backend):
    _job(server)
    for i in range(4):
        server.put("pods", pod(f"lm-{i}-old-cluster", job="lm", index=i, index_as_annotation=True))
    server.log_bytes("lm-3-old-cluster", b"hello\n")
    assert list(backend.logs("lm", process=3)) == ["hello"]


def test_logs_follow_streams_lines_as_they_arrive(server, backend):
    job = _job(server)
    for p in _job_pods():
        server.put("pods", p)
    euro = "€".encode()
    # The job ends with the stream: follow stops with the job, not with one pod's stream.
    job["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    lines = backend.logs("lm", follow=True)  # returns before the pod has logged anything
    server.log_bytes("lm-0-x", b"first\nsec")
    assert next(lines) == "first"  # yielded before the server sent more
    server.log_bytes("lm-0-x", b"ond " + euro[:1])  # a character split across chunks
    server.log_bytes("lm-0-x", euro[1:] + b"\n")
    assert next(lines) == "second €"
    server.log_bytes("lm-0-x", b"last\n")
    server.end_log("lm-0-x")
    assert list(lines) == ["last"]
    (log,) = server.calls("GET", "log")
    assert log.query["follow"] == "true"


def test_logs_closes_the_stream_when_the_reader_stops(server, backend, monkeypatch):
    _job(server)
    for p in _job_pods():
        server.put("pods", p)
    server.log_bytes("lm-0-x", b"a\n", b"b\n", b"c\n")
    closed = []
    monkeypatch.setattr(urllib3.HTTPResponse, "close", lambda self: closed.append(True) or None)
    lines = backend.logs("lm", follow=True)
    assert next(lines) == "a"
    lines.close()
    assert closed


def test_logs_follow_waits_for_the_pod_to_start(server, backend):
    job = _job(server)
    pods = _job_pods(phase="Pending")
    for p in pods:
        server.put("pods", p)
    real_list = backend.api.list

    def list_(kind, selector):
        result = real_list(kind, selector)
        if kind == "Pod" and len(server.calls("GET", "pods")) == 2:  # starts after two polls
            server.put("pods", pod("lm-1-x", job="lm", index=1, phase="Running"))
        return result

    real_answer = server.answer

    def answer(request, authorization):
        if request.resource == "log":  # the job ends with its only line: follow stops with the job
            job["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
            server.log_bytes("lm-1-x", b"up\n")
            server.end_log("lm-1-x")
        return real_answer(request, authorization)

    server.answer = answer  # type: ignore[method-assign]
    backend.api.list = list_
    assert list(backend.logs("lm", process=1, follow=True)) == ["up"]
    assert len(server.calls("GET", "pods")) == 3


def test_logs_follow_gives_up_on_a_finished_job_without_pods(server, backend):
    _job(server, conditions=[{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}])
    with pytest.raises(BackendError, match="lm is Failed and process 2 has no pod left"):
        backend.logs("lm", process=2, follow=True)


def test_logs_errors(server, backend):
    with pytest.raises(JobNotFoundError):
        backend.logs("lm")
    _job(server)
    with pytest.raises(BackendError, match="has processes 0..3; there is no process 4"):
        backend.logs("lm", process=4)
    with pytest.raises(BackendError, match="process 0 of lm has no pod yet.*-f"):
        backend.logs("lm")
    for p in _job_pods():
        server.put("pods", p)
    server.fail(
        "GET",
        "log",
        400,
        'container "worker" in pod "lm-0-x" is waiting to start: ContainerCreating',
        reason="BadRequest",
    )
    with pytest.raises(BackendError, match="is waiting to start: ContainerCreating"):
        backend.logs("lm")


# ----------------------------------------------------------------------------- delete


def test_delete_jobset_uses_foreground_propagation(server, backend):
    submitted(server, SPECS["cpu-jobset"])
    backend.delete("lm")
    (delete,) = server.calls("DELETE")
    assert (delete.resource, delete.name, delete.query) == ("jobsets", "lm", {"propagationPolicy": "Foreground"})
    assert server.objects == {}


def test_delete_indexed_job_removes_its_service_too(server, backend):
    submitted(server, SPECS["indexed-job"])
    server.linger = 2  # foreground deletion keeps the objects for a while
    backend.delete("lm", wait=True)
    assert [(r.resource, r.query["propagationPolicy"]) for r in server.calls("DELETE")] == [
        ("jobs", "Foreground"),
        ("services", "Foreground"),
    ]
    assert server.objects == {}


def test_delete_unknown_job(server, backend):
    with pytest.raises(JobNotFoundError):
        backend.delete("lm")


def test_delete_wait_times_out_with_a_hint(server):
    submitted(server, SPECS["cpu-jobset"])
    server.linger = 10**6
    backend = K.KubernetesBackend(poll_seconds=0, delete_timeout=0)
    with pytest.raises(
        BackendError, match=r"still exists.*kubectl get pods -n team-a -l jobset.sigs.k8s.io/jobset-name=lm"
    ):
        backend.delete("lm", wait=True)


# ----------------------------------------------------------------------------- resume


def test_resume_reads_the_spec_annotation_and_resubmits(server, backend, crd_schema):
    spec = SPECS["tpu-v5p-2-slices"]
    _jobset(
        server,
        spec,
        status={
            "restarts": 4,
            "terminalState": "Failed",
            "conditions": [{"type": "Failed", "status": "True", "reason": "FailedJobs"}],
        },
    )
    server.linger = 2  # the old JobSet lingers while its pods terminate
    status = backend.resume("lm")
    methods = [(r.method, r.resource, r.dry_run) for r in server.requests]
    first_delete = methods.index(("DELETE", "jobsets", False))
    first_post = methods.index(("POST", "jobsets", True))
    assert first_delete < first_post
    # before the delete: the reads of the JobSet CRD, the Nodes, API discovery and the
    # LocalQueue (a refusal deletes nothing)
    before = [r.path.rsplit("/", 2)[-2] for r in server.requests[:first_delete] if r.method == "GET"]
    assert {"customresourcedefinitions", "v1", "apis", "localqueues"} <= set(before)  # v1: /api/v1/nodes
    # after the delete: polled until the JobSet was gone (2 lingering GETs + the 404)
    assert methods[first_delete + 1 : first_post] == [("GET", "jobsets", False)] * 3
    (real_post,) = [r for r in server.calls("POST") if not r.dry_run]
    assert real_post.body == R.render(spec).objects[0]  # same run name, checkpoint_dir, everything
    assert_valid(real_post.body, crd_schema)
    assert server.get("jobsets", "lm")["metadata"]["labels"][R.RUN_NAME_LABEL] == "lm"
    assert status.state is JobState.PENDING


def test_resume_with_a_fixed_spec_submits_it_and_refuses_another_run(server, backend, crd_schema):
    """`resume NAME --spec FILE` after a YAML edit: the fixed spec (another image) replaces the
    stored one in the re-created JobSet (and so in its annotation, for later resumes); one that
    changes checkpoint_dir is another run and is refused before anything is deleted."""
    import dataclasses

    spec = SPECS["tpu-v5p-2-slices"]
    _jobset(
        server,
        spec,
        status={
            "restarts": 4,
            "terminalState": "Failed",
            "conditions": [{"type": "Failed", "status": "True", "reason": "FailedJobs"}],
        },
    )
    with pytest.raises(BackendError, match="checkpoint_dir .* makes it another run"):
        backend.resume("lm", new_spec=dataclasses.replace(spec, checkpoint_dir="gs://other/ckpt"))
    assert not server.calls("DELETE")
    fixed = dataclasses.replace(spec, image=spec.image + "-fixed")
    backend.resume("lm", new_spec=fixed)
    (real_post,) = [r for r in server.calls("POST") if not r.dry_run]
    assert real_post.body == R.render(fixed).objects[0]
    assert_valid(real_post.body, crd_schema)


def test_resume_after_a_simulated_preemption_of_an_indexed_job(server, backend, crd_schema):
    spec = make_spec(name="lm", accelerator={"cpu": {"hosts": 4}}, workload="indexed-job", run_name="run-7")
    submitted(server, spec)
    stored(server, "jobs", "lm")["status"] = {
        "conditions": [
            {
                "type": "Failed",
                "status": "True",
                "reason": "PodFailurePolicy",
                "message": "Pod team-a/lm-0-x has condition DisruptionTarget matching FailJob rule at index 0",
            }
        ]
    }
    assert backend.status("lm").state is JobState.PREEMPTED
    backend.resume("lm")
    deletes = [(r.resource, r.query["propagationPolicy"]) for r in server.calls("DELETE")]
    assert deletes == [("jobs", "Foreground"), ("services", "Foreground")]
    creates = [r for r in server.calls("POST") if not r.dry_run]
    assert [r.body["kind"] for r in creates] == ["Service", "Job"]
    for request, obj in zip(creates, R.render(spec).objects):
        assert request.body == obj
        assert_valid(request.body, crd_schema)
    env = {e["name"]: e.get("value") for e in creates[1].body["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["ROXXEL_RUN_NAME"] == "run-7" and env["ROXXEL_CHECKPOINT_DIR"] == "gs://ckpt/lm"
    assert "status" not in server.get("jobs", "lm")  # a fresh Job


def test_resume_refuses_a_running_job(server, backend):
    _jobset(server, status={"restarts": 0})
    for p in jobset_pods("lm", 2, 4):
        server.put("pods", p)
    with pytest.raises(
        BackendError, match=r"lm is Running.*Wait for it.*roxxel-launch wait lm.*roxxel-launch delete lm"
    ):
        backend.resume("lm")
    assert server.calls("DELETE") == [] and server.calls("POST") == []


def test_resume_refuses_a_job_that_succeeded(server, backend):
    _jobset(server, status={"terminalState": "Completed"})
    with pytest.raises(BackendError, match="succeeded; there is nothing to resume"):
        backend.resume("lm")
    assert server.calls("DELETE") == []


def test_resume_a_deleted_job_needs_its_spec(server, backend):
    with pytest.raises(JobNotFoundError, match="Submit its spec file again"):
        backend.resume("lm")
    backend.resume("lm", spec=SPECS["cpu-jobset"])
    assert [r.dry_run for r in object_posts(server)] == [True, False]


def test_resume_with_an_unreadable_annotation_deletes_nothing(server, backend):
    obj = _jobset(server, status={"terminalState": "Failed"})
    obj["metadata"]["annotations"][R.SPEC_ANNOTATION] = "{not json"
    with pytest.raises(BackendError, match="annotation is not a valid job spec.*resubmit"):
        backend.resume("lm")
    assert server.calls("DELETE") == []


def test_resume_leaves_a_job_suspended_by_kueue_to_kueue(server, backend):
    """Re-creating a Kueue-suspended JobSet would send it to the back of its queue."""
    obj = _jobset(server, suspend=True)
    assert obj["metadata"]["labels"][R.QUEUE_LABEL]
    status = backend.resume("lm")
    assert status.state is JobState.SUSPENDED and "left to Kueue" in status.message
    assert server.calls("DELETE") == [] and server.calls("POST") == []


def test_resume_un_suspends_a_suspended_job_without_a_queue_in_place(server, backend):
    """spec.suspend set by kubectl or `suspend`: the same object resumes (its restarts and
    stored spec stay); under a fixed spec it is re-created instead."""
    import dataclasses

    obj = _jobset(server, suspend=True, status={"restarts": 3})
    del obj["metadata"]["labels"][R.QUEUE_LABEL]
    status = backend.resume("lm")
    assert server.calls("DELETE") == [] and server.calls("POST") == []
    (patch,) = server.calls("PATCH")
    assert patch.body == {"spec": {"suspend": False}}
    assert status.state is JobState.RUNNING and status.restarts == 3  # the simulated pods start at once
    pods = server.pods("lm")
    assert len(pods) == 8 and {p["metadata"]["labels"][K.RESTART_ATTEMPT_KEY] for p in pods} == {"3"}
    stored(server, "jobsets", "lm")["spec"]["suspend"] = True
    spec = dataclasses.replace(SPECS["tpu-v5p-2-slices"], queue=None)
    backend.resume("lm", new_spec=dataclasses.replace(spec, image=spec.image + "-fixed"))
    assert len(server.calls("DELETE")) == 1 and len(object_posts(server)) == 2


# ----------------------------------------------------------------------------- suspend


@pytest.mark.parametrize("case,resource", [("cpu-jobset", "jobsets"), ("indexed-job", "jobs")])
def test_suspend_stops_the_pods_and_keeps_the_job_for_resume(case, resource, server, backend):
    """`suspend` patches spec.suspend (a JSON merge patch); the controllers delete the pods,
    the object and its stored spec stay, and `resume` clears the flag: the pods come back in
    the same object, nothing deleted or re-created."""
    spec = SPECS[case]
    backend.submit(spec)
    assert backend.status("lm").state is JobState.RUNNING
    status = backend.suspend("lm")
    (patch,) = server.calls("PATCH", resource)
    assert (patch.resource, patch.content_type, patch.body) == (
        resource,
        "application/merge-patch+json",
        {"spec": {"suspend": True}},
    )
    assert status.state is JobState.SUSPENDED and "roxxel-launch resume" in status.message
    assert server.pods("lm") == []
    obj = stored(server, resource, "lm")
    assert obj["metadata"]["annotations"][R.SPEC_ANNOTATION]
    assert backend.suspend("lm").state is JobState.SUSPENDED  # again: nothing more sent
    assert len(server.calls("PATCH", resource)) == 1
    status = backend.resume("lm")
    assert server.calls("DELETE") == [] and len(object_posts(server)) == 2 * len(R.render(spec).objects)
    assert len(server.pods("lm")) == spec.num_processes
    assert backend.status("lm").state is JobState.RUNNING
    assert stored(server, resource, "lm")["metadata"]["uid"] == obj["metadata"]["uid"]


def test_suspend_refuses_a_kueue_job_and_an_ended_one(server, backend):
    _jobset(server, status={"restarts": 0})
    with pytest.raises(BackendError, match=r"queued by Kueue.*kueue.x-k8s.io/job-uid=.*active.*false"):
        backend.suspend("lm")
    obj = stored(server, "jobsets", "lm")
    del obj["metadata"]["labels"][R.QUEUE_LABEL]
    obj["status"] = {"terminalState": "Completed"}
    with pytest.raises(BackendError, match="has ended .*Succeeded.*nothing to suspend"):
        backend.suspend("lm")
    with pytest.raises(JobNotFoundError):
        backend.suspend("other")
    assert server.calls("PATCH") == []


# ----------------------------------------------------------------------------- one namespace rule


def test_a_job_in_its_specs_namespace_is_found_without_namespace(server, backend):
    """Submitted into the spec's namespace (ml), not the context's (team-a): status, delete and
    the rest find it there by a list across namespaces, as kubectl users expect."""
    submitted(server, make_spec(namespace="ml"))
    assert backend.status("lm").name == "lm" and backend.namespace == "ml"
    (search,) = [r for r in server.calls("GET", "jobsets") if r.namespace is None]
    assert search.query["fieldSelector"] == "metadata.name=lm"
    backend.delete("lm")
    assert server.objects == {}


def test_a_name_in_two_other_namespaces_is_named_and_nothing_is_guessed(server, backend):
    submitted(server, make_spec(namespace="ml"))
    submitted(server, make_spec(namespace="research"))
    with pytest.raises(BackendError, match=r"namespaces ml, research: choose one with -n/--namespace"):
        backend.delete("lm")
    assert server.calls("DELETE") == []
    searches = len([r for r in server.calls("GET", "jobsets") if r.namespace is None])
    explicit = K.KubernetesBackend(namespace="research", poll_seconds=0, retry=fast_retry())
    with pytest.raises(JobNotFoundError):
        explicit.status("other")
    assert len([r for r in server.calls("GET", "jobsets") if r.namespace is None]) == searches  # -n: no search


def test_without_permission_to_list_across_namespaces_the_error_names_namespace(server, backend):
    """A namespaced Role (k8s/rbac) cannot list other namespaces: the not-found error stands."""
    submitted(server, make_spec(namespace="ml"))
    server.set_role(
        [{"apiGroups": ["jobset.x-k8s.io", "batch"], "resources": ["jobsets", "jobs"], "verbs": ["get", "list"]}]
    )
    with pytest.raises(
        JobNotFoundError,
        match=r"no job 'lm' .* in namespace team-a or any other namespace "
        r"this account may list.*--namespace",
    ):
        backend.status("lm")
