"""The fit check before submit (roxxel_launch.backends.kubernetes.fit): real rendered manifests
through the official client against the simulated cluster (tests/support/k8s_fake_server.py),
whose Nodes carry GKE's node-pool and accelerator labels, taints and allocatable resources."""

from __future__ import annotations

import logging
from decimal import Decimal

import pytest
import yaml
from click.testing import CliRunner

from roxxel_launch import spec as S
from roxxel_launch.backends.base import BackendError
from roxxel_launch.backends.kubernetes import backend as K
from roxxel_launch.backends.kubernetes import fit as F
from roxxel_launch.cli import cli

from support.fake_clock import FakeClock, fast_retry
from support.k8s_fake_server import FakeKubernetes, use_cluster
from support.specs import NO_NETWORK_POLICY, spec_dict

pytestmark = pytest.mark.timeout(60)

NS = "team-a"
POOL = "cloud.google.com/gke-nodepool"
V5E_4X4 = {"tpu": {"type": "v5e", "topology": "4x4"}}  # 4 hosts of 4 chips (ct5lp-hightpu-4t)
H100 = {"gpu": {"type": "h100-80gb", "count": 8, "hosts": 2}}
A3_HIGH = {"gpu": {"type": "nvidia-h100-80gb", "count": 8, "hosts": 2}}  # GKE's label value
TPU_TAINT = {"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"}
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
# A ct5lp-hightpu-4t node (112 vCPUs, 192 GB, 4 chips): allocatable is what GKE leaves after its
# reservations for the system (figures of the right order, made up for the tests).
V5E_ALLOCATABLE = {
    "cpu": "111880m",
    "memory": "183856208Ki",
    "ephemeral-storage": "47060071478",
    "google.com/tpu": "4",
    "pods": "110",
}


def _v5e_node(fake: FakeKubernetes, index: int, pool: str = "tpu-v5e-pool", name: str | None = None) -> None:
    labels = {
        POOL: pool,
        "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
        "cloud.google.com/gke-tpu-topology": "4x4",
        "node.kubernetes.io/instance-type": "ct5lp-hightpu-4t",
    }
    fake.add_node(name or f"gke-{pool}-{index}", labels=labels, allocatable=V5E_ALLOCATABLE, taints=(TPU_TAINT,))


def _gpu_node(fake: FakeKubernetes, index: int, accelerator: str, machine: str, gpus: str) -> None:
    fake.add_node(
        f"gke-gpu-{index}",
        labels={
            POOL: f"{accelerator}-pool",
            "cloud.google.com/gke-accelerator": accelerator,
            "node.kubernetes.io/instance-type": machine,
        },
        allocatable={"cpu": "207", "memory": "1800Gi", "ephemeral-storage": "300Gi", "nvidia.com/gpu": gpus},
        taints=(GPU_TAINT,),
    )


@pytest.fixture
def fake(tmp_path, monkeypatch):
    with FakeKubernetes(namespace=NS) as server:
        yield use_cluster(server, tmp_path, monkeypatch, fast_retry(FakeClock()))


def _spec(accelerator, **fields) -> S.JobSpec:
    return S.spec_from_dict(
        spec_dict(
            namespace=NS, accelerator=accelerator, checkpoint_dir="gs://ckpt/lm", security=NO_NETWORK_POLICY, **fields
        )
    )


def _submit(spec: S.JobSpec, **options) -> None:
    with K.KubernetesBackend(retry=fast_retry(FakeClock()), **options) as b:
        b.submit(spec)


def _fit_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == F.__name__ and r.levelno == logging.WARNING]


# ----------------------------------------------------------------------------- on the cluster


def test_a_v5e_job_that_fits_is_created_without_a_word(fake, caplog):
    for i in range(4):
        _v5e_node(fake, i)
    fake.add_node("gke-default-pool-0", labels={POOL: "default-pool"}, allocatable={"cpu": "2", "memory": "4Gi"})
    with caplog.at_level(logging.INFO):
        _submit(_spec(V5E_4X4, resources={"requests": {"memory": "150Gi", "cpu": "100"}}))
    assert fake.get("jobsets", "lm") is not None
    assert _fit_warnings(caplog) == []
    assert ("", "nodes", "list") in fake.rbac_used


def test_a_memory_request_above_the_nodes_allocatable_is_refused_naming_it(fake):
    for i in range(4):
        _v5e_node(fake, i)
    with pytest.raises(BackendError) as info:
        _submit(_spec(V5E_4X4, resources={"requests": {"memory": "200Gi"}}))
    message = str(info.value)
    assert message.startswith(
        "a worker of slice (google.com/tpu 4, memory 200Gi) fits no node that matches "
        "it (node pool tpu-v5e-pool, ct5lp-hightpu-4t): memory 200Gi > allocatable "
        "175.3Gi. Nothing was created. Lower resources.requests.memory to 175.3Gi or "
        "less, or use a node pool of a larger machine type"
    )
    assert message.endswith("pass --skip-fit-check.") and "\n" not in message
    assert fake.calls("POST") == []


def test_the_gcsfuse_sidecar_s_default_requests_are_counted(fake):
    """The GCS FUSE CSI driver's webhook adds its sidecar at pod creation, after the check, with
    250m cpu, 256Mi memory and 5Gi ephemeral storage when the pod's limit annotations are "0"
    and no request is given (gcs-fuse-csi-driver pkg/webhook/config.go, populateResource). A
    39,500 MiB file cache (a 43,450 MiB volume) fits a default boot disk's allocatable alone,
    not with the sidecar's 5Gi: the pods would stay Pending."""
    for i in range(4):
        _v5e_node(fake, i)
    data = {"gcsfuse": {"bucket": "my-data", "file_cache_mb": 39500}}
    with pytest.raises(BackendError) as info:
        _submit(_spec(V5E_4X4, data=data, service_account="trainer"))
    message = str(info.value)
    assert "; the GCS FUSE sidecar's cpu 250m, ephemeral-storage 5Gi, memory 256Mi included)" in message, message
    assert "ephemeral-storage 47.4Gi > allocatable 43.8Gi" in message
    # what the worker itself may ask for, beside the sidecar's 5Gi
    assert "Lower resources.requests.ephemeral-storage to 38.8Gi or less" in message
    assert "\n" not in message and fake.calls("POST") == []


def test_a_sidecar_limit_is_its_request_in_the_fit_check(fake):
    """A limit annotation without a request: the webhook sets the request to the limit."""
    for i in range(4):
        _v5e_node(fake, i)
    data = {"gcsfuse": {"bucket": "my-data", "file_cache_mb": 39500, "sidecar_ephemeral_storage_limit": "1Gi"}}
    _submit(_spec(V5E_4X4, data=data, service_account="trainer"))
    assert fake.get("jobsets", "lm") is not None


def test_sidecar_requests_come_from_the_pod_template_s_annotations():
    template = {"metadata": {"annotations": {"gke-gcsfuse/volumes": "true", "gke-gcsfuse/cpu-limit": "2"}}}
    main = {"cpu": Decimal(2), "memory": Decimal(256 * 2**20), "ephemeral-storage": Decimal(5 * 2**30)}
    assert F.gcsfuse_sidecars(template) == {"gke-gcsfuse-sidecar": main}
    assert F.gcsfuse_sidecars({"metadata": {"annotations": {}}}) == {}
    named = {**template, "spec": {"initContainers": [{"name": "gke-gcsfuse-sidecar"}]}}
    assert F.gcsfuse_sidecars(named) == {}  # the pod brings its own: its resources count


def _prefetching(value: str, **annotations: str) -> dict:
    volume = {"name": "data", "csi": {"driver": "gcsfuse.csi.storage.gke.io"}}
    volume["csi"]["volumeAttributes"] = {"bucketName": "b", "gcsfuseMetadataPrefetchOnMount": value}
    return {
        "metadata": {"annotations": {"gke-gcsfuse/volumes": "true", **annotations}},
        "spec": {"volumes": [volume]},
    }


def test_the_metadata_prefetch_sidecar_is_counted_where_a_volume_asks_for_it():
    """The webhook injects gke-gcsfuse-metadata-prefetch after its sidecar when a volume sets
    gcsfuseMetadataPrefetchOnMount (read with Go's strconv.ParseBool), with 10m cpu, 10Mi memory
    and 10Mi ephemeral storage by default and the gke-gcsfuse/metadata-prefetch-* annotations
    by the same rule as the sidecar's (gcs-fuse-csi-driver cmd/webhook/main.go,
    pkg/webhook/config.go and injection.go at 5fcdc04)."""
    prefetch = {"cpu": Decimal("0.01"), "memory": Decimal(10 * 2**20), "ephemeral-storage": Decimal(10 * 2**20)}
    for value in ("true", "True", "1", "t"):
        got = F.gcsfuse_sidecars(_prefetching(value))
        assert (
            list(got) == ["gke-gcsfuse-sidecar", "gke-gcsfuse-metadata-prefetch"]
            and got["gke-gcsfuse-metadata-prefetch"] == prefetch
        ), value
    assert list(F.gcsfuse_sidecars(_prefetching("false"))) == ["gke-gcsfuse-sidecar"]
    limited = F.gcsfuse_sidecars(_prefetching("true", **{"gke-gcsfuse/metadata-prefetch-memory-limit": "1Gi"}))
    assert limited["gke-gcsfuse-metadata-prefetch"]["memory"] == 2**30  # a limit alone is the request
    assert limited["gke-gcsfuse-sidecar"]["memory"] == 256 * 2**20  # the main sidecar's own annotations


def test_a_job_with_metadata_prefetch_counts_both_sidecars_in_the_fit_check(fake):
    """With metadata_prefetch_on_mount the refusal names both sidecars and their summed requests."""
    for i in range(4):
        _v5e_node(fake, i)
    data = {"gcsfuse": {"bucket": "my-data", "file_cache_mb": 39500, "metadata_prefetch_on_mount": True}}
    with pytest.raises(BackendError) as info:
        _submit(_spec(V5E_4X4, data=data, service_account="trainer"))
    message = str(info.value)
    assert "the GCS FUSE sidecars' (gke-gcsfuse-sidecar, gke-gcsfuse-metadata-prefetch) cpu 260m" in message, message


def test_a_resume_the_check_refuses_leaves_the_stopped_job_in_place(fake):
    """resume deletes the old JobSet only after the checks pass: a refusal after the delete
    would leave no job and no stored spec."""
    for i in range(4):
        _v5e_node(fake, i)
    fake.plan("lm", "fail")
    with K.KubernetesBackend(retry=fast_retry(FakeClock()), poll_seconds=0.01) as b:
        b.submit(_spec(V5E_4X4))
        b.wait("lm", poll_seconds=0.01)
        with pytest.raises(BackendError, match=r"memory 200Gi > allocatable 175.3Gi"):
            b.resume("lm", new_spec=_spec(V5E_4X4, resources={"requests": {"memory": "200Gi"}}))
    assert fake.calls("DELETE") == [] and fake.get("jobsets", "lm") is not None


def test_skipping_the_check_submits_what_it_would_refuse(fake, caplog):
    _v5e_node(fake, 0)
    with caplog.at_level(logging.INFO):
        _submit(_spec(V5E_4X4, resources={"requests": {"memory": "200Gi"}}), fit_check=False)
    assert fake.get("jobsets", "lm") is not None
    assert not any(r.path == "/api/v1/nodes" for r in fake.calls("GET"))
    assert any("the fit check is skipped (--skip-fit-check)" in r.getMessage() for r in caplog.records)


def test_a_gpu_job_on_a_pool_of_too_few_gpus_per_node_is_refused(fake):
    """a3-highgpu-4g nodes carry the selector's accelerator label, but 4 GPUs each, not 8."""
    for i in range(2):
        _gpu_node(fake, i, "h100-80gb", "a3-highgpu-4g", "4")
    with pytest.raises(
        BackendError,
        match=r"fits no node that matches it \(node pool h100-80gb-pool, "
        r"a3-highgpu-4g\): nvidia.com/gpu 8 > allocatable 4\. Nothing was created\. "
        r"Lower nvidia.com/gpu to 4 or less",
    ):
        _submit(_spec(H100))
    assert fake.calls("POST") == []


def test_a_gpu_job_where_only_other_accelerators_run_is_warned_about_and_submitted(fake, caplog):
    """No node carries gke-accelerator=h100-80gb: a pool of H100s scaled to zero has no Node either,
    so this is a warning naming the selector, not a refusal (see fit's module docstring)."""
    for i in range(2):
        _gpu_node(fake, i, "nvidia-l4", "g2-standard-48", "4")
    _submit(_spec(H100))
    (warning,) = _fit_warnings(caplog)
    assert warning.startswith(
        "no node of the cluster matches a worker of slice (nvidia.com/gpu 8) "
        "(node selector cloud.google.com/gke-accelerator=h100-80gb, its tolerations)"
    )
    assert "node pool scaled to zero" in warning
    assert fake.get("jobsets", "lm") is not None


def test_fewer_nodes_than_hosts_are_warned_about_and_the_job_submitted(fake, caplog):
    for i in range(2):
        _v5e_node(fake, i)
    _submit(_spec(V5E_4X4))
    (warning,) = _fit_warnings(caplog)
    assert "the 2 nodes that can hold one (node pool tpu-v5e-pool) hold 2 of its 4 pods" in warning
    assert "cluster autoscaler" in warning
    assert fake.get("jobsets", "lm") is not None


def test_nodes_whose_device_plugin_reports_no_chips_yet_are_not_held_against_the_job(fake, caplog):
    """A TPU node that has just joined shows no google.com/tpu until its device plugin runs:
    not a reason to refuse."""
    fake.add_node(
        "gke-tpu-v5e-pool-new",
        labels={
            POOL: "tpu-v5e-pool",
            "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
            "cloud.google.com/gke-tpu-topology": "4x4",
        },
        allocatable={k: v for k, v in V5E_ALLOCATABLE.items() if k != "google.com/tpu"},
        taints=(TPU_TAINT,),
    )
    _submit(_spec(V5E_4X4))
    (warning,) = _fit_warnings(caplog)
    assert "no node matching it reports its accelerators yet (1 node in node pool tpu-v5e-pool;" in warning
    assert fake.get("jobsets", "lm") is not None


def test_a_node_whose_taint_the_pod_does_not_tolerate_does_not_match(fake, caplog):
    """A v5e node reserved for another team (a taint the worker lacks a toleration for): the
    worker does not match it, whatever its size."""
    fake.add_node(
        "gke-reserved-0",
        labels={
            POOL: "reserved",
            "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
            "cloud.google.com/gke-tpu-topology": "4x4",
        },
        allocatable=V5E_ALLOCATABLE,
        taints=(TPU_TAINT, {"key": "team", "value": "b", "effect": "NoSchedule"}),
    )
    # More than the node's allocatable (~175Gi), within the machine's 192 GiB: no match, warned.
    _submit(_spec(V5E_4X4, resources={"requests": {"memory": "190Gi"}}))
    (warning,) = _fit_warnings(caplog)
    assert warning.startswith("no node of the cluster matches a worker of slice")


@pytest.mark.parametrize(
    "evidence",
    [
        {"name": "gk3-autopilot-pool-1-abcd"},  # Autopilot
        {"pool": "nap-1acv0bno"},
    ],
)  # node auto-provisioning
def test_a_cluster_that_creates_node_pools_itself_gets_a_warning_not_a_refusal(fake, caplog, evidence):
    """Autopilot nodes are named gk3-..., auto-provisioned pools nap-...: a node of the size the
    worker needs may be made for it."""
    _v5e_node(fake, 0, **evidence)
    _submit(_spec(V5E_4X4, resources={"requests": {"memory": "200Gi"}}))
    (warning,) = _fit_warnings(caplog)
    assert "memory 200Gi > allocatable 175.3Gi; the cluster creates node pools itself" in warning
    assert fake.get("jobsets", "lm") is not None


def test_a_role_that_may_not_list_nodes_skips_the_check_with_one_line(fake, caplog):
    _v5e_node(fake, 0)  # too small for the request: the check, had it run, would refuse
    fake.set_role([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}])  # no ClusterRole
    _submit(_spec(V5E_4X4, resources={"requests": {"memory": "200Gi"}}))
    (warning,) = _fit_warnings(caplog)
    assert warning.startswith("cannot list nodes (forbidden), so the fit check is skipped: grant `list nodes`")
    assert "--skip-fit-check" in warning and "\n" not in warning
    assert fake.get("jobsets", "lm") is not None


def test_the_cli_flag_skips_the_check_and_is_refused_with_local(fake, tmp_path):
    _v5e_node(fake, 0)
    path = tmp_path / "job.yaml"
    path.write_text(
        yaml.safe_dump(
            spec_dict(
                namespace=NS,
                accelerator=V5E_4X4,
                checkpoint_dir="gs://ckpt/lm",
                security=NO_NETWORK_POLICY,
                resources={"requests": {"memory": "200Gi"}},
            )
        )
    )
    refused = CliRunner().invoke(cli, ["submit", str(path)])
    assert refused.exit_code == 1 and "memory 200Gi > allocatable 175.3Gi" in refused.output
    assert CliRunner().invoke(cli, ["submit", str(path), "--skip-fit-check"]).exit_code == 0
    local = CliRunner().invoke(cli, ["submit", str(path), "--local", "--skip-fit-check"])
    assert (
        local.exit_code == 2 and "--skip-fit-check applies to Kubernetes jobs only, not to --local runs" in local.output
    )


# ----------------------------------------------------------------------------- the rules


def test_pod_requests_count_sidecars_and_init_containers_as_the_scheduler_does():
    """Sidecars (restartPolicy: Always) add to the app containers and run beside later init
    containers; a plain init container counts alone, at its peak ("Resource sharing within
    containers" in the Kubernetes docs)."""
    pod = {
        "containers": [
            {"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
            {"resources": {"requests": {"cpu": "500m"}}},
        ],
        "initContainers": [
            {"restartPolicy": "Always", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
            {"resources": {"requests": {"cpu": "4", "memory": "512Mi"}}},
        ],
    }
    # app + sidecar: cpu 2.5, memory 2Gi; the init container beside the sidecar: cpu 5, memory 1.5Gi
    assert F.pod_requests(pod) == {"cpu": Decimal(5), "memory": Decimal(2 * 2**30)}
    assert F.pod_requests({"containers": [{}]}) == {}


@pytest.mark.parametrize(
    "toleration,tolerates",
    [
        ({"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}, True),
        ({"key": "google.com/tpu", "operator": "Equal", "value": "present"}, True),
        ({"key": "google.com/tpu", "value": "absent"}, False),
        ({"key": "google.com/tpu", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"operator": "Exists"}, True),
        ({"key": "nvidia.com/gpu", "operator": "Exists"}, False),
    ],
)
def test_tolerations_match_taints_by_key_value_and_effect(toleration, tolerates):
    assert F.tolerated(TPU_TAINT, [toleration]) is tolerates


@pytest.mark.parametrize(
    "name,value,text",
    [
        ("memory", Decimal(183856208 * 1024), "175.3Gi"),
        ("memory", Decimal(200 * 2**30), "200Gi"),
        ("memory", Decimal(256 * 2**20), "256Mi"),
        ("cpu", Decimal("111.88"), "111880m"),
        ("cpu", Decimal(8), "8"),
        ("google.com/tpu", Decimal(4), "4"),
    ],
)
def test_amounts_read_as_people_write_them(name, value, text):
    assert F.amount(name, value) == text


# ----------------------------------------------------------------------------- no node of the pool yet


@pytest.mark.parametrize(
    "accelerator,requests,refused",
    [
        (V5E_4X4, {"cpu": "160", "memory": "350Gi"}, "cpu 160 > the machine's 112; memory 350Gi > the machine's 192Gi"),
        (V5E_4X4, {"cpu": "100", "memory": "150Gi"}, None),
        (A3_HIGH, {"cpu": "180", "memory": "2000Gi"}, "memory 2000Gi > the machine's 1872Gi"),
        (A3_HIGH, {"cpu": "180", "memory": "1600Gi"}, None),
    ],
)
def test_a_pool_with_no_node_yet_is_judged_by_its_machine_type(fake, caplog, accelerator, requests, refused):
    """A pool that scales from zero (or DWS flex-start) shows no Node: the worker's requests are
    compared with the whole machine its selector implies (ct5lp-hightpu-4t: 112 vCPUs, 192 GiB;
    a3-highgpu-8g: 208 vCPUs, 1,872 GiB). Before, v5e 4x4 with cpu 160 and memory 350Gi passed
    and its pods stayed Pending for ever."""
    fake.add_node("gke-default-pool-0", labels={POOL: "default-pool"}, allocatable={"cpu": "2", "memory": "4Gi"})
    spec = _spec(accelerator, resources={"requests": requests})
    if refused is None:
        with caplog.at_level(logging.INFO):
            _submit(spec)
        assert any("no node of the cluster matches" in w for w in _fit_warnings(caplog))
        return
    with pytest.raises(BackendError) as info:
        _submit(spec)
    message = str(info.value)
    assert refused in message and "Nothing was created" in message and "\n" not in message, message
    assert fake.get("jobsets", "lm") is None
