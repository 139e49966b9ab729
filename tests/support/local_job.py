"""One `netns_train.py` job run with `roxxel-launch submit --local` (a subprocess), and what
a test needs to poke at it: its status, logs, checkpoints and final parameters. Shared by
the network-namespace tests and the liveness tests of the local pod."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import yaml

import pytest

from roxxel_launch.backends.local import backend as L
from roxxel_launch.backends.local import netns
from support.paths import WORKERS

TRAIN = WORKERS / "netns_train.py"
STEPS, EVERY = 8, 4  # training steps, checkpoint interval
HEARTBEAT = 5  # seconds: ROXXEL_HEARTBEAT_TIMEOUT of the jobs
GRACE = 2  # seconds: termination_grace_period of the jobs
TIMEOUT = 300  # seconds for one CLI run

UNAVAILABLE = netns.unavailable_reason()
needs_netns = pytest.mark.skipif(UNAVAILABLE is not None, reason=f"--netns cannot run here: {UNAVAILABLE}")


def job_spec(name: str, hosts: int, command: list[str], **extra) -> dict:
    """A CPU job spec of ``hosts`` workers running ``command`` (fields of ``extra`` added)."""
    data = {
        "apiVersion": "roxxel.dev/v1alpha1",
        "kind": "RoxxelJob",
        "name": name,
        "image": "local",
        "command": command,
        "accelerator": {"cpu": {"hosts": hosts}},
        "termination_grace_period": GRACE,
    }
    data.update(extra)
    return data


class Job:
    """One `netns_train.py` job run with the CLI, and what the test needs to poke at it."""

    def __init__(
        self,
        tmp_path,
        data,
        jax_cache,
        name: str,
        hosts: int,
        *,
        pause: float = 0.0,
        workload: str = "jobset",
        env: dict[str, str] | None = None,
        **spec_extra,
    ):
        self.root, self.name = tmp_path / "runs", name
        self.params = tmp_path / f"{name}.npz"
        self.checkpoints = tmp_path / name / "checkpoints"
        spec = job_spec(
            name,
            hosts,
            [sys.executable, str(TRAIN), str(data), str(self.params), str(STEPS), str(EVERY), str(pause)],
            checkpoint_dir=str(self.checkpoints),
            workload=workload,
            env={
                "ROXXEL_HEARTBEAT_TIMEOUT": str(HEARTBEAT),
                "ROXXEL_INIT_TIMEOUT": "60",
                "JAX_COMPILATION_CACHE_DIR": str(jax_cache),
                "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                **(env or {}),
            },
            **{"max_restarts": 2, **spec_extra},
        )
        self.spec_path = tmp_path / f"{name}.yaml"
        self.spec_path.write_text(yaml.safe_dump(spec))
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("ROXXEL_", "JOB", "TPU_"))}
        self.env.update({L.ROOT_ENV: str(self.root), "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1"})
        self.proc: subprocess.Popen | None = None

    def start(self, *flags: str) -> Job:
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "roxxel_launch.cli", "submit", "--local", str(self.spec_path), *flags],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        return self

    def finish(self) -> tuple[str, str]:
        try:
            out, err = self.proc.communicate(timeout=TIMEOUT)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.seconds = time.monotonic() - self.started
        self.out, self.err = out, err
        assert self.proc.returncode == 0, out[-4000:] + err[-4000:]
        return out, err

    def run(self, *flags: str) -> tuple[str, str]:
        return self.start(*flags).finish()

    def status(self) -> dict:
        path = self.root / self.name / "status.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def log(self, i: int = 0) -> str:
        path = self.root / self.name / f"worker-{i}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def wait_for_checkpoint(self, step: int) -> None:
        """Until the checkpoint of ``step`` is complete (Orbax renames it to its step number
        once every process has written it) and training has gone past it."""
        deadline = time.monotonic() + TIMEOUT
        while f"step {step + 1}/{STEPS}" not in self.log(0) or not (self.checkpoints / str(step)).is_dir():
            assert self.proc.poll() is None, self.proc.communicate()
            assert time.monotonic() < deadline, self.log(0)[-3000:]
            time.sleep(0.05)

    def host(self, i: int) -> dict:
        return self.status()["attempts"][-1]["hosts"][i]

    def params_equal(self, other: pathlib.Path) -> None:
        want, got = np.load(other), np.load(self.params)
        assert sorted(want.files) == sorted(got.files)
        for key in want.files:
            assert np.array_equal(want[key], got[key]), key
