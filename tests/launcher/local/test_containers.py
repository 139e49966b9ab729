"""The container runtime of the local backend (roxxel_launch.backends.local.containers) without
a container engine: the `podman create` options it makes of a rendered pod, and the one-line
refusals of what cannot run. The containers themselves run in tests/image/test_container_pods.py
(the container tier). No Kubernetes API server can run here: the pods are the rendered
manifest's, read as the kubelet reads them (Pod securityContext, emptyDir, volumeMounts)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from roxxel import contract as shared
from roxxel_launch import contract
from roxxel_launch.backends.base import BackendError
from roxxel_launch.backends import rendered_pods
from roxxel_launch.backends.local import containers, create_options
from roxxel_launch.backends.local.pods import LocalSettings
from roxxel_launch.backends.process_plan import rendered_objects
from roxxel_launch.spec import spec_from_dict

from support.paths import REPO


def _pod(**extra):
    data = yaml.safe_load((REPO / "examples/lm/job.yaml").read_text())
    data.update(checkpoint_dir="/ckpt/lm", **extra)
    return rendered_pods.manifest_pods(rendered_objects(spec_from_dict(data)))


def _options(pod, settings, env) -> dict[str, list[str]]:
    args = containers.container_options(pod, settings, env)
    out: dict[str, list[str]] = {}
    for flag, value in zip(args[::2], args[1::2]):
        out.setdefault(flag, []).append(value)
    return out


def test_the_pods_security_context_volumes_and_env_become_podman_options(tmp_path):
    pod = _pod()[1]
    settings = LocalSettings(python=sys.executable, run_dir=tmp_path, data_dir=str(tmp_path))
    env = containers.container_env(pod, settings, restart_attempt=0, pod_ip="10.89.0.12", base_env={})
    opts = _options(pod, settings, {**env, shared.ENV_CHECKPOINT_DIR: str(tmp_path / "ckpt")})
    pod_sc = pod.spec["securityContext"]
    assert opts["--user"] == [f"{pod_sc['runAsUser']}:{pod_sc['runAsGroup']}"]
    assert str(pod_sc["fsGroup"]) in opts["--group-add"]
    assert opts["--read-only"] == ["--read-only-tmpfs=false"]  # a pod's read-only root has no writable /tmp
    assert opts["--cap-drop"] == ["ALL"] and opts["--security-opt"] == ["no-new-privileges"]
    volumes = {v["name"]: v for v in pod.spec["volumes"]}
    container = pod.container(contract.CONTAINER_NAME)
    tmpfs = [m for m in opts["--mount"] if m.startswith("type=tmpfs")]
    empty_dirs = [
        m
        for m in container["volumeMounts"]
        if "emptyDir" in volumes[m["name"]] and m["mountPath"] != contract.SHM_MOUNT_PATH
    ]
    assert len(tmpfs) == len(empty_dirs) and all("tmpfs-mode=1777" in m for m in tmpfs)
    home = next(m for m in tmpfs if f"destination={contract.HOME_MOUNT_PATH}," in m)
    size = volumes[next(m["name"] for m in empty_dirs if m["mountPath"] == contract.HOME_MOUNT_PATH)]["emptyDir"]
    if size.get("sizeLimit"):
        from roxxel_launch.spec.fields import parse_quantity

        assert f"tmpfs-size={int(parse_quantity(size['sizeLimit']))}" in home
    assert f"type=bind,source={tmp_path},destination={contract.DATA_MOUNT_PATH},ro=true" in opts["--mount"]
    assert f"type=bind,source={tmp_path / 'ckpt'},destination={tmp_path / 'ckpt'},U=true" in opts["--mount"]
    assert (tmp_path / "ckpt").is_dir()
    assert "JOB_COMPLETION_INDEX=1" in opts["--env"] and "JAX_PLATFORMS=cpu" in opts["--env"]
    assert f"{shared.ENV_DATA_DIR}={contract.DATA_MOUNT_PATH}" in opts["--env"]


@pytest.mark.parametrize("profile", ["restricted", "baseline", "privileged"])
def test_each_security_profile_runs_as_the_pod_says(tmp_path, profile):
    """A privileged pod's container is privileged here too (before, the local runtime dropped it
    silently); baseline runs as the image's root with the runtime's default capabilities."""
    pod = _pod(security={"profile": profile})[0]
    settings = LocalSettings(python=sys.executable, run_dir=tmp_path, data_dir=str(tmp_path))
    env = containers.container_env(pod, settings, restart_attempt=0, pod_ip="10.89.0.11", base_env={})
    args = containers.container_options(pod, settings, env)
    assert ("--privileged=true" in args) == (profile == "privileged")
    rest = [a for a in args if a != "--privileged=true"]
    opts: dict[str, list[str]] = {}
    for flag, value in zip(rest[::2], rest[1::2]):
        opts.setdefault(flag, []).append(value)
    assert ("--read-only" in opts) == (profile == "restricted")
    assert (opts.get("--cap-drop") == ["ALL"]) == (profile == "restricted")


def test_the_containers_resources_become_the_engines_limits(tmp_path, monkeypatch):
    """A memory limit without swap, a cpu limit (at most this machine's cores) and a cpu
    request as shares, as the kubelet sets them (before, the pod's resources were ignored and
    an out-of-memory that the cluster would kill passed locally)."""
    monkeypatch.setattr("os.cpu_count", lambda: 4)
    pod = _pod(resources={"limits": {"memory": "512Mi", "cpu": "1500m"}, "requests": {"cpu": "500m"}})[0]
    settings = LocalSettings(python=sys.executable, run_dir=tmp_path)
    env = containers.container_env(pod, settings, restart_attempt=0, pod_ip="10.89.0.11", base_env={})
    opts = _options(pod, settings, env)
    assert opts["--memory"] == opts["--memory-swap"] == [str(512 * 2**20)]
    assert opts["--cpus"] == ["1.5"] and opts["--cpu-shares"] == ["512"]
    many = create_options.resource_options({"resources": {"limits": {"cpu": "64"}}})
    assert many == ["--cpus", "4"]  # an engine refuses more cpus than the machine has
    assert create_options.resource_options({}) == []  # no limit: none, as on a node
    assert create_options.memory_limit(pod.container(contract.CONTAINER_NAME)) == "512Mi"


def test_the_runs_outputs_directory_is_bound_at_its_host_path(tmp_path):
    """Logs, metrics, TensorBoard and the plot go to a host directory of the run, bound at the
    same path (before, to the pod's tmpfs $HOME: gone with the job, and the paths printed at
    the end were the container's)."""
    pod = _pod()[0]
    settings = LocalSettings(python=sys.executable, run_dir=tmp_path / "run")
    env = containers.container_env(pod, settings, restart_attempt=0, pod_ip="10.89.0.11", base_env={})
    outputs = tmp_path / "run" / "outputs"
    assert env[shared.ENV_OUTPUT_DIR] == str(outputs)
    opts = _options(pod, settings, env)
    assert f"type=bind,source={outputs},destination={outputs},U=true" in opts["--mount"] and outputs.is_dir()


def test_a_secret_the_local_run_cannot_read_is_named(tmp_path):
    pod = _pod(env_refs={"WANDB_API_KEY": {"secret": "wandb", "key": "api-key"}})[0]
    settings = LocalSettings(python=sys.executable, run_dir=tmp_path)
    with pytest.raises(BackendError, match="WANDB_API_KEY comes from the Secret 'wandb'"):
        containers.container_env(pod, settings, restart_attempt=0, pod_ip="10.89.0.11", base_env={})
    env = containers.container_env(
        pod, settings, restart_attempt=0, pod_ip="10.89.0.11", base_env={"WANDB_API_KEY": "k"}
    )
    assert env["WANDB_API_KEY"] == "k" and env[shared.ENV_DATA_DIR] == contract.DATA_MOUNT_PATH  # the manifest's


def test_a_path_podman_cannot_take_is_refused():
    with pytest.raises(BackendError, match="a path with ','"):
        create_options._bind("/data/a,b", "/data", read_only=True)


def test_without_podman_the_runtime_says_so_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    reason = containers.unavailable_reason("podman")
    assert reason is not None and "podman is not installed" in reason and "\n" not in reason
    assert "must be one of podman" in containers.unavailable_reason("docker-compose")


def _submit(tmp_path, *args: str) -> subprocess.CompletedProcess:
    spec = tmp_path / "job.yaml"
    data = yaml.safe_load((REPO / "examples/lm/job.yaml").read_text())
    data["checkpoint_dir"] = str(tmp_path / "ckpt")
    spec.write_text(yaml.safe_dump(data))
    return subprocess.run(
        [sys.executable, "-m", "roxxel_launch.cli", "submit", str(spec), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={"PATH": str(tmp_path), "ROXXEL_LOCAL_ROOT": str(tmp_path / "runs"), "HOME": str(tmp_path)},
    )


def test_submit_refuses_a_container_run_it_cannot_start(tmp_path):
    out = _submit(tmp_path, "--runtime", "podman", "--dry-run")
    assert out.returncode == 2 and "--runtime applies to --local runs only" in out.stderr, out.stderr
    out = _submit(tmp_path, "--local", "--runtime", "podman", "--data-dir", str(tmp_path))
    assert out.returncode != 0 and "--runtime podman: podman is not installed" in out.stderr, out.stderr
    assert not (tmp_path / "runs" / "lm").exists()


# ----------------------------------------------------------------------------- --runtime docker

FAKE_ENGINE = r"""#!{python}
import json, os, sys
with open(os.environ["FAKE_ENGINE_LOG"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\n")
if sys.argv[1:3] == ["network", "inspect"]:
    print(json.dumps([{{"subnets": [{{"subnet": "10.89.3.0/24"}}], "network_interface": "podman93"}}]))
sys.exit(0)
"""


def _fake_engine(tmp_path, monkeypatch, name: str):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    engine = bin_dir / name
    engine.write_text(FAKE_ENGINE.format(python=sys.executable))
    engine.chmod(0o755)
    log = tmp_path / f"{name}.log"
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_ENGINE_LOG", str(log))
    return lambda: [json.loads(line) for line in log.read_text().splitlines()]


@pytest.mark.parametrize("engine", ["podman", "docker"])
def test_docker_gets_the_same_pods_in_its_own_words(tmp_path, monkeypatch, engine):
    """The same containers under both engines (user, read-only root, capabilities, resources,
    tmpfs emptyDirs, binds, own network with chosen addresses and hostnames); where docker
    lacks podman's words it gets its own: one executable as the entrypoint, no U option (the
    bind made writable instead), no --read-only-tmpfs, a network on a chosen subnet."""
    calls = _fake_engine(tmp_path, monkeypatch, engine)
    pods = _pod(resources={"limits": {"memory": "1Gi"}})
    runtime = containers.ContainerRuntime(tmp_path / "run", engine=engine, base_env={})
    assert runtime.name == engine
    settings = LocalSettings(python=sys.executable, run_dir=tmp_path / "run", data_dir=str(tmp_path))
    address, commands = runtime.commands(pods, settings, restart_attempt=0)
    assert address == "lm-slice-0-0.lm:8476"
    create = runtime.create_args(1, "rxl-x-1-1", commands[1][0])
    opts: dict[str, list[str]] = {}
    options = runtime.options[1]
    for i, flag in enumerate(options):
        if flag.startswith("--") and i + 1 < len(options) and not options[i + 1].startswith("--"):
            opts.setdefault(flag, []).append(options[i + 1])
    image_at = create.index(pods[1].container(contract.CONTAINER_NAME)["image"])
    if engine == "docker":
        network = next(c for c in calls() if c[:2] == ["network", "create"])
        subnet = network[network.index("--subnet") + 1]
        assert subnet.startswith("10.213.") and "--disable-dns" not in network
        assert create[image_at - 2 : image_at] == ["--entrypoint", "roxxel-worker"]
        assert create[image_at + 1 :] == ["--", "python", "examples/lm/train.py"]
        assert "--read-only-tmpfs=false" not in create and "--read-only" in create
        assert not any("U=true" in m for m in opts["--mount"])
        # emptyDirs: --tmpfs with exec (docker's --mount tmpfs is noexec) and the pod's user as
        # owner (runc gives a tmpfs over the image's 0700 $HOME that mode): found by the tier's referee.
        home = next(t for t in opts["--tmpfs"] if t.startswith("/var/lib/roxxel-home:"))
        assert {"exec", "mode=1777", "uid=10001", "gid=10001"} <= set(home.split(":")[1].split(",")), home
        assert "--unsetenv" not in create
        assert oct((tmp_path / "run" / "outputs").stat().st_mode & 0o7777) == "0o1777"
    else:
        assert create[image_at - 2 : image_at] == ["--entrypoint", '["roxxel-worker", "--"]']
        assert create[image_at + 1 :] == ["python", "examples/lm/train.py"]
        assert "--read-only-tmpfs=false" in create
        assert opts["--unsetenv"] == ["TERM", "container"]  # podman's own variables, which no pod has
    assert opts["--hostname"] == [pods[1].name] and opts["--memory"] == [str(2**30)]
    assert opts["--user"] == ["10001:10001"] and opts["--cap-drop"] == ["ALL"]
    assert f"{pods[1].name}:{opts['--ip'][0]}" in opts["--add-host"] and len(opts["--add-host"]) >= len(pods)
    runtime.start(1, commands[1][0], env=commands[1][1], cwd=str(tmp_path), log=open(os.devnull, "wb")).wait()
    runtime.remove_run()
    rm = [c for c in calls() if c[0] == "rm"]
    assert rm and all(("--ignore" in c) == (engine == "podman") for c in rm), rm


def test_submit_offers_docker_and_says_when_its_daemon_does_not_answer(tmp_path):
    out = _submit(tmp_path, "--local", "--runtime", "docker", "--data-dir", str(tmp_path))
    assert out.returncode != 0 and "--runtime docker: docker is not installed" in out.stderr, out.stderr
    assert "apt-get install docker.io" in out.stderr


# ----------------------------------------------------------------------------- engine failures

FAILING_ENGINE = r"""#!{python}
import json, os, sys
with open(os.environ["FAKE_ENGINE_LOG"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\n")
code, started, said = json.loads(os.environ["FAKE_ENGINE_START"])
if sys.argv[1:3] == ["network", "inspect"]:
    print(json.dumps([{{"subnets": [{{"subnet": "10.89.3.0/24"}}], "network_interface": "podman93"}}]))
if sys.argv[1] == "inspect":
    print("false " + (started or "0001-01-01 00:00:00 +0000 UTC"))
if sys.argv[1] == "start":
    print(said, file=sys.stderr, flush=True)
    sys.exit(code)
sys.exit(0)
"""

RLIMIT = (
    "Error: unable to start container 56f7: runc: runc create failed: unable to start container process: "
    "error during container init: error setting rlimits for ready process: error setting rlimit type 7: "
    "operation not permitted: OCI permission denied"
)


def _failing_submit(tmp_path, start: tuple[int, str | None, str]) -> tuple[subprocess.CompletedProcess, dict, list]:
    """``submit --local --runtime podman`` (max_restarts 2) with a podman whose ``start --attach``
    prints ``said`` and exits ``code``, the container having started at ``started`` (None: never)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "podman").write_text(FAILING_ENGINE.format(python=sys.executable))
    (bin_dir / "podman").chmod(0o755)
    spec = tmp_path / "job.yaml"
    data = yaml.safe_load((REPO / "examples/lm/job.yaml").read_text())
    data.update(checkpoint_dir=str(tmp_path / "ckpt"), max_restarts=2)
    spec.write_text(yaml.safe_dump(data))
    out = subprocess.run(
        [sys.executable, "-m", "roxxel_launch.cli", "submit", str(spec), "--local", "--runtime", "podman"]
        + ["--data-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "ROXXEL_LOCAL_ROOT": str(tmp_path / "runs"),
            "HOME": str(tmp_path),
            "FAKE_ENGINE_LOG": str(tmp_path / "podman.log"),
            "FAKE_ENGINE_START": json.dumps(start),
        },
    )
    record = json.loads((tmp_path / "runs" / "lm" / "status.json").read_text())
    calls = [json.loads(line) for line in (tmp_path / "podman.log").read_text().splitlines()]
    return out, record, calls


def test_an_engine_failure_fails_the_job_once_with_the_engines_message_and_the_fix(tmp_path):
    """podman's exit 125 before the container started (runc refusing the default ulimits: an
    OCI permission error, 126 as `podman run` gives it) is
    the engine's failure, not the program's: one attempt, no gang restart, a configuration
    error, the engine's words and the fix in one line (before: 3 gang restarts to the same error)."""
    out, record, calls = _failing_submit(tmp_path, (125, None, RLIMIT))
    assert out.returncode != 0 and record["state"] == "Failed", (out.stdout, out.stderr)
    assert record["reason"] == "config_error" and record["restarts"] == 0, record
    assert len(record["attempts"]) == 1 and record["attempts"][0]["reasons"]["0"] == "EngineError", record
    message = record["message"]
    assert "\n" not in message and "podman could not start the container (exit 126" in message, message
    assert "error setting rlimit type 7" in message and "CONTAINERS_CONF" in message, message
    assert "not restarted" in message and "error setting rlimit type 7" in out.stderr + out.stdout
    assert sum(c[0] == "start" for c in calls) == len(record["attempts"][0]["pods"])  # each pod tried once


def test_a_program_that_itself_exits_127_is_restarted_as_any_failure(tmp_path):
    """The rule's other half: the container started (State.StartedAt set), so its 127 is the
    program's exit and the failure policy decides (gang restarts up to max_restarts)."""
    started = "2026-12-06 00:15:54.517902278 +0000 UTC"
    out, record, _ = _failing_submit(tmp_path, (127, started, "sh: 1: no-such-tool: not found"))
    assert record["state"] == "Failed" and record["reason"] == "restarts_exhausted", record
    assert record["restarts"] == 2 and "EngineError" not in json.dumps(record), record


DOCKER_STATE = r"""#!{python}
import os, sys
if sys.argv[1] == "inspect":
    started = os.environ["FAKE_STARTED_AT"]
    print(f"{{started}} 127" if "ExitCode" in sys.argv[3] else f"false {{started}}")
"""


@pytest.mark.parametrize(
    ("started_at", "code", "reason"),
    [("0001-01-01T00:00:00Z", 127, "EngineError"), ("2026-12-06T02:24:37.1Z", 1, None)],
)
def test_docker_start_exiting_1_is_read_from_the_containers_state(tmp_path, monkeypatch, started_at, code, reason):
    """docker's `start --attach` exits 1 where the container could not start (docker-run(1)'s
    125-127 are `docker run`'s) and records 127 for a command not found in the container's
    State.ExitCode: that is the exit, an engine failure (found by the container tier: the job
    was restarted as a program's exit 1). A container that started keeps start's code."""
    engine = tmp_path / "docker"
    engine.write_text(DOCKER_STATE.format(python=sys.executable))
    engine.chmod(0o755)
    monkeypatch.setenv("FAKE_STARTED_AT", started_at)
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(1)"])
    container = containers._Container(str(engine), "rxl-x-1-0", proc)
    assert container.wait() == code and container.poll() == code
    ended = container.termination()
    assert (ended and ended[0]) == reason, ended
    if reason:
        assert "docker could not start the container (exit 127" in ended[1], ended


@pytest.mark.parametrize(
    ("said", "code"),
    [
        (
            'exec: "roxxel-worker": executable file not found in $PATH: OCI runtime attempted to invoke a command '
            "that was not found",
            127,
        ),
        ('exec: "/etc/hostname": permission denied: OCI permission denied', 126),
        ("Error: something else", 125),
    ],
)
def test_podman_start_exiting_125_is_the_code_podman_run_gives(tmp_path, said, code):
    """`podman start --attach` exits 125 for every OCI runtime failure; `podman run` (and docker,
    through the container's state) gives 127 for a command not found and 126 for one that
    cannot be invoked, from the OCI runtime's error: the same here (found by the container
    tier: docker's job ended 127, podman's 125, for the same image)."""
    log = tmp_path / "worker-0.log"
    log.write_text(f"===== attempt\nError: unable to start container 5f: runc: runc create failed: {said}\n")
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(125)"])
    container = containers._Container("podman", "rxl-x-1-0", proc, log=(log, len("===== attempt\n")))
    assert container.wait() == code and container.poll() == code


def test_a_command_not_found_by_the_engine_names_the_image(tmp_path):
    said = 'Error: runc create failed: exec: "no-such-cmd": executable file not found in $PATH: OCI runtime'
    failed = containers.engine_failure("/usr/bin/podman", 127, False, f"header\n{said}\n")
    assert failed is not None and failed[0] == "EngineError" and said in failed[1], failed
    assert "the image lacks the command named" in failed[1]
    assert containers.engine_failure("podman", 127, True, said) is None  # started: the program's 127
    assert containers.engine_failure("podman", 1, False, said) is None  # not an engine code
    assert containers.engine_failure("docker", 125, None, "")[1].startswith("docker could not start")


def test_podman_gets_the_projects_settings_only_where_its_defaults_fail(monkeypatch):
    """CONTAINERS_CONF=docker/containers.conf for root without systemd or CAP_SYS_RESOURCE
    (where podman's default ulimits fail at runc), never over the user's own, never rootless."""
    monkeypatch.delenv("CONTAINERS_CONF", raising=False)  # .ci/run exports it for the container tier
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(containers, "_has_capability", lambda bit: False)
    monkeypatch.setattr(containers.shutil, "which", lambda name: f"/usr/bin/{name}")
    assert containers.podman_settings({}) == REPO / "docker" / "containers.conf"
    assert containers.engine_env("podman")["CONTAINERS_CONF"].endswith("docker/containers.conf")
    assert containers.engine_env("docker") is None
    assert containers.podman_settings({"CONTAINERS_CONF": "/etc/mine.conf"}) is None
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert containers.podman_settings({}) is None
