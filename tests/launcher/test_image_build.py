"""``roxxel-launch image build``: the commands it builds and runs, without building an image.

The engine is a stand-in script where a command must run (it records its arguments and
answers ``image inspect`` and ``history`` as podman does); tests/image/test_container.py
builds the real image with podman.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from roxxel_launch import image as I
from roxxel_launch.cli import cli

from support.paths import REPO

# podman history --human=false --no-trunc --format '{{.Size}}\t{{.CreatedBy}}' of a worker image.
HISTORY = (
    "0\t/bin/sh -c #(nop) LABEL org.opencontainers.image.revision=abc\n"
    "4096\t/bin/sh -c #(nop) COPY dir:0123 in /home/roxxel/examples/ \n"
    "2500000\t/bin/sh -c #(nop) COPY dir:4567 in /opt/venv/ \n"
    "1100000000\t/bin/sh -c #(nop) COPY dir:89ab in /opt/venv \n"
    "1200000\t|0 /bin/sh -c groupadd --system --gid 10001 roxxel\n"
    "9000000\t|2 BASE_IMAGE=localhost/b ACCELERATOR=cpu /bin/sh -c apt-get update && apt-get install -y tini\n"
    "225000000\t/bin/sh -c #(nop) ADD file:cdef in / \n"
)


def test_worker_build_command():
    build = I.worker_build(
        "podman",
        accelerator="tpu",
        source=REPO,
        tag="r.example/p/worker:tpu",
        base="localhost/roxxel-base:bookworm",
        version="1.2.3",
        revision="abc-dirty",
        pip_cert="/etc/ca.pem",
    )
    assert build.argv == [
        "podman",
        "build",
        "--file",
        str(REPO / "Dockerfile"),
        "--tag",
        "r.example/p/worker:tpu",
        "--build-arg",
        "ACCELERATOR=tpu",
        "--build-arg",
        "VERSION=1.2.3",
        "--build-arg",
        "REVISION=abc-dirty",
        "--build-arg",
        "BASE_IMAGE=localhost/roxxel-base:bookworm",
        "--secret",
        "id=pip-cert,src=/etc/ca.pem",
        str(REPO),
    ]
    assert build.tag == "r.example/p/worker:tpu" and build.dockerfile_text is None
    # A local base must exist: the build would otherwise try to pull it from a registry.
    assert "docker/make-base.sh localhost/roxxel-base:bookworm" in build.check_base


def test_worker_build_defaults_keep_the_dockerfiles_base_and_read_version_and_revision():
    build = I.worker_build("docker", accelerator="cpu", source=REPO)
    assert build.tag == "roxxel/worker:cpu" and build.check_base is None
    args = dict(a.split("=", 1) for a in build.argv[build.argv.index("--tag") + 3 : -1 : 2])
    assert set(args) == {"ACCELERATOR", "VERSION", "REVISION"}  # no BASE_IMAGE: the Dockerfile's pinned one
    assert args["VERSION"] == I.project_version(REPO) == "0.1.0"
    assert args["REVISION"] == I.git_revision(REPO)
    assert len(args["REVISION"].removesuffix("-dirty")) == 40  # this is a git checkout
    assert I.git_revision(Path("/")) == "unknown"
    with pytest.raises(I.ImageError, match="unknown accelerator 'gpu': use one of cpu, tpu, cuda"):
        I.worker_build("docker", accelerator="gpu", source=REPO)


def test_user_build_is_a_dockerfile_from_the_worker_image(tmp_path):
    code = tmp_path / "My Trainer"
    code.mkdir()
    build = I.user_build("podman", accelerator="cuda", context=code)
    assert build.tag == "roxxel/my-trainer:cuda"
    assert build.argv == ["podman", "build", "--file", I.GENERATED, "--tag", "roxxel/my-trainer:cuda", str(code)]
    assert build.dockerfile_text.splitlines()[1:] == ["FROM roxxel/worker:cuda", "COPY . /home/roxxel/"]
    assert "roxxel-launch image build --accelerator cuda" in build.check_base
    named = I.user_build("podman", accelerator="cpu", context=code, tag="me/t:1", base="r.example/w@sha256:00")
    assert named.tag == "me/t:1" and named.check_base is None  # a named base may be pulled
    assert "FROM r.example/w@sha256:00\n" in named.dockerfile_text
    with pytest.raises(I.ImageError, match="not a directory"):
        I.user_build("podman", accelerator="cpu", context=tmp_path / "missing")


def test_the_workdir_the_code_goes_to_is_the_images():
    dockerfile = (REPO / "Dockerfile").read_text()
    assert f"\nWORKDIR {I.WORKER_WORKDIR}\n" in dockerfile


def test_find_engine_prefers_podman_then_docker(monkeypatch):
    monkeypatch.delenv(I.ENGINE_ENV, raising=False)
    installed = {"podman", "docker"}
    which = lambda name: f"/usr/bin/{name}" if name in installed else None
    assert I.find_engine(which=which) == "podman"
    installed.discard("podman")
    assert I.find_engine(which=which) == "docker"
    assert I.find_engine("docker", which=which) == "docker"
    with pytest.raises(I.ImageError, match=r"^podman is not installed \(asked for with --engine"):
        I.find_engine("podman", which=which)
    monkeypatch.setenv(I.ENGINE_ENV, "podman")
    with pytest.raises(I.ImageError, match="podman is not installed"):
        I.find_engine(which=which)
    monkeypatch.delenv(I.ENGINE_ENV)
    installed.clear()
    with pytest.raises(I.ImageError, match=r"^neither podman nor docker is installed: .*apt-get install podman"):
        I.find_engine(which=which)


def test_size_report_names_the_largest_layers():
    layers = I.parse_history(HISTORY + "not a size line\n1 parsec\tRUN x\n")
    assert len(layers) == 7
    # podman 4.3 prints decimal units even with --human=false.
    assert I.parse_history("1.07 GB\tCOPY a\n34.8 kB\tCOPY b\n0 B\tLABEL c\n2 MiB\tRUN d\n") == [
        I.Layer(1_070_000_000, "COPY a"),
        I.Layer(34_800, "COPY b"),
        I.Layer(0, "LABEL c"),
        I.Layer(2**21, "RUN d"),
    ]
    report = I.size_report("roxxel/worker:cpu", 1_337_704_096, layers, largest=3)
    assert report.splitlines() == [
        "roxxel/worker:cpu: 1.34 GB in 7 layers; the largest:",
        "     1.10 GB  COPY dir:89ab in /opt/venv",
        "   225.00 MB  ADD file:cdef in /",
        "     9.00 MB  RUN apt-get update && apt-get install -y tini",
    ]
    assert I.human_size(999) == "999 B" and I.human_size(4096) == "4.10 kB"


FAKE_ENGINE = r"""#!{python}
import json, os, sys
with open(os.environ["FAKE_ENGINE_LOG"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\n")
args = sys.argv[1:]
if args[0] == "build":
    dockerfile = args[args.index("--file") + 1]
    with open(os.environ["FAKE_ENGINE_LOG"] + ".dockerfile", "w") as out:
        out.write(open(dockerfile).read())
    sys.exit(int(os.environ.get("FAKE_BUILD_EXIT", "0")))
if args[:2] == ["image", "inspect"]:
    if "--format" in args:
        print(1337704096)
    sys.exit(0 if os.environ.get("FAKE_IMAGE_EXISTS", "1") == "1" else 125)
if args[0] == "history":
    sys.stdout.write(os.environ["FAKE_HISTORY"])
    sys.exit(0)
if args[0] == "push":
    sys.exit(int(os.environ.get("FAKE_PUSH_EXIT", "0")))
sys.exit(99)
"""


@pytest.fixture
def engine(tmp_path, monkeypatch):
    path = tmp_path / "podman"
    path.write_text(FAKE_ENGINE.format(python=sys.executable))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    log = tmp_path / "engine.log"
    monkeypatch.setenv("FAKE_ENGINE_LOG", str(log))
    monkeypatch.setenv("FAKE_HISTORY", HISTORY)
    monkeypatch.setattr(I, "registry_reachable", lambda host: True)

    def calls() -> list[list[str]]:
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    return str(path), calls, log


def test_run_build_prints_runs_reports_and_pushes(engine, tmp_path):
    path, calls, log = engine
    build = I.worker_build(path, accelerator="cpu", source=REPO, tag="r.example/w:cpu", version="0.1.0", revision="abc")
    out: list[str] = []
    I.run_build(build, push=True, dry_run=False, echo=out.append)
    assert [c[0] for c in calls()] == ["build", "image", "history", "push"]
    assert calls()[0] == build.argv[1:] and calls()[-1] == ["push", "r.example/w:cpu"]
    assert out[0] == "roxxel-launch: running " + " ".join(build.argv)
    assert out[1].startswith("r.example/w:cpu: 1.34 GB in 7 layers; the largest:\n     1.10 GB  COPY dir:89ab")
    assert out[2] == f"roxxel-launch: running {path} push r.example/w:cpu"


def test_run_build_failures_are_one_line_each(engine, monkeypatch, tmp_path):
    path, calls, _ = engine
    build = I.worker_build(path, accelerator="cpu", source=REPO, version="0.1.0", revision="abc")
    monkeypatch.setenv("FAKE_BUILD_EXIT", "3")
    with pytest.raises(I.ImageError, match=r"^.*podman build failed with exit code 3 \(its output is above\)$"):
        I.run_build(build, push=True, dry_run=False, echo=lambda line: None)
    assert [c[0] for c in calls()] == ["build", "image"]  # nothing pushed after a failed build (the base looked for)
    monkeypatch.setenv("FAKE_BUILD_EXIT", "0")
    monkeypatch.setenv("FAKE_PUSH_EXIT", "1")
    with pytest.raises(I.ImageError, match="push roxxel/worker:cpu failed with exit code 1 .* logged in"):
        I.run_build(build, push=True, dry_run=False, echo=lambda line: None)
    # A missing local base is named with the script that makes it, before any build.
    monkeypatch.setenv("FAKE_IMAGE_EXISTS", "0")
    local = I.worker_build(path, accelerator="cpu", source=REPO, base="localhost/b:1", version="0", revision="a")
    before = len(calls())
    with pytest.raises(
        I.ImageError, match="the base image localhost/b:1 is not here: make it with docker/make-base.sh"
    ):
        I.run_build(local, push=False, dry_run=False, echo=lambda line: None)
    assert [c[:2] for c in calls()[before:]] == [["image", "inspect"]]


def test_without_a_registry_the_build_says_how_to_make_a_local_base(engine, monkeypatch):
    """Before, the engine's DNS error was all a machine without Docker Hub got."""
    path, calls, _ = engine
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    asked: list[str] = []
    monkeypatch.setattr(I, "registry_reachable", lambda host: asked.append(host) is not None)  # False
    monkeypatch.setenv("FAKE_IMAGE_EXISTS", "0")
    build = I.worker_build(path, accelerator="cpu", source=REPO, version="0", revision="a")
    assert build.pulls == I.dockerfile_base(REPO) and build.pulls.startswith("python:3.11-slim-bookworm@")
    with pytest.raises(I.ImageError) as err:
        I.run_build(build, push=False, dry_run=False, echo=lambda line: None)
    message = str(err.value)
    assert "\n" not in message and "registry-1.docker.io is not reachable" in message, message
    assert "docker/make-base.sh localhost/roxxel-base:bookworm" in message and "--base localhost/roxxel-base" in message
    assert asked == ["registry-1.docker.io"] and "build" not in [c[0] for c in calls()]  # nothing started
    # The base already in the store: the build runs without the registry.
    monkeypatch.setenv("FAKE_IMAGE_EXISTS", "1")
    I.run_build(build, push=False, dry_run=False, echo=lambda line: None)
    assert "build" in [c[0] for c in calls()]
    # Behind a proxy the engine is left to try; if it fails with the base still missing, the way out follows.
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy:3128")
    monkeypatch.setenv("FAKE_IMAGE_EXISTS", "0")
    monkeypatch.setenv("FAKE_BUILD_EXIT", "125")
    with pytest.raises(
        I.ImageError,
        match=r"exit code 125 \(its output is above\); the base image python:3.11.* was not pulled: make a local base",
    ):
        I.run_build(build, push=False, dry_run=False, echo=lambda line: None)
    # --base: nothing to pull, nothing asked.
    local = I.worker_build(path, accelerator="cpu", source=REPO, base="localhost/b:1", version="0", revision="a")
    assert local.pulls is None


def test_a_context_build_writes_its_dockerfile_and_builds_dir(engine, tmp_path):
    path, calls, log = engine
    code = tmp_path / "trainer"
    code.mkdir()
    build = I.user_build(path, accelerator="cpu", context=code, tag="me/trainer:1")
    out: list[str] = []
    I.run_build(build, push=False, dry_run=False, echo=out.append)
    # The worker image it builds on is looked for first: it must exist here.
    check, build_call, *_ = calls()
    assert check == ["image", "inspect", "roxxel/worker:cpu"]
    dockerfile = build_call[build_call.index("--file") + 1]
    assert dockerfile != I.GENERATED and not os.path.exists(dockerfile)  # a temporary file, removed
    assert Path(str(log) + ".dockerfile").read_text() == build.dockerfile_text
    assert build_call[-1] == str(code)
    assert out[0].startswith("roxxel-launch: the Dockerfile (generated):\n# Generated")
    assert out[1] == "roxxel-launch: running " + " ".join([path, *build_call])


def test_cli_dry_run_prints_the_commands(tmp_path):
    runner = CliRunner()
    result = runner.invoke(
        cli,
        [
            "image",
            "build",
            "--engine",
            "podman",
            "--dry-run",
            "--accelerator",
            "cuda",
            "--base",
            "localhost/roxxel-base:bookworm",
            "--tag",
            "r.example/w:cuda",
            "--push",
        ],
        catch_exceptions=False,
        env={"PIP_CERT": None},
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith(
        f"roxxel-launch: running podman build --file {REPO / 'Dockerfile'} --tag "
        "r.example/w:cuda --build-arg ACCELERATOR=cuda --build-arg VERSION=0.1.0 "
    )
    assert lines[0].endswith(f"--build-arg BASE_IMAGE=localhost/roxxel-base:bookworm {REPO}")
    assert lines[1] == "roxxel-launch: then running podman push r.example/w:cuda"
    cert = tmp_path / "ca.pem"
    cert.write_text("-----BEGIN CERTIFICATE-----\n")
    with_cert = runner.invoke(
        cli, ["image", "build", "--engine", "docker", "--dry-run"], env={"PIP_CERT": str(cert)}, catch_exceptions=False
    )
    assert f"--secret id=pip-cert,src={cert} {REPO}" in with_cert.output
    code = tmp_path / "trainer"
    code.mkdir()
    user = runner.invoke(
        cli, ["image", "build", "--engine", "podman", "--dry-run", "--context", str(code)], catch_exceptions=False
    )
    assert user.exit_code == 0, user.output
    assert "FROM roxxel/worker:cpu\nCOPY . /home/roxxel/\n" in user.output
    assert f"--tag roxxel/trainer:cpu {code}" in user.output


def test_cli_without_an_engine_says_so_in_one_line(monkeypatch):
    monkeypatch.setattr(I.shutil, "which", lambda name: None)
    monkeypatch.delenv(I.ENGINE_ENV, raising=False)
    result = CliRunner().invoke(cli, ["image", "build"])
    assert result.exit_code == 1
    assert result.output == (
        "Error: neither podman nor docker is installed: install one (Debian/Ubuntu: "
        "apt-get install podman) to build images\n"
    )
