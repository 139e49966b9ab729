"""The worker image, really built and run as containers with podman (the container tier).

Once per session (a module fixture; `./dev.sh test` keeps a module on one xdist worker) it
makes the local Debian base (docker/make-base.sh: cached, skipped when the image exists) and
builds the cpu worker image with `roxxel-launch image build` (podman's layer and pip caches
make a rebuild take seconds). Then it runs the image as a rendered pod's container runs: the
pod's user and groups (runAsUser, runAsGroup, fsGroup), read-only root, dropped
capabilities, no privilege escalation, its emptyDirs as tmpfs, its env (literal values,
``$(VAR)`` expanded as the kubelet does), its command, and checks:

- the uid and groups, and that $HOME and every emptyDir are writable;
- tini is PID 1 under the image's ENTRYPOINT, roxxel-worker under the pod's command;
- SIGTERM sent to the container (to PID 1, as the kubelet does) reaches the training
  command once, in both;
- the exit codes 0, 42, 78 and 143 come out of the container as roxxel-worker made them;
- nothing on the root filesystem is writable besides the pod's mounts, and the image's
  code is not writable by the worker even on a writable root.

The settings podman needs on a CI machine come from docker/containers.conf (or
$CONTAINERS_CONF where it is set). Every container carries this session's label and is
removed after its test, failed or not, and again at the end of the module.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from roxxel import exit_codes
from roxxel_launch import contract
from roxxel_launch.cli import cli

from support.paths import REPO

# The first test also waits for the image: a cold build of the base and the image takes ~10 min.
pytestmark = [pytest.mark.slow, pytest.mark.container, pytest.mark.timeout(3600)]

PODMAN = shutil.which("podman")
BASE = "localhost/roxxel-base:bookworm"
IMAGE = "localhost/roxxel-test/worker:cpu"
SESSION = uuid.uuid4().hex[:12]
LABEL = f"dev.roxxel.test-session={SESSION}"
BIN_DIR = Path(sys.executable).parent


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("CONTAINERS_CONF", str(REPO / "docker" / "containers.conf"))
    return env


def podman(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([PODMAN, *args], capture_output=True, text=True, timeout=timeout, env=_env())
    if check:
        assert result.returncode == 0, f"podman {' '.join(args)} exited {result.returncode}:\n{result.stderr}"
    return result


def _remove_session_containers() -> None:
    ids = podman("ps", "--all", "--quiet", "--filter", f"label={LABEL}", check=False).stdout.split()
    if ids:
        podman("rm", "--force", "--time", "0", *ids, check=False)


@pytest.fixture(scope="module")
def worker_image():
    """The cpu worker image built from this tree on the local base; its build output."""
    if PODMAN is None:
        pytest.skip("podman is not installed (apt-get install podman iptables runc mmdebstrap); "
                    ".ci/run installs it")
    make_base = subprocess.run([str(REPO / "docker" / "make-base.sh"), BASE], capture_output=True, text=True,
                               timeout=1200, env=_env())
    assert make_base.returncode == 0, f"docker/make-base.sh failed:\n{make_base.stdout}\n{make_base.stderr}"
    build = subprocess.run([str(BIN_DIR / "roxxel-launch"), "image", "build", "--engine", "podman",
                            "--base", BASE, "--tag", IMAGE], capture_output=True, text=True, timeout=2400,
                           env=_env(), cwd=REPO)
    assert build.returncode == 0, f"roxxel-launch image build failed:\n{build.stdout[-5000:]}\n{build.stderr[-5000:]}"
    yield build.stdout
    _remove_session_containers()


@pytest.fixture
def containers():
    """Names of this test's containers; removed after it, whatever happened."""
    names: list[str] = []
    yield names
    if names:
        podman("rm", "--force", "--time", "0", "--ignore", *names, check=False)


# ----------------------------------------------------------------------------- the rendered pod


def _rendered_pod() -> dict:
    """The pod template of the cpu smoke example, rendered with the test image."""
    runner = CliRunner()
    result = runner.invoke(cli, ["render", str(REPO / "k8s/examples/cpu-smoke.yaml"), "--set", f"image={IMAGE}"],
                           catch_exceptions=False)
    assert result.exit_code == 0, result.output
    jobset = next(o for o in yaml.safe_load_all(result.output) if o["kind"] == "JobSet")
    return jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]


def kubelet_expand(value: str, env: dict[str, str]) -> str:
    """``$(VAR)`` replaced by an earlier variable's value, ``$$`` by ``$``, as the kubelet does
    (an unknown ``$(VAR)`` stays as written)."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), value)


def pod_run_args(pod: dict) -> list[str]:
    """`podman run` options for the pod's container: user, groups, read-only root,
    capabilities, privilege escalation, emptyDirs as tmpfs, literal env."""
    spec = pod["spec"]
    (container,) = spec["containers"]
    pod_sc, sc = spec.get("securityContext", {}), container.get("securityContext", {})
    args = ["--user", f"{pod_sc['runAsUser']}:{pod_sc['runAsGroup']}"]
    if "fsGroup" in pod_sc:
        args += ["--group-add", str(pod_sc["fsGroup"])]
    if sc.get("readOnlyRootFilesystem"):
        # Without --read-only-tmpfs=false podman would add writable /tmp, /run and /var/tmp.
        args += ["--read-only", "--read-only-tmpfs=false"]
    for cap in sc.get("capabilities", {}).get("drop", []):
        args += ["--cap-drop", cap]
    if sc.get("allowPrivilegeEscalation") is False:
        args += ["--security-opt", "no-new-privileges"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    for mount in container["volumeMounts"]:
        empty_dir = volumes[mount["name"]].get("emptyDir")
        assert empty_dir is not None, f"volume {mount['name']}: only emptyDirs are run here"
        size = empty_dir.get("sizeLimit")
        if mount["mountPath"] == "/dev/shm":
            args += ["--shm-size", size or "64m"]
            continue
        # An emptyDir is world-writable (0777, whatever the image has at its path). Podman gives
        # a tmpfs over a directory of the image that directory's mode (0700 for HOME) with
        # root as owner; U=true makes the pod's user its owner, so the user can write to it
        # as to an emptyDir.
        options = ["type=tmpfs", f"destination={mount['mountPath']}", "tmpfs-mode=1777", "U=true"]
        args += ["--mount", ",".join(options + ([f"tmpfs-size={size}"] if size else []))]
    env: dict[str, str] = {}
    for var in container["env"]:
        if "value" in var:
            env[var["name"]] = kubelet_expand(var["value"], env)
    for name, value in env.items():
        args += ["--env", f"{name}={value}"]
    return args


@pytest.fixture(scope="module")
def pod() -> dict:
    return _rendered_pod()


def run(pod: dict | None, containers: list[str], command: list[str], *, entrypoint: list[str] | None = None,
        detach: bool = False, timeout: float = 180) -> subprocess.CompletedProcess:
    """Runs the image as the pod's container (``pod``; None: as `podman run IMAGE` alone), with
    the pod's command (``entrypoint``, default the pod's) or the image's ENTRYPOINT (``[]``)."""
    name = f"roxxel-test-{SESSION}-{len(containers)}-{uuid.uuid4().hex[:6]}"
    containers.append(name)
    args = ["run", "--name", name, "--label", LABEL, "--network", "none"]
    if not detach:
        args.append("--rm")
    else:
        args.append("--detach")
    if pod is not None:
        args += pod_run_args(pod)
        if entrypoint is None:
            entrypoint = pod["spec"]["containers"][0]["command"]
    if entrypoint:
        args += ["--entrypoint", entrypoint[0]]
        command = [*entrypoint[1:], *command]
    return podman(*args, IMAGE, *command, timeout=timeout, check=False)


# ----------------------------------------------------------------------------- the checks


def test_the_build_reports_the_size_and_largest_layers(worker_image):
    report = worker_image[worker_image.index(f"{IMAGE}: "):]
    size, layers = re.match(rf"{re.escape(IMAGE)}: ([\d.]+) GB in (\d+) layers; the largest:", report).groups()
    assert 0.5 < float(size) < 3 and int(layers) >= 5, report
    largest = report.splitlines()[1]
    assert "/opt/venv" in largest, f"the dependencies' layer should be the largest:\n{report}"
    labels = podman("image", "inspect", "--format", "{{json .Labels}}", IMAGE).stdout
    assert '"dev.roxxel.accelerator":"cpu"' in labels and '"org.opencontainers.image.revision":"' in labels


def test_the_pod_runs_as_its_user_with_home_and_emptydirs_writable(worker_image, pod, containers):
    mounts = [m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]]
    script = textwrap.dedent("""
        import os, sys, tempfile
        print(os.getuid(), os.getgid(), sorted(os.getgroups()))
        print(os.environ["HOME"], os.getcwd())
        for path in [os.environ["HOME"], *sys.argv[1:]]:
            with tempfile.NamedTemporaryFile(dir=path) as f:
                f.write(b"x")
        print("writable:", os.environ["HOME"], *sys.argv[1:])
    """)
    result = run(pod, containers, ["python", "-c", script, *mounts])
    assert result.returncode == 0, result.stderr
    ids, home, writable = result.stdout.splitlines()
    assert ids == f"{contract.WORKER_UID} {contract.WORKER_GID} [{contract.WORKER_GID}]"
    pod_home = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}.get("HOME")
    image_home = podman("image", "inspect", "--format", "{{range .Config.Env}}{{println .}}{{end}}",
                        IMAGE).stdout
    assert f"HOME={home.split()[0]}" in image_home.split() or home.split()[0] == pod_home, (home, image_home)
    assert home.split()[1] == "/home/roxxel"  # the image's WORKDIR, with examples/ in it
    assert writable.split()[1:] == [home.split()[0], *mounts]


def test_tini_is_pid_1_under_the_images_entrypoint_and_the_worker_under_the_pods(worker_image, pod, containers):
    show = ["python", "-c", "print(open('/proc/1/cmdline').read().replace(chr(0), ' ').strip())"]
    image = run(pod, containers, show, entrypoint=[])
    assert image.returncode == 0, image.stderr
    assert image.stdout.split()[:4] == ["/usr/bin/tini", "--", "roxxel-worker", "--"], image.stdout
    as_pod = run(pod, containers, show)
    assert as_pod.returncode == 0, as_pod.stderr
    assert re.match(r"\S*python\S* \S*roxxel-worker -- python -c", as_pod.stdout), as_pod.stdout


CHILD = r"""
import os, signal, sys, time
received = []
if sys.argv[1] == "trap":
    signal.signal(signal.SIGTERM, lambda signo, frame: received.append(signo))
print("ready", os.getpid(), flush=True)
deadline = time.monotonic() + 60
while not received and time.monotonic() < deadline:
    time.sleep(0.02)
time.sleep(0.5)  # a second, duplicated SIGTERM would arrive within this window
print("received", len(received), flush=True)
sys.exit(42)  # after a (pretend) checkpoint
"""


def _wait_for_log(name: str, text: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        logs = podman("logs", name, check=False)
        if text in logs.stdout:
            return logs.stdout
        state = podman("inspect", "--format", "{{.State.Status}}", name, check=False).stdout.strip()
        assert state in ("created", "running", "configured"), f"{name} is {state}:\n{logs.stdout}\n{logs.stderr}"
        time.sleep(0.2)
    raise AssertionError(f"{name} did not print {text!r} in {timeout} s:\n{podman('logs', name).stderr}")


@pytest.mark.parametrize("entrypoint", ["image", "pod"])
@pytest.mark.parametrize("mode, expected", [("trap", exit_codes.PREEMPTED_EXIT_CODE),
                                            ("plain", exit_codes.SIGNAL_EXIT_BASE + 15)])
def test_sigterm_to_the_container_reaches_the_command_once(worker_image, pod, containers, entrypoint, mode,
                                                           expected):
    """The kubelet's SIGTERM goes to PID 1; the training command gets it once, and its exit
    (42 after a pretend checkpoint, or 143 when killed by it) is the container's."""
    started = run(pod, containers, ["python", "-c", CHILD, mode], detach=True,
                  entrypoint=[] if entrypoint == "image" else None)
    assert started.returncode == 0, started.stderr
    name = containers[-1]
    _wait_for_log(name, "ready")
    podman("kill", "--signal", "TERM", name)
    code = podman("wait", name, timeout=60).stdout.strip()
    logs = podman("logs", name).stdout
    assert code == str(expected), logs
    if mode == "trap":
        assert "received 1" in logs, f"the command got SIGTERM other than once:\n{logs}"


CONFIG_ERROR = "import roxxel\nfrom roxxel.sharding import BatchShardingError\nraise BatchShardingError('x')"


@pytest.mark.parametrize("command, expected", [
    (["python", "-c", "pass"], 0),
    (["python", "-c", "import sys; sys.exit(42)"], exit_codes.PREEMPTED_EXIT_CODE),
    (["python", "-c", CONFIG_ERROR], exit_codes.CONFIG_ERROR_EXIT_CODE),
    (["python", "examples/lm/no-such-script.py"], exit_codes.CONFIG_ERROR_EXIT_CODE),
    (["no-such-command"], exit_codes.CONFIG_ERROR_EXIT_CODE),
    (["python", "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"], 143),
], ids=["0", "42", "78-config-error", "78-no-script", "78-no-command", "143-killed"])
def test_exit_codes_pass_through(worker_image, pod, containers, command, expected):
    result = run(pod, containers, command)
    assert result.returncode == expected, result.stderr
    if expected == exit_codes.CONFIG_ERROR_EXIT_CODE:
        assert "configuration error" in result.stderr, result.stderr  # and the one line that says why


WRITABLE_DIRS = r"""
import os, sys
found = []
for root, dirs, files in os.walk("/", topdown=True):
    if root in ("/proc", "/sys"):
        dirs[:] = []
        continue
    dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))]
    probe = os.path.join(root, ".roxxel-write-probe")
    try:
        fd = os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except OSError:
        continue
    os.close(fd)
    os.unlink(probe)
    found.append(root)
print("\n".join(sorted(found)))
"""


def _tops(paths: list[str]) -> set[str]:
    """The paths that are not below another one of them."""
    return {p for p in paths if not any(p.startswith(q.rstrip("/") + "/") for q in paths if q != p)}


def test_nothing_on_the_root_is_writable_but_the_mounts(worker_image, pod, containers):
    result = run(pod, containers, ["python", "-c", WRITABLE_DIRS])
    assert result.returncode == 0, result.stderr
    mounts = {m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
    # /dev/mqueue: the runtime's POSIX message-queue mount, in every pod too.
    assert _tops(result.stdout.split()) == mounts | {"/dev/mqueue"}, result.stdout


def test_the_images_code_is_not_writable_by_the_worker_even_on_a_writable_root(worker_image, containers):
    result = run(None, containers, ["python", "-c", WRITABLE_DIRS], entrypoint=[])
    assert result.returncode == 0, result.stderr
    writable = result.stdout.split()
    for path in ("/opt/venv", "/home/roxxel/examples", "/usr"):
        assert not any(w == path or w.startswith(path + "/") for w in writable), (path, writable)
    home = podman("image", "inspect", "--format", "{{range .Config.Env}}{{println .}}{{end}}", IMAGE).stdout
    image_home = dict(line.split("=", 1) for line in home.split())["HOME"]
    assert image_home in writable and "/tmp" in writable, writable
