"""Real multi-process JAX jobs on loopback, for tests: one worker script started once per
process, every process given the same coordinator (a free local port) and its own process
index, on a forced number of CPU devices.

Output goes to files, not pipes: with pipes a chatty process blocks on a full pipe while the
test reads another, and the job deadlocks. Every run ends within its timeout: processes
still alive at the deadline are killed.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from support.net import free_port
from support.paths import TESTS

TIMEOUT = 240  # seconds for one run of all its processes; JAX's own timeouts are lower


def cpu_env(devices: int = 2, extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment without a job's variables (``ROXXEL_*``, ``JAX_*``, ``TPU_*``, ``JOB*``:
    the test's own job must not leak in), JAX on ``devices`` CPU devices, ``tests/`` importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROXXEL_", "JAX_", "TPU_", "JOB"))}
    env.update(
        JAX_PLATFORMS="cpu",
        XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
        PYTHONUNBUFFERED="1",
        TF_CPP_MIN_LOG_LEVEL="3",
        PYTHONPATH=str(TESTS) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    env.update(extra or {})
    return env


@dataclass
class Process:
    """One started worker process and the files its stdout and stderr go to."""

    index: int
    popen: subprocess.Popen
    out_path: Path
    err_path: Path

    @property
    def out(self) -> str:
        return self.out_path.read_text()

    @property
    def err(self) -> str:
        return self.err_path.read_text()

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    def results(self) -> list[dict]:
        """The JSON of each ``RESULT <json>`` line the process printed."""
        return [json.loads(line[7:]) for line in self.out.splitlines() if line.startswith("RESULT ")]

    def result(self) -> dict:
        """The last ``RESULT <json>`` line's JSON; fails, showing the output, when there is none."""
        found = self.results()
        assert found, f"process {self.index} printed no result:\n{self.out[-2000:]}\n{self.err[-4000:]}"
        return found[-1]


def start(
    argv: Callable[[int, str], list[str]], n: int, logs: Path, env: dict[str, str], name: str = "run"
) -> list[Process]:
    """Start ``n`` processes: process ``i`` runs ``argv(i, coordinator)`` (``coordinator``:
    ``127.0.0.1:<free port>``), its output in ``logs/<name>.<k>-<i>.out`` and ``.err`` (``k``:
    the first run of that name in ``logs``)."""
    coordinator = f"127.0.0.1:{free_port()}"
    logs.mkdir(parents=True, exist_ok=True)
    k = 0
    while (logs / f"{name}.{k}-0.out").exists():
        k += 1
    procs = []
    for i in range(n):
        out_path, err_path = logs / f"{name}.{k}-{i}.out", logs / f"{name}.{k}-{i}.err"
        with open(out_path, "w") as out, open(err_path, "w") as err:
            popen = subprocess.Popen(argv(i, coordinator), env=env, stdout=out, stderr=err, text=True)
        procs.append(Process(i, popen, out_path, err_path))
    return procs


def finish(procs: list[Process], expect: int | None = 0, timeout: float = TIMEOUT) -> list[Process]:
    """Wait for ``procs`` (killing those alive after ``timeout`` seconds in all), then check
    that each exited with ``expect`` (None: any code); the failure shows its output's tail."""
    deadline = time.monotonic() + timeout
    try:
        for proc in procs:
            proc.popen.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        for proc in procs:
            if proc.popen.poll() is None:
                proc.popen.kill()
                proc.popen.wait()
    for proc in procs:
        if expect is not None:
            assert proc.returncode == expect, (
                f"process {proc.index} exited with {proc.returncode}, expected {expect}:\n"
                f"{proc.out[-2000:]}\n{proc.err[-4000:]}"
            )
    return procs


def run(
    argv: Callable[[int, str], list[str]],
    n: int,
    logs: Path,
    env: dict[str, str],
    name: str = "run",
    expect: int | None = 0,
    timeout: float = TIMEOUT,
) -> list[Process]:
    """:func:`start` then :func:`finish`."""
    return finish(start(argv, n, logs, env, name), expect, timeout)


def join_job(coordinator: str | None, nproc: int, pid: int) -> None:
    """The worker's side of :func:`run`: join the job as process ``pid`` of ``nproc`` through
    ``roxxel.distributed.initialize`` (a no-op for one process), with timeouts short enough
    for a test: 60 s to meet the coordinator, a peer gone for 20 s ends the job."""
    if nproc > 1:
        import roxxel.distributed as rd

        rd.initialize(
            coordinator_address=coordinator,
            num_processes=nproc,
            process_id=pid,
            initialization_timeout=60,
            heartbeat_timeout_seconds=20,
        )
