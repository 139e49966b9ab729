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
from roxxel_launch import validate as V

BASE = {"apiVersion": "roxxel.dev/v1alpha1", "kind": "RoxxelJob", "name": "lm",
        "image": "img:1", "command": ["python", "train.py"]}
TYPES = {"tcpx": "nvidia-h100-80gb", "tcpxo": "nvidia-h100-mega-80gb", "rdma": "nvidia-h200-141gb"}


def _gpu(**gpu) -> dict:
    return {"accelerator": {"gpu": {"count": 8, "hosts": 2, **gpu}}}


def _spec(**changes) -> S.JobSpec:
    return S.spec_from_dict({**BASE, **changes})


def _pod(spec: S.JobSpec) -> dict:
    (jobset,) = [o for o in R.render(spec).objects if o["kind"] == "JobSet"]
    return jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]


@pytest.mark.parametrize("changes, field, fragment", [
    (_gpu(type="nvidia-h100-80gb", networking="tcpxo"), "accelerator.gpu.networking", "a3-megagpu-8g"),
    (_gpu(type="nvidia-h100-mega-80gb", networking="tcpx"), "accelerator.gpu.networking", "a3-highgpu-8g"),
    (_gpu(type="nvidia-l4", networking="rdma"), "accelerator.gpu.networking", "nvidia-b200"),
    (_gpu(type="nvidia-h100-80gb", networking="tcpx", count=4), "accelerator.gpu.count", "8 GPUs"),
    (_gpu(type="nvidia-h100-80gb", networking="tcpx", networks=["a", "b"]), "accelerator.gpu.networks", "4"),
    (_gpu(type="nvidia-h100-80gb", networking="tcpx", networks=["a", "b", "c", "a"]),
     "accelerator.gpu.networks", "twice"),
    (_gpu(type="nvidia-h100-80gb", networking="tcpx", networks=["a", "b", "c", "D_"]),
     "accelerator.gpu.networks[3]", ""),
    (_gpu(type="nvidia-b200", networking="rdma", daemon_image="x:1"), "accelerator.gpu.daemon_image", "no daemon"),
    (_gpu(type="nvidia-h100-80gb", networks=["a", "b", "c", "d"]), "accelerator.gpu.networking", "preset"),
    (_gpu(type="nvidia-h100-80gb", networking="ib"), "accelerator.gpu.networking", ""),
])
def test_presets_only_on_their_machine_type_and_shape(changes, field, fragment):
    with pytest.raises(S.SpecError) as info:
        _spec(**changes)
    assert info.value.field == field
    assert fragment in str(info.value)


def test_preset_volume_names_are_reserved():
    with pytest.raises(S.SpecError, match="volumes"):
        _spec(**_gpu(type="nvidia-b200", networking="rdma"),
              volumes=[{"name": "gpudirect-gib", "mount_path": "/x", "empty_dir": {}}])


def test_the_user_cannot_set_the_presets_nccl_variables():
    spec = _spec(**_gpu(type="nvidia-h100-mega-80gb", networking="tcpxo"),
                 env={"NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY": "/x"})
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
    controls = {(p, c) for p, c, _ in V.pod_security_findings(pod)}
    assert ("baseline", "HostPath Volumes") in controls
    if mode != "rdma":
        assert ("baseline", "Capabilities") in controls
        (daemon,) = pod["spec"]["initContainers"]
        assert daemon["restartPolicy"] == "Always"
        assert set(pod["metadata"]["annotations"][f"devices.gke.io/container.{daemon['name']}"]
                   .splitlines()) >= {"- path: /dev/nvidia0", "- path: /dev/nvidiactl"}
    with caplog.at_level(logging.WARNING):
        V.validate(objects)
    assert "privileged" in caplog.text


def test_custom_networks_and_daemon_image_are_rendered():
    nets = [f"net-{i}" for i in range(8)]
    spec = _spec(**_gpu(type="nvidia-h100-mega-80gb", networking="tcpxo", networks=nets,
                        daemon_image="registry.example/rxdm:v9"))
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
