"""GKE's GPU networking presets (accelerator.gpu.networking): refusals and what they render.

Offline: no API server or A3/A4 node runs here. The manifests are checked against the official
schemas (kubernetes-validate, strict) and the JobSet CRD; the fields follow the GKE manifests
cited in docs/kubernetes.md ("GPU networking presets"), whose effect on a node only a real
cluster can confirm. The golden files gpu-a3high-tcpx, gpu-a3mega-tcpxo and gpu-a4-rdma pin
the exact rendering.
"""

from __future__ import annotations

import json
import logging

import pytest
import yaml

from roxxel_launch import render as R
from roxxel_launch import spec as S
from roxxel_launch import pod_security as PS
from roxxel_launch import validate as V

BASE = {
    "apiVersion": "roxxel.dev/v1alpha1",
    "kind": "RoxxelJob",
    "name": "lm",
    "image": "img:1",
    "command": ["python", "train.py"],
}
TYPES = {"tcpx": "nvidia-h100-80gb", "tcpxo": "nvidia-h100-mega-80gb", "rdma": "nvidia-h200-141gb"}


def _gpu(**gpu) -> dict:
    return {"accelerator": {"gpu": {"count": 8, "hosts": 2, **gpu}}}


def _spec(**changes) -> S.JobSpec:
    return S.spec_from_dict({**BASE, **changes})


def _pod(spec: S.JobSpec) -> dict:
    (jobset,) = [o for o in R.render(spec).objects if o["kind"] == "JobSet"]
    return jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]


@pytest.mark.parametrize(
    "changes, field, fragment",
    [
        (_gpu(type="nvidia-h100-80gb", networking="tcpxo"), "accelerator.gpu.networking", "a3-megagpu-8g"),
        (_gpu(type="nvidia-h100-mega-80gb", networking="tcpx"), "accelerator.gpu.networking", "a3-highgpu-8g"),
        (_gpu(type="nvidia-l4", networking="rdma"), "accelerator.gpu.networking", "nvidia-b200"),
        (_gpu(type="nvidia-h100-80gb", networking="tcpx", count=4), "accelerator.gpu.count", "8 GPUs"),
        (_gpu(type="nvidia-h100-80gb", networking="tcpx", networks=["a", "b"]), "accelerator.gpu.networks", "4"),
        (
            _gpu(type="nvidia-h100-80gb", networking="tcpx", networks=["a", "b", "c", "a"]),
            "accelerator.gpu.networks",
            "twice",
        ),
        (
            _gpu(type="nvidia-h100-80gb", networking="tcpx", networks=["a", "b", "c", "D_"]),
            "accelerator.gpu.networks[3]",
            "",
        ),
        (_gpu(type="nvidia-b200", networking="rdma", daemon_image="x:1"), "accelerator.gpu.daemon_image", "no daemon"),
        (_gpu(type="nvidia-h100-80gb", networks=["a", "b", "c", "d"]), "accelerator.gpu.networking", "preset"),
        (_gpu(type="nvidia-h100-80gb", networking="ib"), "accelerator.gpu.networking", ""),
    ],
)
def test_presets_only_on_their_machine_type_and_shape(changes, field, fragment):
    with pytest.raises(S.SpecError) as info:
        _spec(**changes)
    assert info.value.field == field
    assert fragment in str(info.value)


def test_preset_volume_names_are_reserved():
    with pytest.raises(S.SpecError, match="volumes"):
        _spec(
            **_gpu(type="nvidia-b200", networking="rdma"),
            volumes=[{"name": "gpudirect-gib", "mount_path": "/x", "empty_dir": {}}],
        )


def test_the_user_cannot_set_the_presets_nccl_variables():
    spec = _spec(
        **_gpu(type="nvidia-h100-mega-80gb", networking="tcpxo"), env={"NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY": "/x"}
    )
    with pytest.raises(S.SpecError, match="NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY is set by"):
        R.render(spec)


@pytest.mark.parametrize("mode", TYPES)
def test_presets_render_strictly_valid_pods_that_need_a_privileged_namespace(mode, caplog):
    spec = _spec(**_gpu(type=TYPES[mode], networking=mode), checkpoint_dir="gs://my-ckpt/lm")
    objects = R.render(spec).objects
    assert V.check_objects(objects) == [] and V.check_schemas(objects) == []
    pod = _pod(spec)
    interfaces = json.loads(pod["metadata"]["annotations"]["networking.gke.io/interfaces"])
    assert interfaces[0] == {"interfaceName": "eth0", "network": "default"}
    assert len(interfaces) == (5 if mode == "tcpx" else 9)
    # Pod Security: the host paths (and the daemon's root + NET_ADMIN) break "baseline".
    controls = {(p, c) for p, c, _ in PS.pod_security_findings(pod)}
    assert ("baseline", "HostPath Volumes") in controls
    if mode != "rdma":
        assert ("baseline", "Capabilities") in controls
        (daemon,) = pod["spec"]["initContainers"]
        assert daemon["restartPolicy"] == "Always"
        assert set(pod["metadata"]["annotations"][f"devices.gke.io/container.{daemon['name']}"].splitlines()) >= {
            "- path: /dev/nvidia0",
            "- path: /dev/nvidiactl",
        }
    with caplog.at_level(logging.WARNING):
        V.validate(objects)
    assert "privileged" in caplog.text


def test_custom_networks_and_daemon_image_are_rendered():
    nets = [f"net-{i}" for i in range(8)]
    spec = _spec(
        **_gpu(type="nvidia-h100-mega-80gb", networking="tcpxo", networks=nets, daemon_image="registry.example/rxdm:v9")
    )
    pod = _pod(spec)
    interfaces = json.loads(pod["metadata"]["annotations"]["networking.gke.io/interfaces"])
    assert [i["network"] for i in interfaces[1:]] == nets
    assert pod["spec"]["initContainers"][0]["image"] == "registry.example/rxdm:v9"
    worker = pod["spec"]["containers"][0]
    assert {"name": "gpudirect-aperture-devices", "mountPath": "/dev/aperture_devices"} in worker["volumeMounts"]


def test_rdma_puts_the_gib_plugin_first_on_the_loader_path():
    pod = _pod(_spec(**_gpu(type="nvidia-b200", networking="rdma")))
    env = {v["name"]: v.get("value") for v in pod["spec"]["containers"][0]["env"]}
    assert env["LD_LIBRARY_PATH"] == "/usr/local/gib/lib64:/usr/local/nvidia/lib64"
    assert env["NCCL_NET"] == "gIB"
    assert "initContainers" not in pod["spec"]


def test_no_preset_renders_no_networking_fields():
    pod = _pod(_spec(**_gpu(type="nvidia-h100-80gb")))
    assert not any(k.startswith("networking.gke.io") for k in pod["metadata"]["annotations"])
    assert "initContainers" not in pod["spec"]
    assert yaml.safe_dump(pod).count("hostPath") == 0


@pytest.mark.parametrize("mode", ["tcpx", "tcpxo"])
def test_the_default_daemon_is_the_release_paired_with_the_installers_plugin(mode):
    """The TCPXO daemon default was v1.0.9 while GKE's installer ships plugin v1.0.15, which the
    same repository pairs with daemon v1.0.21: a daemon of another release than the plugin's."""
    from roxxel_launch import gpu_networking as G

    plugin, daemon = G.RELEASED_PAIRS[mode]
    assert G.PRESETS[mode].daemon_image.endswith("/" + daemon), (G.PRESETS[mode].daemon_image, daemon)


# ----------------------------------------------------------------------------- the NCCL environment

CEA = "GoogleCloudPlatform/container-engine-accelerators@992db81"


def _worker(spec: S.JobSpec) -> dict:
    return _pod(spec)["spec"]["containers"][0]


def _env(container: dict) -> dict:
    return {v["name"]: v.get("value") for v in container["env"]}


@pytest.mark.parametrize("mode", TYPES)
def test_every_preset_renders_schema_valid_manifests(mode):
    from support.k8s_schema import assert_official
    from support.paths import JOBSET_CRD

    spec = _spec(
        **_gpu(type=TYPES[mode], networking=mode), checkpoint_dir="gs://my-ckpt/lm", env={"NCCL_DEBUG": "INFO"}
    )
    assert_official(list(R.render(spec).objects), V.jobset_crd_schema(yaml.safe_load(JOBSET_CRD.read_text())))


def test_tcpx_sets_the_guides_nccl_variables_and_ipc_lock():
    """Values of gpudirect-tcpx/nccl-config.yaml (the run script's -x list) and the IPC_LOCK
    capability of the NCCL container in gpudirect-tcpx/nccl-test-latest.yaml (CEA)."""
    worker = _worker(_spec(**_gpu(type="nvidia-h100-80gb", networking="tcpx")))
    env = _env(worker)
    assert env["NCCL_GPUDIRECTTCPX_SOCKET_IFNAME"] == "eth1,eth2,eth3,eth4"
    assert env["NCCL_GPUDIRECTTCPX_CTRL_DEV"] == "eth0" and env["NCCL_SOCKET_IFNAME"] == "eth0"
    assert (
        env["NCCL_GPUDIRECTTCPX_TX_BINDINGS"]
        == "eth1:8-21,112-125;eth2:8-21,112-125;eth3:60-73,164-177;eth4:60-73,164-177"
    )
    assert (
        env["NCCL_GPUDIRECTTCPX_RX_BINDINGS"]
        == "eth1:22-35,126-139;eth2:22-35,126-139;eth3:74-87,178-191;eth4:74-87,178-191"
    )
    assert env["NCCL_GPUDIRECTTCPX_PROGRAM_FLOW_STEERING_WAIT_MICROS"] == "500000"
    assert (env["NCCL_CROSS_NIC"], env["NCCL_NET_GDR_LEVEL"], env["NCCL_P2P_PXN_LEVEL"]) == ("0", "PIX", "0")
    assert (env["NCCL_BUFFSIZE"], env["NCCL_NSOCKS_PERTHREAD"], env["NCCL_SOCKET_NTHREADS"]) == ("4194304", "4", "1")
    assert env["NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX"] == "/run/tcpx"
    assert worker["securityContext"]["capabilities"] == {"add": ["IPC_LOCK"]}
    assert worker["command"] == ["roxxel-worker", "--"]  # TCPX has no profile script: all in env


def test_the_spec_env_wins_over_a_presets_tuning_but_not_its_plugin_variables():
    worker = _worker(_spec(**_gpu(type="nvidia-h100-80gb", networking="tcpx"), env={"NCCL_ALGO": "Ring"}))
    assert [v.get("value") for v in worker["env"] if v["name"] == "NCCL_ALGO"] == ["Ring"]


def test_ipc_lock_is_named_by_pod_security_and_refused_under_restricted():
    pod = _pod(_spec(**_gpu(type="nvidia-h100-80gb", networking="tcpx")))
    assert any(c == "Capabilities" and "containers[0]: adds IPC_LOCK" in p for _, c, p in PS.pod_security_findings(pod))
    with pytest.raises(S.SpecError) as info:
        _spec(**_gpu(type="nvidia-h100-80gb", networking="tcpx"), security={"profile": "restricted"})
    assert info.value.field == "security.profile" and "restricted forbids adding IPC_LOCK" in str(info.value)
    # privileged (the host network's profile) has every capability: nothing added.
    worker = _worker(_spec(**_gpu(type="nvidia-h100-80gb", networking="tcpx"), host_network=True))
    assert worker["securityContext"] == {"readOnlyRootFilesystem": False, "privileged": True}


@pytest.mark.parametrize(
    "mode,script",
    [("tcpxo", "/usr/local/nvidia/lib64/nccl-env-profile.sh"), ("rdma", "/usr/local/gib/scripts/set_nccl_env.sh")],
)
def test_tcpxo_and_rdma_workers_source_the_plugins_nccl_script(mode, script):
    """gpu-recipes a3mega workload-jobset.yaml sources NCCL_INIT_SCRIPT (the plugin's
    nccl-env-profile.sh); CEA gpudirect-rdma/nccl-test.yaml sources set_nccl_env.sh."""
    worker = _worker(_spec(**_gpu(type=TYPES[mode], networking=mode)))
    assert worker["command"][:2] == ["/bin/bash", "-c"] and f"script={script};" in worker["command"][2]
    assert worker["command"][3] == "roxxel-worker" and worker["args"] == ["python", "train.py"]
    if mode == "tcpxo":
        env = _env(worker)
        assert env["NCCL_LIB_DIR"] == "/usr/local/nvidia/lib64"
        assert env["NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY"] == "/dev/aperture_devices"


def _run_command(command: list[str], args: list[str], script: str, env: dict, tmp_path) -> tuple[int, str, str]:
    """Runs a rendered worker command under bash as the kubelet would ($$ -> $), with the
    script path moved into tmp_path and a roxxel-worker that prints its argv and environment."""
    import os
    import subprocess

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    worker = bin_dir / "roxxel-worker"
    worker.write_text('#!/bin/sh\nprintf "%s\\n" "$@"; echo "NCCL_ALGO=$NCCL_ALGO NCCL_X=$NCCL_X"\n')
    worker.chmod(0o755)
    argv = [part.replace("$$", "$").replace(script, str(tmp_path / "nccl.sh")) for part in command]
    result = subprocess.run(
        argv + [a.replace("$$", "$") for a in args],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": f"{bin_dir}:{os.environ['PATH']}", **env},
    )
    return result.returncode, result.stdout, result.stderr


def test_the_sourced_script_sets_defaults_the_spec_env_overrides(tmp_path):
    spec = _spec(
        **_gpu(type="nvidia-b200", networking="rdma"),
        env={"NCCL_ALGO": "Ring"},
        command=["python", "-c", "print('$(HOME) \"x\" $1')"],
    )
    worker = _worker(spec)
    (tmp_path / "nccl.sh").write_text("export NCCL_ALGO=Tree NCCL_X=from-script\n")
    code, out, err = _run_command(
        worker["command"], worker["args"], "/usr/local/gib/scripts/set_nccl_env.sh", {"NCCL_ALGO": "Ring"}, tmp_path
    )
    assert code == 0, err
    lines = out.splitlines()
    assert lines[:4] == ["--", "python", "-c", "print('$(HOME) \"x\" $1')"]  # args passed verbatim
    assert lines[4] == "NCCL_ALGO=Ring NCCL_X=from-script"


def test_a_missing_script_is_a_configuration_error_in_one_line(tmp_path):
    worker = _worker(_spec(**_gpu(type="nvidia-h100-mega-80gb", networking="tcpxo")))
    code, out, err = _run_command(
        worker["command"], worker["args"], "/usr/local/nvidia/lib64/nccl-env-profile.sh", {}, tmp_path
    )
    assert code == 78 and out == ""
    assert err.count("\n") == 1 and "nccl.sh is missing: install the NCCL plugin installer DaemonSet" in err


@pytest.mark.parametrize("gpu_type, machine", [("nvidia-gb200", "A4X"), ("nvidia-gb300", "A4X Max")])
@pytest.mark.parametrize("networking", [None, "rdma"])
def test_grace_blackwell_is_refused_in_one_line_naming_why_and_what_to_use(gpu_type, machine, networking):
    """A4X/A4X Max nodes are arm64 and their NVLink domain needs a ComputeDomain claim (NVIDIA's
    DRA driver), neither of which is rendered: refused, not rendered into pods that never run."""
    gpu = {"type": gpu_type, "count": 4} | ({"networking": networking} if networking else {})
    with pytest.raises(S.SpecError) as info:
        _spec(accelerator={"gpu": gpu})
    message = str(info.value)
    assert info.value.field == "accelerator.gpu.type"
    assert "\n" not in message
    assert machine in message and "arm64" in message and "ComputeDomain" in message
    assert "nvidia-b200" in message


def test_the_gpu_example_runs_no_privileged_container():
    """k8s/examples/gpu-h100-nfs.yaml (security.profile: privileged, the namespace level its host
    paths and NET_ADMIN need): no container is privileged: true; the worker adds IPC_LOCK only,
    the receive-datapath daemon NET_ADMIN and NET_BIND_SERVICE, and the GPUs reach the daemon
    through the NRI injector's devices.gke.io annotation (before, the profile made the worker
    privileged: every device and the host's kernel interfaces)."""
    from roxxel_launch import render as R
    from roxxel_launch import spec as S
    from support.paths import REPO

    spec = S.load_spec(REPO / "k8s" / "examples" / "gpu-h100-nfs.yaml")
    (jobset,) = [o for o in R.render(spec).objects if o["kind"] == "JobSet"]
    template = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    containers = {c["name"]: c for c in template["spec"]["containers"] + template["spec"].get("initContainers", [])}
    for container in containers.values():
        assert not (container.get("securityContext") or {}).get("privileged"), container["name"]
    added = {n: (c.get("securityContext") or {}).get("capabilities", {}).get("add", []) for n, c in containers.items()}
    assert added == {"worker": ["IPC_LOCK"], "gpudirect-daemon": ["NET_ADMIN", "NET_BIND_SERVICE"]}, added
    assert "/dev/nvidia0" in template["metadata"]["annotations"]["devices.gke.io/container.gpudirect-daemon"]
