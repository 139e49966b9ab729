"""Rendering: JobSet and Indexed Job + Service follow k8s-conventions.md, validate against the
official schemas, honour roxxel.distributed's environment contract, and are injection-proof.

No Kubernetes API server runs here: built-in kinds are checked offline with
kubernetes-validate (strict), JobSets against the JobSet CRD's OpenAPI schema
(tests/fixtures/k8s, with unknown fields rejected) using jsonschema.
"""

from __future__ import annotations

import functools
import json
import re

import jinja2
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from roxxel import distributed
from roxxel_launch import render as R
from roxxel_launch import spec as S
from roxxel_launch.render import yaml_quoting
from roxxel_launch import validate as V
from support.k8s_schema import assert_official

from support.paths import JOBSET_CRD as CRD
from support.specs import NO_NETWORK_POLICY, job_spec

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@pytest.fixture(scope="module")
def crd_schema() -> dict:
    return V.jobset_crd_schema(yaml.load(CRD.read_text(), Loader=_LOADER))


_spec = functools.partial(job_spec, security=NO_NETWORK_POLICY)


CASES = {
    "cpu-1-host": _spec(),
    "tpu-v5p-2x2x4-2-slices": _spec(
        accelerator={"tpu": {"type": "v5p", "topology": "2x2x4"}},
        num_slices=2,
        checkpoint_dir="gs://ckpt/lm",
        service_account="trainer",
        queue="team-a",
        priority_class="high",
        termination_grace_period=600,
        max_restarts=5,
    ),
    "tpu-v5e-4x4-2-slices-gcsfuse": _spec(
        accelerator={"tpu": {"type": "v5e", "topology": "4x4"}},
        num_slices=2,
        data={"gcsfuse": {"bucket": "my-data", "only_dir": "shards/v1"}},
        service_account="trainer",
    ),
    "tpu-v6e-single-host": _spec(accelerator={"tpu": {"type": "v6e", "topology": "2x4"}}),
    "gpu-2-hosts-8xh100-nfs": _spec(
        accelerator={"gpu": {"type": "nvidia-h100-80gb", "count": 8, "hosts": 2}},
        data={"nfs": {"server": "10.0.0.2", "path": "/vol1/data"}},
        resources={"requests": {"cpu": 200, "memory": "1800Gi"}},
        node_selectors={"cloud.google.com/gke-nodepool": "h100"},
        tolerations=[{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}],
    ),
    "cpu-pvc": _spec(
        accelerator={"cpu": {"hosts": 2}},
        data={"pvc": {"claim": "shared-data"}},
        checkpoint_dir="/ckpt",
        volumes=[{"name": "ckpt", "mount_path": "/ckpt", "read_only": False, "pvc": "checkpoints"}],
    ),
    "indexed-job-cpu-4-hosts": _spec(
        accelerator={"cpu": {"hosts": 4}},
        workload="indexed-job",
        queue="team-a",
        data={"pvc": {"claim": "shared-data"}},
    ),
    "indexed-job-tpu-v5p": _spec(accelerator={"tpu": {"type": "v5p", "topology": "2x2x2"}}, workload="indexed-job"),
}


def _pod(obj: dict) -> dict:
    if obj["kind"] == "JobSet":
        return obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    return obj["spec"]["template"]


def _job_spec(obj: dict) -> dict:
    if obj["kind"] == "JobSet":
        return obj["spec"]["replicatedJobs"][0]["template"]["spec"]
    return obj["spec"]


def _workload(rendered: R.Rendered) -> dict:
    return rendered.objects[-1]


@pytest.mark.parametrize("case", CASES)
def test_rendered_manifests_validate(case, crd_schema):
    """Offline schema checks (no API server): kubernetes-validate strict + JobSet CRD schema."""
    rendered = R.render(CASES[case])
    assert list(yaml.load_all(rendered.yaml, Loader=_LOADER)) == list(rendered.objects)
    assert_official(rendered.objects, crd_schema)


@pytest.mark.parametrize("case", CASES)
def test_conventions_common_to_both_kinds(case):
    spec = CASES[case]
    obj = _workload(R.render(spec))
    job, pod = _job_spec(obj), _pod(obj)
    assert job["completionMode"] == "Indexed" and job["backoffLimit"] == 0
    assert job["parallelism"] == job["completions"] == spec.hosts_per_slice
    rules = job["podFailurePolicy"]["rules"]
    assert rules[0] == {
        "action": "FailJob",
        "onExitCodes": {"containerName": "worker", "operator": "In", "values": [78]},
    }
    assert rules[1] == {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    assert rules[2]["onExitCodes"] == {"containerName": "worker", "operator": "In", "values": [42]}
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["terminationGracePeriodSeconds"] == spec.termination_grace_period
    (container,) = pod["spec"]["containers"]
    assert container["command"] == ["roxxel-worker", "--"]
    assert container["args"] == list(spec.command)
    assert {"name": "dshm", "emptyDir": {"medium": "Memory"}} in pod["spec"]["volumes"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    assert obj["metadata"]["labels"]["roxxel.dev/run-name"] == spec.run_name
    assert json.loads(obj["metadata"]["annotations"]["roxxel.dev/spec"]) == S.spec_to_dict(spec)


def test_jobset_failure_policy_network_and_scheduling():
    spec = CASES["tpu-v5p-2x2x4-2-slices"]
    (obj,) = R.render(spec).objects
    assert obj["apiVersion"] == "jobset.x-k8s.io/v1alpha2"
    assert obj["spec"]["network"] == {"enableDNSHostnames": True, "publishNotReadyAddresses": True, "subdomain": "lm"}
    assert obj["spec"]["coordinator"] == {"replicatedJob": "slice", "jobIndex": 0, "podIndex": 0}
    assert obj["spec"]["failurePolicy"] == {
        "maxRestarts": 5,
        "restartStrategy": "BlockingRecreate",
        "rules": [
            {
                "name": "configError",
                "action": "FailJobSet",
                "onJobFailureReasons": ["PodFailurePolicy"],
                "onJobFailureMessagePatterns": ["failed with exit code 78 matching FailJob rule at index 0"],
            },
            {
                "name": "preemption",
                "action": "RestartJobSetAndIgnoreMaxRestarts",
                "onJobFailureReasons": ["PodFailurePolicy"],
            },
        ],
    }
    (rjob,) = obj["spec"]["replicatedJobs"]
    assert rjob["replicas"] == 2
    assert obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert (
        obj["metadata"]["annotations"]["alpha.jobset.sigs.k8s.io/exclusive-topology"] == "cloud.google.com/gke-nodepool"
    )
    pod = _pod(obj)["spec"]
    assert pod["serviceAccountName"] == "trainer" and pod["priorityClassName"] == "high"
    assert pod["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v5p-slice",
        "cloud.google.com/gke-tpu-topology": "2x2x4",
    }
    assert pod["tolerations"] == [{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}]
    resources = pod["containers"][0]["resources"]
    assert resources["limits"] == resources["requests"] == {"google.com/tpu": "4"}
    assert "subdomain" not in pod  # the JobSet controller sets it


def test_single_host_tpu_and_gpu_need_no_exclusive_topology():
    for case in ("tpu-v6e-single-host", "gpu-2-hosts-8xh100-nfs", "cpu-1-host"):
        obj = _workload(R.render(CASES[case]))
        assert "alpha.jobset.sigs.k8s.io/exclusive-topology" not in obj["metadata"]["annotations"]
    pod = _pod(_workload(R.render(CASES["tpu-v6e-single-host"])))["spec"]
    assert pod["containers"][0]["resources"]["limits"] == {"google.com/tpu": "8"}


def test_gpu_selectors_resources_tolerations_and_nfs():
    pod = _pod(_workload(R.render(CASES["gpu-2-hosts-8xh100-nfs"])))["spec"]
    assert pod["nodeSelector"] == {
        "cloud.google.com/gke-accelerator": "nvidia-h100-80gb",
        "cloud.google.com/gke-nodepool": "h100",
    }
    # GKE's maintenance handler taints a GPU node before host maintenance; Google's GPU
    # recipes tolerate it (AI-Hypercomputer/gpu-recipes src/helm-charts/a3mega/job).
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "cloud.google.com/impending-node-termination", "operator": "Exists"},
        {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
    ]
    resources = pod["containers"][0]["resources"]
    assert resources["limits"] == {"nvidia.com/gpu": "8"}
    assert resources["requests"] == {"cpu": "200", "memory": "1800Gi", "nvidia.com/gpu": "8"}
    assert {"name": "data", "nfs": {"server": "10.0.0.2", "path": "/vol1/data", "readOnly": True}} in pod["volumes"]
    assert {"name": "data", "mountPath": "/data", "readOnly": True} in pod["containers"][0]["volumeMounts"]


@pytest.mark.parametrize("key", ["cloud.google.com/gke-spot", "cloud.google.com/gke-preemptible"])
def test_spot_node_selector_tolerates_the_spot_taint_once(key):
    toleration = {"key": key, "operator": "Equal", "value": "true", "effect": "NoSchedule"}
    spec = S.spec_from_dict(
        {
            **S.spec_to_dict(CASES["tpu-v6e-single-host"]),
            "node_selectors": {key: "true"},
            "termination_grace_period": 30,
        }
    )
    assert toleration in _pod(_workload(R.render(spec)))["spec"]["tolerations"]
    # Given by the user too: rendered once.
    spec = S.spec_from_dict({**S.spec_to_dict(spec), "tolerations": [{**toleration}]})
    assert _pod(_workload(R.render(spec)))["spec"]["tolerations"].count(toleration) == 1
    # "false" (or no selector) asks for standard nodes: no toleration.
    spec = S.spec_from_dict({**S.spec_to_dict(spec), "node_selectors": {key: "false"}, "tolerations": []})
    assert all(t["key"] != key for t in _pod(_workload(R.render(spec)))["spec"]["tolerations"])


def test_gcsfuse_annotation_and_read_only_inline_volume():
    pod = _pod(_workload(R.render(CASES["tpu-v5e-4x4-2-slices-gcsfuse"])))
    assert pod["metadata"]["annotations"] == {
        "kubectl.kubernetes.io/default-container": "worker",
        "roxxel.dev/pod-security": "baseline",
        "gke-gcsfuse/volumes": "true",
        "gke-gcsfuse/cpu-limit": "0",
        "gke-gcsfuse/memory-limit": "0",
        "gke-gcsfuse/ephemeral-storage-limit": "0",
    }
    assert {
        "name": "data",
        "csi": {
            "driver": "gcsfuse.csi.storage.gke.io",
            "readOnly": True,
            "volumeAttributes": {"bucketName": "my-data", "mountOptions": "implicit-dirs,only-dir:shards/v1"},
        },
    } in pod["spec"]["volumes"]
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["ROXXEL_DATA_DIR"] == "/data"


def test_pvc_is_read_only():
    pod = _pod(_workload(R.render(CASES["cpu-pvc"])))["spec"]
    assert {"name": "data", "persistentVolumeClaim": {"claimName": "shared-data", "readOnly": True}} in pod["volumes"]


def test_indexed_job_and_headless_service():
    service, job = R.render(CASES["indexed-job-cpu-4-hosts"]).objects
    assert (service["kind"], job["kind"]) == ("Service", "Job")
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    pod = job["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert pod["spec"]["subdomain"] == service["metadata"]["name"]
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert "kueue.x-k8s.io/queue-name" not in service["metadata"]["labels"]


def _downward(env_list: list[dict], labels: dict, completion_index: int) -> dict[str, str]:
    """The environment a pod sees: literal values, label/annotation fieldRefs, JOB_COMPLETION_INDEX."""
    env = {distributed.ENV_JOB_COMPLETION_INDEX: str(completion_index)}
    for var in env_list:
        if "value" in var:
            env[var["name"]] = var["value"]
        else:
            path = var["valueFrom"]["fieldRef"]["fieldPath"]
            key = re.fullmatch(r"metadata\.(?:labels|annotations)\['(.+)'\]", path).group(1)
            env[var["name"]] = labels[key]
    return env


def test_jobset_env_gives_every_pod_a_distinct_process_id():
    spec = CASES["tpu-v5p-2x2x4-2-slices"]
    (obj,) = R.render(spec).objects
    env_list = _pod(obj)["spec"]["containers"][0]["env"]
    seen = set()
    for slice_index in range(spec.num_slices):
        labels = {
            "jobset.sigs.k8s.io/jobset-name": "lm",
            "jobset.sigs.k8s.io/replicatedjob-name": "slice",
            "jobset.sigs.k8s.io/job-index": str(slice_index),
            "jobset.sigs.k8s.io/restart-attempt": "0",
        }
        for host in range(spec.hosts_per_slice):
            found = distributed.detect(_downward(env_list, labels, host))
            assert found.source == "jobset"
            assert found.num_processes == spec.num_processes == 8
            assert found.coordinator_address == "lm-slice-0-0.lm:8476"
            seen.add(found.process_id)
    assert seen == set(range(8))


def test_indexed_job_env_matches_the_worker_contract():
    _, job = R.render(CASES["indexed-job-cpu-4-hosts"]).objects
    env_list = job["spec"]["template"]["spec"]["containers"][0]["env"]
    ids = set()
    for index in range(4):
        found = distributed.detect(_downward(env_list, {}, index))
        assert (found.source, found.num_processes) == ("indexed-job", 4)
        assert found.coordinator_address == "lm-0.lm:8476"
        ids.add(found.process_id)
    assert ids == {0, 1, 2, 3}


def test_commands_and_env_values_are_passed_literally():
    spec = _spec(command=["bash", "-c", "echo $(HOME) $$ $X"], env={"GREETING": "$(USER)"})
    container = _pod(_workload(R.render(spec)))["spec"]["containers"][0]
    # Kubernetes reads $$ as a literal $, so the process sees exactly the spec's text.
    assert container["args"][2] == "echo $$(HOME) $$$$ $$X"
    assert {"name": "GREETING", "value": "$$(USER)"} in container["env"]


def test_templates_refuse_values_without_the_quote_filter():
    env = yaml_quoting.environment()
    with pytest.raises(jinja2.TemplateError, match="without the q filter"):
        env.from_string("name: {{ name }}").render(name="x")
    assert env.from_string("name: {{ name | q }}").render(name="a: b") == 'name: "a: b"'


# --------------------------------------------------------------------------- injection

HOSTILE = [
    '"',
    "'",
    "\\",
    "\n",
    "\r\n",
    "\t",
    "{{ name }}",
    "{% if true %}x{% endif %}",
    "{#",
    "&a",
    "*a",
    "&a x\n*a",
    ": ",
    "a: b",
    "#",
    " #c",
    "- x",
    "-",
    "---",
    "...",
    "? k",
    "|",
    ">",
    "!!python/object:os.system",
    "%YAML 1.1",
    "@",
    "`",
    "[",
    "]",
    "{",
    "}",
    ",",
    "~",
    "null",
    "true",
    "0x1F",
    "1e3",
    "\u2028",
    "\u0085",
    "\ufeff",
    "\x7f",
    "\x00",
    "\ud800",
    "é",
    "😀",
    '"}]\nkind: Secret\n',
    "a\n  injected: true",
    '\\"',
    "$(HOME)",
    "$$",
    "/x\n- y: z",
    '/p/"a: b" #c',
    "/{{ x }}",
    'gs://bkt/a"\n&b: *c',
    "gs://bkt/{% raw %}",
    "2001:db8::1",
    "10.0.0.2",
    "nfs.example.com",
]
_TEXT = st.one_of(
    st.sampled_from(HOSTILE),
    st.text(max_size=20),
    st.lists(st.sampled_from(HOSTILE + ["a", "0", "-", "."]), max_size=5).map("".join),
)


def _set(path: str):
    def setter(data: dict, value: str) -> None:
        *parents, last = path.split(".")
        node = data
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value

    return setter


def _set_in_list(key: str, index: int, template: list):
    def setter(data: dict, value: str) -> None:
        items = list(template)
        items[index] = value
        data[key] = items

    return setter


def _set_nested(key: str, build):
    def setter(data: dict, value: str) -> None:
        data[key] = build(value)

    return setter


# (field, setter, a valid value for the baseline rendering)
FIELDS = [
    ("apiVersion", _set("apiVersion"), "roxxel.dev/v1alpha1"),
    ("kind", _set("kind"), "RoxxelJob"),
    ("name", _set("name"), "lm"),
    ("namespace", _set("namespace"), "ml"),
    ("image", _set("image"), "img:1"),
    ("command[0]", _set_in_list("command", 0, ["python", "x"]), "python"),
    ("command[1]", _set_in_list("command", 1, ["python", "x"]), "x"),
    ("accelerator.tpu.type", _set_nested("accelerator", lambda v: {"tpu": {"type": v, "topology": "2x2x2"}}), "v5p"),
    ("accelerator.tpu.topology", _set_nested("accelerator", lambda v: {"tpu": {"type": "v5e", "topology": v}}), "4x4"),
    ("accelerator.gpu.type", _set_nested("accelerator", lambda v: {"gpu": {"type": v, "count": 1}}), "nvidia-l4"),
    ("env value", _set("env.FOO"), "bar"),
    ("env name", _set_nested("env", lambda v: {v: "x"}), "FOO"),
    ("data.gcsfuse.bucket", _set_nested("data", lambda v: {"gcsfuse": {"bucket": v}}), "bkt"),
    ("data.gcsfuse.only_dir", _set_nested("data", lambda v: {"gcsfuse": {"bucket": "bkt", "only_dir": v}}), "d"),
    (
        "data.gcsfuse.mount_options",
        _set_nested("data", lambda v: {"gcsfuse": {"bucket": "bkt", "mount_options": [v]}}),
        "ro",
    ),
    ("data.nfs.server", _set_nested("data", lambda v: {"nfs": {"server": v, "path": "/p"}}), "h"),
    ("data.nfs.path", _set_nested("data", lambda v: {"nfs": {"server": "h", "path": v}}), "/p"),
    ("data.pvc.claim", _set_nested("data", lambda v: {"pvc": {"claim": v}}), "c"),
    ("checkpoint_dir", _set("checkpoint_dir"), "gs://bkt/x"),
    ("run_name", _set("run_name"), "r"),
    ("service_account", _set("service_account"), "sa"),
    ("queue", _set("queue"), "q"),
    ("priority_class", _set("priority_class"), "p"),
    ("workload_priority_class", lambda d, v: d.update(queue="q", workload_priority_class=v), "p"),
    ("topology.required", lambda d, v: d.update(queue="q", topology={"required": v}), "kubernetes.io/hostname"),
    ("topology.preferred", lambda d, v: d.update(queue="q", topology={"preferred": v}), "kubernetes.io/hostname"),
    ("workload", _set("workload"), "jobset"),
    ("resources name", _set_nested("resources", lambda v: {"limits": {v: "1"}}), "cpu"),
    ("resources quantity", _set_nested("resources", lambda v: {"limits": {"cpu": v}}), "1"),
    ("node_selectors key", _set_nested("node_selectors", lambda v: {v: "x"}), "pool"),
    ("node_selectors value", _set_nested("node_selectors", lambda v: {"pool": v}), "x"),
    ("tolerations key", _set_nested("tolerations", lambda v: [{"key": v, "operator": "Exists"}]), "k"),
    ("tolerations value", _set_nested("tolerations", lambda v: [{"key": "k", "value": v}]), "v"),
    ("tolerations operator", _set_nested("tolerations", lambda v: [{"key": "k", "operator": v}]), "Exists"),
    ("tolerations effect", _set_nested("tolerations", lambda v: [{"key": "k", "effect": v}]), "NoSchedule"),
]


def _raw(field_index: int, value: str, workload: str) -> dict:
    data = {
        "apiVersion": "roxxel.dev/v1alpha1",
        "kind": "RoxxelJob",
        "name": "lm",
        "image": "img:1",
        "command": ["python", "x"],
        "accelerator": {"cpu": {"hosts": 2}},
        "workload": workload,
    }
    FIELDS[field_index][1](data, value)
    return data


def _shape(node, hostile: str, baseline: str):
    """The structure of a document: keys and nesting, with every string leaf abstracted.

    A key equal to the hostile or the baseline value (a field used as a key, or a real key
    such as "kind" that the value happens to spell) becomes "<key>" in both documents.
    """
    if isinstance(node, dict):
        return {("<key>" if k in (hostile, baseline) else k): _shape(v, hostile, baseline) for k, v in node.items()}
    if isinstance(node, list):
        return [_shape(v, hostile, baseline) for v in node]
    return "<str>" if isinstance(node, str) else node


def _check_injection(field_index: int, value: str, workload: str) -> None:
    field, _, baseline_value = FIELDS[field_index]
    try:
        spec = S.spec_from_dict(_raw(field_index, value, workload))
    except S.SpecError as err:
        # Rejected: the error names a field and says what is wrong.
        assert err.field and err.problem
        return
    # cluster=False: a local checkpoint_dir is refused for clusters, not an injection matter.
    rendered = R.render(spec, cluster=False)
    baseline = R.render(S.spec_from_dict(_raw(field_index, baseline_value, workload)), cluster=False)
    parsed = list(yaml.load_all(rendered.yaml, Loader=_LOADER))
    assert parsed == list(rendered.objects)
    assert [_shape(o, value, baseline_value) for o in parsed] == [
        _shape(o, value, baseline_value) for o in baseline.objects
    ], field
    workload_obj = parsed[-1]
    # Every field's value survives exactly (the spec annotation holds all of them) ...
    assert json.loads(workload_obj["metadata"]["annotations"]["roxxel.dev/spec"]) == (S.spec_to_dict(spec))
    # ... and free-text fields land where they belong, literally.
    container = _pod(workload_obj)["spec"]["containers"][0]
    literal = value.replace("$", "$$")
    if field.startswith("command"):
        assert literal in container["args"]
    if field == "env value":
        assert {"name": "FOO", "value": literal} in container["env"]
    if field == "image":
        assert container["image"] == value


@pytest.mark.slow
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(field_index=st.integers(0, len(FIELDS) - 1), value=_TEXT)
def test_hostile_strings_never_change_the_structure(field_index, value):
    _check_injection(field_index, value, "jobset")


@pytest.mark.parametrize("field_index", range(len(FIELDS)), ids=[f[0] for f in FIELDS])
def test_hostile_corpus_in_every_field_of_both_kinds(field_index):
    for workload in ("jobset", "indexed-job"):
        for value in HOSTILE:
            _check_injection(field_index, value, workload)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_quote_is_read_back_exactly_by_yaml_and_json(text):
    if re.search("[\ud800-\udfff]", text):
        with pytest.raises(ValueError):
            R.quote(text)
        return
    quoted = R.quote(text)
    assert "\n" not in quoted
    assert yaml.load(f"k: {quoted}", Loader=_LOADER) == {"k": text}
    assert json.loads(quoted) == text


def test_quote_structured_values():
    value = {"a": [1, True, None, "x: y"], "b": {"c": "#"}}
    assert yaml.safe_load(R.quote(value)) == value
    with pytest.raises(TypeError, match="float"):
        R.quote(1.5)
