"""The goodput lines of ``roxxel-launch status``: where a job's run keeps its checkpoints and
metrics (from the spec stored with the job), and what :mod:`roxxel_launch.goodput_read` finds
there. Nothing here raises for what it reads: a place that cannot be read is one line."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from roxxel_launch.backends.base import BackendError, JobStatus
from roxxel_launch.goodput_read import GoodputReading, read_goodput

LABEL = "goodput:"
OUTPUTS = "outputs"
"""A local run's outputs folder (``RUN_DIR/outputs``), which the container runtimes bind into
every pod as ``ROXXEL_OUTPUT_DIR`` (the local backend's ``OUTPUTS_DIR``)."""


def job_goodput(backend: Any, job: JobStatus) -> GoodputReading:
    """The goodput totals of ``job``'s run: a local run's checkpoint directory and outputs
    (``RUN_DIR/outputs``, ``ROXXEL_OUTPUT_DIR`` of a container run), or a cluster job's
    ``gs://`` checkpoint directory (a path on the pods' volumes is not on this machine)."""
    if job.run_dir is not None:
        return _local_run(Path(job.run_dir))
    return _cluster_run(backend, job.name)


def _local_run(run_dir: Path) -> GoodputReading:
    from roxxel_launch.backends.local.rundir import LAUNCH_FILE, SPEC_FILE, read_json

    try:
        spec, launch = read_json(run_dir / SPEC_FILE), read_json(run_dir / LAUNCH_FILE)
    except (OSError, ValueError) as err:
        return GoodputReading(problem=f"the run's spec in {run_dir} cannot be read ({err})")
    checkpoint_dir = spec.get("checkpoint_dir") if isinstance(spec, dict) else None
    if checkpoint_dir and "://" not in checkpoint_dir:  # relative to the workers' working directory
        cwd = launch.get("cwd") if isinstance(launch, dict) else None
        checkpoint_dir = os.path.join(cwd or "", os.path.expanduser(checkpoint_dir))
    return read_goodput(checkpoint_dir, str(run_dir / OUTPUTS))


def _cluster_run(backend: Any, name: str) -> GoodputReading:
    stored_spec = getattr(backend, "stored_spec", None)
    if stored_spec is None:
        return GoodputReading()
    try:
        spec = stored_spec(name)
    except BackendError as err:
        return GoodputReading(problem=str(err))
    path = getattr(spec, "checkpoint_dir", None)
    if not path:
        return GoodputReading()
    if not path.startswith("gs://"):
        return GoodputReading(
            problem=f"checkpoint_dir {path} is on the job's volumes, not on this machine "
            "(status reads a cluster job's totals from a gs:// checkpoint_dir)"
        )
    return read_goodput(path, None)


def goodput_lines(reading: GoodputReading) -> list[str]:
    """'goodput:    61.3% of 5m 12s (productive 3m 11s), at step 120, 2 attempts' and
    'badput:     restart 1m 02s, compile 40s, restore 12s'; 'goodput:    not read: WHY';
    none when nothing is reported yet."""
    if reading.totals is not None:
        head, badput = reading.totals.lines()
        return [f"{LABEL:<11} {head}", f"{'badput:':<11} {badput}"]
    if reading.problem:
        return [f"{LABEL:<11} not read: {' '.join(reading.problem.split())}"]
    return []


def goodput_json(reading: GoodputReading) -> dict[str, Any]:
    """``{"goodput": {...} | None}``, plus ``"goodput_error"`` when it could not be read."""
    out: dict[str, Any] = {"goodput": reading.totals.as_json() if reading.totals is not None else None}
    if reading.problem:
        out["goodput_error"] = reading.problem
    return out
