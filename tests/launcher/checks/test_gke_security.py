"""Where the GKE pod fields and escape hatches (issue 16) meet Pod security (issue 23).

TPU multislice host networking, user labels, volumes, env_refs, image_pull_policy and
pod_patch against the "restricted" profile, the job label the NetworkPolicy selects, and
the launcher's own writable volumes. No Kubernetes API server runs here: the rendered
objects are checked with the launcher's offline validation (official schemas, strict) and
its Pod Security checker (tested control by control in test_pod_security.py).
"""

from __future__ import annotations

import pytest

from roxxel_launch import render as R
from roxxel_launch import spec as S
from roxxel_launch import pod_security as PS
from roxxel_launch import validate as V

BASE = {
    "apiVersion": "roxxel.dev/v1alpha1",
    "kind": "RoxxelJob",
    "name": "lm",
    "namespace": "ml",
    "image": "us-docker.pkg.dev/proj/repo/worker:1",
    "command": ["python", "train.py"],
    "accelerator": {"cpu": {"hosts": 2}},
}
TPU = {"tpu": {"type": "v5p", "topology": "2x2x4"}}
DIGEST = "sha256:" + "cd" * 32


def _spec(**changes) -> S.JobSpec:
    return S.spec_from_dict({**BASE, **changes})


def _rendered(spec: S.JobSpec) -> list[dict]:
    objects = list(R.render(spec).objects)
    V.validate(objects)  # schemas, strict; logs the Pod Security warnings
    return objects


def _pod(objects: list[dict]) -> dict:
    workload = objects[-1]
    if workload["kind"] == "JobSet":
        return workload["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    return workload["spec"]["template"]


def test_tpu_multislice_host_network_defaults_to_the_privileged_profile(caplog):
    """The default hostNetwork of TPU multislice needs Pod Security privileged (Host
    Namespaces): the pods are written for it, as the references run them (privileged worker),
    so nothing is unexpected; host_network: false keeps them baseline (root, no host network)."""
    objects = _rendered(_spec(accelerator=TPU, num_slices=2))
    pod = _pod(objects)
    assert pod["spec"]["hostNetwork"] is True
    assert pod["spec"]["containers"][0]["securityContext"]["privileged"] is True
    assert [o["kind"] for o in objects] == ["NetworkPolicy", "JobSet"]
    assert V.warn_pod_security(objects) == []
    assert V.pod_security_level(objects) == "privileged"
    assert any(c == "Host Namespaces" for _, c, _ in PS.pod_security_findings(pod))

    objects = _rendered(_spec(accelerator=TPU, num_slices=2, host_network=False))
    assert "hostNetwork" not in _pod(objects)["spec"]
    assert V.warn_pod_security(objects) == [] and V.pod_security_level(objects) == "baseline"
    # Chosen restricted: no host network, the restricted rendering.
    objects = _rendered(_spec(accelerator=TPU, num_slices=2, security={"profile": "restricted"}))
    assert "hostNetwork" not in _pod(objects)["spec"]
    assert PS.pod_security_findings(_pod(objects)) == []


@pytest.mark.parametrize(
    "volume,field",
    [
        ({"name": "tmp", "mount_path": "/scratch"}, "volumes[0].name"),
        ({"name": "cache", "mount_path": "/scratch"}, "volumes[0].name"),
        ({"name": "jax-cache", "mount_path": "/scratch"}, "volumes[0].name"),
        ({"name": "gke-gcsfuse-cache", "mount_path": "/scratch"}, "volumes[0].name"),
        ({"name": "scratch", "mount_path": "/tmp"}, "volumes[0].mount_path"),
        ({"name": "scratch", "mount_path": "/var/cache/roxxel/"}, "volumes[0].mount_path"),
        ({"name": "scratch", "mount_path": "/var/cache/roxxel-jax"}, "volumes[0].mount_path"),
    ],
)
def test_user_volumes_cannot_take_the_writable_dirs(volume, field):
    with pytest.raises(S.SpecError) as info:
        _spec(volumes=[{**volume, "empty_dir": {}}])
    assert info.value.field == field


def test_user_volumes_sit_beside_the_writable_dirs_and_nfs_is_reported():
    objects = _rendered(
        _spec(
            volumes=[
                {"name": "scratch", "mount_path": "/scratch", "read_only": False, "empty_dir": {}},
                {"name": "share", "mount_path": "/share", "nfs": {"server": "10.0.0.3", "path": "/s"}},
            ]
        )
    )
    pod = _pod(objects)["spec"]
    names = [v["name"] for v in pod["volumes"]]
    assert len(names) == len(set(names))
    assert {"scratch", "share", "tmp", "cache", "jax-cache"} <= set(names)
    paths = [m["mountPath"] for m in pod["containers"][0]["volumeMounts"]]
    assert len(paths) == len(set(paths))
    lines = V.warn_pod_security(objects)
    assert any("(Volume Types)" in line and "(share) is of type nfs" in line for line in lines)
    assert "enforce=baseline" in lines[-1]


@pytest.mark.parametrize("workload", ["jobset", "indexed-job"])
def test_user_labels_join_the_job_label_the_network_policy_selects(workload):
    objects = _rendered(_spec(workload=workload, labels={"example.com/team": "a"}))
    policy = next(o for o in objects if o["kind"] == "NetworkPolicy")
    labels = _pod(objects)["metadata"]["labels"]
    assert labels["example.com/team"] == "a"
    assert labels["roxxel.dev/job"] == "lm"
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= labels.items()
    assert objects[-1]["metadata"]["labels"]["example.com/team"] == "a"


@pytest.mark.parametrize("key", ["roxxel.dev/job", "roxxel.dev/run-name"])
def test_user_labels_cannot_replace_ours(key):
    with pytest.raises(S.SpecError) as info:
        _spec(labels={key: "other"})
    assert info.value.field == f"labels.{key}"


def test_env_refs_for_a_writable_dir_variable_wins_once():
    objects = _rendered(_spec(env_refs={"TMPDIR": {"secret": "paths", "key": "tmp"}}))
    env = _pod(objects)["spec"]["containers"][0]["env"]
    tmpdir = [e for e in env if e["name"] == "TMPDIR"]
    assert tmpdir == [
        {"name": "TMPDIR", "valueFrom": {"secretKeyRef": {"name": "paths", "key": "tmp", "optional": False}}}
    ]
    assert any(e["name"] == "XDG_CACHE_HOME" for e in env)


def test_gpu_ld_library_path_from_env_refs_is_not_doubled():
    gpu = {"gpu": {"type": "nvidia-h100-80gb", "count": 8}}
    objects = _rendered(_spec(accelerator=gpu, env_refs={"LD_LIBRARY_PATH": {"config_map": "libs", "key": "path"}}))
    env = _pod(objects)["spec"]["containers"][0]["env"]
    assert [e for e in env if e["name"] == "LD_LIBRARY_PATH"] == [
        {
            "name": "LD_LIBRARY_PATH",
            "valueFrom": {"configMapKeyRef": {"name": "libs", "key": "path", "optional": False}},
        }
    ]


@pytest.mark.parametrize(
    "image,override,expected",
    [
        ("us-docker.pkg.dev/p/r/w:1", None, "Always"),
        (f"us-docker.pkg.dev/p/r/w@{DIGEST}", None, "IfNotPresent"),
        (f"us-docker.pkg.dev/p/r/w:1@{DIGEST}", None, "IfNotPresent"),
        ("us-docker.pkg.dev/p/r/w:1", "IfNotPresent", "IfNotPresent"),
        (f"us-docker.pkg.dev/p/r/w@{DIGEST}", "Never", "Never"),
    ],
)
def test_image_pull_policy_from_tag_or_digest_unless_overridden(image, override, expected):
    assert R.image_pull_policy(image, override) == expected
    changes = {"image": image} if override is None else {"image": image, "image_pull_policy": override}
    container = _pod(_rendered(_spec(**changes)))["spec"]["containers"][0]
    assert container["imagePullPolicy"] == expected


def test_pod_patch_that_loosens_security_is_reported():
    spec = _spec(pod_patch={"spec": {"hostIPC": True, "securityContext": {"runAsNonRoot": None}}})
    objects = _rendered(spec)
    lines = V.warn_pod_security(objects)
    assert any("(Host Namespaces): hostIPC is true" in line for line in lines)
    assert any("(Running as Non-root)" in line for line in lines)
    assert "enforce=privileged" in lines[-1]
