"""Golden files: the exact manifests ``roxxel-launch render`` prints for representative jobs.

Each case's rendered YAML is compared, character for character, with
``tests/golden/<case>.yaml`` (after that file's leading comment lines), so that any change in
what reaches a cluster shows up in review as a diff of the golden file. Every golden file
also validates offline (no API server runs here): built-in kinds, and each JobSet's child
Job, with kubernetes-validate in strict mode; JobSets against the JobSet CRD's OpenAPI
schema (tests/fixtures/k8s) with jsonschema, unknown fields rejected.

After an intended change to the rendering, regenerate the files and review the diff:

    ROXXEL_UPDATE_GOLDEN=1 pytest tests/launcher/render/test_golden.py
"""

from __future__ import annotations

import difflib
import json
import os
import pathlib

import pytest
import yaml
from click.testing import CliRunner

from roxxel_launch import render as R
from roxxel_launch import spec as S
from roxxel_launch import pod_security as PS
from roxxel_launch import validate as V
from roxxel_launch.cli import cli
from support.paths import GOLDEN
from support.paths import JOBSET_CRD as CRD

UPDATE_ENV = "ROXXEL_UPDATE_GOLDEN"
HEADER = (
    "# Golden file of tests/launcher/render/test_golden.py: `roxxel-launch render` of case {case!r}.\n"
    "# Do not edit by hand; regenerate with: " + UPDATE_ENV + "=1 pytest tests/launcher/render/test_golden.py\n"
)
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

BASE = {
    "apiVersion": "roxxel.dev/v1alpha1",
    "kind": "RoxxelJob",
    "image": "us-docker.pkg.dev/my-project/roxxel/worker:1.0",
    "command": ["python", "examples/lm/train.py", "--steps", "10000"],
}

# Each case: the spec, and the shape the rendering must have (checked besides the golden
# text, so that a regenerated golden file cannot silently accept a wrong shape).
CASES: dict[str, tuple[dict, dict]] = {
    # The smallest job: one CPU pod.
    "cpu-1-host": (
        {
            "name": "smoke",
            "accelerator": "cpu",
            "resources": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "4Gi"}},
            "max_restarts": 0,
            "termination_grace_period": 30,
        },
        {"kinds": ["NetworkPolicy", "JobSet"], "slices": 1, "hosts": 1},
    ),
    # v5p topologies are 3-D (AxBxC chips): 2x2x4 = 16 chips, 4 chips per host -> 4 hosts
    # per slice, derived from the topology table (launcher/roxxel_launch/tpu.py), never given by the user.
    "tpu-v5p-2x2x4-2-slices": (
        {
            "name": "lm-v5p",
            "namespace": "ml",
            "accelerator": {"tpu": {"type": "v5p", "topology": "2x2x4"}},
            "num_slices": 2,
            "checkpoint_dir": "gs://my-checkpoints/lm-v5p",
            "service_account": "roxxel-trainer",
            "queue": "team-a",
            "priority_class": "training",
            "max_restarts": 5,
            "termination_grace_period": 600,
        },
        {"kinds": ["NetworkPolicy", "JobSet"], "slices": 2, "hosts": 4, "tpu": ("tpu-v5p-slice", "2x2x4", "4")},
    ),
    # v5e topologies are 2-D: 4x4 = 16 chips, 4 per host -> 4 hosts; data through GCS FUSE.
    "tpu-v5e-4x4-2-slices-gcsfuse": (
        {
            "name": "lm-v5e",
            "namespace": "ml",
            "accelerator": {"tpu": {"type": "v5e", "topology": "4x4"}},
            "num_slices": 2,
            "checkpoint_dir": "gs://my-checkpoints/lm-v5e",
            "service_account": "roxxel-trainer",
            "data": {
                "gcsfuse": {
                    "bucket": "my-datasets",
                    "only_dir": "shards/web-v1",
                    "mount_options": ["implicit-dirs", "metadata-cache:ttl-secs:-1"],
                    "file_cache_mb": 50000,
                }
            },
            # Nodes with a larger boot disk than GKE's 100 GB default: the 55,000 MiB cache fits.
            "node_ephemeral_storage": "200Gi",
        },
        {
            "kinds": ["NetworkPolicy", "JobSet"],
            "slices": 2,
            "hosts": 4,
            "tpu": ("tpu-v5-lite-podslice", "4x4", "4"),
            "data": "gcsfuse",
        },
    ),
    # Two A3 hosts with 8 H100s each; data read-only from an NFS (Filestore) share.
    "gpu-h100-8x2-nfs": (
        {
            "name": "lm-h100",
            "namespace": "ml",
            "accelerator": {"gpu": {"type": "nvidia-h100-80gb", "count": 8, "hosts": 2}},
            "data": {"nfs": {"server": "10.0.0.2", "path": "/datasets"}},
            "checkpoint_dir": "gs://my-checkpoints/lm-h100",
            "service_account": "roxxel-trainer",
            "env": {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.92"},
            "resources": {"requests": {"cpu": "180", "memory": "1600Gi"}, "limits": {"memory": "1700Gi"}},
            "tolerations": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}],
            "termination_grace_period": 600,
        },
        {
            "kinds": ["NetworkPolicy", "JobSet"],
            "slices": 1,
            "hosts": 2,
            "gpu": ("nvidia-h100-80gb", "8"),
            "data": "nfs",
        },
    ),
    # The indexed-job kind: a headless Service and an Indexed Job (no JobSet controller).
    "indexed-job-cpu-4-hosts": (
        {
            "name": "lm-idx",
            "namespace": "ml",
            "accelerator": {"cpu": {"hosts": 4}},
            "workload": "indexed-job",
            "queue": "team-a",
            "data": {"pvc": {"claim": "shared-data"}},
            "checkpoint_dir": "/ckpt/lm-idx",
            "volumes": [{"name": "ckpt", "mount_path": "/ckpt", "read_only": False, "pvc": "checkpoints"}],
        },
        {"kinds": ["Service", "NetworkPolicy", "Job"], "slices": 1, "hosts": 4, "data": "persistentVolumeClaim"},
    ),
    # GKE's GPU networking presets (launcher/roxxel_launch/gpu_networking.py): A3 High with
    # GPUDirect-TCPX, A3 Mega with GPUDirect-TCPXO (custom network names), A4 with RDMA.
    "gpu-a3high-tcpx": (
        {
            "name": "lm-a3high",
            "namespace": "ml",
            "accelerator": {"gpu": {"type": "nvidia-h100-80gb", "count": 8, "hosts": 2, "networking": "tcpx"}},
            "checkpoint_dir": "gs://my-checkpoints/lm-a3high",
        },
        {
            "kinds": ["NetworkPolicy", "JobSet"],
            "slices": 1,
            "hosts": 2,
            "gpu": ("nvidia-h100-80gb", "8"),
            "networking": ("tcpx", 5),
        },
    ),
    "gpu-a3mega-tcpxo": (
        {
            "name": "lm-a3mega",
            "namespace": "ml",
            "accelerator": {
                "gpu": {
                    "type": "nvidia-h100-mega-80gb",
                    "count": 8,
                    "hosts": 4,
                    "networking": "tcpxo",
                    "networks": [f"a3mega-net-{i}" for i in range(1, 9)],
                }
            },
            "checkpoint_dir": "gs://my-checkpoints/lm-a3mega",
        },
        {
            "kinds": ["NetworkPolicy", "JobSet"],
            "slices": 1,
            "hosts": 4,
            "gpu": ("nvidia-h100-mega-80gb", "8"),
            "networking": ("tcpxo", 9),
        },
    ),
    "gpu-a4-rdma": (
        {
            "name": "lm-a4",
            "namespace": "ml",
            "accelerator": {"gpu": {"type": "nvidia-b200", "count": 8, "hosts": 2, "networking": "rdma"}},
            "checkpoint_dir": "gs://my-checkpoints/lm-a4",
        },
        {
            "kinds": ["NetworkPolicy", "JobSet"],
            "slices": 1,
            "hosts": 2,
            "gpu": ("nvidia-b200", "8"),
            "networking": ("rdma", 9),
        },
    ),
}


def _spec(case: str) -> S.JobSpec:
    return S.spec_from_dict({**BASE, **CASES[case][0]})


def _strip_header(text: str) -> str:
    lines = text.splitlines(keepends=True)
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    return "".join(lines)


def _diff(expected: str, actual: str, path: pathlib.Path) -> str:
    diff = "".join(
        difflib.unified_diff(
            expected.splitlines(keepends=True),
            actual.splitlines(keepends=True),
            fromfile=f"{path} (golden)",
            tofile="rendered now",
            n=2,
        )
    )
    return (
        f"the rendered manifests differ from {path}:\n{diff}\nIf the change is intended, regenerate "
        f"the golden files with {UPDATE_ENV}=1 pytest tests/launcher/render/test_golden.py and review the diff."
    )


@pytest.fixture(scope="module")
def crd_schema() -> dict:
    return V.jobset_crd_schema(yaml.load(CRD.read_text(), Loader=_LOADER))


@pytest.mark.parametrize("case", CASES)
def test_rendered_manifests_match_the_golden_file(case):
    path = GOLDEN / f"{case}.yaml"
    actual = R.render(_spec(case)).yaml
    if os.environ.get(UPDATE_ENV) == "1":
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(HEADER.format(case=case) + actual, encoding="utf-8")
    assert path.is_file(), (
        f"{path} is missing; create it with {UPDATE_ENV}=1 pytest tests/launcher/render/test_golden.py"
    )
    expected = _strip_header(path.read_text(encoding="utf-8"))
    if expected != actual:
        pytest.fail(_diff(expected, actual, path), pytrace=False)


@pytest.mark.parametrize("case", CASES)
def test_golden_manifests_validate_and_have_the_expected_shape(case, crd_schema):
    """Offline (no API server): kubernetes-validate strict + the JobSet CRD schema, closed."""
    objects = [o for o in yaml.load_all((GOLDEN / f"{case}.yaml").read_text(), Loader=_LOADER) if o]
    assert V.check_objects(objects) == []
    assert V.check_schemas(objects) == []  # built-in kinds, and each JobSet's child Job
    V.validate(objects)
    for obj in objects:
        if obj["kind"] == "JobSet":
            assert V.check_jobset_crd(obj, crd_schema) == []

    shape = CASES[case][1]
    assert [o["kind"] for o in objects] == shape["kinds"]
    workload = objects[-1]
    if workload["kind"] == "JobSet":
        (rjob,) = workload["spec"]["replicatedJobs"]
        assert rjob["replicas"] == shape["slices"]
        job = rjob["template"]["spec"]
    else:
        job = workload["spec"]
    assert job["parallelism"] == job["completions"] == shape["hosts"]
    pod = job["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    (container,) = pod["containers"]
    limits = container["resources"]["limits"]
    if "tpu" in shape:
        accelerator, topology, chips = shape["tpu"]
        assert pod["nodeSelector"]["cloud.google.com/gke-tpu-accelerator"] == accelerator
        assert pod["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == topology
        assert limits["google.com/tpu"] == chips
        assert (
            workload["metadata"]["annotations"]["alpha.jobset.sigs.k8s.io/exclusive-topology"]
            == "cloud.google.com/gke-nodepool"
        )
    annotations = job["template"]["metadata"]["annotations"]
    if "networking" in shape:
        mode, interfaces = shape["networking"]
        assert annotations["networking.gke.io/default-interface"] == "eth0"
        assert len(json.loads(annotations["networking.gke.io/interfaces"])) == interfaces
        sidecars = pod.get("initContainers", [])
        assert [c["restartPolicy"] for c in sidecars] == ([] if mode == "rdma" else ["Always"])
        env = {v["name"]: v.get("value") for v in container["env"]}
        assert "/usr/local/nvidia/lib64" in env["LD_LIBRARY_PATH"].split(":")
        # Host paths and added capabilities: the namespace must allow "privileged".
        assert {p for p, _, _ in PS.pod_security_findings(job["template"])} == {"baseline", "restricted"}
    else:
        assert "initContainers" not in pod
    if "gpu" in shape:
        accelerator, count = shape["gpu"]
        assert pod["nodeSelector"]["cloud.google.com/gke-accelerator"] == accelerator
        assert limits["nvidia.com/gpu"] == count
    data = [v for v in pod["volumes"] if v["name"] == "data"]
    if "data" in shape:
        (volume,) = data
        mount = next(m for m in container["volumeMounts"] if m["name"] == "data")
        assert mount == {"name": "data", "mountPath": "/data", "readOnly": True}
        if shape["data"] == "gcsfuse":
            assert volume["csi"]["driver"] == "gcsfuse.csi.storage.gke.io" and volume["csi"]["readOnly"]
            assert (
                volume["csi"]["volumeAttributes"]["mountOptions"]
                == "implicit-dirs,metadata-cache:ttl-secs:-1,only-dir:shards/web-v1,file-cache:max-size-mb:50000"
            )
            # The sidecar's limits are explicit, and the bounded file cache has its own volume.
            assert job["template"]["metadata"]["annotations"] == {
                "kubectl.kubernetes.io/default-container": "worker",
                "roxxel.dev/pod-security": "baseline",
                "gke-gcsfuse/volumes": "true",
                "gke-gcsfuse/cpu-limit": "0",
                "gke-gcsfuse/memory-limit": "0",
                "gke-gcsfuse/ephemeral-storage-limit": "0",
            }
            assert {"name": "gke-gcsfuse-cache", "emptyDir": {"sizeLimit": "55000Mi"}} in pod["volumes"]
        else:
            assert volume[shape["data"]]["readOnly"] is True
    else:
        assert data == []


def test_cli_render_prints_the_golden_text(tmp_path):
    """`roxxel-launch render` prints exactly the golden manifests (what kubectl apply gets)."""
    case = "tpu-v5p-2x2x4-2-slices"
    spec_file = tmp_path / "job.yaml"
    spec_file.write_text(yaml.safe_dump({**BASE, **CASES[case][0]}))
    result = CliRunner().invoke(cli, ["render", str(spec_file)])
    assert result.exit_code == 0, result.output
    assert result.output == _strip_header((GOLDEN / f"{case}.yaml").read_text())


def test_every_golden_file_belongs_to_a_case():
    files = {p.stem for p in GOLDEN.glob("*.yaml")}
    assert files == set(CASES), f"stale golden files: {sorted(files - set(CASES))}"


def test_a_changed_rendering_fails_with_a_readable_diff():
    golden = _strip_header((GOLDEN / "cpu-1-host.yaml").read_text())
    changed = golden.replace("backoffLimit: 0", "backoffLimit: 6")
    message = _diff(golden, changed, GOLDEN / "cpu-1-host.yaml")
    assert "-        backoffLimit: 0\n+        backoffLimit: 6\n" in message
    assert f"{UPDATE_ENV}=1" in message
