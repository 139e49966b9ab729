"""Pod security of rendered jobs: the Pod Security Standards "restricted" profile, no
needless API token, image pinning, and the per-job NetworkPolicy.

No Kubernetes API server (and so no Pod Security admission) runs here. The restricted
profile is checked twice: by ``assert_restricted`` below, written from the controls listed
on https://kubernetes.io/docs/concepts/security/pod-security-standards/ (kept independent
of the launcher's own checker), and by ``validate.pod_security_findings``, whose every
control is shown to fire. NetworkPolicies validate against the official schema with
kubernetes-validate (strict); create/delete go through the repository's fake API server.
"""

from __future__ import annotations

import re

import pytest

from roxxel_launch import contract
from roxxel_launch import render as R
from roxxel_launch import spec as S
from roxxel_launch import validate as V
from roxxel_launch.backends.base import JobExistsError
import test_launch_kubernetes as fake_api

from support.paths import REPO as ROOT

# The fake API server's fixtures: pytest finds fixtures that are attributes of a test module.
crd_schema, server, backend = fake_api.crd_schema, fake_api.server, fake_api.backend
make_spec = fake_api.make_spec

EXAMPLES = sorted((ROOT / "k8s" / "examples").glob("*.yaml"))
DIGEST = "sha256:" + "ab" * 32


def example_specs() -> list[tuple[str, S.JobSpec]]:
    """Every example spec in both workloads (an indexed job runs one slice)."""
    out = []
    for path in EXAMPLES:
        out.append((f"{path.stem}-jobset", S.load_spec(path)))
        out.append((f"{path.stem}-indexed-job",
                    S.load_spec(path, ["workload=indexed-job", "num_slices=1"])))
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
    containers = (spec.get("initContainers") or []) + spec["containers"] + (
        spec.get("ephemeralContainers") or [])
    # Baseline: host namespaces, HostProcess, hostPath, host ports, sysctls.
    assert not any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC"))
    assert not (psc.get("windowsOptions") or {}).get("hostProcess")
    assert not psc.get("sysctls")
    for volume in spec.get("volumes") or []:
        # Restricted: only these volume types (which also rules out hostPath).
        (kind,) = set(volume) - {"name"}
        assert kind in {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                        "persistentVolumeClaim", "projected", "secret"}, volume
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


@pytest.mark.parametrize("case,spec", EXAMPLE_SPECS, ids=[c for c, _ in EXAMPLE_SPECS])
def test_every_example_pod_is_restricted_in_both_workloads(case, spec):
    objects = R.render(spec).objects
    V.validate(objects)  # names, enums, official schemas (incl. the NetworkPolicy)
    for pod in pod_templates(objects):
        assert_restricted(pod)
        assert V.pod_security_findings(pod) == []
    assert V.check_pod_security(objects) == []
    assert V.warn_pod_security(objects) == []


def test_the_image_user_is_the_one_the_pods_run_as():
    """The Dockerfile's user (a fixed numeric UID) is what runAsUser/runAsGroup default to."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    uid = re.search(r"useradd --system --uid (\d+)", dockerfile).group(1)
    gid = re.search(r"groupadd --system --gid (\d+)", dockerfile).group(1)
    user = re.search(r"^USER (\d+):(\d+)$", dockerfile, re.M).groups()
    assert (int(uid), int(gid)) == (contract.WORKER_UID, contract.WORKER_GID)
    assert tuple(map(int, user)) == (contract.WORKER_UID, contract.WORKER_GID)


def _spec(**changes) -> S.JobSpec:
    data = {"apiVersion": "roxxel.dev/v1alpha1", "kind": "RoxxelJob", "name": "lm",
            "image": "us-docker.pkg.dev/p/r/worker:1", "command": ["python", "t.py"],
            "accelerator": {"cpu": {"hosts": 2}}}
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
    assert ("HOME", "/data/home") in [(e["name"], e.get("value")) for e in _pod(_spec(
        env={"HOME": "/data/home"}))["spec"]["containers"][0]["env"]]


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
    on = S.spec_from_dict({**S.spec_to_dict(_spec())},
                          ["security.automount_service_account_token=true"])
    assert _pod(on)["spec"]["automountServiceAccountToken"] is True
    with pytest.raises(S.SpecError, match="automount_service_account_token: 'yes' is not true or false"):
        S.spec_from_dict(S.spec_to_dict(_spec()), ["security.automount_service_account_token=yes"])


def test_run_as_user_is_configurable_but_never_root():
    pod = _pod(_spec(security={"run_as_user": 1000, "run_as_group": 1000}))
    assert pod["spec"]["securityContext"]["runAsUser"] == 1000
    with pytest.raises(S.SpecError, match=r"security.run_as_user: must be between 1 and .*never run as root"):
        _spec(security={"run_as_user": 0})


def test_image_pull_policy_follows_tag_or_digest():
    assert _pod(_spec())["spec"]["containers"][0]["imagePullPolicy"] == "Always"
    for image in (f"us-docker.pkg.dev/p/r/worker@{DIGEST}", f"us-docker.pkg.dev/p/r/worker:1@{DIGEST}"):
        container = _pod(_spec(image=image))["spec"]["containers"][0]
        assert container["image"] == image and container["imagePullPolicy"] == "IfNotPresent"


@pytest.mark.parametrize("image", [
    "us-docker.pkg.dev/p/r/worker@sha256:abc",
    f"us-docker.pkg.dev/p/r/worker@md5:{'a' * 64}",
    f"us-docker.pkg.dev/p/r/worker@{DIGEST.upper()}",
    f"us-docker.pkg.dev/p/r/worker@{DIGEST}@{DIGEST}",
    f"us-docker.pkg.dev/p/r/@{DIGEST}",
])
def test_bad_digests_are_refused(image):
    with pytest.raises(S.SpecError, match=r"^image: .*(digest|not an image reference).*@sha256:<64 hex digits>"):
        _spec(image=image)


# Each mutation breaks one control; the checker must name it and the level the pod then needs.
BREAKS = {
    "hostNetwork": (lambda p: p["spec"].update(hostNetwork=True), "Host Namespaces", "privileged"),
    "privileged": (lambda p: p["spec"]["containers"][0]["securityContext"].update(privileged=True),
                   "Privileged Containers", "privileged"),
    "SYS_ADMIN": (lambda p: p["spec"]["containers"][0]["securityContext"]["capabilities"].update(
        add=["SYS_ADMIN"]), "Capabilities", "privileged"),
    "hostPath": (lambda p: p["spec"]["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
                 "HostPath Volumes", "privileged"),
    "hostPort": (lambda p: p["spec"]["containers"][0]["ports"][0].update(hostPort=8476),
                 "Host Ports", "privileged"),
    "unconfined": (lambda p: p["spec"]["securityContext"].update(seccompProfile={"type": "Unconfined"}),
                   "Seccomp", "privileged"),
    "nfs": (lambda p: p["spec"]["volumes"].append({"name": "n", "nfs": {"server": "h", "path": "/"}}),
            "Volume Types", "baseline"),
    "escalation": (lambda p: p["spec"]["containers"][0]["securityContext"].update(
        allowPrivilegeEscalation=True), "Privilege Escalation", "baseline"),
    "root": (lambda p: p["spec"]["securityContext"].update(runAsUser=0), "Running as Non-root user",
             "baseline"),
    "maybe-root": (lambda p: p["spec"]["securityContext"].pop("runAsNonRoot"), "Running as Non-root",
                   "baseline"),
    "no-drop": (lambda p: p["spec"]["containers"][0]["securityContext"].pop("capabilities"),
                "Capabilities", "baseline"),
    "NET_RAW": (lambda p: p["spec"]["containers"][0]["securityContext"]["capabilities"].update(
        add=["NET_RAW"]), "Capabilities", "privileged"),
}


@pytest.mark.parametrize("name", BREAKS)
def test_the_checker_names_each_broken_control(name):
    mutate, control, level = BREAKS[name]
    pod = _pod(_spec())
    mutate(pod)
    findings = V.pod_security_findings(pod)
    assert control in {c for _, c, _ in findings}, findings
    assert V.required_pod_security_level(findings) == level
    with pytest.raises((AssertionError, KeyError)):
        assert_restricted(pod)


def test_validation_warns_with_the_level_the_namespace_needs(caplog):
    spec = _spec(data={"nfs": {"server": "10.0.0.2", "path": "/d"}})
    with caplog.at_level("WARNING", logger="roxxel_launch.validate"):
        V.validate(R.render(spec).objects)
    text = caplog.text
    assert "breaks Pod Security 'restricted' (Volume Types): volumes[1] (data) is of type nfs" in text
    assert "pod-security.kubernetes.io/enforce=baseline" in text


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


def test_tpu_network_policy_names_the_coordinator_and_tpu_runtime_ports():
    spec = _spec(accelerator={"tpu": {"type": "v5p", "topology": "2x2x4"}}, num_slices=2)
    (rule,) = _policy(spec)["spec"]["ingress"]
    assert sorted(p["port"] for p in rule["ports"]) == sorted(
        [contract.DEFAULT_COORDINATOR_PORT, 8482, 8471, 8080])
    assert all(p["protocol"] == "TCP" for p in rule["ports"])


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
