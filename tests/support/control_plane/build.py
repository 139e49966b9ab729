"""Building the control plane's programs from their Go modules, once per pinned set.

The Go module ``k8s/cluster`` pins every component (its ``go.mod``: k8s.io/kubernetes with its
staging modules at the matching v0.x, JobSet, Kueue, kwok, etcd's embed package) and lists the
upstream ``main`` packages as ``tool`` directives; ``go build -o DIR/ tool ./cmd/...`` builds them
all in one run, sharing the compiled packages they have in common. The Go toolchain takes the
modules from the Go module proxy (``GOPROXY``); nothing else is downloaded.

A build is kept under ``~/.cache/roxxel/cluster/KEY`` (``ROXXEL_CACHE`` moves ``~/.cache/roxxel``),
KEY being a digest of the module's files and the Go version, so that a changed pin builds anew and
an unchanged one starts at once. Beside the programs it keeps what the controllers' releases
install with them, read from the same module versions (``go list -m -f {{.Dir}}``): the JobSet and
Kueue CRDs and webhook configurations, and kwok's node and pod stages. A build is written in a
temporary directory and renamed into place, so a crash never leaves a half-built one that looks
whole.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
MODULE = REPO / "k8s" / "cluster"
PROGRAMS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "jobset",
    "kueue",
    "kwok",
)
# What the releases install beside their controllers, as (module, path in it, where it goes).
UPSTREAM_FILES = (
    ("sigs.k8s.io/jobset", "config/components/crd", "jobset/crd"),
    ("sigs.k8s.io/jobset", "config/components/webhook", "jobset/webhook"),
    ("sigs.k8s.io/kueue", "config/components/crd", "kueue/crd"),
    ("sigs.k8s.io/kueue", "config/components/webhook", "kueue/webhook"),
    ("sigs.k8s.io/kwok", "kustomize/stage/node/fast/node-initialize.yaml", "kwok/node-initialize.yaml"),
    (
        "sigs.k8s.io/kwok",
        "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
        "kwok/node-heartbeat-with-lease.yaml",
    ),
    ("sigs.k8s.io/kwok", "kustomize/stage/pod/fast/pod-ready.yaml", "kwok/pod-ready.yaml"),
    ("sigs.k8s.io/kwok", "kustomize/stage/pod/fast/pod-delete.yaml", "kwok/pod-delete.yaml"),
)


class BuildError(RuntimeError):
    """The Go toolchain is missing or a build failed; the message names the fix."""


def cache_root() -> Path:
    """``$ROXXEL_CACHE/cluster`` (default ``~/.cache/roxxel/cluster``)."""
    base = os.environ.get("ROXXEL_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "roxxel")
    return Path(base) / "cluster"


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise BuildError(
            "no `go` on PATH: the local control plane is built from its Go modules (k8s/cluster/go.mod, "
            "Go >= 1.26); install Go (Debian's golang is older: use the toolchain this machine has)"
        )
    return go


def build_key() -> str:
    """A digest of what decides the build: the module's go.mod, go.sum and Go sources, and
    ``go version``."""
    digest = hashlib.sha256()
    digest.update(subprocess.run([_go(), "version"], capture_output=True, text=True, check=True).stdout.encode())
    for path in sorted(MODULE.rglob("*")):
        if path.is_file() and (path.suffix == ".go" or path.name in ("go.mod", "go.sum")):
            digest.update(str(path.relative_to(MODULE)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def built(key: str | None = None) -> Path | None:
    """The finished build for ``key`` (default: the current one), or None."""
    home = cache_root() / (key or build_key())
    return home if (home / "COMPLETE").is_file() else None


def build(*, log=sys.stderr) -> Path:
    """The build directory (``bin/`` and ``upstream/``), building it when it is not cached.

    Cold, on 2 cores: see README.md (the Go compiler's cache, ``go env GOCACHE``, makes a rebuild
    after a pin change much shorter). Raises: BuildError naming the step that failed."""
    key = build_key()
    home = cache_root() / key
    if built(key):
        return home
    home.parent.mkdir(parents=True, exist_ok=True)
    print(
        f"control plane: building {', '.join(PROGRAMS)} from k8s/cluster/go.mod into {home} (once; minutes)",
        file=log,
        flush=True,
    )
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=home.parent, prefix=f".{key}.") as tmp:
        work = Path(tmp)
        (work / "bin").mkdir()
        env = dict(os.environ)
        flags = " ".join(f"-X {var}={value}" for var, value in _version_stamps(env).items())
        _run([_go(), "build", "-trimpath", "-ldflags", flags, "-o", str(work / "bin") + "/", "tool", "./cmd/..."], env)
        missing = [p for p in PROGRAMS if not (work / "bin" / p).is_file()]
        if missing:
            raise BuildError(f"go build made no {', '.join(missing)} (k8s/cluster/go.mod's tool lines)")
        for module, inside, target in UPSTREAM_FILES:
            source = Path(_run([_go(), "list", "-m", "-f", "{{.Dir}}", module], env).strip()) / inside
            dest = work / "upstream" / target
            dest.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                shutil.copytree(source, dest)
            else:
                shutil.copyfile(source, dest)
        for copied in (work / "upstream").rglob("*"):
            copied.chmod(0o755 if copied.is_dir() else 0o644)  # the module cache's files are read-only
        (work / "COMPLETE").write_text(f"built in {time.monotonic() - started:.0f} s\n")
        if home.exists():
            shutil.rmtree(home)
        os.rename(work, home)
        work.mkdir()  # for TemporaryDirectory's cleanup
    print(f"control plane: built in {time.monotonic() - started:.0f} s", file=log, flush=True)
    return home


def _version_stamps(env: dict) -> dict[str, str]:
    """The version variables the upstream release builds set with ``-ldflags -X`` (without them
    the API server reports ``v0.0.0-master``, which Kueue refuses to parse): the pinned module
    versions of k8s.io/kubernetes (k8s.io/component-base/version and client-go's copy), JobSet
    and Kueue."""
    kubernetes = _run([_go(), "list", "-m", "-f", "{{.Version}}", "k8s.io/kubernetes"], env).strip()
    major, minor = kubernetes.removeprefix("v").split(".")[:2]
    stamps = {}
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        stamps |= {
            f"{package}.gitVersion": kubernetes,
            f"{package}.gitMajor": major,
            f"{package}.gitMinor": minor,
            f"{package}.gitTreeState": "clean",
        }
    for module in ("sigs.k8s.io/jobset", "sigs.k8s.io/kueue"):
        stamps[f"{module}/pkg/version.GitVersion"] = _run(
            [_go(), "list", "-m", "-f", "{{.Version}}", module], env
        ).strip()
    return stamps


def _run(command: list[str], env: dict) -> str:
    done = subprocess.run(command, cwd=MODULE, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-20:])
        raise BuildError(f"`{' '.join(command)}` in k8s/cluster failed (exit {done.returncode}):\n{tail}")
    return done.stdout
