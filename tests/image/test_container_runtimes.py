"""The same pods under ``--runtime docker`` as under ``--runtime podman`` (the container tier).

A probe job of 2 pods runs through ``roxxel-launch submit --local --runtime R``, the whole
path a user takes, on each runtime of this machine (podman always; docker where its daemon
answers: .ci/run starts one). Every pod reports what the kubelet's pod would show a program:
its user and groups, hostname, working directory, environment, what it can write, the
filesystem type and flags of its root and of every mount (read-only root; emptyDirs as
world-writable tmpfs, exec, with their sizeLimit; the run's outputs and checkpoint binds),
its capabilities, no_new_privs and seccomp mode, its memory and cpu limits as the cgroup has
them, PID 1, and which pod every manifest DNS name resolves to (its own network; names of no
pod fail). Pod 1 exits 3: the job fails with that exit code, as on a cluster. podman's pods
are checked against the manifest, and docker's must report the same, field by field (the
addresses differ: each engine's network has its own subnet). One difference is expected and
left out: the open-files limit, which neither the pod spec nor the kubelet sets (podman's comes
from docker/containers.conf, docker's from its daemon's).

The other launcher tests of the tier (the main job stopped and resumed, OOMKilled, an engine
failure, an image not built, a killed supervisor) run on both runtimes too (the ``runtime``
fixture); the image's own checks (test_container.py), podman's kube-play referee and the
4-pod sharded-memory job run on podman only: they test the image and the pod template, not
the runtime, and would double the tier's time.
"""

from __future__ import annotations

import json

import pytest
import yaml

from roxxel_launch.backends import rendered_pods
from roxxel_launch.backends.process_plan import rendered_objects
from roxxel_launch.spec import spec_from_dict
from support.container_job import launch, log, status
from support.image import IMAGE

pytestmark = [pytest.mark.slow, pytest.mark.container, pytest.mark.timeout(900)]

JOB = "probe"
PROBE = r"""
import json, os, socket, sys, time
watched = ["/", *sys.argv[1:], os.environ["ROXXEL_OUTPUT_DIR"], os.environ["ROXXEL_CHECKPOINT_DIR"]]
mounts = {}
for line in open("/proc/self/mounts"):
    _, path, fstype, options, *_ = line.split()
    mounts[path] = [fstype, sorted(o for o in options.split(",") if o in ("ro", "rw", "nosuid", "nodev", "noexec") or o.startswith("size="))]
writable = []
for path in dict.fromkeys(["/", "/home/roxxel", "/opt/venv", "/tmp", "/var/tmp", "/run", *watched]):
    try:
        with open(os.path.join(path, ".probe"), "w"):
            pass
        os.unlink(os.path.join(path, ".probe"))
        writable.append(path)
    except OSError:
        pass
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
def read(*paths):
    for path in paths:
        try:
            return open(path).read().split()
        except OSError:
            pass
    return None
me = socket.gethostname()
resolved = {}
for name in sys.argv[-1].split(","):
    try:
        resolved[name] = "self" if socket.gethostbyname(name) == socket.gethostbyname(me) else "other pod"
    except OSError as err:
        resolved[name] = "fails"
print("PROBE " + json.dumps({
    "ids": [os.getuid(), os.getgid(), sorted(os.getgroups())], "hostname": me, "cwd": os.getcwd(),
    "umask": os.umask(0o22), "env": dict(os.environ), "writable": writable,
    "mounts": {path: mounts.get(path) for path in watched},
    "status": {key: status[key].strip() for key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp")},
    "memory": read("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory.max"),
    "swap": read("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes", "/sys/fs/cgroup/memory.swap.max"),
    "cpu": [read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), read("/sys/fs/cgroup/cpu/cpu.cfs_period_us"), read("/sys/fs/cgroup/cpu.max")],
    "shares": read("/sys/fs/cgroup/cpu/cpu.shares", "/sys/fs/cgroup/cpu.weight"),
    "pid1": open("/proc/1/cmdline").read().split("\0")[:2], "resolved": resolved,
}), flush=True)
if os.environ["JOB_COMPLETION_INDEX"] == "1":
    time.sleep(2)  # after pod 0 has reported
    sys.exit(3)
"""


def _spec(tmp_path) -> tuple[dict, list[str]]:
    data = {
        "apiVersion": "roxxel.dev/v1alpha1",
        "kind": "RoxxelJob",
        "name": JOB,
        "image": IMAGE,
        "command": ["python", "-c", PROBE],
        "accelerator": {"cpu": {"hosts": 2}},
        "resources": {"requests": {"cpu": "500m"}, "limits": {"memory": "1Gi", "cpu": "1"}},
        "checkpoint_dir": str(tmp_path / "checkpoints"),
        "max_restarts": 0,
        "termination_grace_period": 5,
    }
    pods = rendered_pods.manifest_pods(rendered_objects(spec_from_dict(data)))
    mounts = [m["mountPath"] for m in pods[0].container("worker")["volumeMounts"]]
    names = [name for pod in pods for name in (pod.name, *pod.dns_names)] + ["no-such-pod", "example.com"]
    data["command"] += [*mounts, ",".join(names)]
    return data, mounts


def _dns_names(tmp_path) -> list[list[str]]:
    """Each pod's name and DNS names, as the manifest gives them."""
    data, _ = _spec(tmp_path)
    return [[pod.name, *pod.dns_names] for pod in rendered_pods.manifest_pods(rendered_objects(spec_from_dict(data)))]


def _probe(tmp_path, runtime: str) -> tuple[dict, list[dict], list[str]]:
    """The probe job's record and its pods' reports under ``runtime`` (paths of its run as ``<run>``)."""
    root = tmp_path / runtime
    data, mounts = _spec(root)
    (root / "job.yaml").parent.mkdir(parents=True)
    (root / "job.yaml").write_text(yaml.safe_dump(data))
    out = launch(root, "submit", str(root / "job.yaml"), "--local", "--runtime", runtime, check=None, timeout=300)
    reports = []
    for i in range(2):
        text = log(root, JOB, i)
        line = next((line for line in text.splitlines() if line.startswith("PROBE ")), None)
        assert line is not None, f"pod {i} under {runtime} did not report:\n{text[-3000:]}\n{out.stderr[-2000:]}"
        reports.append(json.loads(line.removeprefix("PROBE ").replace(str(root), "<run>")))
    return status(root, JOB), reports, mounts


@pytest.fixture(scope="module")
def podman_pods(worker_image, tmp_path_factory):
    """The probe job under podman: the referee of the other runtimes."""
    return _probe(tmp_path_factory.mktemp("referee"), "podman")


def test_the_runtime_runs_the_pods_the_manifest_describes(runtime, podman_pods, tmp_path):
    record, reports, mounts = podman_pods if runtime == "podman" else _probe(tmp_path, runtime)
    dns = _dns_names(tmp_path)
    assert (record["state"], record["exit_code"], record["restarts"]) == ("Failed", 3, 0), record
    assert record["attempts"][0]["exit_codes"][1] == 3, record
    for i, pod in enumerate(reports):
        assert pod["ids"] == [10001, 10001, [10001]] and pod["hostname"] == f"{JOB}-slice-0-{i}", pod
        assert not {"TERM", "container"} & set(pod["env"]), pod["env"]  # no engine's own variables
        assert (
            pod["env"]["JOB_COMPLETION_INDEX"] == str(i)
            and pod["env"]["ROXXEL_OUTPUT_DIR"] == "<run>/local/probe/outputs"
        )
        # Read-only root; every mount, the outputs and the checkpoint directory writable, nothing else.
        assert pod["mounts"]["/"][1][0] == "ro" and sorted(pod["writable"]) == sorted(
            [*mounts, "<run>/local/probe/outputs", "<run>/checkpoints"]
        ), pod["writable"]
        for path in mounts:  # emptyDirs: tmpfs, writable, exec (a kubelet's emptyDir is)
            fstype, flags = pod["mounts"][path]
            assert fstype == "tmpfs" and "rw" in flags and (path == "/dev/shm" or "noexec" not in flags), (path, flags)
        assert pod["status"]["NoNewPrivs"] == "1" and int(pod["status"]["CapEff"], 16) == 0, pod["status"]
        assert pod["memory"] == [str(2**30)] and pod["cpu"][0] in (["100000"], None), (pod["memory"], pod["cpu"])
        # Every DNS name of the manifest's pods (short, the subdomain's, the cluster's) is its pod.
        assert pod["resolved"] == {
            **{name: "self" if n == i else "other pod" for n, names in enumerate(dns) for name in names},
            "no-such-pod": "fails",
            "example.com": "fails",
        }, pod["resolved"]
    if runtime == "podman":
        return
    _, theirs, _ = podman_pods
    assert record["attempts"][0]["exit_codes"] == podman_pods[0]["attempts"][0]["exit_codes"], record
    differ = [
        f"pod {i} {key}: {_differ(pod[key], referee[key]) if key == 'env' else f'{pod[key]} != {referee[key]}'}"
        for i, (pod, referee) in enumerate(zip(_comparable(reports), _comparable(theirs)))
        for key in referee
        if pod[key] != referee[key]
    ]
    assert not differ, f"under {runtime}, not as under podman:\n" + "\n".join(differ)


def _comparable(reports: list[dict]) -> list[dict]:
    """The reports but for what differs by design: the pod's address (each engine's network has
    its own subnet) and the name of roxxel-worker's own temporary file."""
    return [
        {
            **r,
            "env": {k: v for k, v in r["env"].items() if not k.endswith("POD_IP") and k != "ROXXEL_CONFIG_ERROR_FILE"},
        }
        for r in reports
    ]


def _differ(left: dict, right: dict) -> str:
    keys = sorted(k for k in left.keys() | right.keys() if left.get(k) != right.get(k))
    return "; ".join(f"{k}: {left.get(k)!r} != podman's {right.get(k)!r}" for k in keys)
