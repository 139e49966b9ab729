"""The main job (examples/lm/job.yaml, short) run with `roxxel-launch submit --local`, as
processes or as containers of the worker image, and what a test reads of it (tests/image)."""

from __future__ import annotations

import json
import subprocess
import sys

import yaml

from support.image import IMAGE, engine, podman_env
from support.paths import REPO

STEPS = ("6", "4")
TOTAL = sum(map(int, STEPS))


def write_spec(tmp_path, name: str, image: str = IMAGE, steps: tuple[str, str] = STEPS) -> tuple[str, str]:
    """The main job (examples/lm/job.yaml), short; its final parameters go into its checkpoint
    directory, the one place of this machine a container writes to."""
    spec = yaml.safe_load((REPO / "examples/lm/job.yaml").read_text())
    checkpoints = tmp_path / name / "checkpoints"
    params = str(checkpoints / "final-params.npz")
    spec.update(name=name, image=image, checkpoint_dir=str(checkpoints), termination_grace_period=60)
    spec["command"] = [
        "python",
        "examples/lm/train.py",
        "--steps",
        *steps,
        "--batch",
        "8",
        "4",
        "--width",
        "32",
        "--log-every",
        "1",
        "--eval-every",
        "1000",
        "--checkpoint-every",
        "1000",
        "--save-params",
        params,
    ]
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path), params


def launch(tmp_path, *args: str, check: int | None = 0, timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(podman_env(), ROXXEL_LOCAL_ROOT=str(tmp_path / "local"))
    env = {k: v for k, v in env.items() if not k.startswith(("JOB", "TPU_"))}
    out = subprocess.run(
        [sys.executable, "-m", "roxxel_launch.cli", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check is not None:
        assert out.returncode == check, f"exit {out.returncode}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


def status(tmp_path, name: str) -> dict:
    path = tmp_path / "local" / name / "status.json"
    return json.loads(path.read_text()) if path.exists() else {}


def log(tmp_path, name: str, i: int = 0) -> str:
    path = tmp_path / "local" / name / f"worker-{i}.log"
    return path.read_text(errors="replace") if path.exists() else ""


def podman(*args: str, runtime: str = "podman") -> str:
    """What ``runtime`` (podman, or docker) prints for ``args``."""
    return engine(runtime, *args).stdout
