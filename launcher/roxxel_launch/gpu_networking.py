"""GKE's high-bandwidth GPU networking presets (GPUDirect-TCPX, -TCPXO, RDMA).

Each preset renders what Google's GKE "Maximize GPU network bandwidth" guides and the
manifests in GoogleCloudPlatform/container-engine-accelerators (gpudirect-tcpx/
nccl-test-latest.yaml, gpudirect-tcpxo/nccl-test-latest.yaml, gpudirect-rdma/nccl-test.yaml)
add to a GPU pod: the multi-network annotations, the receive-datapath daemon (TCPX, TCPXO)
as a native sidecar (an init container with ``restartPolicy: Always``, as
gpudirect-tcpxo/best-practice.md recommends, so the Job completes when the worker exits),
the host paths the NCCL plugin lives in, and the NCCL environment the guides and Google's
GPU recipes (AI-Hypercomputer/gpu-recipes) give the workload: the variables their manifests
set, the TCPX variable list of gpudirect-tcpx/nccl-config.yaml, the profile script the
TCPXO and RDMA workloads source before starting (``nccl-env-profile.sh`` of the TCPXO
plugin, ``set_nccl_env.sh`` of the gIB plugin; :attr:`PodAdditions.init_script`), and the
worker's ``IPC_LOCK`` capability for TCPX (gpudirect-tcpx/nccl-test-latest.yaml).
The node pool must have been created with the matching additional networks and the NCCL
plugin installer DaemonSet; docs/kubernetes.md lists every field and its source.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from roxxel.contract import CONFIG_ERROR_EXIT_CODE

NETWORKING_MODES = ("none", "tcpx", "tcpxo", "rdma")
# Where GKE's GPU nodes keep the driver (and, for TCPX/TCPXO, the NCCL plugin the installer
# DaemonSet copies there) and, for RDMA, the gIB NCCL plugin.
HOST_NVIDIA_DIR = "/home/kubernetes/bin/nvidia"
HOST_GIB_DIR = "/home/kubernetes/bin/gib"


@dataclasses.dataclass(frozen=True)
class Preset:
    """One machine family's networking, as the GKE recipes render it."""

    machine_type: str
    gke_accelerators: tuple[str, ...]  # cloud.google.com/gke-accelerator values it runs on
    networks: tuple[str, ...]  # the recipe's additional network names (eth1...; RDMA eth2...)
    first_interface: int  # interface number of the first additional network
    daemon_image: str | None  # the receive-datapath daemon's image (None: no daemon)


PRESETS: dict[str, Preset] = {
    # A3 High: 4 additional NICs, GPUDirect-TCPX (gpudirect-tcpx/nccl-test-latest.yaml).
    "tcpx": Preset(
        "a3-highgpu-8g",
        ("nvidia-h100-80gb",),
        tuple(f"vpc{i}" for i in range(1, 5)),
        1,
        "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpx/tcpgpudmarxd-dev:v2.0.12",
    ),
    # A3 Mega: 8 additional NICs, GPUDirect-TCPXO (gpudirect-tcpxo/nccl-test-latest.yaml).
    "tcpxo": Preset(
        "a3-megagpu-8g",
        ("nvidia-h100-mega-80gb",),
        tuple(f"vpc{i}" for i in range(1, 9)),
        1,
        "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpxo/tcpgpudmarxd-dev:v1.0.21",
    ),
    # A3 Ultra / A4: 8 RDMA NICs from eth2 on (eth1 is the second gVNIC), GPUDirect RDMA with
    # the gIB plugin (gpudirect-rdma/nccl-test.yaml).
    "rdma": Preset(
        "a3-ultragpu-8g / a4-highgpu-8g",
        ("nvidia-h200-141gb", "nvidia-b200"),
        tuple(f"rdma-{i}" for i in range(8)),
        2,
        None,
    ),
}
# The NCCL plugin each installer DaemonSet puts on the nodes, and the daemon release the same
# repository's test manifests pair with it (container-engine-accelerators @ 992db81, 2026-06-11:
# gpudirect-tcp{x,xo}/nccl-tcp{x,xo}-installer.yaml and nccl-test-latest.yaml). A daemon of
# another release than the installed plugin's may not speak its protocol.
RELEASED_PAIRS = {
    "tcpx": ("nccl-plugin-gpudirecttcpx-dev:v3.1.9", "tcpgpudmarxd-dev:v2.0.12"),
    "tcpxo": ("nccl-plugin-gpudirecttcpx-dev:v1.0.15", "tcpgpudmarxd-dev:v1.0.21"),
}
GPUS_PER_HOST = 8  # every machine type above has 8 GPUs

# Grace-Blackwell machines, accepted by the GKE label syntax but not runnable as rendered: their
# nodes are arm64 (GKE taints Arm nodes kubernetes.io/arch=arm64:NoSchedule, and the images
# built here are amd64), and their NVLink domain across hosts (MNNVL through IMEX) needs a DRA
# ComputeDomain claim from NVIDIA's DRA driver (NVIDIA AI Cluster Runtime, "GKE A4X Max (GB300)
# Networking Prerequisites"), none of which the launcher renders.
UNSUPPORTED_GPU_TYPES = {
    "nvidia-gb200": "A4X (a4x-highgpu-4g)",
    "nvidia-gb300": "A4X Max (a4x-maxgpu-4g-metal)",
}
UNSUPPORTED_GPU_REASON = (
    "runs arm64 nodes and needs a ComputeDomain (NVIDIA DRA driver) for its NVLink domain, "
    "which roxxel-launch does not render (no arm64 toleration, image or ComputeDomain claim)"
)
UNSUPPORTED_GPU_FIX = "Use A4 (type: nvidia-b200, a4-highgpu-8g) or A3 Ultra (nvidia-h200-141gb) with networking: rdma."
TCPX_SOCKET_DIR = "/run/tcpx"
APERTURE_DEVICES = "/dev/aperture_devices"
DAEMON_CONTAINER = "gpudirect-daemon"
# The NCCL environment scripts the workloads source (the installers put the TCPXO plugin's in
# the host's NVIDIA lib64, mounted at NVIDIA_LIB_DIR; the gIB one lives in its own directory).
NVIDIA_LIB_DIR = "/usr/local/nvidia/lib64"
INIT_SCRIPTS = {"tcpxo": f"{NVIDIA_LIB_DIR}/nccl-env-profile.sh", "rdma": "/usr/local/gib/scripts/set_nccl_env.sh"}
# Capabilities the worker container adds (GKE's TCPX manifests add IPC_LOCK to the NCCL container).
WORKER_CAPABILITIES = {"tcpx": ("IPC_LOCK",)}
# GPUDirect-TCPX's NCCL settings for A3 High (container-engine-accelerators @ 992db81,
# gpudirect-tcpx/nccl-config.yaml, the variables its run script exports); the data NICs'
# names come from the preset's interfaces.
_TCPX_NCCL = {
    "NCCL_SOCKET_IFNAME": "eth0",
    "NCCL_ALGO": "Ring,Tree",
    "NCCL_PROTO": "Simple",
    "NCCL_CROSS_NIC": "0",
    "NCCL_NET_GDR_LEVEL": "PIX",
    "NCCL_P2P_PXN_LEVEL": "0",
    "NCCL_GPUDIRECTTCPX_CTRL_DEV": "eth0",
    "NCCL_DYNAMIC_CHUNK_SIZE": "524288",
    "NCCL_P2P_NET_CHUNKSIZE": "524288",
    "NCCL_P2P_PCI_CHUNKSIZE": "524288",
    "NCCL_P2P_NVL_CHUNKSIZE": "1048576",
    "NCCL_BUFFSIZE": "4194304",
    "NCCL_NSOCKS_PERTHREAD": "4",
    "NCCL_SOCKET_NTHREADS": "1",
    "NCCL_GPUDIRECTTCPX_TX_BINDINGS": "eth1:8-21,112-125;eth2:8-21,112-125;eth3:60-73,164-177;eth4:60-73,164-177",
    "NCCL_GPUDIRECTTCPX_RX_BINDINGS": "eth1:22-35,126-139;eth2:22-35,126-139;eth3:74-87,178-191;eth4:74-87,178-191",
    "NCCL_GPUDIRECTTCPX_PROGRAM_FLOW_STEERING_WAIT_MICROS": "500000",
}
# The NVIDIA devices the daemon needs (the devices.gke.io/container.<name> annotation).
_DAEMON_DEVICES = [f"/dev/nvidia{i}" for i in range(GPUS_PER_HOST)] + ["/dev/nvidiactl", "/dev/nvidia-uvm"]


@dataclasses.dataclass
class PodAdditions:
    """What a preset adds to the pod template."""

    annotations: dict[str, str] = dataclasses.field(default_factory=dict)
    init_containers: list[dict] = dataclasses.field(default_factory=list)
    volumes: list[dict] = dataclasses.field(default_factory=list)
    mounts: list[dict] = dataclasses.field(default_factory=list)
    env: dict[str, str] = dataclasses.field(default_factory=dict)  # what the plugin needs: the user may not set it
    tuning: dict[str, str] = dataclasses.field(default_factory=dict)  # recommended settings: the user's env wins
    init_script: str | None = None  # the NCCL environment script the worker sources before starting
    capabilities: tuple[str, ...] = ()  # added to the worker container


def _host(name: str, path: str) -> dict:
    return {"name": name, "hostPath": {"path": path}}


def _interfaces(preset: Preset, networks: tuple[str, ...]) -> str:
    interfaces = [{"interfaceName": "eth0", "network": "default"}]
    interfaces += [
        {"interfaceName": f"eth{preset.first_interface + i}", "network": network} for i, network in enumerate(networks)
    ]
    return json.dumps(interfaces, separators=(",", ":"))


def _daemon(mode: str, image: str, devices_annotation: dict[str, str], privileged: bool) -> dict[str, Any]:
    mounts = [
        {"name": "gpudirect-nvidia-lib", "mountPath": "/usr/local/nvidia/lib64"},
        {"name": "gpudirect-sys", "mountPath": "/hostsysfs"},
        {"name": "gpudirect-proc-sys", "mountPath": "/hostprocsysfs"},
    ]
    if mode == "tcpx":
        command = [
            "/tcpgpudmarxd/build/app/tcpgpudmarxd",
            "--gpu_nic_preset",
            "a3vm",
            "--gpu_shmem_type",
            "fd",
            "--uds_path",
            TCPX_SOCKET_DIR,
            "--setup_param",
            "--verbose 128 2 0 ",
        ]
        mounts.append({"name": "gpudirect-tcpx-socket", "mountPath": TCPX_SOCKET_DIR})
        # The receive-datapath daemon programs the NICs (NET_ADMIN) and binds its service
        # ports (NET_BIND_SERVICE); its devices come through the NRI injector's annotation.
        capabilities = ["NET_ADMIN", "NET_BIND_SERVICE"]
    else:
        command = [
            "/bin/sh",
            "-c",
            "chmod 755 /fts/entrypoint_rxdm_container.sh && exec "
            "/fts/entrypoint_rxdm_container.sh --num_hops=2 --num_nics=8 --uid= "
            "--alsologtostderr",
        ]
        devices_annotation["/dev/dmabuf_import_helper"] = ""
        capabilities = ["NET_ADMIN", "NET_BIND_SERVICE"]
    security: dict[str, Any] = {"runAsNonRoot": False, "runAsUser": 0, "capabilities": {"add": capabilities}}
    if privileged:
        # On the host network the recipes run the daemon privileged, without a device list.
        security["privileged"] = True
    return {
        "name": DAEMON_CONTAINER,
        "image": image,
        "restartPolicy": "Always",
        # The daemon runs as root, as in the recipes (the pod's runAsNonRoot is the
        # worker's): it programs the NICs' flow steering through /hostsysfs.
        "command": command,
        "securityContext": security,
        "env": [{"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib64"}],
        "volumeMounts": mounts,
    }


def pod_additions(
    mode: str, networks: tuple[str, ...], daemon_image: str | None, host_network: bool = False
) -> PodAdditions:
    """The pod-template additions of preset ``mode`` ("none" adds nothing).

    Args:
        mode: one of NETWORKING_MODES.
        networks: the node pool's additional network names, in interface order.
        daemon_image: the TCPX/TCPXO daemon image (None: the recipe's).
        host_network: the pod runs on the node's network. As Google's GPU recipes render it
            (AI-Hypercomputer/gpu-recipes, src/helm-charts/a3mega|a3ultra|a4/jobset/templates/
            workload-jobset.yaml, ``network.hostNetwork``): no multi-network annotations (the
            pod sees the node's NICs) and a privileged daemon instead of its device list.
    Raises:
        ValueError: unknown mode.
    """
    out = PodAdditions()
    if mode == "none":
        return out
    if mode not in PRESETS:
        raise ValueError(f"unknown GPU networking mode {mode!r}")
    preset = PRESETS[mode]
    if not host_network:
        out.annotations = {
            "networking.gke.io/default-interface": "eth0",
            "networking.gke.io/interfaces": _interfaces(preset, networks),
        }
    if mode == "rdma":
        out.volumes = [_host("gpudirect-nvidia", HOST_NVIDIA_DIR), _host("gpudirect-gib", HOST_GIB_DIR)]
        out.mounts = [
            {"name": "gpudirect-nvidia", "mountPath": "/usr/local/nvidia"},
            {"name": "gpudirect-gib", "mountPath": "/usr/local/gib"},
        ]
        # The recipe sources /usr/local/gib/scripts/set_nccl_env.sh; these are the values the
        # gIB images set (NCCL_NET=gIB and the plugin's libraries first on the loader path).
        out.env = {"LD_LIBRARY_PATH": "/usr/local/gib/lib64:/usr/local/nvidia/lib64", "NCCL_NET": "gIB"}
        out.init_script = INIT_SCRIPTS["rdma"]
        return out
    devices: dict[str, str] = dict.fromkeys(_DAEMON_DEVICES, "")
    daemon = _daemon(mode, daemon_image or str(preset.daemon_image), devices, privileged=host_network)
    if not host_network:
        out.annotations[f"devices.gke.io/container.{DAEMON_CONTAINER}"] = "".join(
            f"- path: {path}\n" for path in devices
        )
    out.init_containers = [daemon]
    out.volumes = [
        _host("gpudirect-nvidia-lib", f"{HOST_NVIDIA_DIR}/lib64"),
        _host("gpudirect-sys", "/sys"),
        _host("gpudirect-proc-sys", "/proc/sys"),
    ]
    out.mounts = [{"name": "gpudirect-nvidia-lib", "mountPath": "/usr/local/nvidia/lib64"}]
    out.env = {"LD_LIBRARY_PATH": NVIDIA_LIB_DIR}
    if mode == "tcpx":
        out.volumes.append(_host("gpudirect-tcpx-socket", TCPX_SOCKET_DIR))
        out.mounts.append({"name": "gpudirect-tcpx-socket", "mountPath": TCPX_SOCKET_DIR})
        out.env["NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX"] = TCPX_SOCKET_DIR
        out.tuning = {
            **_TCPX_NCCL,
            "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME": ",".join(
                f"eth{preset.first_interface + i}" for i in range(len(networks))
            ),
        }
        out.capabilities = WORKER_CAPABILITIES["tcpx"]
    else:
        out.volumes.append(_host("gpudirect-aperture-devices", APERTURE_DEVICES))
        out.mounts.append({"name": "gpudirect-aperture-devices", "mountPath": APERTURE_DEVICES})
        out.env["NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY"] = APERTURE_DEVICES
        # gpu-recipes a3mega workload-jobset.yaml: NCCL_LIB_DIR names the plugin's directory
        # and the workload sources its nccl-env-profile.sh (NCCL_INIT_SCRIPT) before starting.
        out.env["NCCL_LIB_DIR"] = NVIDIA_LIB_DIR
        out.init_script = INIT_SCRIPTS["tcpxo"]
    return out


def worker_command(init_script: str, entrypoint: tuple[str, ...], keep: tuple[str, ...]) -> list[str]:
    """The worker container's command when a preset's NCCL script must be sourced first: bash
    sources ``init_script`` (as the recipes' workloads do), puts back the variables named in
    ``keep`` (the spec's own env, which wins over the script's defaults), then execs
    ``entrypoint`` with the container's args. A missing script (no plugin installer on the
    node) ends the worker with the configuration-error exit code and one line on stderr.

    Args:
        init_script: absolute path of the script in the container.
        entrypoint: the worker command (``contract.WORKER_ENTRYPOINT``).
        keep: names of variables to keep as the container got them (C identifiers).
    """
    names = " ".join(keep)
    keep_line = f"kept=$(declare -p {names} 2>/dev/null); " if keep else ""
    restore = 'eval "$kept"; ' if keep else ""
    script = (
        f'script={init_script}; if [ ! -r "$script" ]; then echo "roxxel: $script is missing: install the '
        'NCCL plugin installer DaemonSet of accelerator.gpu.networking on the node pool" >&2; '
        f'exit {CONFIG_ERROR_EXIT_CODE}; fi; {keep_line}source "$script"; {restore}'
        f'exec {" ".join(entrypoint)} "$@"'
    )
    return ["/bin/bash", "-c", script, entrypoint[0]]


# Volume names the presets use (reserved in the spec's volumes).
VOLUME_NAMES = frozenset(
    {
        "gpudirect-nvidia",
        "gpudirect-gib",
        "gpudirect-nvidia-lib",
        "gpudirect-sys",
        "gpudirect-proc-sys",
        "gpudirect-tcpx-socket",
        "gpudirect-aperture-devices",
    }
)
