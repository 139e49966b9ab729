"""The worker image, really built and run as containers with podman (the container tier).

Once per test run (tests/image/conftest.py) it makes the local Debian base
(docker/make-base.sh: cached, skipped when the image exists) and builds the cpu worker image
with `roxxel-launch image build` (podman's layer and pip caches make a rebuild take
seconds). Then it runs the image as a rendered pod's container runs: the pod's user and
groups (runAsUser, runAsGroup, fsGroup), read-only root, dropped capabilities, no
privilege escalation, its emptyDirs as tmpfs, its env as the kubelet
resolves it, its command (the options are those of the local backend's container runtime,
roxxel_launch.backends.local.containers), and checks:

- the image holds no launcher dependencies (the launch extra): roxxel-launch there names the extra;
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

import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from roxxel import contract as shared_contract
from roxxel import exit_codes
from roxxel_launch import contract
from roxxel_launch.backends.local import containers as containers_runtime
from roxxel_launch.backends import rendered_pods
from roxxel_launch.backends.local.pods import LocalSettings
from roxxel_launch.backends.process_plan import rendered_objects
from roxxel_launch.cli import cli
from roxxel_launch.spec import spec_from_dict

from support.image import IMAGE, PODMAN, podman_env
from support.paths import REPO

# The first test also waits for the image: a cold build of the base and the image takes ~10 min.
pytestmark = [pytest.mark.slow, pytest.mark.container, pytest.mark.timeout(3600)]

SESSION = uuid.uuid4().hex[:12]
LABEL = f"dev.roxxel.test-session={SESSION}"


def podman(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([PODMAN, *args], capture_output=True, text=True, timeout=timeout, env=podman_env())
    if check:
        assert result.returncode == 0, f"podman {' '.join(args)} exited {result.returncode}:\n{result.stderr}"
    return result


def _remove_session_containers() -> None:
    ids = podman("ps", "--all", "--quiet", "--filter", f"label={LABEL}", check=False).stdout.split()
    if ids:
        podman("rm", "--force", "--time", "0", *ids, check=False)


RUN_DIR = Path(tempfile.gettempdir()) / f"roxxel-container-test-{SESSION}"
"""The local run directory of this module's pods: its ``outputs`` is bound into each as ROXXEL_OUTPUT_DIR."""


@pytest.fixture(scope="module", autouse=True)
def _session_containers_removed():
    yield
    _remove_session_containers()
    shutil.rmtree(RUN_DIR, ignore_errors=True)


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
    result = runner.invoke(
        cli, ["render", str(REPO / "k8s/examples/cpu-smoke.yaml"), "--set", f"image={IMAGE}"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    jobset = next(o for o in yaml.safe_load_all(result.output) if o["kind"] == "JobSet")
    return jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]


def _without_log_format(containers: list[dict]) -> list[dict]:
    return [
        {**c, "env": [e for e in c.get("env", ()) if e["name"] != shared_contract.ENV_LOG_FORMAT]} for c in containers
    ]


def pod_run_args(pod: dict) -> list[str]:
    """`podman create` options for the pod's container, as the container runtime of the local
    backend makes them (roxxel_launch.backends.local.containers): user, groups, read-only root,
    capabilities, privilege escalation, emptyDirs as tmpfs, the env as the kubelet resolves it.
    The pod is the rendered manifest's first (``pod`` is its template, which this matches)."""
    spec = spec_from_dict({**yaml.safe_load((REPO / "k8s/examples/cpu-smoke.yaml").read_text()), "image": IMAGE})
    (first, *_) = rendered_pods.manifest_pods(rendered_objects(spec))
    # The same containers but for the log format: json on a cluster (for Cloud Logging), text for --local.
    assert _without_log_format(first.spec["containers"]) == _without_log_format(pod["spec"]["containers"])
    settings = LocalSettings(python=sys.executable, run_dir=RUN_DIR)
    env = containers_runtime.container_env(first, settings, restart_attempt=0, pod_ip="127.0.0.1", base_env={})
    return containers_runtime.container_options(first, settings, env)


@pytest.fixture(scope="module")
def pod() -> dict:
    return _rendered_pod()


def run(
    pod: dict | None,
    containers: list[str],
    command: list[str],
    *,
    entrypoint: list[str] | None = None,
    detach: bool = False,
    timeout: float = 180,
) -> subprocess.CompletedProcess:
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
    report = worker_image[worker_image.index(f"{IMAGE}: ") :]
    size, layers = re.match(rf"{re.escape(IMAGE)}: ([\d.]+) GB in (\d+) layers; the largest:", report).groups()
    assert 0.5 < float(size) < 3 and int(layers) >= 5, report
    largest = report.splitlines()[1]
    assert "/opt/venv" in largest, f"the dependencies' layer should be the largest:\n{report}"
    print(report)  # the size, which the docs quote (docs/run-on-gke.md): -s or -rP shows it
    labels = podman("image", "inspect", "--format", "{{json .Labels}}", IMAGE).stdout
    assert '"dev.roxxel.accelerator":"cpu"' in labels and '"org.opencontainers.image.revision":"' in labels


def test_the_image_runs_workers_without_the_launchers_dependencies(worker_image, pod, containers):
    """The image installs Roxxel without the launch extra (#52): no Kubernetes client, and its
    roxxel-launch exits 1 with the one line that names the extra, while the worker's modules import."""
    launch = run(pod, containers, ["render", "job.yaml"], entrypoint=["roxxel-launch"])
    assert launch.returncode == 1 and launch.stdout == "", launch
    (line,) = launch.stderr.splitlines()
    assert "kubernetes" in line and line.endswith("pip install 'roxxel[launch]'"), line
    probe = "import importlib.util as u, roxxel.worker; print(u.find_spec('kubernetes'), u.find_spec('kubernetes_validate'))"
    imports = run(pod, containers, ["-c", probe], entrypoint=["python"])
    assert imports.returncode == 0 and imports.stdout.split() == ["None", "None"], imports


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
    image_home = podman("image", "inspect", "--format", "{{range .Config.Env}}{{println .}}{{end}}", IMAGE).stdout
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
@pytest.mark.parametrize(
    "mode, expected", [("trap", exit_codes.PREEMPTED_EXIT_CODE), ("plain", exit_codes.SIGNAL_EXIT_BASE + 15)]
)
def test_sigterm_to_the_container_reaches_the_command_once(worker_image, pod, containers, entrypoint, mode, expected):
    """The kubelet's SIGTERM goes to PID 1; the training command gets it once, and its exit
    (42 after a pretend checkpoint, or 143 when killed by it) is the container's."""
    started = run(
        pod, containers, ["python", "-c", CHILD, mode], detach=True, entrypoint=[] if entrypoint == "image" else None
    )
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


@pytest.mark.parametrize(
    "command, expected",
    [
        (["python", "-c", "pass"], 0),
        (["python", "-c", "import sys; sys.exit(42)"], exit_codes.PREEMPTED_EXIT_CODE),
        (["python", "-c", CONFIG_ERROR], exit_codes.CONFIG_ERROR_EXIT_CODE),
        (["python", "examples/lm/no-such-script.py"], exit_codes.CONFIG_ERROR_EXIT_CODE),
        (["no-such-command"], exit_codes.CONFIG_ERROR_EXIT_CODE),
        (["python", "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"], 143),
    ],
    ids=["0", "42", "78-config-error", "78-no-script", "78-no-command", "143-killed"],
)
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
    # /dev/mqueue: the runtime's POSIX message-queue mount, in every pod too; the run's outputs
    # directory (ROXXEL_OUTPUT_DIR) is bound below /tmp.
    writable = result.stdout.split()
    assert _tops(writable) == mounts | {"/dev/mqueue"}, result.stdout
    assert str(RUN_DIR / "outputs") in writable, result.stdout


def test_the_images_code_is_not_writable_by_the_worker_even_on_a_writable_root(worker_image, containers):
    result = run(None, containers, ["python", "-c", WRITABLE_DIRS], entrypoint=[])
    assert result.returncode == 0, result.stderr
    writable = result.stdout.split()
    for path in ("/opt/venv", "/home/roxxel/examples", "/usr"):
        assert not any(w == path or w.startswith(path + "/") for w in writable), (path, writable)
    home = podman("image", "inspect", "--format", "{{range .Config.Env}}{{println .}}{{end}}", IMAGE).stdout
    image_home = dict(line.split("=", 1) for line in home.split())["HOME"]
    assert image_home in writable and "/tmp" in writable, writable


def test_the_images_streamer_reads_from_the_maps_with_its_native_reader(worker_image, containers):
    """The build stage compiles roxxel/format/_mapread.c (docker/build-tools.sh); the worker stage has
    the module but no compiler. A pack and a stream in the container read rows through it."""
    script = textwrap.dedent("""
        import shutil, tempfile, numpy as np
        from roxxel import Curriculum, Phase, Roxxel
        from roxxel.format import mapread
        assert mapread.WHY_NOT is None and mapread.crc32c_ready(), mapread.WHY_NOT
        calls = []
        real = mapread.gather
        mapread.gather = lambda *a: calls.append(1) or real(*a)
        d = tempfile.mkdtemp()
        Roxxel(d + "/ds").write([np.arange(i, i + 3000) % 50_000 for i in range(0, 300_000, 3000)], vocab_size=50_000)
        stream = Curriculum(Roxxel(d + "/ds"), [Phase(steps=20, global_batch_size=4, seq_len=256)]).stream(
            seed=0, to_device=False, prefetch_size=0
        )
        batches = list(stream)
        print(len(batches), len(calls) > 0, shutil.which("gcc") is None)
    """)
    result = run(None, containers, ["python", "-c", script], entrypoint=[])
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["20", "True", "True"], result.stdout
