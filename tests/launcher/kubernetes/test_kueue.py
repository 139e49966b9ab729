"""Kueue beyond the queue: the workload priority class, topology-aware scheduling (whole
PodSet and slices) and flex-start queued provisioning, from
the spec (refusals, --set) through the rendered JobSet / Indexed Job (where Kueue's docs say
it reads them, checked against the official schemas) to the submit-time check that the
WorkloadPriorityClass exists (the simulated cluster of tests/support/k8s_fake_server.py)."""

from __future__ import annotations

import logging

import pytest
import yaml

from roxxel_launch import render as R
from roxxel_launch import spec as S
from roxxel_launch import validate as V
from support.k8s_schema import assert_official
from roxxel_launch.backends.base import BackendError
from roxxel_launch.backends.kubernetes import backend as K

from support.fake_clock import FakeClock, fast_retry
from support.k8s_fake_server import FakeKubernetes, use_cluster
from support.paths import JOBSET_CRD
from support.specs import NO_NETWORK_POLICY, TPU_V5P, spec_dict

pytestmark = pytest.mark.timeout(60)

BLOCK = "cloud.google.com/gce-topology-block"
HOST = "kubernetes.io/hostname"
KUEUE = {"queue": "team-a", "workload_priority_class": "high"}


def _spec(**fields) -> S.JobSpec:
    return S.spec_from_dict(spec_dict(security=NO_NETWORK_POLICY, **fields))


def _error(overrides=(), **fields) -> S.SpecError:
    with pytest.raises(S.SpecError) as info:
        S.spec_from_dict(spec_dict(**fields), overrides)
    return info.value


# ----------------------------------------------------------------------------- the spec


@pytest.mark.parametrize(
    "fields,field,fragment",
    [
        (
            {"workload_priority_class": "high"},
            "workload_priority_class",
            "is set without queue, and Kueue reads it only from a job it manages: it would do nothing. "
            "Set queue to your LocalQueue too, or remove workload_priority_class.",
        ),
        ({"topology": {"required": BLOCK}}, "topology", "is set without queue"),
        ({"queue": "q", "workload_priority_class": "High"}, "workload_priority_class", "DNS-1123 subdomain"),
        (
            {"queue": "q", "workload_priority_class": "a" * 64},
            "workload_priority_class",
            "a label value holds at most 63",
        ),
        ({"queue": "q", "topology": {}}, "topology", "give required, preferred or slice_required (got none)"),
        (
            {"queue": "q", "topology": {"required": BLOCK, "preferred": HOST}},
            "topology",
            "give at most one of required, preferred (got required, preferred)",
        ),
        (
            {"queue": "q", "topology": {"slice_required": HOST}},
            "topology.slice_size",
            "is required with slice_required (Kueue needs both)",
        ),
        (
            {"queue": "q", "topology": {"required": BLOCK, "slice_size": 2}},
            "topology.slice_required",
            "is required with slice_size",
        ),
        (
            {"queue": "q", "topology": {"slice_required": "a b", "slice_size": 2}},
            "topology.slice_required",
            "not a qualified name",
        ),
        (
            {"queue": "q", "topology": {"slice_required": HOST, "slice_size": 0}},
            "topology.slice_size",
            "must be at least 1, got 0",
        ),
        (
            {"queue": "q", "accelerator": {"cpu": {"hosts": 2}}, "topology": {"slice_required": HOST, "slice_size": 3}},
            "topology.slice_size",
            "3 does not divide the job's 2 pods into whole slices",
        ),
        ({"topology": {"slice_required": HOST, "slice_size": 1}}, "topology", "is set without queue"),
        ({"queue_provisioning": {}}, "queue_provisioning", "is set without queue"),
        (
            {"queue": "q", "queue_provisioning": {"max_run_duration_seconds": 0}},
            "queue_provisioning.max_run_duration_seconds",
            "must be between 1 and 604800 seconds (seven days), got 0",
        ),
        (
            {"queue": "q", "queue_provisioning": {"max_run_duration_seconds": 604801}},
            "queue_provisioning.max_run_duration_seconds",
            "got 604801",
        ),
        ({"queue": "q", "topology": {"required": "rack level"}}, "topology.required", "not a qualified name"),
        ({"queue": "q", "topology": {"preferred": "Example.com/rack"}}, "topology.preferred", "DNS-1123 subdomain"),
    ],
)
def test_bad_kueue_fields_are_one_line_naming_the_field(fields, field, fragment):
    err = _error(**fields)
    assert err.field == field and str(err).startswith(f"{field}: ")
    assert fragment in str(err) and "\n" not in str(err)


def test_a_misspelt_level_field_is_named_with_the_one_meant():
    err = _error(queue="q", topology={"requried": BLOCK})
    assert str(err.each()[0]) == "topology.requried: unknown field. Did you mean 'required'?"


def test_kueue_fields_are_settable_with_set(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec_dict()))
    spec = S.load_spec(path, ["queue=team-a", "workload_priority_class=high", f"topology.preferred={HOST}"])
    assert (spec.queue, spec.workload_priority_class) == ("team-a", "high")
    assert spec.topology == S.Topology(preferred=HOST)
    with pytest.raises(S.SpecError, match=r"^topology.required: .*from --set topology.required=a b\)"):
        S.load_spec(path, ["queue=q", "topology.required=a b"])


def test_the_schema_documents_topology_and_queue_provisioning():
    topology = S.spec_schema()["properties"]["topology"]
    assert set(topology["properties"]) == {"required", "preferred", "slice_required", "slice_size"}
    assert "kueue.x-k8s.io/podset-slice-size" in topology["properties"]["slice_size"]["description"]
    provisioning = S.spec_schema()["properties"]["queue_provisioning"]
    assert "provreq.kueue.x-k8s.io/maxRunDurationSeconds" in provisioning["description"]
    assert "kueue.x-k8s.io/priority-class" in S.spec_schema()["properties"]["workload_priority_class"]["description"]


# ----------------------------------------------------------------------------- the manifests


@pytest.fixture(scope="module")
def crd_schema() -> dict:
    return V.jobset_crd_schema(yaml.safe_load(JOBSET_CRD.read_text()))


def _valid(rendered: R.Rendered, crd_schema: dict) -> None:
    """The official checks: Kubernetes' schemas (strict), the JobSet CRD, names, Pod Security."""
    assert_official(rendered.objects, crd_schema)


def test_jobset_carries_the_priority_label_and_its_pod_template_the_topology(crd_schema):
    """Kueue's docs: the priority-class label on the JobSet's metadata (like queue-name), the
    TAS annotation on the replicated job's pod template, not on the JobSet or the Job."""
    spec = _spec(accelerator=TPU_V5P, num_slices=2, topology={"required": BLOCK}, **KUEUE)
    rendered = R.render(spec)
    _valid(rendered, crd_schema)
    (jobset,) = rendered.objects
    labels = jobset["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/queue-name"] == "team-a"
    assert labels["kueue.x-k8s.io/priority-class"] == "high"
    (rjob,) = jobset["spec"]["replicatedJobs"]
    assert "kueue.x-k8s.io/priority-class" not in rjob["template"]["metadata"]["labels"]
    pod = rjob["template"]["spec"]["template"]
    assert pod["metadata"]["annotations"]["kueue.x-k8s.io/podset-required-topology"] == BLOCK
    assert "kueue.x-k8s.io/priority-class" not in pod["metadata"]["labels"]
    assert "kueue.x-k8s.io/podset-preferred-topology" not in pod["metadata"]["annotations"]
    assert not any(k.startswith("kueue.x-k8s.io/podset") for k in jobset["metadata"]["annotations"])
    assert "priorityClassName" not in pod["spec"]  # the pods' own priority is priority_class's
    # Kueue places the pods: JobSet's exclusive placement, which pins a slice's followers to its
    # leader's node pool, is left out (without topology it is there)
    assert "alpha.jobset.sigs.k8s.io/exclusive-topology" not in jobset["metadata"]["annotations"]
    (plain,) = R.render(_spec(accelerator=TPU_V5P, num_slices=2, **KUEUE)).objects
    assert (
        plain["metadata"]["annotations"]["alpha.jobset.sigs.k8s.io/exclusive-topology"]
        == "cloud.google.com/gke-nodepool"
    )


def test_indexed_job_carries_them_on_the_job_and_its_pod_template(crd_schema):
    spec = _spec(
        accelerator={"cpu": {"hosts": 4}},
        workload="indexed-job",
        topology={"preferred": HOST},
        priority_class="batch",
        **KUEUE,
    )
    rendered = R.render(spec)
    _valid(rendered, crd_schema)
    service, job = rendered.objects
    assert job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "high"
    assert "kueue.x-k8s.io/priority-class" not in service["metadata"]["labels"]
    pod = job["spec"]["template"]
    assert pod["metadata"]["annotations"]["kueue.x-k8s.io/podset-preferred-topology"] == HOST
    assert pod["spec"]["priorityClassName"] == "batch"


def test_slices_are_pod_template_annotations_next_to_the_whole_podsets(crd_schema):
    """Kueue's JobSet TAS example (site/static/examples/jobs/sample-jobset-tas-combined.yaml):
    podset-required-topology with podset-slice-required-topology and podset-slice-size, all
    on the replicated job's pod template; the size a string (Kueue parses it as an int32)."""
    spec = _spec(
        accelerator=TPU_V5P,
        num_slices=2,
        queue="team-a",
        topology={"required": BLOCK, "slice_required": HOST, "slice_size": 4},
    )
    rendered = R.render(spec)
    _valid(rendered, crd_schema)
    (jobset,) = rendered.objects
    pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    annotations = pod["metadata"]["annotations"]
    assert annotations["kueue.x-k8s.io/podset-required-topology"] == BLOCK
    assert annotations["kueue.x-k8s.io/podset-slice-required-topology"] == HOST
    assert annotations["kueue.x-k8s.io/podset-slice-size"] == "4"
    assert not any(k.startswith("kueue.x-k8s.io/podset") for k in jobset["metadata"]["annotations"])


def test_slices_alone_and_a_slice_of_every_pod_are_accepted():
    spec = _spec(queue="q", accelerator={"cpu": {"hosts": 2}}, topology={"slice_required": HOST, "slice_size": 2})
    assert spec.topology.pod_annotations() == {
        "kueue.x-k8s.io/podset-slice-required-topology": HOST,
        "kueue.x-k8s.io/podset-slice-size": "2",
    }
    # 2 slices of 4 v5p hosts: 8 pods, cut into slices of 4 (one TPU slice each).
    assert (
        _spec(
            accelerator=TPU_V5P, num_slices=2, queue="q", topology={"slice_required": HOST, "slice_size": 4}
        ).topology.slice_size
        == 4
    )
    assert (
        _error(accelerator=TPU_V5P, num_slices=2, queue="q", topology={"slice_required": HOST, "slice_size": 16}).field
        == "topology.slice_size"
    )


@pytest.mark.parametrize("workload", ["jobset", "indexed-job"])
def test_queue_provisioning_annotates_the_job_object_and_targets_queued_nodes(workload, crd_schema):
    """Kueue copies the job object's provreq.kueue.x-k8s.io/* annotations into the
    ProvisioningRequest (pkg/controller/jobframework/utils.go); GKE taints queued-provisioning
    nodes cloud.google.com/gke-queued (GKE samples ai-ml/gke-ray/tpu/dws tolerate it) and xpk
    selects them by that label for flex-start."""
    spec = _spec(
        accelerator={"cpu": {"hosts": 2}},
        workload=workload,
        queue="team-a",
        queue_provisioning={"max_run_duration_seconds": 3600},
    )
    rendered = R.render(spec)
    _valid(rendered, crd_schema)
    job = rendered.objects[-1]
    assert job["metadata"]["annotations"]["provreq.kueue.x-k8s.io/maxRunDurationSeconds"] == "3600"
    pod = (job["spec"]["replicatedJobs"][0]["template"]["spec"] if workload == "jobset" else job["spec"])["template"]
    assert pod["spec"]["nodeSelector"]["cloud.google.com/gke-queued"] == "true"
    assert {"key": "cloud.google.com/gke-queued", "operator": "Exists", "effect": "NoSchedule"} in pod["spec"][
        "tolerations"
    ]
    assert not any(k.startswith("provreq.") for k in pod["metadata"].get("annotations", {}))


def test_queue_provisioning_without_a_duration_adds_no_annotation():
    (jobset,) = R.render(_spec(queue="q", queue_provisioning={})).objects
    assert not any(k.startswith("provreq.") for k in jobset["metadata"]["annotations"])
    pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert pod["spec"]["nodeSelector"]["cloud.google.com/gke-queued"] == "true"


def test_without_kueue_fields_nothing_of_theirs_is_rendered():
    (jobset,) = R.render(_spec(queue="team-a")).objects
    pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert "kueue.x-k8s.io/priority-class" not in jobset["metadata"]["labels"]
    assert not any(k.startswith("kueue.x-k8s.io/") for k in pod["metadata"].get("annotations", {}))
    assert not any(k.startswith("provreq.") for k in jobset["metadata"]["annotations"])
    assert "cloud.google.com/gke-queued" not in pod["spec"].get("nodeSelector", {})


# ----------------------------------------------------------------------------- before the first create

NS = "team-a"


@pytest.fixture
def fake(tmp_path, monkeypatch):
    with FakeKubernetes(namespace=NS) as server:
        yield use_cluster(server, tmp_path, monkeypatch, fast_retry(FakeClock()))


def _submit(**fields) -> None:
    spec = S.spec_from_dict(
        spec_dict(namespace=NS, accelerator={"cpu": {"hosts": 2}}, checkpoint_dir="gs://ckpt/lm", **fields)
    )
    with K.KubernetesBackend(retry=fast_retry(FakeClock())) as b:
        b.submit(spec)


def test_a_missing_workload_priority_class_is_refused_before_anything_is_created(fake):
    fake.kueue("team-a", priority_classes=("low",))
    with pytest.raises(BackendError) as info:
        _submit(**KUEUE)
    message = str(info.value)
    assert "no WorkloadPriorityClass 'high'" in message and "kubectl get workloadpriorityclasses" in message
    assert "\n" not in message and fake.calls("POST") == []


def test_an_existing_workload_priority_class_is_read_and_the_job_created(fake):
    fake.kueue("team-a", priority_classes=("high",))
    _submit(**KUEUE)
    assert fake.get("jobsets", "lm")["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "high"
    assert ("kueue.x-k8s.io", "workloadpriorityclasses", "get") in fake.rbac_used


def test_without_kueue_the_priority_class_is_refused(fake):
    fake.kueue()
    fake._real.local_queues = None  # no Kueue API at all: the queue check says so first
    with pytest.raises(BackendError, match=r"queue: team-a, but Kueue is not installed"):
        _submit(**KUEUE)
    assert fake.calls("POST") == []


def test_a_role_that_cannot_read_priority_classes_skips_the_check(fake, caplog):
    """WorkloadPriorityClasses are cluster-scoped: a namespaced Role cannot grant reading them.
    Forbidden is logged and the job is submitted (as for the LocalQueue check)."""
    fake.kueue("team-a")  # no class: the check, had it run, would refuse
    fake.set_role([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}])  # no ClusterRole
    with caplog.at_level(logging.INFO):
        _submit(**KUEUE)
    assert fake.get("jobsets", "lm") is not None
    assert any("cannot read WorkloadPriorityClass high (forbidden)" in r.getMessage() for r in caplog.records)


def _kueue_paths(fake) -> list[str]:
    return [r.path for r in fake.calls("GET") if r.path.startswith("/apis/kueue.x-k8s.io/")]


@pytest.mark.parametrize(
    "served,used",
    [
        (("v1beta1",), "v1beta1"),  # Kueue before 0.15
        (("v1beta2", "v1beta1"), "v1beta2"),  # Kueue 0.15: v1beta2 preferred, v1beta1 kept
        (("v1beta2",), "v1beta2"),  # a release that no longer serves v1beta1
    ],
)
def test_kueue_is_read_in_the_version_discovery_prefers(fake, served, used):
    fake.kueue("team-a", priority_classes=("high",), versions=served)
    _submit(**KUEUE)
    paths = _kueue_paths(fake)
    assert {p.split("/")[3] for p in paths} == {used}
    assert any("/localqueues/team-a" in p for p in paths)
    assert any("/workloadpriorityclasses/high" in p for p in paths)
    assert fake.get("jobsets", "lm") is not None


def test_a_kueue_serving_no_known_version_is_refused_in_one_line(fake):
    fake.kueue("team-a", priority_classes=("high",), versions=("v2",))
    with pytest.raises(BackendError) as info:
        _submit(**KUEUE)
    message = str(info.value)
    assert "Kueue serves v2, none of v1beta2, v1beta1" in message and "\n" not in message
    assert fake.calls("POST") == []
