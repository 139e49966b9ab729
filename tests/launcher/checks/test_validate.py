"""Validation of rendered manifests, and the roxxel-launch CLI.

No Kubernetes API server runs here: built-in kinds are validated offline with
kubernetes-validate (strict mode), JobSets against the JobSet CRD's OpenAPI schema in
tests/fixtures/k8s with jsonschema, unknown fields rejected by the additionalProperties:
false that jobset_crd_schema adds. Enum values and the JobSet failure reasons, which those
schemas do not constrain, are checked explicitly by check_objects.
"""

from __future__ import annotations

import copy
import json
import pathlib
import subprocess
import sys
import time

import pytest
import yaml
from click.testing import CliRunner

from roxxel_launch import render as R
from roxxel_launch import spec as S
from roxxel_launch import validate as V
from roxxel_launch.cli import cli

from support.paths import REPO
from support.paths import JOBSET_CRD as CRD
from support.specs import NO_NETWORK_POLICY, TPU_V5P, spec_dict

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

SPEC = spec_dict(accelerator=TPU_V5P, num_slices=2, checkpoint_dir="gs://ckpt/lm", security=NO_NETWORK_POLICY)


@pytest.fixture(scope="module")
def crd() -> dict:
    return yaml.load(CRD.read_text(), Loader=_LOADER)


@pytest.fixture(scope="module")
def strict_schema(crd) -> dict:
    return V.jobset_crd_schema(crd)


def _jobset(**changes) -> dict:
    return copy.deepcopy(R.render(S.spec_from_dict({**SPEC, **changes})).objects[0])


def _pod_spec(jobset: dict) -> dict:
    return jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]


def test_crd_schema_rejects_unknown_fields_only_when_asked(crd, strict_schema):
    """The plain CRD schema (as a cluster prunes) accepts a typo; the strict one names it."""
    jobset = _jobset()
    jobset["spec"]["failurePolicy"]["maxRestart"] = 3
    _pod_spec(jobset)["containers"][0]["imagePullPolcy"] = "Always"
    assert V.check_jobset_crd(jobset, V.jobset_crd_schema(crd, reject_unknown_fields=False)) == []
    problems = V.check_jobset_crd(jobset, strict_schema)
    assert any("maxRestart" in p and "spec.failurePolicy" in p for p in problems)
    assert any("imagePullPolcy" in p for p in problems)


def test_crd_schema_checks_types_and_its_own_enums(strict_schema):
    jobset = _jobset()
    jobset["spec"]["failurePolicy"]["restartStrategy"] = "Sometimes"
    jobset["spec"]["replicatedJobs"][0]["replicas"] = "2"
    problems = V.check_jobset_crd(jobset, strict_schema)
    assert any("restartStrategy" in p and "Sometimes" in p for p in problems)
    assert any("replicas" in p for p in problems)
    with pytest.raises(ValueError, match="no version 'v9'"):
        V.jobset_crd_schema({"spec": {"versions": [{"name": "v1alpha2"}]}}, version="v9")


@pytest.mark.parametrize(
    "mutate,fragment",
    [
        (
            lambda j: j["spec"]["failurePolicy"]["rules"][0].update(onJobFailureReasons=["Preempted"]),
            "onJobFailureReasons: 'Preempted' is not one of",
        ),
        (lambda j: _pod_spec(j).update(restartPolicy="OnFailure"), "restartPolicy: 'OnFailure'"),
        (
            lambda j: j["spec"]["replicatedJobs"][0]["template"]["spec"]["podFailurePolicy"]["rules"][0].update(
                action="Restart"
            ),
            "action: 'Restart'",
        ),
        (lambda j: _pod_spec(j)["tolerations"][0].update(operator="Has"), "operator: 'Has'"),
        (lambda j: _pod_spec(j)["volumes"][0]["emptyDir"].update(medium="Disk"), "medium: 'Disk'"),
        (
            lambda j: j["spec"]["replicatedJobs"][0]["template"]["spec"].update(completionMode="NonIndexed"),
            "completionMode",
        ),
    ],
)
def test_enum_values_the_schemas_do_not_constrain(strict_schema, mutate, fragment):
    jobset = _jobset()
    mutate(jobset)
    problems = V.check_objects([jobset])
    assert any(fragment in p for p in problems), problems


def test_longest_pod_name_is_checked_on_the_objects():
    jobset = _jobset(name="a" * 47)
    assert V.check_objects([jobset]) == []
    jobset["spec"]["replicatedJobs"][0]["replicas"] = 11  # slice index 10: one more digit
    (problem,) = V.check_objects([jobset])
    assert "JobSet/" in problem and "plus its 6-character random suffix is 64" in problem


@pytest.mark.parametrize(
    "mutate,fragment",
    [
        (
            lambda j: _pod_spec(j)["containers"][0]["resources"]["limits"].update({"google.com/tpu": "8"}),
            "google.com/tpu=8 but a 2x2x4 tpu-v5p-slice host has 4 chips",
        ),
        (
            lambda j: j["spec"]["replicatedJobs"][0]["template"]["spec"].update(parallelism=2, completions=2),
            "2 pods per slice but topology 2x2x4 has 4 hosts",
        ),
        (
            lambda j: j["metadata"]["annotations"].pop("alpha.jobset.sigs.k8s.io/exclusive-topology"),
            "multi-host TPU slice needs",
        ),
        (
            lambda j: _pod_spec(j)["nodeSelector"].pop("cloud.google.com/gke-tpu-topology"),
            "needs cloud.google.com/gke-tpu-accelerator",
        ),
        (
            lambda j: _pod_spec(j)["nodeSelector"].update({"cloud.google.com/gke-tpu-topology": "4x4"}),
            "'4x4' is not a v5p topology",
        ),
    ],
)
def test_accelerator_topology_consistency(mutate, fragment):
    jobset = _jobset()
    mutate(jobset)
    problems = V.check_objects([jobset])
    assert any(fragment in p for p in problems), problems


V5E_2X4_TWO_HOSTS = {"tpu": {"type": "v5e", "topology": "2x4", "chips_per_host": 4}}


@pytest.mark.parametrize(
    "mutate",
    [
        lambda j: _pod_spec(j)["nodeSelector"].pop("node.kubernetes.io/instance-type"),
        lambda j: _pod_spec(j)["nodeSelector"].update({"node.kubernetes.io/instance-type": "ct5lp-hightpu-8t"}),
    ],
)
def test_two_host_2x4_pods_cannot_pack_onto_one_8_chip_host(mutate):
    # ct5lp-hightpu-4t and -8t nodes carry the same accelerator and topology labels.
    jobset = _jobset(accelerator=V5E_2X4_TWO_HOSTS, num_slices=1)
    assert V.check_objects([jobset]) == []
    mutate(jobset)
    (problem,) = V.check_objects([jobset])
    assert (
        "ct5lp-hightpu-4t and ct5lp-hightpu-8t hosts alike: select "
        "node.kubernetes.io/instance-type: ct5lp-hightpu-4t" in problem
    ), problem


@pytest.mark.parametrize(
    "resources,fragment",
    [
        (
            {"requests": {"cpu": "8"}, "limits": {"cpu": "2"}},
            "resources.requests.cpu: 8 is more than the cpu limit (2)",
        ),
        (
            {"requests": {"google.com/tpu": "2"}, "limits": {"google.com/tpu": "4"}},
            "must equal the google.com/tpu limit (4)",
        ),
        ({"requests": {"example.com/widget": "1"}}, "cannot be overcommitted"),
        ({"limits": {"memory": "lots"}}, "'lots' is not a non-negative resource quantity"),
    ],
)
def test_api_server_resource_rules_are_checked_on_the_objects(resources, fragment):
    # What a pod_patch (or a hand-edited manifest) could bring: the spec's own checks are past.
    jobset = _jobset()
    container = _pod_spec(jobset)["containers"][0]
    for section in ("requests", "limits"):
        container["resources"][section].update(resources.get(section, {}))
    problems = V.check_objects([jobset])
    assert any(fragment in p and "containers[0]" in p for p in problems), problems


def test_gpu_needs_its_selector_and_service_must_be_headless():
    jobset = _jobset(accelerator={"gpu": {"type": "nvidia-l4", "count": 1}}, num_slices=1)
    _pod_spec(jobset)["nodeSelector"].clear()
    assert any("needs cloud.google.com/gke-accelerator" in p for p in V.check_objects([jobset]))
    service, job = R.render(S.spec_from_dict({**SPEC, "workload": "indexed-job", "num_slices": 1})).objects
    service = copy.deepcopy(service)
    service["spec"]["clusterIP"] = "10.0.0.1"
    assert any("headless" in p for p in V.check_objects([service, job]))


def test_kubernetes_validate_catches_unknown_fields_in_built_in_kinds_and_child_jobs():
    """kubernetes-validate strict, offline (no API server)."""
    service, job = copy.deepcopy(
        R.render(S.spec_from_dict({**SPEC, "workload": "indexed-job", "num_slices": 1})).objects
    )
    job["spec"]["template"]["spec"]["containers"][0]["rezources"] = {}
    service["spec"]["clusterIp"] = "None"
    problems = V.check_schemas([service, job])
    assert any(p.startswith("Job/lm:") and "rezources" in p for p in problems)
    assert any(p.startswith("Service/lm:") and "clusterIp" in p for p in problems)
    jobset = _jobset()
    _pod_spec(jobset)["terminationGracePeriodSeconds"] = "300"
    (problem,) = V.check_schemas([jobset])
    assert "child Job" in problem and "terminationGracePeriodSeconds" in problem


def test_validate_raises_with_every_problem():
    jobset = _jobset()
    _pod_spec(jobset).update(restartPolicy="Always")
    jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["bogus"] = 1
    with pytest.raises(V.ManifestError) as info:
        V.validate([jobset])
    assert len(info.value.problems) == 2
    assert "restartPolicy" in str(info.value) and "bogus" in str(info.value)


def test_large_multislice_render_and_validate_is_fast(strict_schema):
    """256 slices x 4 hosts (v5e 4x4): the issue's target is < 1 s; generous bound here."""
    spec = S.spec_from_dict({**SPEC, "accelerator": {"tpu": {"type": "v5e", "topology": "4x4"}}, "num_slices": 256})
    start = time.perf_counter()
    rendered = R.render(spec)
    V.validate(rendered.objects)
    elapsed = time.perf_counter() - start
    assert V.check_jobset_crd(rendered.objects[0], strict_schema) == []
    assert rendered.objects[0]["spec"]["replicatedJobs"][0]["replicas"] == 256
    assert elapsed < 3.0, elapsed


# --------------------------------------------------------------------------- CLI


@pytest.fixture
def spec_file(tmp_path) -> pathlib.Path:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(SPEC))
    return path


def test_cli_render_prints_manifests_ready_for_kubectl(spec_file, tmp_path):
    result = CliRunner().invoke(cli, ["render", str(spec_file), "--set", "num_slices=3"])
    assert result.exit_code == 0, result.output
    (jobset,) = yaml.safe_load_all(result.output)
    assert jobset["kind"] == "JobSet" and jobset["spec"]["replicatedJobs"][0]["replicas"] == 3
    out = tmp_path / "out.yaml"
    result = CliRunner().invoke(cli, ["render", str(spec_file), "-o", str(out), "--no-schema"])
    assert result.exit_code == 0 and result.output == ""
    assert yaml.safe_load(out.read_text())["metadata"]["name"] == "lm"


def test_cli_validate(spec_file):
    result = CliRunner().invoke(cli, ["validate", str(spec_file)])
    assert result.exit_code == 0 and "ok: JobSet/lm" in result.output
    result = CliRunner().invoke(cli, ["validate", str(spec_file), "--set", "name=" + "a" * 50])
    assert result.exit_code == 1
    assert "invalid job spec: name:" in result.output and "Shorten name" in result.output
    result = CliRunner().invoke(cli, ["validate", str(spec_file), "--set", "accelerator.tpu.topology=4x4"])
    assert result.exit_code == 1 and "accelerator.tpu.topology" in result.output


def test_cli_schema_is_json():
    result = CliRunner().invoke(cli, ["schema"])
    assert result.exit_code == 0
    assert json.loads(result.output)["properties"]["workload"]["default"] == "jobset"


def test_cli_help_imports_nothing_heavy():
    code = (
        "import sys; from roxxel_launch.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = {'yaml', 'jinja2', 'kubernetes', 'jax', 'numpy', 'jsonschema'} & set(sys.modules)\n"
        "print(sorted(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


_REPO = REPO
EXAMPLES = sorted((_REPO / "k8s" / "examples").glob("*.yaml")) + [_REPO / "examples" / "lm" / "job.yaml"]


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_specs_render_and_validate(path, strict_schema):
    """Offline only (no API server): strict built-in schemas and the JobSet CRD schema."""
    rendered = R.render(S.load_spec(path))
    V.validate(rendered.objects)
    for obj in rendered.objects:
        if obj["kind"] == "JobSet":
            assert V.check_jobset_crd(obj, strict_schema) == []


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_specs_fit_their_default_nodes(path, caplog):
    """No example needs more node ephemeral storage than it says its nodes have (default: a
    100 GB boot disk), so none is left Pending or evicted for its file cache."""
    spec = S.load_spec(path)
    node = (
        S.parse_quantity(spec.node_ephemeral_storage)
        if spec.node_ephemeral_storage
        else S.DEFAULT_NODE_EPHEMERAL_STORAGE
    )
    assert spec.ephemeral_storage_bytes <= node
    with caplog.at_level("WARNING", logger="roxxel_launch.render"):
        R.render(spec)
    assert "ephemeral storage" not in caplog.text


def test_examples_are_found():
    assert {p.name for p in EXAMPLES} >= {"cpu-smoke.yaml", "gpu-h100-nfs.yaml", "tpu-v5p-multislice.yaml", "job.yaml"}
