"""Whose checkpoint directory a local run would write: refused before anything starts when
it records another run (a cluster's volumes are checked by the workers themselves)."""

from __future__ import annotations

import json
from pathlib import Path

from roxxel_launch.backends.base import BackendError


def check_checkpoint_owner(spec) -> None:
    """Refuse, before anything starts, a spec whose local ``checkpoint_dir`` records another
    run (``roxxel_run.json``, written by the training program's checkpointer at its first
    save): the job would start, restore nothing and exit 78 on every worker. Directories on
    object storage or on a cluster's volumes are checked by the workers themselves.

    Raises:
        BackendError: names both runs and the fixes (its own directory, or ``restore_from``).
    """
    from roxxel.contract import OWNER_FILE

    path = spec.checkpoint_dir
    if path is None or "://" in path:
        return
    try:
        record = json.loads((Path(path) / OWNER_FILE).read_text())
    except (OSError, ValueError):
        return  # none (a new directory), or unreadable: the checkpointer says which
    owner = record.get("run") if isinstance(record, dict) else None
    if owner is not None and owner != spec.run_name:
        raise BackendError(
            f"checkpoint_dir {path} belongs to run {owner!r}, not to this job's run {spec.run_name!r}: its workers "
            f"would be refused at their first step (a renamed job must not continue or overwrite another run's "
            f"checkpoints). Give it a directory of its own (--set checkpoint_dir=...), and add --set "
            f"restore_from={path} to start from that run's latest step"
        )
