"""Pod security of rendered jobs: the Pod Security Standards profile each spec chooses
(``security.profile``: restricted, baseline, privileged, with a default per accelerator), no
needless API token, image pinning, and the per-job NetworkPolicy.

No Kubernetes API server (and so no Pod Security admission) runs here. Each profile is
checked twice: by ``assert_restricted`` / ``assert_baseline`` below, written from the
controls listed on https://kubernetes.io/docs/concepts/security/pod-security-standards/
(kept independent of the launcher's own checker), and by ``validate.pod_security_findings``,
whose every control is shown to fire. Manifests validate against the official schema with
kubernetes-validate (strict) and the JobSet CRD; create/delete go through the repository's
fake API server.
"""

from __future__ import annotations

import copy
import re
import sys
from pathlib import Path

import pytest
import yaml

from roxxel_launch import contract
from roxxel_launch import gpu_networking as GN
from roxxel_launch import render as R
from roxxel_launch import spec as S
from roxxel_launch import pod_security as PS
from roxxel_launch import validate as V
from roxxel_launch.backends.base import JobExistsError

# The Kubernetes backend's tests, in tests/launcher/kubernetes/ (imported as pytest imports them).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kubernetes"))
import test_kubernetes_backend as fake_api

from support.paths import REPO as ROOT

# The fake API server's fixtures: pytest finds fixtures that are attributes of a test module.
crd_schema, server, backend = fake_api.crd_schema, fake_api.server, fake_api.backend
make_spec = fake_api.make_spec

EXAMPLES = sorted((ROOT / "k8s" / "examples").glob("*.yaml"))
TPU = {"tpu": {"type": "v5p", "topology": "2x2x4"}}
GPU = {"gpu": {"type": "nvidia-h100-80gb", "count": 8, "hosts": 2}}
RDMA = {"gpu": {"type": "nvidia-h200-141gb", "count": 8, "hosts": 2, "networking": "rdma"}}
DIGEST = "sha256:" + "ab" * 32
INDEXED_JOB_OVERRIDES = ["workload=indexed-job", "num_slices=1", "host_network=false"]


def example_specs() -> list[tuple[str, S.JobSpec]]:
    """Every example spec in both workloads (an indexed job runs one slice, off the host network:
    its headless Service's DNS names do not cover host-network pods), and the GPU example under
    its preset's default profile, baseline, which the preset's additions break."""
    out = []
    for path in EXAMPLES:
        out.append((f"{path.stem}-jobset", S.load_spec(path)))
        out.append((f"{path.stem}-indexed-job", S.load_spec(path, INDEXED_JOB_OVERRIDES)))
    gpu = ROOT / "k8s" / "examples" / "gpu-h100-nfs.yaml"
    out.append(("gpu-h100-nfs-baseline", S.load_spec(gpu, ["security.profile=baseline"])))
    return out


EXAMPLE_SPECS = example_specs()


def pod_templates(objects) -> list[dict]:
    pods = []
    for obj in objects:
        if obj["kind"] == "JobSet":
            pods += [r["template"]["spec"]["template"] for r in obj["spec"]["replicatedJobs"]]
        elif obj["kind"] == "Job":
            pods.append(obj["spec"]["template"])
    assert pods, "no pod template rendered"
    return pods


def assert_restricted(pod: dict) -> None:
    """The Pod Security Standards controls, baseline then restricted, on one pod template."""
    spec = pod["spec"]
    psc = spec.get("securityContext") or {}
    containers = (spec.get("initContainers") or []) + spec["containers"] + (spec.get("ephemeralContainers") or [])
    # Baseline: host namespaces, HostProcess, hostPath, host ports, sysctls.
    assert not any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC"))
    assert not (psc.get("windowsOptions") or {}).get("hostProcess")
    assert not psc.get("sysctls")
    for volume in spec.get("volumes") or []:
        # Restricted: only these volume types (which also rules out hostPath).
        (kind,) = set(volume) - {"name"}
        assert kind in {
            "configMap",
            "csi",
            "downwardAPI",
            "emptyDir",
            "ephemeral",
            "persistentVolumeClaim",
            "projected",
            "secret",
        }, volume
    # Restricted, pod level: non-root, a non-zero UID (the image's), RuntimeDefault seccomp.
    assert psc["runAsNonRoot"] is True
    assert psc["runAsUser"] == contract.WORKER_UID and psc["runAsGroup"] == contract.WORKER_GID
    assert psc["fsGroup"] == contract.WORKER_GID
    assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not psc.get("seLinuxOptions") and not psc.get("appArmorProfile")
    for container in containers:
        sc = container["securityContext"]
        # Baseline: not privileged, no procMount, no hostPort, no unconfined profiles.
        assert not sc.get("privileged") and sc.get("procMount", "Default") == "Default"
        assert not any(p.get("hostPort") for p in container.get("ports") or [])
        assert "seccompProfile" not in sc and "seLinuxOptions" not in sc
        # Restricted: no escalation, every capability dropped and none added.
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert sc.get("runAsUser", psc["runAsUser"]) != 0
        # Beyond the profile: a read-only root filesystem.
        assert sc["readOnlyRootFilesystem"] is True
    assert spec["automountServiceAccountToken"] is False


def assert_baseline(pod: dict, *, privileged: bool, privileged_worker: bool | None = None) -> None:
    """The baseline controls (and, with ``privileged``, only what that level adds: a
    privileged worker container, unless ``privileged_worker`` is False (a GPU networking
    preset on the pod network: capabilities instead), and host namespaces), and the root user
    the TPU/GPU references run as, with a writable root filesystem."""
    privileged_worker = privileged if privileged_worker is None else privileged_worker
    spec = pod["spec"]
    psc = spec.get("securityContext") or {}
    containers = (spec.get("initContainers") or []) + spec["containers"]
    if not privileged:
        assert not any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC"))
        assert not any("hostPath" in v for v in spec.get("volumes") or [])
    assert not spec.get("hostPID") and not spec.get("hostIPC")
    assert not psc.get("sysctls") and not (psc.get("windowsOptions") or {}).get("hostProcess")
    assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in containers:
        sc = container.get("securityContext") or {}
        assert not any(p.get("hostPort") for p in container.get("ports") or [])
        assert sc.get("procMount", "Default") == "Default"
        assert (sc.get("seccompProfile") or {}).get("type") != "Unconfined"
        if not privileged:
            assert not sc.get("privileged")
            assert set((sc.get("capabilities") or {}).get("add") or []) <= PS.BASELINE_CAPABILITIES
    (worker,) = spec["containers"]
    assert psc["runAsUser"] == 0 and psc["runAsGroup"] == 0
    assert "runAsNonRoot" not in psc and "fsGroup" not in psc
    assert worker["securityContext"] == (
        {"readOnlyRootFilesystem": False, "privileged": True}
        if privileged_worker
        else {"readOnlyRootFilesystem": False}
    )
    assert pod["metadata"]["annotations"][PS.POD_SECURITY_ANNOTATION] == ("privileged" if privileged else "baseline")


def assert_profile(pod: dict, profile: str, *, privileged_worker: bool | None = None) -> None:
    if profile == "restricted":
        assert_restricted(pod)
    else:
        assert_baseline(pod, privileged=profile == "privileged", privileged_worker=privileged_worker)


def without_gpu_preset(pod: dict) -> dict:
    """A copy of ``pod`` less what a GPU networking preset adds to it (the ``gpudirect-``
    host-path volumes and their mounts, the receive-datapath daemon, the worker's added
    capabilities): the part that is written for the spec's profile."""
    pod = copy.deepcopy(pod)
    spec = pod["spec"]
    preset = {v["name"] for v in spec.get("volumes") or [] if v["name"].startswith("gpudirect-")}
    spec["volumes"] = [v for v in spec["volumes"] if v["name"] not in preset]
    daemons = [c for c in spec.get("initContainers") or [] if c["name"] == GN.DAEMON_CONTAINER]
    spec["initContainers"] = [c for c in spec.get("initContainers") or [] if c not in daemons]
    if not spec["initContainers"]:
        del spec["initContainers"]
    for container in spec["containers"]:
        container["volumeMounts"] = [m for m in container["volumeMounts"] if m["name"] not in preset]
        container["securityContext"].pop("capabilities", None)
    return pod


@pytest.mark.parametrize("case,spec", EXAMPLE_SPECS, ids=[c for c, _ in EXAMPLE_SPECS])
def test_every_example_pod_meets_its_profile_in_both_workloads(case, spec):
    """Every example pod meets the profile it is written for; a GPU networking preset's
    additions break exactly the baseline controls docs/kubernetes.md lists for them (host
    paths, the daemon's NET_ADMIN, TCPX's IPC_LOCK), and the namespace then needs privileged."""
    objects = R.render(spec).objects
    V.validate(objects)  # names, enums, official schemas (incl. the NetworkPolicy)
    gpu = spec.accelerator.gpu
    preset = gpu.networking if gpu is not None and gpu.networking not in (None, "none") else None
    for pod in pod_templates(objects):
        # A preset on the pod network adds capabilities, never a privileged container.
        assert_profile(
            without_gpu_preset(pod) if preset else pod,
            spec.security_profile,
            privileged_worker=None if preset is None or spec.uses_host_network else False,
        )
        findings = PS.pod_security_findings(pod)
        if preset is None:
            assert PS.required_pod_security_level(findings) == spec.security_profile
            continue
        volumes = [v["name"] for v in pod["spec"]["volumes"] if "hostPath" in v]
        # The GPU example's profile is privileged (the level its host paths and NET_ADMIN need),
        # yet no container is privileged: the worker adds the preset's capabilities only.
        worker_added = GN.WORKER_CAPABILITIES.get(preset, ())
        assert [f for f in findings if f[0] == "baseline"] == [
            ("baseline", "Capabilities", "initContainers[0]: adds NET_ADMIN"),
            *(("baseline", "Capabilities", f"containers[0]: adds {c}") for c in worker_added),
            *(
                ("baseline", "HostPath Volumes", f"volumes[{i}] ({v['name']}) is a hostPath")
                for i, v in enumerate(pod["spec"]["volumes"])
                if v["name"] in volumes
            ),
        ]
        assert volumes and all(name.startswith("gpudirect-") for name in volumes)
        assert PS.required_pod_security_level(findings) == "privileged"
    breaks_its_profile = preset is not None and spec.security_profile != "privileged"
    assert (V.check_pod_security(objects) == []) == (not breaks_its_profile)
    assert (V.warn_pod_security(objects) == []) == (not breaks_its_profile)
    assert V.pod_security_level(objects) == ("privileged" if preset else spec.security_profile)


def test_the_image_user_is_the_one_the_pods_run_as():
    """The Dockerfile's user (a fixed numeric UID) is what runAsUser/runAsGroup default to."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    uid = re.search(r"useradd --system --uid (\d+)", dockerfile).group(1)
    gid = re.search(r"groupadd --system --gid (\d+)", dockerfile).group(1)
    user = re.search(r"^USER (\d+):(\d+)$", dockerfile, re.M).groups()
    assert (int(uid), int(gid)) == (contract.WORKER_UID, contract.WORKER_GID)
    assert tuple(map(int, user)) == (contract.WORKER_UID, contract.WORKER_GID)


def _spec(**changes) -> S.JobSpec:
    data = {
        "apiVersion": "roxxel.dev/v1alpha1",
        "kind": "RoxxelJob",
        "name": "lm",
        "image": "us-docker.pkg.dev/p/r/worker:1",
        "command": ["python", "t.py"],
        "accelerator": {"cpu": {"hosts": 2}},
    }
    data.update(changes)
    return S.spec_from_dict(data)


def _pod(spec: S.JobSpec) -> dict:
    return pod_templates(R.render(spec).objects)[0]


def test_writable_paths_are_emptydirs_and_a_users_env_wins():
    pod = _pod(_spec(env={"XDG_CACHE_HOME": "/data/cache"}))
    (container,) = pod["spec"]["containers"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    for name, (path, _) in contract.WRITABLE_DIRS.items():
        assert mounts[path] == name and volumes[name] == {"name": name, "emptyDir": {}}
    env = [(e["name"], e.get("value")) for e in container["env"]]
    assert ("XDG_CACHE_HOME", "/data/cache") in env and ("XDG_CACHE_HOME", "/var/cache/roxxel") not in env
    assert ("JAX_COMPILATION_CACHE_DIR", contract.JAX_CACHE_MOUNT_PATH) in env
    assert ("TMPDIR", "/tmp") in env
    assert ("HOME", contract.HOME_MOUNT_PATH) in env
    assert ("HOME", "/data/home") in [
        (e["name"], e.get("value")) for e in _pod(_spec(env={"HOME": "/data/home"}))["spec"]["containers"][0]["env"]
    ]


def test_home_is_writable_and_does_not_hide_the_images_working_directory():
    # gcloud, W&B and matplotlib write under $HOME; the root filesystem is read-only. The
    # image's home directory (useradd --home-dir) is its WORKDIR too, with examples/ in it:
    # HOME points at an emptyDir elsewhere instead of covering it.
    dockerfile = (ROOT / "Dockerfile").read_text()
    image_home = re.search(r"--home-dir (\S+)", dockerfile).group(1)
    workdir = re.findall(r"^WORKDIR (\S+)", dockerfile, re.M)[-1]
    (container,) = _pod(_spec())["spec"]["containers"]
    mounts = [m["mountPath"] for m in container["volumeMounts"]]
    assert contract.HOME_MOUNT_PATH in mounts
    for path in (image_home, workdir):
        assert not any(path == m or path.startswith(m.rstrip("/") + "/") for m in mounts), path


def test_the_api_token_is_mounted_only_when_asked_for():
    assert _pod(_spec())["spec"]["automountServiceAccountToken"] is False
    on = S.spec_from_dict({**S.spec_to_dict(_spec())}, ["security.automount_service_account_token=true"])
    assert _pod(on)["spec"]["automountServiceAccountToken"] is True
    with pytest.raises(S.SpecError, match="automount_service_account_token: 'yes' is not true or false"):
        S.spec_from_dict(S.spec_to_dict(_spec()), ["security.automount_service_account_token=yes"])


def test_run_as_user_is_configurable_but_never_root_under_restricted():
    pod = _pod(_spec(security={"run_as_user": 1000, "run_as_group": 1000}))
    assert pod["spec"]["securityContext"]["runAsUser"] == 1000
    for security in ({"run_as_user": 0}, {"run_as_group": 0, "profile": "restricted"}):
        with pytest.raises(
            S.SpecError,
            match=r"^security.run_as_(user|group): is 0 \(root\), which the "
            r"restricted profile forbids\. .*security.profile: baseline",
        ):
            _spec(security=security)
    with pytest.raises(S.SpecError, match=r"^security.run_as_user: must be between 0 and 2147483647, got -1"):
        _spec(security={"run_as_user": -1, "profile": "baseline"})
    # A TPU spec defaults to baseline, where root is the default and a UID of one's own stays.
    pod = _pod(_spec(accelerator=TPU, security={"run_as_user": 1000, "run_as_group": 1000}))
    assert pod["spec"]["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "runAsGroup": 1000,
        "fsGroup": 1000,
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert pod["spec"]["containers"][0]["securityContext"] == {"readOnlyRootFilesystem": False}


def test_image_pull_policy_follows_tag_or_digest():
    assert _pod(_spec())["spec"]["containers"][0]["imagePullPolicy"] == "Always"
    for image in (f"us-docker.pkg.dev/p/r/worker@{DIGEST}", f"us-docker.pkg.dev/p/r/worker:1@{DIGEST}"):
        container = _pod(_spec(image=image))["spec"]["containers"][0]
        assert container["image"] == image and container["imagePullPolicy"] == "IfNotPresent"


@pytest.mark.parametrize(
    "image",
    [
        "us-docker.pkg.dev/p/r/worker@sha256:abc",
        f"us-docker.pkg.dev/p/r/worker@md5:{'a' * 64}",
        f"us-docker.pkg.dev/p/r/worker@{DIGEST.upper()}",
        f"us-docker.pkg.dev/p/r/worker@{DIGEST}@{DIGEST}",
        f"us-docker.pkg.dev/p/r/@{DIGEST}",
    ],
)
def test_bad_digests_are_refused(image):
    with pytest.raises(S.SpecError, match=r"^image: .*(digest|not an image reference).*@sha256:<64 hex digits>"):
        _spec(image=image)


# Each mutation breaks one control; the checker must name it and the level the pod then needs.
BREAKS = {
    "hostNetwork": (lambda p: p["spec"].update(hostNetwork=True), "Host Namespaces", "privileged"),
    "privileged": (
        lambda p: p["spec"]["containers"][0]["securityContext"].update(privileged=True),
        "Privileged Containers",
        "privileged",
    ),
    "SYS_ADMIN": (
        lambda p: p["spec"]["containers"][0]["securityContext"]["capabilities"].update(add=["SYS_ADMIN"]),
        "Capabilities",
        "privileged",
    ),
    "hostPath": (
        lambda p: p["spec"]["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
        "HostPath Volumes",
        "privileged",
    ),
    "hostPort": (lambda p: p["spec"]["containers"][0]["ports"][0].update(hostPort=8476), "Host Ports", "privileged"),
    "unconfined": (
        lambda p: p["spec"]["securityContext"].update(seccompProfile={"type": "Unconfined"}),
        "Seccomp",
        "privileged",
    ),
    "nfs": (
        lambda p: p["spec"]["volumes"].append({"name": "n", "nfs": {"server": "h", "path": "/"}}),
        "Volume Types",
        "baseline",
    ),
    "escalation": (
        lambda p: p["spec"]["containers"][0]["securityContext"].update(allowPrivilegeEscalation=True),
        "Privilege Escalation",
        "baseline",
    ),
    "root": (lambda p: p["spec"]["securityContext"].update(runAsUser=0), "Running as Non-root user", "baseline"),
    "maybe-root": (lambda p: p["spec"]["securityContext"].pop("runAsNonRoot"), "Running as Non-root", "baseline"),
    "no-drop": (
        lambda p: p["spec"]["containers"][0]["securityContext"].pop("capabilities"),
        "Capabilities",
        "baseline",
    ),
    "NET_RAW": (
        lambda p: p["spec"]["containers"][0]["securityContext"]["capabilities"].update(add=["NET_RAW"]),
        "Capabilities",
        "privileged",
    ),
}


@pytest.mark.parametrize("name", BREAKS)
def test_the_checker_names_each_broken_control(name):
    mutate, control, level = BREAKS[name]
    pod = _pod(_spec())
    mutate(pod)
    findings = PS.pod_security_findings(pod)
    assert control in {c for _, c, _ in findings}, findings
    assert PS.required_pod_security_level(findings) == level
    with pytest.raises((AssertionError, KeyError)):
        assert_restricted(pod)


def test_validation_warns_with_the_level_the_namespace_needs(caplog):
    spec = _spec(data={"nfs": {"server": "10.0.0.2", "path": "/d"}})
    with caplog.at_level("WARNING", logger="roxxel_launch.validate"):
        V.validate(R.render(spec).objects)
    text = caplog.text
    assert "breaks Pod Security 'restricted' (Volume Types): volumes[1] (data) is of type nfs" in text
    assert "pod-security.kubernetes.io/enforce=baseline" in text


# ----------------------------------------------------------------------------- profiles


@pytest.mark.parametrize("profile", ["restricted", "baseline", "privileged"])
@pytest.mark.parametrize("accelerator", ["cpu", TPU, GPU], ids=["cpu", "tpu", "gpu"])
@pytest.mark.parametrize("workload", ["jobset", "indexed-job"])
def test_each_profile_renders_valid_manifests_that_meet_it(profile, accelerator, workload, crd_schema):
    spec = _spec(accelerator=accelerator, workload=workload, security={"profile": profile})
    assert spec.security_profile == profile
    objects = R.render(spec).objects
    V.validate(objects)  # official schemas, strict (the child Job of a JobSet too)
    for obj in objects:
        if obj["kind"] == "JobSet":
            assert V.check_jobset_crd(obj, crd_schema) == []
    for pod in pod_templates(objects):
        assert_profile(pod, profile)
    assert V.check_pod_security(objects) == [] and V.warn_pod_security(objects) == []
    assert V.pod_security_level(objects) == profile


# Unset security.profile: the level a GKE document or reference shows working (docs/kubernetes.md).
DEFAULTS = {
    "cpu": ({}, "restricted", False),
    "gpu": ({"accelerator": GPU}, "restricted", False),
    "tpu, one slice": ({"accelerator": TPU}, "baseline", False),
    "tpu multislice with gcsfuse": (
        {"accelerator": TPU, "num_slices": 2, "data": {"gcsfuse": {"bucket": "my-data"}}},
        "baseline",
        False,
    ),
    "tpu multislice, host network off": (
        {"accelerator": TPU, "num_slices": 2, "host_network": False},
        "baseline",
        False,
    ),
    "tpu multislice (host network)": ({"accelerator": TPU, "num_slices": 2}, "privileged", True),
    "gpu networking preset": ({"accelerator": RDMA}, "baseline", False),
    "gpu host network": ({"accelerator": GPU, "host_network": True}, "privileged", True),
    "gpu preset on the host network": ({"accelerator": RDMA, "host_network": True}, "privileged", True),
}


@pytest.mark.parametrize("case", DEFAULTS)
def test_the_default_profile_follows_the_accelerator(case):
    changes, profile, host_network = DEFAULTS[case]
    spec = _spec(**changes)
    assert (spec.security_profile, spec.uses_host_network) == (profile, host_network)
    assert S.default_security_profile(spec) == profile
    pod = _pod(spec)
    assert pod["metadata"]["annotations"][R.POD_SECURITY_ANNOTATION] == profile
    assert bool(pod["spec"].get("hostNetwork")) is host_network
    if "networking" not in str(changes):
        assert_profile(pod, profile)


def test_an_explicit_profile_that_forbids_host_namespaces_turns_the_multislice_default_off():
    for profile in ("restricted", "baseline"):
        spec = _spec(accelerator=TPU, num_slices=2, security={"profile": profile})
        assert not spec.uses_host_network and "hostNetwork" not in _pod(spec)["spec"]
    spec = _spec(accelerator=TPU, num_slices=2, security={"profile": "privileged"})
    assert spec.uses_host_network


# Each refusal: the spec, the field named, the start of the one-line message.
REFUSALS = {
    "tpu host network under baseline": (
        {"accelerator": TPU, "num_slices": 2, "host_network": True, "security": {"profile": "baseline"}},
        "host_network",
        "needs security.profile: privileged",
    ),
    "gpu host network under restricted": (
        {"accelerator": GPU, "host_network": True, "security": {"profile": "restricted"}},
        "host_network",
        "needs security.profile: privileged",
    ),
    "cpu host network": (
        {"host_network": True, "security": {"profile": "privileged"}},
        "host_network",
        "is offered for TPU slices and GPU hosts only",
    ),
    "identity provider without host network": (
        {
            "accelerator": GPU,
            "data": {"gcsfuse": {"bucket": "my-data", "identity_provider": "https://example.com/idp"}},
        },
        "data.gcsfuse.identity_provider",
        "is read only for host-network pods",
    ),
    "identity provider that is not an https URL": (
        {
            "accelerator": GPU,
            "host_network": True,
            "data": {"gcsfuse": {"bucket": "my-data", "identity_provider": "http://example.com/a,b"}},
        },
        "data.gcsfuse.identity_provider",
        "'http://example.com/a,b' is not an https URL",
    ),
    "host network outside a jobset": (
        {"accelerator": GPU, "host_network": True, "workload": "indexed-job"},
        "host_network",
        "needs workload: jobset",
    ),
    "unknown profile": ({"security": {"profile": "root"}}, "security.profile", ""),
}


@pytest.mark.parametrize("case", REFUSALS)
def test_refusals_name_the_field_in_one_line(case):
    changes, field, message = REFUSALS[case]
    with pytest.raises(S.SpecError) as info:
        _spec(**changes)
    assert info.value.field == field
    assert message in str(info.value) and "\n" not in str(info.value)


def test_gpu_preset_on_the_host_network_renders_as_the_recipes(crd_schema):
    """Google's GPU recipes with network.hostNetwork: no multi-network annotations, a
    privileged daemon instead of its device list, a privileged worker."""
    tcpxo = {"gpu": {"type": "nvidia-h100-mega-80gb", "count": 8, "hosts": 2, "networking": "tcpxo"}}
    for accelerator in (RDMA, tcpxo):
        objects = R.render(_spec(accelerator=accelerator, host_network=True)).objects
        V.validate(objects)
        assert V.check_jobset_crd(objects[-1], crd_schema) == []
        (pod,) = pod_templates(objects)
        annotations = pod["metadata"]["annotations"]
        assert not any(k.startswith(("networking.gke.io/", "devices.gke.io/")) for k in annotations)
        assert pod["spec"]["hostNetwork"] is True
        assert pod["spec"]["dnsPolicy"] == "ClusterFirstWithHostNet"
        assert pod["spec"]["containers"][0]["securityContext"]["privileged"] is True
        for daemon in pod["spec"].get("initContainers") or []:
            assert daemon["securityContext"]["privileged"] is True
        assert V.pod_security_level(objects) == "privileged" and V.check_pod_security(objects) == []
    # Off the host network the preset keeps its annotations and an unprivileged daemon.
    (pod,) = pod_templates(R.render(_spec(accelerator=tcpxo)).objects)
    assert "networking.gke.io/interfaces" in pod["metadata"]["annotations"]
    assert "devices.gke.io/container.gpudirect-daemon" in pod["metadata"]["annotations"]
    assert "privileged" not in pod["spec"]["initContainers"][0]["securityContext"]


def test_a_control_beyond_the_chosen_profile_is_still_reported():
    """Under baseline an inline NFS volume needs nothing more (Volume Types is a restricted
    control); hostIPC (through pod_patch) needs privileged, and is reported with that level."""
    spec = _spec(accelerator=TPU, data={"nfs": {"server": "10.0.0.2", "path": "/d"}})
    objects = R.render(spec).objects
    assert V.check_pod_security(objects) == [] and V.pod_security_level(objects) == "baseline"
    spec = _spec(accelerator=TPU, pod_patch={"spec": {"hostIPC": True}})
    objects = R.render(spec).objects
    lines = V.warn_pod_security(objects)
    assert len(lines) == 2 and "(Host Namespaces): hostIPC is true" in lines[0]
    assert "enforce=privileged" in lines[-1]


@pytest.mark.parametrize(
    "overrides,line",
    [
        (
            [],
            "pods written for 'restricted' (the default for CPU); the namespace must enforce 'restricted' "
            "or a looser level (label pod-security.kubernetes.io/enforce=restricted)",
        ),
        (
            ["accelerator.cpu=null", "accelerator.tpu.type=v5p", "accelerator.tpu.topology=2x2x4"],
            "pods written for 'baseline' (the default for TPU); the namespace must enforce 'baseline' or a "
            "looser level (label pod-security.kubernetes.io/enforce=baseline)",
        ),
        (
            ["security.profile=baseline", "data.nfs.server=10.0.0.2", "data.nfs.path=/d"],
            "pods written for 'baseline' (security.profile); the namespace must enforce 'baseline'",
        ),
        (
            ["data.nfs.server=10.0.0.2", "data.nfs.path=/d"],
            "pods written for 'restricted' (the default for CPU); the namespace must enforce 'baseline'",
        ),
        (
            ["security.profile=privileged"],
            "pods written for 'privileged' (security.profile); the namespace must enforce 'privileged' "
            "(label pod-security.kubernetes.io/enforce=privileged)",
        ),
    ],
)
def test_cli_validate_names_the_level_in_one_line(tmp_path, overrides, line):
    from click.testing import CliRunner

    from roxxel_launch.cli import cli

    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(S.spec_to_dict(_spec())))
    args = ["validate", str(path), "--no-schema"] + [a for o in overrides for a in ("--set", o)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    (summary,) = [out for out in result.output.splitlines() if out.startswith("pod security: ")]
    assert line in summary


# ----------------------------------------------------------------------------- NetworkPolicy


def _policy(spec: S.JobSpec) -> dict:
    (policy,) = [o for o in R.render(spec).objects if o["kind"] == "NetworkPolicy"]
    return policy


@pytest.mark.parametrize("workload", ["jobset", "indexed-job"])
def test_network_policy_admits_only_the_jobs_own_pods(workload):
    spec = _spec(workload=workload, namespace="ml")
    objects = R.render(spec).objects
    kinds = [o["kind"] for o in objects]
    assert kinds.index("NetworkPolicy") < kinds.index("JobSet" if workload == "jobset" else "Job")
    policy = _policy(spec)
    assert V.check_schemas([policy]) == [] and V.check_objects([policy]) == []
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector == {R.JOB_LABEL: "lm"}
    # The selector picks exactly the job's pods (their template labels).
    labels = pod_templates(objects)[0]["metadata"]["labels"]
    assert selector.items() <= labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]  # egress stays open (docs)
    (rule,) = policy["spec"]["ingress"]
    assert rule["from"] == [{"podSelector": {"matchLabels": selector}}]
    assert "ports" not in rule  # CPU/GPU: Gloo and NCCL use ephemeral ports between the pods
    assert policy["metadata"]["labels"][R.MANAGED_BY_LABEL] == R.MANAGED_BY


@pytest.mark.parametrize("topology", ["2x2x4", "2x2x1"])
def test_single_slice_tpu_network_policy_admits_every_port_of_the_jobs_own_pods(topology):
    """As for multislice, GPU and CPU: no reference limits the ports between a TPU job's pods
    (xpk runs them on the host network, GKE's multi-host TPU examples set no policy) and
    libtpu publishes no complete list; a 4-port allow-list could cut off a port it opens."""
    spec = _spec(accelerator={"tpu": {"type": "v5p", "topology": topology}})
    (rule,) = _policy(spec)["spec"]["ingress"]
    assert "ports" not in rule
    assert rule["from"] == [{"podSelector": {"matchLabels": {R.JOB_LABEL: "lm"}}}]
    # The runtime's ports stay declared on the container, as xpk declares them.
    (jobset,) = [o for o in R.render(spec).objects if o["kind"] == "JobSet"]
    ports = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["ports"]
    assert {p["containerPort"] for p in ports} >= {8482, 8471, 8080}


@pytest.mark.parametrize("host_network", [True, False])
def test_tpu_multislice_network_policy_admits_every_port_of_the_jobs_own_pods(host_network):
    """libtpu's DCN transport names no complete port list: a port list would cut it off on the
    pod network (the GCS FUSE default), so the job's own pods may use any port."""
    spec = _spec(
        accelerator={"tpu": {"type": "v5p", "topology": "2x2x4"}},
        num_slices=2,
        host_network=host_network,
        data={"gcsfuse": {"bucket": "my-data"}},
    )
    (rule,) = _policy(spec)["spec"]["ingress"]
    assert "ports" not in rule
    assert rule["from"] == [{"podSelector": {"matchLabels": {R.JOB_LABEL: "lm"}}}]


def test_network_policy_can_be_turned_off():
    spec = _spec(security={"network_policy": False})
    assert [o["kind"] for o in R.render(spec).objects] == ["JobSet"]


def test_a_policy_that_admits_other_pods_is_refused():
    policy = _policy(_spec())
    policy["spec"]["ingress"][0]["from"] = [{"podSelector": {}}]
    assert any("admits pods other than the job's own" in p for p in V.check_objects([policy]))
    policy["spec"]["podSelector"] = {}
    assert any("must select the job's pods" in p for p in V.check_objects([policy]))


def test_backend_creates_the_policy_before_the_job_and_deletes_it_with_the_job(server, backend):
    """Against the repository's fake API server (tests/support/k8s_fake_server.py)."""
    spec = make_spec(security={"network_policy": True}, workload="indexed-job")
    backend.submit(spec)
    creates = [r.body["kind"] for r in server.calls("POST") if not r.dry_run]
    assert creates == ["Service", "NetworkPolicy", "Job"]
    assert ("networkpolicies", spec.namespace, "lm") in server.objects
    backend.delete("lm", wait=True)
    assert not any(key[2] == "lm" for key in server.objects), sorted(server.objects)


def test_delete_of_a_jobset_removes_its_policy_and_leaves_a_foreign_one(server, backend):
    spec = make_spec(security={"network_policy": True})
    backend.submit(spec)
    backend.delete("lm", wait=True)
    assert ("networkpolicies", spec.namespace, "lm") not in server.objects
    backend.submit(spec)
    server.objects[("networkpolicies", spec.namespace, "lm")]["metadata"]["labels"] = {}
    backend.delete("lm", wait=True)
    assert ("networkpolicies", spec.namespace, "lm") in server.objects  # not ours: left alone


def test_a_policy_left_by_a_job_deleted_with_kubectl_is_replaced(server, backend):
    """`kubectl delete jobset lm` leaves the NetworkPolicy: a new submit replaces it."""
    spec = make_spec(security={"network_policy": True})
    backend.submit(spec)
    del server.objects[("jobsets", spec.namespace, "lm")]
    backend.submit(spec)
    assert ("jobsets", spec.namespace, "lm") in server.objects
    deletes = [r.resource for r in server.calls("DELETE")]
    assert deletes == ["networkpolicies"]


def test_an_existing_job_is_named_even_when_its_policy_is_found_first(server, backend):
    spec = make_spec(security={"network_policy": True})
    backend.submit(spec)
    with pytest.raises(JobExistsError, match=r"JobSet team-a/lm already exists.*delete.*resume"):
        backend.submit(spec)
    assert ("networkpolicies", spec.namespace, "lm") in server.objects  # untouched


def test_a_foreign_policy_of_the_same_name_is_not_replaced(server, backend):
    spec = make_spec(security={"network_policy": True})
    backend.submit(spec)
    del server.objects[("jobsets", spec.namespace, "lm")]
    server.objects[("networkpolicies", spec.namespace, "lm")]["metadata"]["labels"] = {}
    with pytest.raises(JobExistsError, match="NetworkPolicy team-a/lm already exists"):
        backend.submit(spec)
    assert server.calls("DELETE") == []
