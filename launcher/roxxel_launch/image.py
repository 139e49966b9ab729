"""``roxxel-launch image build``: the worker image, or your own image on top of it.

Two kinds of build, each one command of podman or docker (whichever is installed; podman
first, as it needs no daemon; ``--engine`` or ``$ROXXEL_CONTAINER_ENGINE`` picks one):

* the worker image, from Roxxel's source tree (the repository's ``Dockerfile``), for one
  accelerator: ``--build-arg ACCELERATOR=cpu|tpu|cuda``, ``BASE_IMAGE`` (``--base``; a local
  one from ``docker/make-base.sh`` where no registry is reachable), ``VERSION`` and
  ``REVISION`` (the OCI labels: the package version and the source tree's git commit);
* with ``--context DIR``, your own code in an image FROM the worker image (as xpk does on
  ``workload create``): a two-line Dockerfile, ``FROM <worker image>`` and
  ``COPY . /home/roxxel/``, built with DIR as the build context. The code lands in the
  worker image's working directory, owned by root (readable, not writable, by the worker).

Without ``--base`` the build pulls the Dockerfile's base image. Where that image is not in
the engine's store and its registry cannot be reached (no proxy set), the build is not started:
one line says to make a local base with ``docker/make-base.sh`` and pass ``--base``; a build
that fails with the base still missing says the same after the engine's output.

Every command is printed before it runs. After a build, the image's size and its largest
layers are reported (``image inspect`` and ``history``), each layer named by the
instruction that made it; ``--push`` then pushes the tag.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

ACCELERATORS = ("cpu", "tpu", "cuda")
ENGINES = ("podman", "docker")
ENGINE_ENV = "ROXXEL_CONTAINER_ENGINE"
# Where a user's code goes in an image built FROM the worker image: the worker image's
# WORKDIR (Dockerfile), where its examples/ are too.
WORKER_WORKDIR = "/home/roxxel"
DEFAULT_REPOSITORY = "roxxel/worker"
LARGEST_LAYERS = 5
GENERATED = "<generated Dockerfile>"  # in a --context build's argv until the file is written


LOCAL_BASE = "localhost/roxxel-base:bookworm"
NO_REGISTRY_FIX = (
    f"make a local base from Debian's packages and build on it: docker/make-base.sh {LOCAL_BASE} && "
    f"roxxel-launch image build --base {LOCAL_BASE} (see docs/local.md)"
)
_PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")


class ImageError(Exception):
    """What went wrong and what to do about it, in one line."""


def default_tag(accelerator: str) -> str:
    """The worker image's tag when --tag is not given: ``roxxel/worker:ACCELERATOR``."""
    return f"{DEFAULT_REPOSITORY}:{accelerator}"


def find_engine(name: str | None = None, *, which: Callable[[str], str | None] | None = None) -> str:
    """The container engine to build with: ``name`` (``--engine``), else $ROXXEL_CONTAINER_ENGINE,
    else podman, else docker, whichever is installed."""
    which = which or shutil.which
    wanted = name or os.environ.get(ENGINE_ENV) or None
    if wanted:
        if which(wanted) is None:
            raise ImageError(
                f"{wanted} is not installed (asked for with --engine or ${ENGINE_ENV}): "
                "install it, or leave the choice to roxxel-launch (podman, else docker)"
            )
        return wanted
    for engine in ENGINES:
        if which(engine) is not None:
            return engine
    raise ImageError(
        "neither podman nor docker is installed: install one (Debian/Ubuntu: apt-get install podman) to build images"
    )


def dockerfile_base(source: Path) -> str | None:
    """The Dockerfile's default ``BASE_IMAGE`` (what a build without ``--base`` pulls), or None."""
    try:
        text = (source / "Dockerfile").read_text(encoding="utf-8")
    except OSError:
        return None
    found = re.search(r"^ARG BASE_IMAGE=(\S+)", text, re.MULTILINE)
    return found.group(1) if found else None


def registry_host(image: str) -> str:
    """The registry an image reference is pulled from (Docker Hub for ``python:3.11``)."""
    first, _, rest = image.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first.split(":")[0]
    return "registry-1.docker.io"


def registry_reachable(host: str, timeout: float = 3.0) -> bool:
    """Whether ``host`` answers on HTTPS's port from here (its name resolves and it connects)."""
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
    except OSError:
        return False
    return True


def find_source(start: Path | None = None) -> Path:
    """Roxxel's source tree (the directory with the worker image's Dockerfile): the one this
    package was installed from (an editable install), else the working directory or one of
    its parents."""
    here = Path(__file__).resolve().parents[2]
    candidates = [here] + [p for p in [start or Path.cwd(), *(start or Path.cwd()).parents]]
    for candidate in candidates:
        if (candidate / "Dockerfile").is_file() and (candidate / "launcher" / "roxxel_launch").is_dir():
            return candidate
    raise ImageError(
        "building the worker image needs Roxxel's source tree (its Dockerfile): run this "
        "in a clone of the repository or pass --source DIR (to build your own code on "
        "a worker image instead, pass --context DIR)"
    )


def git_revision(source: Path) -> str:
    """The source tree's commit for the revision label, with ``-dirty`` when files differ from
    it; ``unknown`` outside a git checkout."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=source, capture_output=True, text=True, timeout=30)
        if head.returncode != 0:
            return "unknown"
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=source,
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def project_version(source: Path) -> str:
    import tomllib

    return tomllib.loads((source / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]


def context_dockerfile(base: str) -> str:
    """The Dockerfile of an image with a user's code (the build context) on the worker image."""
    return (
        f"# Generated by roxxel-launch image build --context: your code on the worker image.\n"
        f"FROM {base}\n"
        f"COPY . {WORKER_WORKDIR}/\n"
    )


@dataclasses.dataclass(frozen=True)
class Build:
    """One image build: the command, the Dockerfile it reads and the tag it makes."""

    engine: str
    tag: str
    argv: list[str]
    dockerfile_text: str | None = None  # set for --context builds (a generated Dockerfile)
    base: str | None = None
    check_base: str | None = None  # a base that must exist here (with the hint when it does not)
    pulls: str | None = None  # the Dockerfile's base the build pulls unless the store has it


def worker_build(
    engine: str,
    *,
    accelerator: str,
    source: Path,
    tag: str | None = None,
    base: str | None = None,
    version: str | None = None,
    revision: str | None = None,
    pip_cert: str | None = None,
) -> Build:
    """The command that builds the worker image from the source tree. ``pip_cert``: a CA
    bundle that pip trusts during the build (a TLS-intercepting proxy's), passed as the build
    secret ``pip-cert``, which no layer keeps."""
    if accelerator not in ACCELERATORS:
        raise ImageError(f"unknown accelerator {accelerator!r}: use one of {', '.join(ACCELERATORS)}")
    tag = tag or default_tag(accelerator)
    args = {
        "ACCELERATOR": accelerator,
        "VERSION": version or project_version(source),
        "REVISION": revision or git_revision(source),
    }
    if base:
        args["BASE_IMAGE"] = base
    argv = [engine, "build", "--file", str(source / "Dockerfile"), "--tag", tag]
    for name, value in args.items():
        argv += ["--build-arg", f"{name}={value}"]
    if pip_cert:
        argv += ["--secret", f"id=pip-cert,src={pip_cert}"]
    argv.append(str(source))
    check = None
    if base and base.startswith("localhost/"):
        check = (
            f"the base image {base} is not here: make it with docker/make-base.sh {base} "
            "(a Debian bookworm base from Debian's packages)"
        )
    return Build(engine, tag, argv, base=base, check_base=check, pulls=None if base else dockerfile_base(source))


def user_build(
    engine: str, *, accelerator: str, context: Path, tag: str | None = None, base: str | None = None
) -> Build:
    """The command that builds the code in ``context`` into an image FROM the worker image
    (``base``, default ``roxxel/worker:ACCELERATOR``); :func:`run_build` writes the generated
    Dockerfile to a temporary file and puts its path in place of :data:`GENERATED`."""
    if accelerator not in ACCELERATORS:
        raise ImageError(f"unknown accelerator {accelerator!r}: use one of {', '.join(ACCELERATORS)}")
    if not context.is_dir():
        raise ImageError(f"--context {context}: not a directory; give the directory with your code")
    worker = base or default_tag(accelerator)
    if tag is None:
        name = re.sub(r"[^a-z0-9._-]+", "-", context.resolve().name.lower()).strip(".-_") or "app"
        tag = f"roxxel/{name}:{accelerator}"
    argv = [engine, "build", "--file", GENERATED, "--tag", tag, str(context)]
    check = None
    if base is None:
        check = (
            f"the worker image {worker} is not here: build it first with `roxxel-launch image build "
            f"--accelerator {accelerator}`, or name the worker image to build on with --base"
        )
    return Build(engine, tag, argv, dockerfile_text=context_dockerfile(worker), base=worker, check_base=check)


def push_command(engine: str, tag: str) -> list[str]:
    return [engine, "push", tag]


def build_env(engine: str) -> dict[str, str]:
    """The environment of the build: docker needs BuildKit for the Dockerfile's cache mounts."""
    env = dict(os.environ)
    if Path(engine).name == "docker":
        env.setdefault("DOCKER_BUILDKIT", "1")
    return env


# ----------------------------------------------------------------------------- size report


@dataclasses.dataclass(frozen=True)
class Layer:
    size: int
    created_by: str


_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


def parse_size(text: str) -> int | None:
    """Bytes from ``12345``, ``34.8 kB`` or ``1.07 GB`` (podman 4 prints its history sizes in
    decimal units even with --human=false); None for anything else."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    if match is None or match.group(2).lower() not in _UNITS:
        return None
    return round(float(match.group(1)) * _UNITS[match.group(2).lower()])


def parse_history(text: str) -> list[Layer]:
    """``ENGINE history --human=false --no-trunc --format '{{.Size}}\\t{{.CreatedBy}}'``'s lines."""
    layers = []
    for line in text.splitlines():
        size, tab, created_by = line.partition("\t")
        size_bytes = parse_size(size)
        if tab and size_bytes is not None:  # else not a line of this format
            layers.append(Layer(size_bytes, created_by.strip()))
    return layers


def instruction_of(created_by: str) -> str:
    """A layer's instruction as the Dockerfile says it: the builder's ``/bin/sh -c #(nop)``
    prefix dropped, whitespace squeezed, cut at 100 characters."""
    text = re.sub(r"^\|\d+ (\S+=\S* )*", "", created_by.strip())  # build args podman prepends to RUN
    text = re.sub(r"^/bin/sh -c #\(nop\)\s*", "", text)
    text = re.sub(r"^/bin/sh -c\s+", "RUN ", text)
    text = " ".join(text.split())
    return text if len(text) <= 100 else text[:97] + "..."


def human_size(size: int) -> str:
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if size >= scale:
            return f"{size / scale:.2f} {unit}"
    return f"{size} B"


def size_report(tag: str, total: int, layers: Sequence[Layer], *, largest: int = LARGEST_LAYERS) -> str:
    """The image's size and its largest layers, one line each."""
    lines = [f"{tag}: {human_size(total)} in {len(layers)} layers; the largest:"]
    for layer in sorted(layers, key=lambda layer: layer.size, reverse=True)[:largest]:
        if layer.size:
            lines.append(f"  {human_size(layer.size):>10}  {instruction_of(layer.created_by)}")
    return "\n".join(lines)


def inspect_commands(engine: str, tag: str) -> tuple[list[str], list[str]]:
    """The commands that read the image's size (bytes) and its layers' sizes and instructions."""
    return (
        [engine, "image", "inspect", "--format", "{{.Size}}", tag],
        [engine, "history", "--human=false", "--no-trunc", "--format", "{{.Size}}\t{{.CreatedBy}}", tag],
    )


def image_size(engine: str, tag: str) -> str:
    size_cmd, history_cmd = inspect_commands(engine, tag)
    size = subprocess.run(size_cmd, capture_output=True, text=True, timeout=120)
    history = subprocess.run(history_cmd, capture_output=True, text=True, timeout=120)
    if size.returncode != 0 or history.returncode != 0:
        raise ImageError(f"could not read the size of {tag}: {(size.stderr or history.stderr).strip()}")
    return size_report(tag, int(size.stdout.strip().splitlines()[0]), parse_history(history.stdout))


# ----------------------------------------------------------------------------- running


def image_exists(engine: str, image: str) -> bool:
    return subprocess.run([engine, "image", "inspect", image], capture_output=True, timeout=120).returncode == 0


def run_build(build: Build, *, push: bool, dry_run: bool, echo: Callable[[str], None]) -> None:
    """Runs ``build`` (printing every command first), reports the image's size, pushes when asked."""
    if build.check_base and not dry_run and not image_exists(build.engine, build.base or ""):
        raise ImageError(build.check_base)
    if build.pulls and not dry_run and not any(os.environ.get(v) for v in _PROXY_VARIABLES):
        host = registry_host(build.pulls)
        if not registry_reachable(host) and not image_exists(build.engine, build.pulls):
            raise ImageError(
                f"the base image {build.pulls} cannot be pulled ({host} is not reachable): {NO_REGISTRY_FIX}"
            )
    with tempfile.TemporaryDirectory(prefix="roxxel-image-") as tmp:
        argv = list(build.argv)
        if build.dockerfile_text is not None:
            dockerfile = Path(tmp) / "Dockerfile"
            dockerfile.write_text(build.dockerfile_text, encoding="utf-8")
            argv[argv.index(GENERATED)] = str(dockerfile)
            echo("roxxel-launch: the Dockerfile (generated):\n" + build.dockerfile_text.rstrip())
        echo(f"roxxel-launch: running {shlex.join(argv)}")
        if dry_run:
            if push:
                echo(f"roxxel-launch: then running {shlex.join(push_command(build.engine, build.tag))}")
            return
        code = subprocess.run(argv, env=build_env(build.engine)).returncode
    if code != 0:
        missing = build.pulls and not image_exists(build.engine, build.pulls)
        raise ImageError(
            f"{build.engine} build failed with exit code {code} (its output is above)"
            + (f"; the base image {build.pulls} was not pulled: {NO_REGISTRY_FIX}" if missing else "")
        )
    echo(image_size(build.engine, build.tag))
    if push:
        command = push_command(build.engine, build.tag)
        echo(f"roxxel-launch: running {shlex.join(command)}")
        code = subprocess.run(command).returncode
        if code != 0:
            raise ImageError(
                f"{build.engine} push {build.tag} failed with exit code {code} (its output is "
                "above): check that you are logged in to the registry (e.g. gcloud auth "
                "configure-docker REGION-docker.pkg.dev)"
            )
