"""Specs that cannot overflow or surprise, and manifests a real GKE cluster runs as intended.

Offline: no API server runs here. Manifests are checked against the official schemas
(kubernetes-validate, strict) and the JobSet CRD's OpenAPI schema (tests/fixtures/k8s),
as tests/launcher/render/test_golden.py does; the GKE behaviour each test relies on is cited in
docs/kubernetes.md.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import subprocess
import sys
from fractions import Fraction

import pytest
import yaml

from roxxel import exit_codes
from roxxel_launch import patch as P
from roxxel_launch import render as R
from roxxel_launch import spec as S
from roxxel_launch import validate as V
from roxxel_launch.backends.local import backend as L
from roxxel_launch.backends.base import BackendError
from roxxel_launch.spec.storage import gcsfuse_sidecar_requests

from support.paths import JOBSET_CRD as CRD
from support.paths import REPO

BASE = {
    "apiVersion": "roxxel.dev/v1alpha1",
    "kind": "RoxxelJob",
    "name": "lm",
    "image": "img:1",
    "command": ["python", "train.py"],
    "accelerator": {"cpu": {"hosts": 2}},
}


def _spec(**changes) -> S.JobSpec:
    return S.spec_from_dict({**BASE, **changes})


def _error(**changes) -> S.SpecError:
    with pytest.raises(S.SpecError) as info:
        _spec(**changes)
    return info.value


@functools.cache
def _crd_schema() -> dict:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return V.jobset_crd_schema(yaml.load(CRD.read_text(), Loader=loader))


def _valid(spec: S.JobSpec) -> list[dict]:
    """Rendered objects that pass every offline check (strict schemas + closed JobSet CRD),
    without the job's NetworkPolicy (tested in test_pod_security.py)."""
    objects = list(R.render(spec).objects)
    V.validate(objects)
    crd = _crd_schema()
    for obj in objects:
        if obj["kind"] == "JobSet":
            assert V.check_jobset_crd(obj, crd) == []
    return [obj for obj in objects if obj["kind"] != "NetworkPolicy"]


def _pod(obj: dict) -> dict:
    if obj["kind"] == "JobSet":
        return obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    return obj["spec"]["template"]


# ----------------------------------------------------------------------------- bounded numbers


@pytest.mark.parametrize(
    "changes,field",
    [
        ({"accelerator": {"cpu": {"hosts": 10**12}}}, "accelerator.cpu.hosts"),
        ({"num_slices": 2**63}, "num_slices"),
        ({"accelerator": {"cpu": {"hosts": 100_001}}}, "accelerator.cpu.hosts"),
        ({"accelerator": {"gpu": {"type": "nvidia-h100-80gb", "count": 8, "hosts": 200_000}}}, "accelerator.gpu.hosts"),
        ({"num_slices": 100_001}, "num_slices"),
        ({"max_restarts": 2**31}, "max_restarts"),
        ({"termination_grace_period": -1}, "termination_grace_period"),
        ({"ttl_seconds_after_finished": -5}, "ttl_seconds_after_finished"),
        (
            {"tolerations": [{"key": "k", "effect": "NoExecute", "toleration_seconds": 2**40}]},
            "tolerations[0].toleration_seconds",
        ),
    ],
)
def test_every_number_has_its_kubernetes_bound(changes, field):
    assert _error(**changes).field == field


def test_processes_beyond_int32_are_refused():
    # 100,000 slices x 100,000 hosts each: both in range, the product is not.
    err = _error(num_slices=100_000, accelerator={"cpu": {"hosts": 100_000}})
    assert err.field == "num_slices" and "int32" in str(err)


@pytest.mark.parametrize("quantity", ["-1", "-500m", "1 Gi", "Gi", "1e"])
def test_resources_are_non_negative_quantities(quantity):
    err = _error(resources={"requests": {"cpu": quantity}})
    assert err.field == "resources.requests.cpu" and "non-negative" in str(err)


def test_valid_quantities_still_pass():
    spec = _spec(resources={"requests": {"cpu": "+1", "memory": "1.5Gi"}, "limits": {"memory": "2e9"}})
    assert spec.resources.requests["cpu"] == "+1"


# ----------------------------------------------------------------------------- malformed files


@pytest.mark.parametrize(
    "text,fragment",
    [
        ("name: a\nname: b\n", "line 2, column 1: duplicate key 'name'"),
        ("env: &e {A: x}\nlabels: *e\n", "line 2, column 9: aliases (*name) are not allowed"),
        ("a: " + "[" * 5000, "nested more than 32 levels deep"),
        ("name: [unclosed\n", "line 2, column 1: not valid YAML"),
        ("name: a\n\tkind: b\n", "not valid YAML"),
    ],
)
def test_malformed_yaml_is_one_line_naming_file_and_position(tmp_path, text, fragment):
    path = tmp_path / "job.yaml"
    path.write_text(text)
    with pytest.raises(S.SpecError) as info:
        S.load_spec(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and fragment in message
    assert "\n" not in message


def test_non_utf8_names_the_byte_and_its_position(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_bytes(b"name: lm\nimage: caf\xe9\n")
    with pytest.raises(S.SpecError, match=r"job\.yaml: line 2, column 11: byte 0xe9 is not UTF-8"):
        S.load_spec(path)


def test_a_spec_larger_than_the_annotation_can_hold_is_refused(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({**BASE, "env": {f"V{i}": "x" * 100 for i in range(1000)}}))
    with pytest.raises(S.SpecError, match="larger than 64 KiB"):
        S.load_spec(path)


def test_annotation_total_is_checked_after_overrides():
    # --set can grow a spec past what its file held: the rendered annotations are checked too.
    spec = _spec(env={f"V{i}": "\u00e9" * 1000 for i in range(60)})
    with pytest.raises(S.SpecError, match="more than the 262144 Kubernetes allows"):
        R.render(spec)


def test_malformed_file_through_the_cli_is_one_line_not_a_traceback(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_bytes(b"a: " + b"[" * 5000)
    result = subprocess.run(
        [sys.executable, "-m", "roxxel_launch.cli", "render", str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "nested more than 32 levels deep" in line and str(path) in line


def test_overrides_use_the_strict_parser_too():
    with pytest.raises(S.SpecError, match="duplicate key"):
        _spec(**S.apply_overrides(BASE, ["env={A: x, A: y}"]))


# ----------------------------------------------------------------------------- --local cap


def test_local_worker_count_is_capped_with_an_override(monkeypatch, tmp_path):
    monkeypatch.delenv(L.MAX_WORKERS_ENV, raising=False)
    big = _spec(accelerator={"cpu": {"hosts": 100_000}})
    with pytest.raises(BackendError, match="100000 worker processes is more than the local cap of 64"):
        L.check_worker_count(big)
    L.check_worker_count(big, max_workers=100_000)
    monkeypatch.setenv(L.MAX_WORKERS_ENV, "200000")
    L.check_worker_count(big)
    monkeypatch.setenv(L.MAX_WORKERS_ENV, "lots")
    with pytest.raises(BackendError, match="not an integer"):
        L.check_worker_count(big)
    backend = L.LocalBackend(root=tmp_path, options=L.LocalOptions(max_workers=3))
    with pytest.raises(BackendError, match="local cap of 3"):
        backend.submit(big, dry_run=True)
    assert not (tmp_path / "lm").exists()


# ----------------------------------------------------------------------------- config errors


def test_config_error_exit_code_fails_the_job_without_restart_in_the_manifests():
    (jobset,) = _valid(_spec(max_restarts=5))
    rules = jobset["spec"]["failurePolicy"]["rules"]
    assert rules[0]["action"] == "FailJobSet" and rules[0]["onJobFailureReasons"] == ["PodFailurePolicy"]
    job = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]
    pod_rules = job["podFailurePolicy"]["rules"]
    assert pod_rules[0] == {
        "action": "FailJob",
        "onExitCodes": {"containerName": "worker", "operator": "In", "values": [exit_codes.CONFIG_ERROR_EXIT_CODE]},
    }
    # The Job controller's failure message for rule 0 (its format, from the Kubernetes docs:
    # "Container main for pod default/x failed with exit code 42 matching FailJob rule at
    # index 0") must match the JobSet rule's pattern, and a preemption's must not.
    (pattern,) = rules[0]["onJobFailureMessagePatterns"]
    pod = "Container worker for pod ml/lm-slice-0-1-abcde"
    config = f"{pod} failed with exit code 78 matching FailJob rule at index 0"
    preempted = f"{pod} failed with exit code 42 matching FailJob rule at index 2"
    assert re.search(pattern, config) and not re.search(pattern, preempted)
    (_, job) = _valid(_spec(workload="indexed-job"))
    assert job["spec"]["podFailurePolicy"]["rules"][0]["onExitCodes"]["values"] == [78]


@pytest.mark.slow
def test_local_backend_treats_a_config_error_as_final(tmp_path, monkeypatch):
    """End to end through `roxxel-launch submit --local`: worker 1 exits 78 at once."""
    root = tmp_path / "runs"
    program = (
        "import os, sys, time\n"
        "from roxxel.exit_codes import exit_config_error\n"
        "if os.environ['JOB_COMPLETION_INDEX'] == '1':  # the Job controller's index\n"
        "    exit_config_error('global batch 10 is not divisible by 2 processes')\n"
        "time.sleep(60)\n"
    )
    spec = tmp_path / "bad.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                **BASE,
                "name": "bad",
                "image": "local",
                "max_restarts": 3,
                "termination_grace_period": 2,
                "command": [sys.executable, "-c", program],
            }
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROXXEL_", "JOB"))}
    env[L.ROOT_ENV] = str(root)
    result = subprocess.run(
        [sys.executable, "-m", "roxxel_launch.cli", "submit", "--local", str(spec)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == exit_codes.CONFIG_ERROR_EXIT_CODE, result.stdout + result.stderr
    status = json.loads((root / "bad" / "status.json").read_text())
    assert (status["state"], status["restarts"], len(status["attempts"])) == ("Failed", 0, 1)
    assert status["reason"] == "config_error"
    assert "configuration error" in status["message"] and "not restarted" in status["message"]
    assert "global batch 10 is not divisible" in status["message"]  # the worker's own line


# ----------------------------------------------------------------------------- storage


def test_gcsfuse_sidecar_limits_and_bounded_cache_volume():
    spec = _spec(
        data={
            "gcsfuse": {
                "bucket": "bkt",
                "file_cache_mb": 1000,
                "file_cache_medium": "memory",
                "sidecar_memory_limit": "4Gi",
            }
        }
    )
    (jobset,) = _valid(spec)
    pod = _pod(jobset)
    annotations = pod["metadata"]["annotations"]
    assert annotations["gke-gcsfuse/memory-limit"] == "4Gi"
    assert annotations["gke-gcsfuse/cpu-limit"] == annotations["gke-gcsfuse/ephemeral-storage-limit"] == "0"
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["gke-gcsfuse-cache"] == {
        "name": "gke-gcsfuse-cache",
        "emptyDir": {"medium": "Memory", "sizeLimit": "1100Mi"},
    }
    assert volumes["data"]["csi"]["volumeAttributes"]["mountOptions"] == "implicit-dirs,file-cache:max-size-mb:1000"


def _worker_resources(spec: S.JobSpec) -> dict:
    (jobset,) = _valid(spec)
    return _pod(jobset)["spec"]["containers"][0]["resources"]


@pytest.mark.parametrize(
    "resources,requested,limited",
    [
        ({}, "11000Mi", None),  # the cache volume alone
        ({"requests": {"ephemeral-storage": "10Gi"}}, "21240Mi", None),  # the worker's own + the cache
        ({"limits": {"ephemeral-storage": "10Gi"}}, "21240Mi", "21240Mi"),  # request defaults to the limit
        (
            {"requests": {"ephemeral-storage": "1"}, "limits": {"ephemeral-storage": "10Gi"}},
            str(11000 * 2**20 + 1),
            "21240Mi",
        ),
    ],
)
def test_a_disk_file_cache_is_requested_as_ephemeral_storage(resources, requested, limited):
    # The scheduler places a pod by its requests; the kubelet evicts it when emptyDirs and
    # containers use more than the sum of the limits: the cache volume counts in both.
    spec = _spec(data={"gcsfuse": {"bucket": "bkt", "file_cache_mb": 10000}}, resources=resources)
    got = _worker_resources(spec)
    assert got["requests"]["ephemeral-storage"] == requested
    assert got["limits"].get("ephemeral-storage") == limited


def test_a_memory_file_cache_takes_no_ephemeral_storage():
    spec = _spec(
        data={"gcsfuse": {"bucket": "bkt", "file_cache_mb": 10000, "file_cache_medium": "memory"}},
        node_ephemeral_storage="6Gi",  # the sidecar's 5Gi, not the 11,000 MiB cache
    )
    assert "ephemeral-storage" not in _worker_resources(spec)["requests"]


def test_a_file_cache_larger_than_the_node_is_refused_or_warned_about(caplog):
    big = {"gcsfuse": {"bucket": "bkt", "file_cache_mb": 100000}}
    err = _error(data=big, node_ephemeral_storage="100Gi")
    assert err.field == "data.gcsfuse.file_cache_mb"
    # 110,000 MiB of cache volume and the GCS FUSE sidecar's default 5 GiB request
    assert "112.4 GiB of node ephemeral storage" in str(err) and "node_ephemeral_storage" in err.fix
    assert "5.0 GiB the GCS FUSE sidecar's request" in str(err)
    err = _error(resources={"requests": {"ephemeral-storage": "50Gi"}}, node_ephemeral_storage="40Gi")
    assert err.field == "resources.requests.ephemeral-storage"
    assert _error(node_ephemeral_storage="lots").field == "node_ephemeral_storage"
    _spec(data=big, node_ephemeral_storage="1400Gi")  # local SSDs: fits
    # Unknown node: a warning past a default 100 GB boot disk's ~43.8 GiB, none within it.
    with caplog.at_level(logging.WARNING, logger="roxxel_launch.render"):
        R.render(_spec(data=big))
    assert "about 43.8 GiB" in caplog.text and "node_ephemeral_storage" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="roxxel_launch.render"):
        R.render(_spec(data={"gcsfuse": {"bucket": "bkt", "file_cache_mb": 30000}}))
    assert "ephemeral storage" not in caplog.text


@pytest.mark.parametrize(
    "gcsfuse,fits",
    [
        ({}, False),  # limit "0": the driver requests its default 5Gi for the sidecar
        ({"sidecar_ephemeral_storage_limit": "1Gi"}, True),  # a limit and no request: the request is the limit
    ],
)
def test_the_gcsfuse_sidecar_s_ephemeral_storage_request_is_in_the_budget(caplog, gcsfuse, fits):
    """gcs-fuse-csi-driver pkg/webhook/config.go (populateResource): with the limit "0" and no
    request the sidecar requests 5Gi of ephemeral storage. A 39,500 MiB cache (a 43,450 MiB
    volume, 42.4 GiB) fits a default boot disk's 43.8 GiB alone, not with the sidecar's 5 GiB."""
    data = {"gcsfuse": {"bucket": "bkt", "file_cache_mb": 39500, **gcsfuse}}
    node = str(S.DEFAULT_NODE_EPHEMERAL_STORAGE)
    with caplog.at_level(logging.WARNING, logger="roxxel_launch.render"):
        R.render(_spec(data=data))
    if fits:
        _spec(data=data, node_ephemeral_storage=node)
        assert "ephemeral storage" not in caplog.text
        return
    err = _error(data=data, node_ephemeral_storage=node)
    assert err.field == "data.gcsfuse.file_cache_mb"
    assert "47.4 GiB of node ephemeral storage" in str(err) and "sidecar" in str(err)
    assert "about 43.8 GiB" in caplog.text and "sidecar" in caplog.text


def test_gcsfuse_sidecar_requests_follow_the_driver_s_rule():
    """populateResource in gcs-fuse-csi-driver pkg/webhook/config.go: no annotations, or a "0"
    limit and no request: the defaults; a limit alone: the limit; a request: itself (0: none)."""
    defaults = {"cpu": Fraction(1, 4), "memory": Fraction(256 * 2**20), "ephemeral-storage": Fraction(5 * 2**30)}
    assert gcsfuse_sidecar_requests({}) == defaults
    zero = {f"gke-gcsfuse/{r}-limit": "0" for r in ("cpu", "memory", "ephemeral-storage")}
    assert gcsfuse_sidecar_requests(zero) == defaults
    assert gcsfuse_sidecar_requests({"gke-gcsfuse/memory-limit": "4Gi"})["memory"] == 4 * 2**30
    explicit = {"gke-gcsfuse/cpu-limit": "0", "gke-gcsfuse/cpu-request": "2", "gke-gcsfuse/memory-request": "0"}
    got = gcsfuse_sidecar_requests(explicit)
    assert got["cpu"] == 2 and "memory" not in got


def test_gcsfuse_file_cache_is_off_by_default():
    (jobset,) = _valid(_spec(data={"gcsfuse": {"bucket": "bkt"}}))
    pod = _pod(jobset)["spec"]
    assert "gke-gcsfuse-cache" not in {v["name"] for v in pod["volumes"]}
    assert "file-cache" not in pod["volumes"][1]["csi"]["volumeAttributes"]["mountOptions"]


@pytest.mark.parametrize(
    "gcsfuse,field",
    [
        ({"mount_options": ["file-cache:max-size-mb:-1"]}, "mount_options[0]"),
        ({"mount_options": ["uid=1000"]}, "mount_options[0]"),
        ({"mount_options": ["implicit-dirs metadata-cache:ttl-secs:-1"]}, "mount_options[0]"),
        ({"mount_options": ["a:b:c:d"]}, "mount_options[0]"),
        ({"only_dir": "shards:v1"}, "only_dir"),
        ({"only_dir": "/abs"}, "only_dir"),
        ({"only_dir": "a,b"}, "only_dir"),
        ({"file_cache_mb": 0}, "file_cache_mb"),
        ({"sidecar_cpu_limit": "-1"}, "sidecar_cpu_limit"),
    ],
)
def test_gcsfuse_values_that_would_be_split_wrongly_are_refused(gcsfuse, field):
    err = _error(data={"gcsfuse": {"bucket": "bkt", **gcsfuse}})
    assert err.field == f"data.gcsfuse.{field}"


def test_gcsfuse_cache_options_render_as_the_drivers_training_examples_set_them():
    """Range reads and parallel downloads as file-cache mount options (the driver's
    examples/pytorch/train-job-pytorch.yaml sets fileCacheForRangeRead; its parallel-download
    test the file-cache:*parallel* keys), metadata prefetch as its volume attribute."""
    cache = {
        "bucket": "bkt",
        "file_cache_mb": 1000,
        "file_cache_for_range_read": True,
        "parallel_downloads": True,
        "parallel_downloads_per_file": 4,
        "max_parallel_downloads": -1,
        "download_chunk_size_mb": 16,
        "metadata_prefetch_on_mount": True,
    }
    (jobset,) = _valid(_spec(data={"gcsfuse": cache}))
    (data,) = [v for v in _pod(jobset)["spec"]["volumes"] if v["name"] == "data"]
    assert data["csi"]["volumeAttributes"] == {
        "bucketName": "bkt",
        "gcsfuseMetadataPrefetchOnMount": "true",
        "mountOptions": "implicit-dirs,file-cache:max-size-mb:1000,file-cache:cache-file-for-range-read:true,"
        "file-cache:enable-parallel-downloads:true,file-cache:parallel-downloads-per-file:4,"
        "file-cache:max-parallel-downloads:-1,file-cache:download-chunk-size-mb:16",
    }


@pytest.mark.parametrize(
    "gcsfuse,field,message",
    [
        ({"file_cache_for_range_read": True}, "file_cache_for_range_read", "needs the file cache"),
        ({"parallel_downloads": True}, "parallel_downloads", "needs the file cache"),
        (
            {"file_cache_mb": 10, "parallel_downloads_per_file": 4},
            "parallel_downloads_per_file",
            "tunes parallel downloads, which are off",
        ),
        (
            {"file_cache_mb": 10, "parallel_downloads": True, "parallel_downloads_per_file": 0},
            "parallel_downloads_per_file",
            "at least 1, got 0",
        ),
        (
            {"file_cache_mb": 10, "parallel_downloads": True, "max_parallel_downloads": 0},
            "max_parallel_downloads",
            "at least 1, or -1 for no limit, got 0",
        ),
        (
            {"file_cache_mb": 10, "parallel_downloads": True, "max_parallel_downloads": -2},
            "max_parallel_downloads",
            "got -2",
        ),
        (
            {"file_cache_mb": 10, "parallel_downloads": True, "download_chunk_size_mb": 2**31},
            "download_chunk_size_mb",
            "32-bit integer",
        ),
        (
            {"file_cache_mb": 10, "mount_options": ["file-cache:enable-parallel-downloads:true"]},
            "mount_options[0]",
            "parallel_downloads",
        ),
    ],
)
def test_gcsfuse_cache_options_are_checked(gcsfuse, field, message):
    err = _error(data={"gcsfuse": {"bucket": "bkt", **gcsfuse}})
    assert err.field == f"data.gcsfuse.{field}"
    assert message in str(err) and "\n" not in str(err)


def test_local_checkpoint_dir_needs_a_writable_volume_on_a_cluster():
    spec = _spec(checkpoint_dir="/ckpt/run")
    with pytest.raises(S.SpecError, match="checkpoint_dir: '/ckpt/run' is a local path"):
        R.render(spec)
    R.render(spec, cluster=False)  # --local: a local directory is the point
    for volume in ({"read_only": True, "pvc": "c"}, {"read_only": False, "empty_dir": {}}):
        with pytest.raises(S.SpecError, match="checkpoint_dir"):
            R.render(_spec(checkpoint_dir="/ckpt/run", volumes=[{"name": "ckpt", "mount_path": "/ckpt", **volume}]))
    backed = _spec(
        checkpoint_dir="/ckpt/run", volumes=[{"name": "ckpt", "mount_path": "/ckpt", "read_only": False, "pvc": "c"}]
    )
    (jobset,) = _valid(backed)
    assert {"name": "ckpt", "mountPath": "/ckpt", "readOnly": False} in _pod(jobset)["spec"]["containers"][0][
        "volumeMounts"
    ]


# ----------------------------------------------------------------------------- pods on GKE


def test_default_container_pull_policy_and_ttl():
    (jobset,) = _valid(_spec(ttl_seconds_after_finished=3600))
    assert jobset["spec"]["ttlSecondsAfterFinished"] == 3600
    assert "ttlSecondsAfterFinished" not in jobset["spec"]["replicatedJobs"][0]["template"]["spec"]
    pod = _pod(jobset)
    assert pod["metadata"]["annotations"]["kubectl.kubernetes.io/default-container"] == "worker"
    assert pod["spec"]["containers"][0]["imagePullPolicy"] == "Always"
    digest = "img@sha256:" + "a" * 64
    (jobset,) = _valid(_spec(image=digest))
    assert _pod(jobset)["spec"]["containers"][0]["imagePullPolicy"] == "IfNotPresent"
    (jobset,) = _valid(_spec(image_pull_policy="IfNotPresent"))
    assert _pod(jobset)["spec"]["containers"][0]["imagePullPolicy"] == "IfNotPresent"
    (_, job) = _valid(_spec(workload="indexed-job", ttl_seconds_after_finished=0))
    assert job["spec"]["ttlSecondsAfterFinished"] == 0


def test_tpu_multislice_host_network_default_and_refusals():
    tpu = {"tpu": {"type": "v5e", "topology": "4x4"}}
    (jobset,) = _valid(_spec(accelerator=tpu, num_slices=2))
    pod = _pod(jobset)["spec"]
    assert (pod["hostNetwork"], pod["dnsPolicy"]) == (True, "ClusterFirstWithHostNet")
    for spec in (
        _spec(accelerator=tpu),
        _spec(accelerator=tpu, num_slices=2, host_network=False),
        _spec(accelerator=tpu, num_slices=2, data={"gcsfuse": {"bucket": "bkt"}}),
    ):
        (jobset,) = _valid(spec)
        assert "hostNetwork" not in _pod(jobset)["spec"]
    assert _error(host_network=True).field == "host_network"  # CPU pods
    assert _error(accelerator=tpu, workload="indexed-job", host_network=True).field == "host_network"


def test_gcsfuse_on_the_host_network_renders_the_drivers_opt_in():
    """gcs-fuse-csi-driver docs/authentication.md: host-network pods need hostNetworkPodKSA
    (and identityProvider with a self-deployed driver); pod-network pods get neither."""
    tpu = {"tpu": {"type": "v5e", "topology": "4x4"}}
    idp = "https://container.googleapis.com/v1/projects/p/locations/l/clusters/c"
    (jobset,) = _valid(
        _spec(
            accelerator=tpu,
            num_slices=2,
            host_network=True,
            data={"gcsfuse": {"bucket": "bkt", "identity_provider": idp}},
        )
    )
    pod = _pod(jobset)["spec"]
    (data,) = [v for v in pod["volumes"] if v["name"] == "data"]
    assert pod["hostNetwork"] is True
    assert data["csi"]["volumeAttributes"] == {
        "bucketName": "bkt",
        "mountOptions": "implicit-dirs",
        "hostNetworkPodKSA": "true",
        "identityProvider": idp,
    }
    (jobset,) = _valid(_spec(accelerator=tpu, num_slices=2, host_network=True, data={"gcsfuse": {"bucket": "bkt"}}))
    (data,) = [v for v in _pod(jobset)["spec"]["volumes"] if v["name"] == "data"]
    assert data["csi"]["volumeAttributes"]["hostNetworkPodKSA"] == "true"
    assert "identityProvider" not in data["csi"]["volumeAttributes"]
    (jobset,) = _valid(_spec(accelerator=tpu, num_slices=2, data={"gcsfuse": {"bucket": "bkt"}}))
    (data,) = [v for v in _pod(jobset)["spec"]["volumes"] if v["name"] == "data"]
    assert set(data["csi"]["volumeAttributes"]) == {"bucketName", "mountOptions"}


@pytest.mark.parametrize(
    "changes,warned",
    [
        ({"num_slices": 2}, True),  # the multislice default: host network
        ({"num_slices": 2, "host_network": True, "data": {"gcsfuse": {"bucket": "bkt"}}}, True),
        ({"num_slices": 2, "host_network": False}, False),
        ({"num_slices": 2, "data": {"gcsfuse": {"bucket": "bkt"}}}, False),  # pod network by default
        ({"num_slices": 1}, False),
        ({"num_slices": 2, "checkpoint_dir": None}, False),
    ],
)
def test_host_network_pods_writing_gs_checkpoints_are_told_whose_identity_writes(caplog, changes, warned):
    """Workload Identity serves pod-network pods only (GKE's Workload Identity limitations): a
    host-network pod writes gs:// as the node pool's service account, whose default scopes
    (devstorage.read_only) refuse the first save."""
    tpu = {"tpu": {"type": "v5e", "topology": "4x4"}}
    fields = {"accelerator": tpu, "checkpoint_dir": "gs://ckpt/run", "service_account": "trainer", **changes}
    with caplog.at_level(logging.WARNING, logger="roxxel_launch.render"):
        R.render(_spec(**{k: v for k, v in fields.items() if v is not None}))
    lines = [r.getMessage() for r in caplog.records if "host network" in r.getMessage()]
    if not warned:
        assert not lines
        return
    (line,) = lines
    assert "gs://ckpt/run" in line and "node pool's service account" in line
    assert "--scopes=storage-full" in line and "host_network: false" in line
    # The set-up the warning asks for is documented where it points (and names the warning).
    assert 'docs/run-on-gke.md, "Host-network pods write as the node"' in line
    section = (REPO / "docs" / "run-on-gke.md").read_text().split("#### Host-network pods write as the node")[1]
    assert "--scopes=storage-full,gke-default" in section.split("####")[0] and "reminder" in section


def test_gpu_pods_get_the_node_driver_libraries_on_the_loader_path(caplog):
    gpu = {"gpu": {"type": "nvidia-h100-80gb", "count": 8}}
    (jobset,) = _valid(_spec(accelerator=gpu))
    env = _pod(jobset)["spec"]["containers"][0]["env"]
    assert {"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib64"} in env
    with caplog.at_level(logging.WARNING):
        R.render(_spec(accelerator=gpu, env={"LD_LIBRARY_PATH": "/opt/lib"}))
    assert "/usr/local/nvidia/lib64" in caplog.text


def _worker_grace(rendered) -> str:
    obj = rendered.objects[-1]
    pod = obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    return env["ROXXEL_TERMINATION_GRACE_S"]


@pytest.mark.parametrize(
    "fields,told",
    [
        ({"termination_grace_period": 600}, "15"),  # GKE's default for non-system pods
        ({"termination_grace_period": 600, "spot_grace_period": 90}, "90"),  # a pool's longer setting
        ({"termination_grace_period": 10}, "10"),  # shorter than GKE's: the spec's
    ],
)
def test_spot_workers_are_told_the_grace_gke_gives(caplog, fields, told):
    """On Spot / preemptible nodes GKE gives non-system pods 15 s (at most 120 s with the node
    setting), whatever terminationGracePeriodSeconds says: the workers were told 600 s and
    planned their preemption save on it (failed before: ROXXEL_TERMINATION_GRACE_S was 600)."""
    with caplog.at_level(logging.WARNING):
        rendered = R.render(_spec(node_selectors={"cloud.google.com/gke-spot": "true"}, **fields))
    assert _worker_grace(rendered) == told
    assert f"a preemption save must fit in {told} s" in caplog.text, caplog.text


def test_off_spot_the_workers_are_told_the_termination_grace_period(caplog):
    with caplog.at_level(logging.WARNING):
        rendered = R.render(_spec(termination_grace_period=600))
    assert _worker_grace(rendered) == "600" and "Spot" not in caplog.text


@pytest.mark.parametrize("bad", [0, 121])
def test_spot_grace_period_is_at_most_what_gke_allows(bad):
    with pytest.raises(S.SpecError, match="spot_grace_period: must be between 1 and 120"):
        _spec(node_selectors={"cloud.google.com/gke-spot": "true"}, spot_grace_period=bad)


# ----------------------------------------------------------------------------- escape hatches


def test_escape_hatches_render_and_pass_strict_schemas():
    spec = _spec(
        env_from=[{"secret": "wandb", "prefix": "WANDB_"}, {"config_map": "settings", "optional": True}],
        env_refs={"HF_TOKEN": {"secret": "hf", "key": "token"}},
        image_pull_secrets=["registry-creds"],
        volumes=[
            {"name": "scratch", "mount_path": "/scratch", "read_only": False, "empty_dir": {"size_limit": "300Gi"}},
            {"name": "creds", "mount_path": "/etc/creds", "secret": "creds"},
            {"name": "share", "mount_path": "/share", "nfs": {"server": "10.0.0.3", "path": "/s"}},
        ],
        labels={"team": "lm"},
        annotations={"example.com/owner": "ana"},
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]
                }
            }
        },
        priority_class="high",
        tolerations=[{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}],
    )
    (jobset,) = _valid(spec)
    assert jobset["metadata"]["labels"]["team"] == "lm"
    pod = _pod(jobset)
    assert pod["metadata"]["labels"]["team"] == "lm"
    assert pod["metadata"]["annotations"]["example.com/owner"] == "ana"
    spec_ = pod["spec"]
    assert spec_["imagePullSecrets"] == [{"name": "registry-creds"}]
    assert spec_["affinity"] == dict(spec.affinity)
    container = spec_["containers"][0]
    assert container["envFrom"] == [
        {"secretRef": {"name": "wandb", "optional": False}, "prefix": "WANDB_"},
        {"configMapRef": {"name": "settings", "optional": True}},
    ]
    assert {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token", "optional": False}},
    } in container["env"]
    assert {"name": "scratch", "emptyDir": {"sizeLimit": "300Gi"}} in spec_["volumes"]
    assert {"name": "creds", "mountPath": "/etc/creds", "readOnly": True} in container["volumeMounts"]


def test_a_wrong_affinity_is_caught_by_the_strict_schema():
    spec = _spec(affinity={"nodeAffinity": {"requiredDuringScheduling": {}}})
    with pytest.raises(V.ManifestError, match="requiredDuringScheduling"):
        V.validate(R.render(spec).objects)


@pytest.mark.parametrize(
    "changes,field",
    [
        ({"labels": {"roxxel.dev/run-name": "x"}}, "labels.roxxel.dev/run-name"),
        ({"annotations": {"gke-gcsfuse/volumes": "false"}}, "annotations.gke-gcsfuse/volumes"),
        ({"labels": {"team": "a b"}}, "labels.team"),
        ({"volumes": [{"name": "dshm", "mount_path": "/x", "secret": "s"}]}, "volumes[0].name"),
        ({"volumes": [{"name": "v", "mount_path": "/dev/shm", "secret": "s"}]}, "volumes[0].mount_path"),
        ({"volumes": [{"name": "v", "mount_path": "/x", "secret": "s", "pvc": "p"}]}, "volumes[0]"),
        ({"env_refs": {"ROXXEL_RUN_NAME": {"secret": "s", "key": "k"}}}, "env_refs.ROXXEL_RUN_NAME"),
        ({"env_from": [{"secret": "Bad_Name"}]}, "env_from[0].secret"),
        ({"image_pull_secrets": ["UPPER"]}, "image_pull_secrets[0]"),
        ({"affinity": {"weight": 1.5}}, "affinity.weight"),
    ],
)
def test_escape_hatch_mistakes_are_named(changes, field):
    assert _error(**changes).field == field


def test_pod_patch_is_a_strategic_merge_validated_like_the_rest():
    spec = _spec(
        pod_patch={
            "spec": {
                "containers": [
                    {
                        "name": "worker",
                        "securityContext": {"runAsNonRoot": True},
                        "env": [{"name": "EXTRA", "value": "1"}],
                    }
                ],
                "volumes": [{"name": "dshm", "$patch": "delete"}],
                "dnsConfig": {"options": [{"name": "ndots", "value": "1"}]},
            }
        }
    )
    with pytest.raises(V.ManifestError, match="mount of unknown volume 'dshm'"):
        V.validate(R.render(spec).objects)
    spec = _spec(
        pod_patch={
            "metadata": {"annotations": {"example.com/x": "y"}},
            "spec": {
                "containers": [{"name": "worker", "env": [{"name": "EXTRA", "value": "1"}]}],
                "dnsConfig": {"options": [{"name": "ndots", "value": "1"}]},
            },
        }
    )
    (jobset,) = _valid(spec)
    pod = _pod(jobset)
    assert pod["metadata"]["annotations"]["example.com/x"] == "y"
    assert pod["spec"]["dnsConfig"] == {"options": [{"name": "ndots", "value": "1"}]}
    (container,) = pod["spec"]["containers"]
    assert container["env"][-1] == {"name": "EXTRA", "value": "1"}
    assert container["env"][0]["name"] == "JOBSET_NAME" or len(container["env"]) > 5  # merged, not replaced
    bad = _spec(pod_patch={"spec": {"restartPolicy": "OnFailure"}})
    with pytest.raises(V.ManifestError, match="restartPolicy"):
        V.validate(R.render(bad).objects)
    with pytest.raises(S.SpecError, match="pod_patch"):
        R.render(_spec(pod_patch={"spec": {"containers": [{"image": "x"}]}}))


def test_pod_patch_hostile_strings_stay_values():
    value = 'x"\n  hostPID: true\n#'
    spec = _spec(pod_patch={"metadata": {"annotations": {"example.com/x": value}}})
    jobset = R.render(spec).objects[-1]
    assert _pod(jobset)["metadata"]["annotations"]["example.com/x"] == value
    assert "hostPID" not in _pod(jobset)["spec"]


def test_strategic_merge_rules():
    original = {"a": {"b": 1, "c": 2}, "containers": [{"name": "w", "x": 1}], "l": [1, 2]}
    out = P.strategic_merge(
        original, {"a": {"c": None, "d": 3}, "containers": [{"name": "w", "y": 2}, {"name": "new"}], "l": [3]}
    )
    assert out == {"a": {"b": 1, "d": 3}, "containers": [{"name": "w", "x": 1, "y": 2}, {"name": "new"}], "l": [3]}
    assert original["a"] == {"b": 1, "c": 2}  # not modified
    with pytest.raises(ValueError, match="directive"):
        P.strategic_merge(original, {"containers": [{"name": "w", "$patch": "replace"}]})


# ----------------------------------------------------------------------------- TPU shapes


@pytest.mark.parametrize(
    "tpu,hosts,chips",
    [
        ({"type": "v5e", "topology": "2x4"}, 1, "8"),  # ct5lp-hightpu-8t
        ({"type": "v5e", "topology": "2x4", "chips_per_host": 4}, 2, "4"),  # ct5lp-hightpu-4t
        ({"type": "v6e", "topology": "2x4", "chips_per_host": 4}, 2, "4"),  # ct6e-standard-4t (xpk v6e-8)
        ({"type": "tpu7x", "topology": "1x1x1"}, 1, "1"),  # tpu7x-standard-1t
        ({"type": "tpu7x", "topology": "2x2x1"}, 1, "4"),
        ({"type": "tpu7x", "topology": "4x4x8"}, 32, "4"),
        ({"type": "tpu7x", "topology": "4x12x124"}, 1488, "4"),  # xpk: sides to 256
    ],
)
def test_tpu_shapes_render_and_validate(tpu, hosts, chips):
    (jobset,) = _valid(_spec(accelerator={"tpu": tpu}))
    job = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]
    pod = job["template"]["spec"]
    assert job["completions"] == hosts
    assert pod["containers"][0]["resources"]["limits"]["google.com/tpu"] == chips
    assert pod["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == tpu["topology"]
    exclusive = "alpha.jobset.sigs.k8s.io/exclusive-topology" in jobset["metadata"]["annotations"]
    assert exclusive == (hosts > 1)


@pytest.mark.parametrize(
    "tpu,machine",
    [
        ({"type": "v5e", "topology": "2x4"}, "ct5lp-hightpu-8t"),
        ({"type": "v5e", "topology": "2x4", "chips_per_host": 4}, "ct5lp-hightpu-4t"),
        ({"type": "v6e", "topology": "2x4"}, "ct6e-standard-8t"),
        ({"type": "v6e", "topology": "2x4", "chips_per_host": 4}, "ct6e-standard-4t"),
        ({"type": "v6e", "topology": "4x4"}, None),  # one layout: the labels suffice
        ({"type": "v5e", "topology": "2x2"}, None),
        ({"type": "tpu7x", "topology": "1x1x1"}, None),
    ],
)
def test_a_topology_served_by_two_host_sizes_names_its_machine_type(tpu, machine):
    (jobset,) = _valid(_spec(accelerator={"tpu": tpu}))
    assert _pod(jobset)["spec"]["nodeSelector"].get("node.kubernetes.io/instance-type") == machine


def test_tpu7x_multi_host_selects_its_workload_policy():
    policy = "tpu7x-128-4x4x4-placement-policy"  # xpk's name for this shape
    (jobset,) = _valid(_spec(accelerator={"tpu": {"type": "tpu7x", "topology": "4x4x4", "placement_policy": policy}}))
    pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"]["cloud.google.com/placement-policy-name"] == policy
    (plain,) = _valid(_spec(accelerator={"tpu": {"type": "tpu7x", "topology": "4x4x4"}}))
    assert "cloud.google.com/placement-policy-name" not in _pod(plain)["spec"]["nodeSelector"]


@pytest.mark.parametrize(
    "tpu,problem",
    [
        ({"type": "tpu7x", "topology": "2x2x1"}, "without a workload policy"),  # single host
        ({"type": "v5p", "topology": "2x2x4"}, "without a workload policy"),
        ({"type": "tpu7x", "topology": "4x4x4", "placement_policy": "Bad Name"}, "placement_policy"),
    ],
)
def test_placement_policy_only_where_node_pools_have_one(tpu, problem):
    err = _error(accelerator={"tpu": {"placement_policy": "p", **tpu}})
    assert err.field == "accelerator.tpu.placement_policy" and problem in str(err)
    assert str(err).count("\n") == 0


def test_placement_policy_selector_is_the_accelerator_s():
    err = _error(
        accelerator={"tpu": {"type": "tpu7x", "topology": "4x4x4", "placement_policy": "p"}},
        node_selectors={"cloud.google.com/placement-policy-name": "q"},
    )
    assert err.field.startswith("node_selectors")


def test_chips_per_host_must_fit_the_topology():
    err = _error(accelerator={"tpu": {"type": "v5e", "topology": "4x4", "chips_per_host": 8}})
    assert err.field == "accelerator.tpu.chips_per_host" and "4 chips per host, not 8" in str(err)


# ----------------------------------------------------------------------------- restart budget


def test_jobset_pods_carry_their_restart_budget():
    (jobset,) = _valid(_spec(max_restarts=3, max_preemptions=20))
    env = {e["name"]: e for e in _pod(jobset)["spec"]["containers"][0]["env"]}
    assert env["ROXXEL_MAX_RESTART_ATTEMPT"]["value"] == "23"
    assert env["ROXXEL_RESTART_ATTEMPT"]["valueFrom"] == {
        "fieldRef": {"fieldPath": "metadata.annotations['jobset.sigs.k8s.io/restart-attempt']"}
    }
    (_, job) = _valid(_spec(workload="indexed-job"))  # no gang restarts: no budget
    assert "ROXXEL_MAX_RESTART_ATTEMPT" not in {e["name"] for e in _pod(job)["spec"]["containers"][0]["env"]}
    assert _error(max_preemptions=-1).field == "max_preemptions"


@pytest.mark.parametrize("attempt,last,starts", [("23", "23", True), ("24", "23", False), (None, "23", True)])
def test_worker_refuses_a_restart_beyond_the_budget(tmp_path, attempt, last, starts):
    """roxxel-worker itself (the image entrypoint): exit 78 without running the command."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROXXEL_")}
    env["ROXXEL_MAX_RESTART_ATTEMPT"] = last
    if attempt is not None:
        env["ROXXEL_RESTART_ATTEMPT"] = attempt
    marker = tmp_path / "ran"
    result = subprocess.run(
        [sys.executable, "-m", "roxxel.worker", "--", sys.executable, "-c", f"open({str(marker)!r}, 'w').close()"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert marker.exists() == starts
    if starts:
        assert result.returncode == 0, result.stderr
    else:
        assert result.returncode == exit_codes.CONFIG_ERROR_EXIT_CODE
        assert "gang restart 24 is beyond the job's budget of 23 restarts" in result.stderr
