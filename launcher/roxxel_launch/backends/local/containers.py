"""The container runtime of the local backend: every pod of the rendered manifest as a
container of the manifest's image (``roxxel-launch submit --local --runtime podman``, or
``--runtime docker``: the same containers, the same options where docker has them; where it
has not: the entrypoint is one executable with the rest after the image, a bind the pod writes
is made writable by every user instead of podman's ``U`` chown, an emptyDir is a ``--tmpfs``
with ``exec`` (docker's ``--mount type=tmpfs`` is noexec, a kubelet's emptyDir is not), each
attempt's network gets a subnet of :data:`DOCKER_SUBNETS`, ``rm`` has no ``--ignore``, and
the code of a container that could not start is read from its state (docker's ``start``
exits 1 there). Both are refereed by the same container tier, tests/image).

Where :class:`~roxxel_launch.backends.local.runtime.ProcessRuntime` runs a pod's command as a
process of this machine's Python, this runtime runs it as the kubelet would run the pod's
``worker`` container, with podman:

- the manifest's ``image`` (never pulled: build it with ``roxxel-launch image build``), its
  ``command`` as the entrypoint and ``args`` after it, both ``$(VAR)``-expanded against the
  container's ``env`` as the kubelet does (:mod:`roxxel_launch.backends.rendered_pods`); the
  environment is the container's ``env`` alone (the image supplies the rest), plus
  ``JAX_PLATFORMS=cpu`` unless set, ``XLA_FLAGS`` for ``--devices-per-worker``;
- the pod's ``securityContext``: ``runAsUser``/``runAsGroup``/``fsGroup``, a read-only root
  filesystem, dropped and added capabilities, no privilege escalation, a privileged container;
- its emptyDirs as tmpfs with their ``sizeLimit`` (world-writable, as an emptyDir is);
  ``/dev/shm`` as the container's shm of that size;
- the data volume (``--data-dir``) bound read-only at ``/data`` (read-write where the
  manifest mounts it so), a local ``checkpoint_dir`` bound at its own path, read-write and
  given to the pod's user (podman's ``U`` option: what ``fsGroup`` ownership management does
  for a pod's volume), a local ``restore_from`` bound read-only;
- the run's outputs directory (``RUN_DIR/outputs`` of the local run) bound at its own path,
  read-write and given to the pod's user, named in ``ROXXEL_OUTPUT_DIR``: the logs, metrics,
  TensorBoard events and plots a program writes there outlive the containers, and the paths
  it prints are this machine's (the pod's ``$HOME`` is a tmpfs, gone with the container);
- every attempt gets a network of its own (a podman bridge network, ``--internal``: nothing
  outside this machine is reachable), each pod its own address there, its pod's hostname,
  and every pod's DNS names in its ``/etc/hosts`` (the coordinator is reached by the name
  the manifest gives it, as in a cluster); names that are no pod's fail at once (the
  resolver is the container's own loopback);
- the container's ``resources``, as the kubelet gives them to the container runtime: a
  memory limit as ``--memory`` with no swap beside it, a cpu limit as ``--cpus`` (at most
  this machine's cores), a cpu request as ``--cpu-shares``; a container killed for going
  over its memory limit ends ``OOMKilled`` with exit 137, as a pod's does;
- SIGTERM goes to the container's PID 1 (``podman kill --signal TERM``, what the kubelet's
  stop does), SIGKILL after the pod's grace period; the exit code is the container's;
- an engine failure is told apart from the program's exit (:data:`ENGINE_EXIT_CODES`): the
  rule is an exit of 125, 126 or 127 *and* a container that never started (its
  ``State.StartedAt`` is unset: the OCI runtime failed before the entrypoint ran, or the
  container is gone). It ends ``EngineError`` with the engine's own message and the fix, and
  the job fails without a restart, as a configuration error (it would fail the same way on
  every attempt). A program that ran and itself exited 126 or 127 is the program's exit, as
  any other code.

Containers and networks carry the label ``dev.roxxel.run=<run id>``: an attempt's are
removed when it ends, and :meth:`ContainerRuntime.remove_run` removes whatever a killed
supervisor left (``delete`` and every start of the run call it).

podman's own settings come from its configuration as usual (``$CONTAINERS_CONF``). Where
the user has set none and this machine is one that ``docker/containers.conf`` is written for
(root without systemd or without ``CAP_SYS_RESOURCE``: podman's default ulimits fail at runc
with "error setting rlimit type 7"), the runtime runs podman with ``CONTAINERS_CONF`` set to that file
(:func:`podman_settings`) and says so in one line.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import logging
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from roxxel_launch import contract
from roxxel_launch.backends import rendered_pods
from roxxel_launch.backends.base import BackendError
from roxxel_launch.backends.local import bridge_firewall
from roxxel_launch.backends.local.create_options import (
    container_env,
    container_options,
    is_docker,
    memory_limit,
    plan_env,
)
from roxxel_launch.backends.local.pods import LocalSettings, secret_from_environment
from roxxel_launch.backends.local.runtime import ENGINE_FAILURE, RunningWorker, WorkerCommand, WorkerRuntime
from roxxel_launch.backends.process_plan import plans

__all__ = [  # the container's env and options are create_options'; its users import them here too
    "ContainerRuntime",
    "ENGINES",
    "ENGINE_FAILURE",
    "container_env",
    "container_options",
    "podman_settings",
    "unavailable_reason",
]

logger = logging.getLogger("roxxel_launch.backends.local")

ENGINES = ("podman", "docker")
"""Container engines a local run can use (``--runtime``)."""
DOCKER_SUBNETS = "10.213.{}.0/24"
"""The attempt networks' subnets under docker (which gives a container a chosen ``--ip`` only
on a network whose subnet was chosen): one of 256, picked from the run's id, the next taken
when one is in use."""
RUN_LABEL = "dev.roxxel.run"
"""Label on every container and network of a local run; its value is the run id."""
ENGINE_EXIT_CODES = {
    125: "the container engine itself failed",
    126: "the container's command cannot be invoked",
    127: "the container's command was not found",
}
"""The exit codes ``podman run`` / ``docker run`` (and ``start --attach``) give for their own
failures, from their man pages' EXIT STATUS sections (podman-run(1), docker-run(1)); any other
code is the container's. They are the engine's only when the container never started: a
program may exit 126 or 127 itself (:func:`engine_failure`)."""
CONTAINERS_CONF = Path(__file__).resolve().parents[4] / "docker" / "containers.conf"
"""The project's podman settings for machines without systemd or ``CAP_SYS_RESOURCE``
(present in a checkout of the repository)."""
_CAP_SYS_RESOURCE = 24
_CALL_TIMEOUT = 60.0  # seconds for one podman call (create, kill, rm, network)
_KILL_RETRY_SECONDS = 10.0  # how long a stop waits for a container that is still starting


def unavailable_reason(engine: str = "podman") -> str | None:
    """None when ``engine`` can run containers here; else why not, in one line."""
    if engine not in ENGINES:
        return f"the container runtime must be one of {', '.join(ENGINES)}, got {engine!r}"
    if shutil.which(engine) is None:
        install = "apt-get install podman iptables" if engine == "podman" else "apt-get install docker.io"
        return (
            f"{engine} is not installed (on Debian/Ubuntu: {install}); "
            "or run the workers as processes (the default runtime)"
        )
    if is_docker(engine):
        try:
            info = subprocess.run(
                [engine, "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True, timeout=20
            )
        except subprocess.TimeoutExpired:
            return "the docker daemon did not answer `docker info` within 20s"
        if info.returncode != 0:
            said = " ".join(info.stderr.split())[-300:]
            return f"the docker daemon does not answer ({said}); start it, or use --runtime podman"
    return None


def _has_capability(bit: int) -> bool:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> bit & 1)
    except (OSError, ValueError, IndexError):
        pass
    return True  # unknown: assume a normal machine


def podman_settings(environ: Mapping[str, str] | None = None) -> Path | None:
    """The ``CONTAINERS_CONF`` the launcher gives podman where the user has set none: the
    project's ``docker/containers.conf`` on a machine it is written for (no systemd, so no
    cgroup manager or journald to ask; no ``CAP_SYS_RESOURCE``, so podman's default
    ``nofile``/``nproc`` ulimits fail at runc: "error setting rlimit type 7: operation not
    permitted") and podman runs as root, when the file and ``runc`` (which it names) are here;
    else None (podman's own configuration, as on a workstation or rootless)."""
    import os

    environ = os.environ if environ is None else environ
    if environ.get("CONTAINERS_CONF") or not CONTAINERS_CONF.is_file() or shutil.which("runc") is None:
        return None
    if os.geteuid() != 0:  # rootless podman keeps this process's limits: no rlimit to refuse
        return None
    if Path("/run/systemd/system").is_dir() and _has_capability(_CAP_SYS_RESOURCE):
        return None
    return CONTAINERS_CONF


def engine_env(engine: str) -> dict[str, str] | None:
    """The environment ``engine`` runs with: this one, plus ``CONTAINERS_CONF`` for podman
    where :func:`podman_settings` gives one; None (inherit) where nothing is added."""
    import os

    conf = None if is_docker(engine) else podman_settings()
    return None if conf is None else {**os.environ, "CONTAINERS_CONF": str(conf)}


def engine_failure(engine: str, code: int, started: bool | None, said: str) -> tuple[str, str] | None:
    """``(ENGINE_FAILURE, message)`` when ``engine``'s exit ``code`` is its own failure, else None.

    The rule: ``code`` is one of :data:`ENGINE_EXIT_CODES` (125 the engine failed, 126 the
    command cannot be invoked, 127 it was not found) and the container never started
    (``started`` False: ``State.StartedAt`` unset; None: the container cannot be inspected,
    e.g. never created). A container that started ran the program, whose own 126 or 127 is
    its exit like any other. ``said``: what the engine printed (its ``Error:`` line is quoted).
    The message is one line: what failed, the engine's words, the fix.
    """
    if code not in ENGINE_EXIT_CODES or started:
        return None
    name = Path(engine).name
    lines = [line.strip() for line in said.splitlines() if line.strip()]
    quoted = next((line for line in reversed(lines) if line.lower().startswith("error")), lines[-1] if lines else "")
    quoted = quoted[-400:] or "(it printed nothing)"
    lower = quoted.lower()
    if "rlimit" in lower:
        fix = (
            "podman's default ulimits need CAP_SYS_RESOURCE: set CONTAINERS_CONF to a containers.conf "
            "with lower default_ulimits (this repository's docker/containers.conf)"
        )
    elif "not found" in lower or "no such file" in lower or code == 127:
        fix = (
            "the image lacks the command named (the pods' entrypoint is roxxel-worker): run an image "
            "built by `roxxel-launch image build`, or check the job's command"
        )
    elif "permission denied" in lower or code == 126:
        fix = "the image's command cannot be run (permissions, or not an executable): check the image"
    else:
        fix = f"check that `{name} run --rm IMAGE true` works on this machine (see docs/local.md)"
    what = ENGINE_EXIT_CODES.get(code, "")
    return (
        ENGINE_FAILURE,
        f"{name} could not start the container (exit {code}: {what}, before the program ran): {quoted}; fix: {fix}",
    )


def run_id(run_dir: Path) -> str:
    """A short id of the run directory: the value of :data:`RUN_LABEL` and part of names."""
    return hashlib.sha256(str(Path(run_dir).absolute()).encode()).hexdigest()[:12]


def check_image(engine: str, image: str) -> None:
    """Raises BackendError when ``image`` is not in ``engine``'s local store (a local run never pulls)."""
    probe = ("image", "inspect", image) if is_docker(engine) else ("image", "exists", image)
    if _podman(engine, *probe, check=False).returncode != 0:
        raise BackendError(
            f"image {image!r} is not in {engine}'s local store, and a local run never pulls: "
            "build it (roxxel-launch image build --tag IMAGE) and submit with --set image=IMAGE"
        )


# ------------------------------------------------------------------------------------
# The runtime
# ------------------------------------------------------------------------------------


class _Container(RunningWorker):
    """One pod's container, attached: ``pid`` is the ``podman start --attach`` process."""

    def __init__(
        self,
        engine: str,
        name: str,
        proc: subprocess.Popen,
        *,
        workdir: Path | None = None,
        memory: str | None = None,
        log: tuple[Path, int] | None = None,
    ):
        self.engine, self.name, self.proc, self.pid = engine, name, proc, proc.pid
        self.workdir, self.memory = workdir, memory
        self.log = log  # the worker's log and where this container's output starts in it
        self.killed = False  # SIGKILL sent by the launcher (a grace period over, a second stop)
        self._code: int | None = None  # the container's exit code, once read (_exit_code)

    def poll(self) -> int | None:
        code = self.proc.poll()
        return None if code is None else self._exit_code(code)

    def wait(self) -> int:
        return self._exit_code(self.proc.wait())

    def _exit_code(self, code: int) -> int:
        """The container's exit code from ``start --attach``'s ``code``, as ``run`` would give
        it (podman-run(1), docker-run(1): 126 the command cannot be invoked, 127 not found, 125
        any other failure of the engine). ``podman start`` exits 125 for all three: its OCI
        runtime's error names which (as ``podman run`` reads it). docker's ``start`` exits 1
        where the container could not start, and records the code in the container's
        ``State.ExitCode``: 126 or 127 there, 125 for any other failure (docker records 128)."""
        if code == 0 or self.killed:
            return code
        if self._code is None:
            self._code = code
            if not is_docker(self.engine):
                said = self._output() if code == 125 else ""
                said = "" if "Error: unable to start container" not in said else said  # podman's own, not the program's
                if "OCI runtime attempted to invoke a command that was not found" in said:
                    self._code = 127
                elif "OCI permission denied" in said:
                    self._code = 126
                return self._code
            state = _podman(
                self.engine, "inspect", "--format", "{{.State.StartedAt}} {{.State.ExitCode}}", self.name, check=False
            )
            started_at, _, recorded = state.stdout.strip().partition(" ")
            if state.returncode == 0 and started_at.startswith("0001-01-01") and recorded.isdigit():
                self._code = int(recorded) if int(recorded) in (126, 127) else 125
        return self._code

    def _signal(self, signo: str) -> None:
        # A container still being started cannot be signalled yet: retry until it can be or
        # it has ended, so that no stop is lost.
        deadline = time.monotonic() + _KILL_RETRY_SECONDS
        while self.proc.poll() is None:
            result = _podman(self.engine, "kill", "--signal", signo, self.name, check=False)
            if result.returncode == 0 or time.monotonic() >= deadline:
                return
            time.sleep(0.1)

    def terminate(self) -> None:
        self._signal("TERM")

    def termination(self) -> tuple[str, str] | None:
        """``("OOMKilled", ...)`` when the kernel killed the container for going over its
        memory limit: podman's ``State.OOMKilled``, or the ``oom`` file conmon writes in its
        working directory (where podman does not read it back: cgroup v1 with runc)."""
        code = self.poll()
        if code is None:
            return None
        state = _podman(
            self.engine, "inspect", "--format", "{{.State.OOMKilled}} {{.State.StartedAt}}", self.name, check=False
        )
        oom_field, _, started_at = state.stdout.strip().partition(" ")
        if not self.killed and code in ENGINE_EXIT_CODES:
            started = None if state.returncode != 0 or not started_at else not started_at.startswith("0001-01-01")
            failed = engine_failure(self.engine, code, started, self._output())
            if failed is not None:
                return failed
        said = state.returncode == 0 and oom_field == "true"
        if not said and self.workdir is not None:
            said = not self.killed and (self.workdir / "oom").exists()
        if not said:
            return None
        limit = f" ({self.memory})" if self.memory else ""
        return "OOMKilled", f"the container went over its memory limit{limit} and the kernel killed it"

    def _output(self) -> str:
        """What this container's ``start --attach`` printed (the engine's error, where it failed)."""
        if self.log is None:
            return ""
        path, offset = self.log
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                return f.read(64 * 1024).decode(errors="replace")
        except OSError:
            return ""

    def kill(self) -> bool:
        alive = self.proc.poll() is None
        if alive:
            self.killed = True
            self._signal("KILL")
            try:
                self.proc.wait(timeout=_CALL_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        _podman(self.engine, "rm", "--force", *([] if is_docker(self.engine) else ["--ignore"]), self.name, check=False)
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
        return alive


def _log_position(log: IO[bytes]) -> tuple[Path, int] | None:
    """The log file's path and its current end, where a container's output will start."""
    name = getattr(log, "name", None)
    if not isinstance(name, str):
        return None
    try:
        log.flush()
        return Path(name), Path(name).stat().st_size
    except OSError:
        return None


def _podman(engine: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    try:
        result = subprocess.run(
            [engine, *args],
            capture_output=True,
            text=True,
            timeout=_CALL_TIMEOUT,
            stdin=subprocess.DEVNULL,
            env=engine_env(engine),
        )
    except subprocess.TimeoutExpired:
        raise BackendError(f"`{engine} {' '.join(args[:2])}` did not answer within {_CALL_TIMEOUT:g}s") from None
    if check and result.returncode != 0:
        raise BackendError(
            f"`{engine} {' '.join(args[:3])} ...` failed ({result.returncode}): {result.stderr.strip()[-500:]}"
        )
    return result


class ContainerRuntime(WorkerRuntime):
    """Each pod's worker is a container of the manifest's image (see the module docstring).

    Args:
        run_dir: the run directory (its id names and labels the containers and networks).
        engine: the container engine's command (``podman``).
        base_env: where ``secretKeyRef``/``configMapKeyRef`` values are read (default the
            supervisor's environment, which is that of ``submit``).
    """

    name = "podman"  # or "docker": the engine's

    def __init__(self, run_dir: Path, engine: str = "podman", base_env: Mapping[str, str] | None = None):
        import os

        self.run_dir = Path(run_dir)
        found = shutil.which(engine)
        if found is None:
            raise BackendError(unavailable_reason(engine) or f"{engine} not found")
        self.engine, self.run_id = found, run_id(run_dir)
        self.name = Path(engine).name  # the runtime's name (--runtime) is the engine's
        self.docker = is_docker(engine)
        conf = None if self.docker else podman_settings()
        if conf is not None:
            logger.info(
                "podman runs with CONTAINERS_CONF=%s (root without systemd or CAP_SYS_RESOURCE here, where "
                "podman's defaults fail at runc); set CONTAINERS_CONF to choose other settings",
                conf,
            )
        self.base_env = os.environ if base_env is None else base_env
        self.network: str | None = None
        self.options: list[list[str]] = []
        self.memory: list[str | None] = []
        self.images: list[str] = []
        self.command_lengths: list[int] = []
        self.attempts = 0

    def _label(self) -> str:
        return f"{RUN_LABEL}={self.run_id}"

    def _network_up(self, n: int) -> list[str]:
        """A fresh internal network for this attempt; the pods' addresses in it."""
        self.attempts += 1
        self.network = f"rxl-{self.run_id}-{self.attempts}"
        if self.docker:
            _podman(self.engine, "network", "rm", self.network, check=False)
            subnet = self._docker_network()
        else:
            _podman(self.engine, "network", "rm", "--force", self.network, check=False)
            create = ["network", "create", "--internal", "--disable-dns", "--label", self._label(), self.network]
            _podman(self.engine, *create)
            info = json.loads(_podman(self.engine, "network", "inspect", self.network).stdout)[0]
            subnet = ipaddress.ip_network(info["subnets"][0]["subnet"])
            # netavark adds no FORWARD rule for an internal network (docker adds its own)
            if info.get("network_interface"):
                bridge_firewall.allow(info["network_interface"], self.run_id)
            elif bridge_firewall.host_filters_bridges():
                raise BackendError(
                    f"`podman network inspect {self.network}` names no network_interface: cannot let its pods through this machine's bridge filter"
                )
        hosts = list(subnet.hosts())[10 : 10 + n]  # clear of the gateway at the start of the range
        if len(hosts) < n:
            raise BackendError(f"network {self.network} ({subnet}) has no room for {n} pods")
        return [str(h) for h in hosts]

    def _docker_network(self) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
        """Creates this attempt's docker network on a subnet of :data:`DOCKER_SUBNETS` (the
        run's own first, the next where one is in use); the subnet."""
        first, network, errors = int(self.run_id, 16) % 256, self.network or "", ""
        for i in range(256):
            subnet = DOCKER_SUBNETS.format((first + i) % 256)
            create = ["network", "create", "--internal", "--subnet", subnet, "--label", self._label(), network]
            result = _podman(self.engine, *create, check=False)
            if result.returncode == 0:
                return ipaddress.ip_network(subnet)
            errors = result.stderr.strip()
            if "overlap" not in errors.lower():
                break
        raise BackendError(f"`{self.name} network create {network}` failed: {errors[-500:]}")

    def commands(
        self,
        pods: Sequence[rendered_pods.RenderedPod],
        settings: LocalSettings,
        *,
        restart_attempt: int | None,
        network: Any = None,
    ) -> tuple[str, list[WorkerCommand]]:
        if network is not None:
            raise BackendError(
                f"--netns and --runtime {self.name} do not go together: containers have their own network"
            )
        addresses = self._network_up(len(pods))
        hosts = [f"{name}:{ip}" for pod, ip in zip(pods, addresses) for name in (pod.name, *pod.dns_names)]
        secret = secret_from_environment(self.base_env)
        planned = plans(pods, restart_attempt=restart_attempt, pod_ips=addresses, secret=secret)
        commands, self.options, self.images, self.command_lengths, self.memory = [], [], [], [], []
        for one, ip in zip(planned, addresses):
            env = plan_env(one, settings)
            options = ["--network", self.network or "", "--ip", ip, "--hostname", one.pod.name, "--dns", "127.0.0.1"]
            for host in hosts:
                options += ["--add-host", host]
            self.options.append(options + container_options(one.pod, settings, env, engine=self.engine))
            self.images.append(one.image)
            self.memory.append(memory_limit(one.pod.container(contract.CONTAINER_NAME)))
            self.command_lengths.append(len(one.command))
            commands.append((one.argv_for(env), env))
        return planned[0].coordinator_address or "none", commands

    def start(
        self,
        index: int,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str,
        log: IO[bytes],
        wrap: Callable[[list[str]], list[str]] | None = None,
    ) -> RunningWorker:
        name = f"rxl-{self.run_id}-{self.attempts}-{index}"
        _podman(self.engine, *self._rm(name), check=False)
        _podman(self.engine, *self.create_args(index, name, argv))
        # conmon (started by `podman start`) may write its `oom` file into its working
        # directory: one of the run's own per container, never the user's.
        workdir = self.run_dir / "containers" / name
        shutil.rmtree(workdir, ignore_errors=True)
        workdir.mkdir(parents=True)
        position = _log_position(log)
        proc = subprocess.Popen(
            [self.engine, "start", "--attach", name],
            cwd=workdir,
            env=engine_env(self.engine),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            process_group=0,
        )
        return _Container(self.engine, name, proc, workdir=workdir, memory=self.memory[index], log=position)

    def _rm(self, *names: str) -> list[str]:
        # docker's rm has neither --ignore nor --time (a missing container is an error, ignored here).
        return ["rm", "--force", *names] if self.docker else ["rm", "--force", "--ignore", *names]

    def create_args(self, index: int, name: str, argv: Sequence[str]) -> list[str]:
        """The engine's ``create`` arguments for pod ``index``'s container called ``name``
        running ``argv`` (its first :attr:`command_lengths` items are the pod's ``command``:
        the entrypoint, a JSON list for podman; docker takes one executable, the rest after
        the image)."""
        command = self.command_lengths[index]
        if self.docker:
            entrypoint, rest = argv[0], list(argv[1:])
        else:
            entrypoint, rest = json.dumps(list(argv[:command])), list(argv[command:])
        head = ["create", "--pull=never", "--name", name, "--label", self._label(), *self.options[index]]
        return [*head, "--entrypoint", entrypoint, self.images[index], *rest]

    def attempt_over(self) -> None:
        if self.network is not None:
            self._remove(network_too=True)
            self.network = None

    def _remove(self, *, network_too: bool) -> list[str]:
        ids = _podman(
            self.engine, "ps", "--all", "--quiet", "--filter", f"label={self._label()}", check=False
        ).stdout.split()
        if ids:
            stop_now = [] if self.docker else ["--time", "0"]
            _podman(self.engine, "rm", "--force", *stop_now, *ids, check=False)
        nets = []
        if network_too:
            nets = _podman(
                self.engine, "network", "ls", "--quiet", "--filter", f"label={self._label()}", check=False
            ).stdout.split()
            if nets:
                _podman(self.engine, "network", "rm", *([] if self.docker else ["--force"]), *nets, check=False)
            if not self.docker:
                bridge_firewall.remove(self.run_id)
        return ids + nets

    def remove_run(self) -> list[str]:
        return self._remove(network_too=True)

    def remove_leftover(self, pid: int) -> bool:
        return False  # the containers go by their label (remove_run); their pids are podman's
