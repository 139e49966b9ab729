"""Job spec (roxxel.dev/v1alpha1): parsing, --set overrides, validation errors, TPU table, schema."""

from __future__ import annotations

import dataclasses
import functools
import typing

import pytest
import yaml

from roxxel_launch import spec as S
from roxxel_launch import tpu

from support.specs import TPU_V5P, spec_dict


_base = functools.partial(spec_dict, accelerator=TPU_V5P, num_slices=2)


def _error(data: dict, overrides=()) -> S.SpecError:
    with pytest.raises(S.SpecError) as info:
        S.spec_from_dict(data, overrides)
    return info.value


def test_minimal_spec_gets_documented_defaults():
    spec = S.spec_from_dict(_base(accelerator="cpu", num_slices=1))
    assert spec.accelerator.cpu == S.CpuAccelerator(hosts=1)
    assert (spec.namespace, spec.run_name, spec.workload) == ("default", "lm", "jobset")
    assert (spec.max_restarts, spec.termination_grace_period) == (3, 300)
    assert spec.num_processes == 1 and spec.data is None and spec.checkpoint_dir is None


def test_spec_is_frozen_and_round_trips_through_plain_data():
    spec = S.spec_from_dict(
        _base(
            env={"A": "1"},
            data={"nfs": {"server": "10.0.0.2", "path": "/v"}},
            tolerations=[{"key": "k", "operator": "Exists"}],
        )
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.name = "other"
    with pytest.raises(TypeError):
        spec.env["B"] = "2"
    assert S.spec_from_dict(S.spec_to_dict(spec)) == spec


@pytest.mark.parametrize(
    "type_name,topology,hosts,chips_per_host",
    [
        ("v4", "2x2x1", 1, 4),
        ("v4", "2x2x4", 4, 4),
        ("v4", "4x4x8", 32, 4),
        ("v5e", "1x1", 1, 1),
        ("v5e", "2x4", 1, 8),
        ("v5e", "4x4", 4, 4),
        ("v5e", "16x16", 64, 4),
        ("v5p", "2x2x1", 1, 4),
        ("v5p", "2x2x2", 2, 4),
        ("v5p", "4x4x4", 16, 4),
        ("v5p", "16x16x24", 1536, 4),
        ("v6e", "2x2", 1, 4),
        ("v6e", "8x16", 32, 4),
    ],
)
def test_hosts_per_slice_come_from_the_tpu_table(type_name, topology, hosts, chips_per_host):
    shape = tpu.tpu_slice(type_name, topology)
    assert (shape.hosts, shape.chips_per_host) == (hosts, chips_per_host)
    assert shape.hosts * shape.chips_per_host == shape.chips
    spec = S.spec_from_dict(_base(accelerator={"tpu": {"type": type_name, "topology": topology}}, name="x"))
    assert spec.hosts_per_slice == hosts and spec.num_processes == 2 * hosts


def test_gke_accelerator_names():
    assert {t: tpu.TPU_TYPES[t].gke_accelerator for t in tpu.TPU_TYPES} == {
        "v4": "tpu-v4-podslice",
        "v5e": "tpu-v5-lite-podslice",
        "v5p": "tpu-v5p-slice",
        "v6e": "tpu-v6e-slice",
        "tpu7x": "tpu7x",
    }


def test_gpu_and_cpu_hosts_are_explicit():
    gpu = S.spec_from_dict(
        _base(accelerator={"gpu": {"type": "nvidia-h100-80gb", "count": 8, "hosts": 2}}, num_slices=1)
    )
    assert gpu.hosts_per_slice == 2 and gpu.num_processes == 2
    cpu = S.spec_from_dict(_base(accelerator={"cpu": {"hosts": 3}}, num_slices=1))
    assert cpu.hosts_per_slice == 3


@pytest.mark.parametrize(
    "changes,overrides,field,fragment",
    [
        ({}, ["accelerator.tpu.topology=4x4"], "accelerator.tpu.topology", "not a v5p topology"),
        ({}, ["accelerator.tpu.type=v9"], "accelerator.tpu.type", "unknown TPU type"),
        (
            {"accelerator": {"tpu": {"type": "v5p", "topology": "2x2x1"}, "cpu": {}}},
            [],
            "accelerator",
            "exactly one of tpu, gpu, cpu",
        ),
        ({"accelerator": {"gpu": {"type": "nvidia-l4"}}}, [], "accelerator.gpu.count", "is required"),
        ({"accelerator": {"gpu": {"type": "nvidia-l4", "count": 0}}}, [], "accelerator.gpu.count", "between 1 and 16"),
        ({"nmae": "x"}, [], "nmae", "Did you mean 'name'"),
        ({"apiVersion": "roxxel.dev/v2"}, [], "apiVersion", "roxxel.dev/v1alpha1"),
        ({"kind": "Job"}, [], "kind", "RoxxelJob"),
        ({"name": "Lm"}, [], "name", "DNS-1035"),
        ({"name": "1lm"}, [], "name", "DNS-1035"),
        ({"name": "lm\n"}, [], "name", "DNS-1035"),
        ({"namespace": "a_b"}, [], "namespace", "DNS-1123"),
        ({"image": "img with space"}, [], "image", "image reference"),
        ({"command": []}, [], "command", "must not be empty"),
        ({"command": ["sleep", 10]}, [], "command[1]", "Quote the value"),
        ({"command": "python train.py"}, [], "command", "must be a list"),
        ({"num_slices": 0}, [], "num_slices", "at least 1"),
        ({"num_slices": True}, [], "num_slices", "must be an integer"),
        ({"workload": "indexed-job"}, [], "num_slices", "single slice"),
        ({"workload": "deployment"}, [], "workload", "jobset, indexed-job"),
        ({"env": {"1X": "a"}}, [], "env.1X", "environment variable name"),
        ({"env": {"JOB_INDEX": "a"}}, [], "env.JOB_INDEX", "set by roxxel-launch"),
        ({"env": {"X": 1}}, [], "env.X", "Quote the value"),
        ({"checkpoint_dir": "ckpt"}, [], "checkpoint_dir", "absolute path"),
        ({"checkpoint_dir": "s3://b/c"}, [], "checkpoint_dir", "only gs://"),
        ({"checkpoint_dir": "gs://B/c"}, [], "checkpoint_dir", "bucket name (bucket names are 3-63 characters"),
        ({"checkpoint_dir": "/data/ckpt", "data": {"pvc": {"claim": "d"}}}, [], "checkpoint_dir", "read-only"),
        ({"restore_from": "ckpt", "checkpoint_dir": "/c"}, [], "restore_from", "absolute path"),
        ({"restore_from": "gs://bkt/lm"}, [], "restore_from", "without checkpoint_dir"),
        (
            {"restore_from": "gs://bkt/lm/", "checkpoint_dir": "gs://bkt/lm"},
            [],
            "restore_from",
            "is checkpoint_dir itself",
        ),
        ({"restore_from": "gs://bkt/lm", "checkpoint_dir": "gs://bkt/lm/ft"}, [], "restore_from", "are nested"),
        ({"watchdog": {"step_floor_s": 0}}, [], "watchdog.step_floor_s", "positive number of seconds"),
        ({"watchdog": {"step_flor_s": 5}}, [], "watchdog.step_flor_s", "Did you mean 'step_floor_s'"),
        ({"watchdog": {"step_multiple": 0}}, [], "watchdog.step_multiple", "positive factor of the median step time"),
        ({"watchdog": {"enabled": False, "step_floor_s": 5}}, [], "watchdog.enabled", "would be dropped"),
        ({"data": {"gcsfuse": {"bucket": "bkt", "only_dir": "a,ro=false"}}}, [], "data.gcsfuse.only_dir", "no ','"),
        (
            {"data": {"gcsfuse": {"bucket": "bkt", "mount_options": ["a,b"]}}},
            [],
            "data.gcsfuse.mount_options[0]",
            "no ','",
        ),
        ({"data": {"nfs": {"server": "h", "path": "rel"}}}, [], "data.nfs.path", "absolute"),
        ({"data": {}}, [], "data", "exactly one of gcsfuse, nfs, pvc"),
        ({"run_name": "a b"}, [], "run_name", "label value"),
        ({"service_account": "SA"}, [], "service_account", "DNS-1123"),
        ({"queue": "q.x"}, [], "queue", "DNS-1123"),
        ({"max_restarts": -1}, [], "max_restarts", "between 0"),
        ({"termination_grace_period": 10**6}, [], "termination_grace_period", "86400"),
        ({"resources": {"limits": {"google.com/tpu": 4}}}, [], "resources.limits.google.com/tpu", "accelerator block"),
        ({"resources": {"requests": {"memory": "lots"}}}, [], "resources.requests.memory", "quantity"),
        # The API server's rules that the OpenAPI schema does not carry (validateResourceRequirements).
        (
            {"resources": {"requests": {"cpu": "8"}, "limits": {"cpu": "2"}}},
            [],
            "resources.requests.cpu",
            "8 is more than the cpu limit (2)",
        ),
        (
            {"resources": {"requests": {"memory": "64Gi"}, "limits": {"memory": "4Gi"}}},
            [],
            "resources.requests.memory",
            "64Gi is more than the memory limit (4Gi)",
        ),
        (
            {"resources": {"requests": {"example.com/widget": "1"}, "limits": {"example.com/widget": "2"}}},
            [],
            "resources.requests.example.com/widget",
            "must equal the example.com/widget limit (2)",
        ),
        (
            {"resources": {"requests": {"example.com/widget": "1"}}},
            [],
            "resources.requests.example.com/widget",
            "cannot be overcommitted: it needs a limit",
        ),
        (
            {"resources": {"limits": {"example.com/widget": "500m"}}},
            [],
            "resources.limits.example.com/widget",
            "must be a whole number",
        ),
        ({"resources": {"limits": {"gpu": "1"}}}, [], "resources.limits.gpu", "is not a container resource"),
        (
            {"resources": {"limits": {"hugepages-2Mi": "3Mi", "memory": "1Gi"}}},
            [],
            "resources.limits.hugepages-2Mi",
            "whole number of 2Mi pages",
        ),
        (
            {"resources": {"limits": {"hugepages-2Mi": "4Mi"}}},
            [],
            "resources.limits",
            "huge pages need a cpu or memory",
        ),
        (
            {"node_selectors": {"cloud.google.com/gke-tpu-topology": "4x4"}},
            [],
            "node_selectors.cloud.google.com/gke-tpu-topology",
            "accelerator block",
        ),
        ({"node_selectors": {"pool": "a b"}}, [], "node_selectors.pool", "label value"),
        (
            {"tolerations": [{"key": "k", "toleration_seconds": 5}]},
            [],
            "tolerations[0].toleration_seconds",
            "NoExecute",
        ),
        (
            {"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]},
            [],
            "tolerations[0].value",
            "must be empty",
        ),
        ({"tolerations": [{"operator": "Equal"}]}, [], "tolerations[0].key", "required"),
        ({"tolerations": [{"key": "k", "effect": "Sometimes"}]}, [], "tolerations[0].effect", "NoSchedule"),
    ],
)
def test_errors_name_the_field_and_the_fix(changes, overrides, field, fragment):
    err = _error(_base(**changes), overrides)
    assert err.field == field
    assert fragment in str(err)
    assert str(err).startswith(f"{field}: ")


def test_requests_and_limits_compare_exactly_across_units():
    resources = {
        "requests": {"cpu": "1000m", "memory": "1Gi", "example.com/widget": "2"},
        "limits": {"cpu": "1", "memory": "1073741824", "example.com/widget": "2"},
    }
    spec = S.spec_from_dict(_base(resources=resources))
    assert spec.resources.requests["cpu"] == "1000m"
    err = _error(_base(resources={"requests": {"cpu": "8", "memory": "64Gi"}, "limits": {"cpu": "2", "memory": "4Gi"}}))
    assert [e.field for e in err.each()] == ["resources.requests.cpu", "resources.requests.memory"]
    assert "give only the limit" in str(err)


def test_longest_pod_name_must_fit_in_63_characters():
    # v5p 2x2x4 x 2 slices: longest pod name is NAME-slice-1-3 (+ 6 for the random suffix).
    limit = 63 - 6 - len("-slice-1-3")
    assert S.spec_from_dict(_base(name="a" * limit)).name == "a" * limit
    err = _error(_base(name="a" * (limit + 1)))
    assert err.field == "name"
    assert f"Shorten name to at most {limit} characters" in str(err)
    assert "slice-1-3" in str(err)
    # The Indexed Job's pods are NAME-INDEX: a longer name fits.
    indexed = _base(name="a" * (limit + 1), workload="indexed-job", num_slices=1)
    assert S.spec_from_dict(indexed).workload == "indexed-job"


def test_overrides_follow_the_field_type():
    spec = S.spec_from_dict(
        _base(),
        [
            "env.VERSION=007",
            "num_slices=3",
            "command=[python, train.py, '--lr=3e-4']",
            r"resources.limits.example\.com/widget=2",
            "accelerator.tpu.topology=2x2x2",
            "data.gcsfuse.bucket=my-bkt",
            "service_account=trainer",
        ],
    )
    assert spec.env["VERSION"] == "007"
    assert spec.num_slices == 3
    assert spec.command == ("python", "train.py", "--lr=3e-4")
    assert spec.resources.limits["example.com/widget"] == "2"
    assert spec.hosts_per_slice == 2
    assert spec.data.gcsfuse.bucket == "my-bkt"


@pytest.mark.parametrize(
    "override,field,fragment",
    [
        ("num_slices", "--set", "key.path=value"),
        ("num_slices=two", "num_slices", "not an integer"),
        ("name.first=x", "name", "not a mapping"),
        ("bogus.field=1", "bogus", "unknown field"),
    ],
)
def test_bad_overrides(override, field, fragment):
    err = _error(_base(), [override])
    assert err.field == field and fragment in str(err)


@pytest.mark.parametrize(
    "override,field,source",
    [
        ("command=[python, x.py, --steps, 60]", "command[3]", "from --set command=[python, x.py, --steps, 60]"),
        ("max_restarts=-1", "max_restarts", "from --set max_restarts=-1"),
        ("accelerater.tpu.type=v5p", "accelerater", "from --set accelerater.tpu.type=v5p"),
        ("resources.requests.cpu=lots", "resources.requests.cpu", "from --set resources.requests.cpu=lots"),
    ],
)
def test_a_bad_value_from_set_names_the_set_not_the_file(tmp_path, override, field, source):
    """Errors in --set values said "(in job.yaml)", sending users to a file that was right."""
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(_base()))
    with pytest.raises(S.SpecError) as err:
        S.load_spec(path, ["max_restarts=3", override])
    assert err.value.field == field and f"({source})" in str(err.value) and "job.yaml" not in str(err.value)
    with pytest.raises(S.SpecError, match=r"^--set: 'num_slices' is not key.path=value\. "):  # quotes itself
        S.load_spec(path, ["num_slices"])
    with pytest.raises(S.SpecError, match=r"num_slices: .*\(in .*job\.yaml\)"):  # the file's own value
        path.write_text(yaml.safe_dump(_base(num_slices=0)))
        S.load_spec(path, ["max_restarts=3"])


def test_every_field_with_a_problem_is_named_in_one_run(tmp_path):
    """validate named only the first bad field: a user fixed one, ran it again, met the next."""
    path = tmp_path / "job.yaml"
    data = _base(max_restarts="x", resources={"requests": {"cpu": "two"}})
    data["accelerater"] = data.pop("accelerator")  # a typo: reported as unknown, not also as missing
    data["data"] = {"gcsfuse": {"bucket": "Bad Bucket"}}
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(S.SpecError) as info:
        S.load_spec(path, ["tolerations=[{operator: Equal}]"])
    err = info.value
    fields = [e.field for e in err.each()]
    assert fields == [
        "accelerater",
        "data.gcsfuse.bucket",
        "max_restarts",
        "resources.requests.cpu",
        "tolerations[0].key",
    ], fields
    lines = str(err).splitlines()
    assert lines[0] == "5 problems:" and len(lines) == 6
    assert "Did you mean 'accelerator'?" in lines[1] and "(in " in lines[1]
    assert "(from --set tolerations=[{operator: Equal}])" in lines[5]
    assert err.field == "accelerater"  # the first, for callers that look at one
    # One problem stays one line, as before.
    path.write_text(yaml.safe_dump(_base(num_slices=0)))
    with pytest.raises(S.SpecError) as one:
        S.load_spec(path)
    assert len(str(one.value).splitlines()) == 1 and one.value.each() == [one.value]


def test_every_bad_value_and_every_bad_set_is_named_in_one_run(tmp_path):
    """Values checked on the whole spec (names, ranges) and --set values that do not parse
    used to stop at the first; a typo's suggestion prefers the field it contains."""
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(_base(name="Bad_Name", namespace="ML_x")))
    with pytest.raises(S.SpecError) as info:
        S.load_spec(path, ["num_slices=0", "max_restarts=-1", "command=[python, x.py", "queue_name=q"])
    by_field = {e.field: str(e) for e in info.value.each()}
    assert list(by_field) == ["command", "queue_name", "name", "namespace", "num_slices", "max_restarts"]
    assert "(from --set command=[python, x.py)" in by_field["command"] and "not valid YAML" in by_field["command"]
    assert "Did you mean 'queue'?" in by_field["queue_name"]
    assert "(in " in by_field["name"] and "(from --set num_slices=0)" in by_field["num_slices"]
    assert len(str(info.value).splitlines()) == 7


def test_load_spec_reports_the_file(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(_base(num_slices=0)))
    with pytest.raises(S.SpecError, match=r"num_slices: .*job\.yaml"):
        S.load_spec(path)
    path.write_text("name: [unclosed")
    with pytest.raises(S.SpecError, match="not valid YAML"):
        S.load_spec(path)
    path.write_text("- a list")
    with pytest.raises(S.SpecError, match="must be a mapping"):
        S.load_spec(path)


def _walk_dataclasses(cls, seen=None):
    seen = set() if seen is None else seen
    if cls in seen:
        return seen
    seen.add(cls)
    for hint in typing.get_type_hints(cls).values():
        for arg in (hint, *typing.get_args(hint)):
            for inner in (arg, *typing.get_args(arg)):
                if dataclasses.is_dataclass(inner):
                    _walk_dataclasses(inner, seen)
    return seen


def test_schema_documents_every_field():
    schema = S.spec_schema()
    assert schema["properties"]["apiVersion"]["enum"] == ["roxxel.dev/v1alpha1"]
    assert set(schema["required"]) == {"apiVersion", "kind", "name", "image", "command", "accelerator"}
    assert schema["properties"]["workload"]["enum"] == ["jobset", "indexed-job"]
    tpu_schema = schema["properties"]["accelerator"]["properties"]["tpu"]
    assert tpu_schema["required"] == ["type", "topology"]

    def check(node, path):
        if node.get("type") == "object" and "properties" in node:
            assert node["additionalProperties"] is False, path
            for key, prop in node["properties"].items():
                assert prop["description"], f"{path}.{key} has no description"
                check(prop, f"{path}.{key}")
        if node.get("type") == "array":
            check(node["items"], f"{path}[]")

    check(schema, "")
    documented = sum(len(dataclasses.fields(c)) for c in _walk_dataclasses(S.JobSpec))
    assert documented >= 35


def test_kubernetes_recommended_labels_are_the_users_except_the_ones_we_set(tmp_path):
    """Found by a new user's pass: every app.kubernetes.io/* label was refused as ours, though
    roxxel-launch sets only managed-by (and kubectl's default-container annotation)."""
    path = tmp_path / "job.yaml"
    ok = {"app.kubernetes.io/name": "lm", "app.kubernetes.io/part-of": "research"}
    path.write_text(yaml.safe_dump(_base(labels=ok)))
    assert dict(S.load_spec(path).labels) == ok
    for section, key in (
        ("labels", "app.kubernetes.io/managed-by"),
        ("annotations", "kubectl.kubernetes.io/default-container"),
        ("labels", "jobset.sigs.k8s.io/jobset-name"),
    ):
        path.write_text(yaml.safe_dump(_base(**{section: {key: "x"}})))
        with pytest.raises(S.SpecError, match="uses a key or prefix that roxxel-launch or its controllers own"):
            S.load_spec(path)
