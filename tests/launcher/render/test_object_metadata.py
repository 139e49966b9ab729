"""The job object's own labels and annotations (``metadata``): on the JobSet / Job only, keys
and values checked as Kubernetes checks them, roxxel-launch's own keys refused in one line,
and no value able to change the shape of the manifest."""

from __future__ import annotations

import pytest
import yaml

from roxxel_launch import render as R
from roxxel_launch import spec as S
from roxxel_launch import validate as V
from support.k8s_schema import assert_official
from support.paths import JOBSET_CRD
from support.specs import NO_NETWORK_POLICY, spec_dict

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def crd_schema() -> dict:
    return V.jobset_crd_schema(yaml.safe_load(JOBSET_CRD.read_text()))


def _error(**fields) -> S.SpecError:
    with pytest.raises(S.SpecError) as info:
        S.spec_from_dict(spec_dict(**fields))
    return info.value


@pytest.mark.parametrize("workload", ["jobset", "indexed-job"])
def test_they_go_on_the_job_object_only(workload, crd_schema):
    spec = S.spec_from_dict(
        spec_dict(
            workload=workload,
            security=NO_NETWORK_POLICY,
            labels={"team": "a"},
            metadata={
                "labels": {"example.com/cost-center": "ml-42"},
                "annotations": {"example.com/owner": "Jo <jo@example.com>", "note": ""},
            },
        )
    )
    rendered = R.render(spec)
    assert_official(list(rendered.objects), crd_schema)
    job = rendered.objects[-1]
    assert job["metadata"]["labels"]["example.com/cost-center"] == "ml-42"
    assert job["metadata"]["labels"]["team"] == "a"
    assert job["metadata"]["annotations"]["example.com/owner"] == "Jo <jo@example.com>"
    assert job["metadata"]["annotations"]["note"] == ""
    assert "roxxel.dev/spec" in job["metadata"]["annotations"]
    pods = [job["spec"]["replicatedJobs"][0]["template"]] if workload == "jobset" else []
    pods.append(
        job["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
        if workload == "jobset"
        else job["spec"]["template"]
    )
    if workload == "indexed-job":
        pods.append(rendered.objects[0])  # the Service
    for meta in (p["metadata"] for p in pods):
        assert "example.com/cost-center" not in meta.get("labels", {})
        assert "example.com/owner" not in meta.get("annotations", {})


@pytest.mark.parametrize("value", ['x"\n  injected: true', "a: b\n---\nkind: Secret", "{{ x }} $(HOME) #"])
def test_an_annotation_value_cannot_change_the_manifests_shape(value):
    spec = S.spec_from_dict(spec_dict(metadata={"annotations": {"example.com/note": value}}))
    rendered = R.render(spec)
    assert [o["kind"] for o in rendered.objects] == ["NetworkPolicy", "JobSet"]
    jobset = rendered.objects[-1]
    assert jobset["metadata"]["annotations"]["example.com/note"] == value
    assert "injected" not in jobset["metadata"]["annotations"]


@pytest.mark.parametrize(
    "metadata,field,message",
    [
        (
            {"labels": {"kueue.x-k8s.io/queue-name": "q"}},
            "metadata.labels.kueue.x-k8s.io/queue-name",
            "is set from queue. Set queue instead.",
        ),
        (
            {"labels": {"kueue.x-k8s.io/priority-class": "hi"}},
            "metadata.labels.kueue.x-k8s.io/priority-class",
            "is set from workload_priority_class",
        ),
        (
            {"annotations": {"provreq.kueue.x-k8s.io/maxRunDurationSeconds": "60"}},
            "metadata.annotations.provreq.kueue.x-k8s.io/maxRunDurationSeconds",
            "is set from queue_provisioning.max_run_duration_seconds",
        ),
        (
            {"annotations": {"provreq.kueue.x-k8s.io/ValidUntilSeconds": "60"}},
            "metadata.annotations.provreq.kueue.x-k8s.io/ValidUntilSeconds",
            "is read by Kueue only from a job it manages (one with queue)",
        ),
        (
            {"annotations": {"roxxel.dev/spec": "{}"}},
            "metadata.annotations.roxxel.dev/spec",
            "uses a key or prefix that roxxel-launch or its controllers own",
        ),
        (
            {"labels": {"app.kubernetes.io/managed-by": "me"}},
            "metadata.labels.app.kubernetes.io/managed-by",
            "roxxel-launch or its controllers own",
        ),
        (
            {"annotations": {"alpha.jobset.sigs.k8s.io/exclusive-topology": "x"}},
            "metadata.annotations.alpha.jobset.sigs.k8s.io/exclusive-topology",
            "controllers own",
        ),
        ({"labels": {"bad key": "x"}}, "metadata.labels.bad key", "not a qualified name"),
        ({"labels": {"ok": "not ok"}}, "metadata.labels.ok", "not a valid label value"),
        ({"labels": {"ok": "x" * 64}}, "metadata.labels.ok", "at most 63"),
        ({"annotations": {"Example.com/x": "1"}}, "metadata.annotations.Example.com/x", "DNS-1123 subdomain"),
        ({"labels": {"team": "b"}}, "metadata.labels.team", "is also in labels"),
    ],
)
def test_bad_or_owned_keys_are_one_line_naming_the_key(metadata, field, message):
    err = _error(metadata=metadata, labels={"team": "a"})
    assert err.field == field, str(err)
    assert message in str(err) and "\n" not in str(err)


def test_provisioning_request_parameters_pass_with_a_queue():
    spec = S.spec_from_dict(
        spec_dict(queue="q", metadata={"annotations": {"provreq.kueue.x-k8s.io/ValidUntilSeconds": "600"}})
    )
    (_, jobset) = R.render(spec).objects
    assert jobset["metadata"]["annotations"]["provreq.kueue.x-k8s.io/ValidUntilSeconds"] == "600"


def test_settable_with_set(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec_dict()))
    spec = S.load_spec(path, [r"metadata.labels.example\.com/tier=gold"])
    assert dict(spec.metadata.labels) == {"example.com/tier": "gold"}
