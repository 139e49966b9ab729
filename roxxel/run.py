"""What the launcher tells the training command about its run, read in one place.

Every pod gets these variables (names in :mod:`roxxel.contract`); a training script reads
them through :func:`run_info` instead of spelling the names, with its own defaults for a
run started by hand. Standard library only.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

from roxxel.contract import (
    ENV_CHECKPOINT_DIR,
    ENV_DATA_DIR,
    ENV_OUTPUT_DIR,
    ENV_RESTART_ATTEMPT,
    ENV_RESTORE_FROM,
    ENV_RUN_NAME,
)


@dataclasses.dataclass(frozen=True)
class RunInfo:
    """The run as the launcher described it.

    Attributes:
        run_name: the job's name (``ROXXEL_RUN_NAME``): the same across restarts; the
            checkpoint directory belongs to it.
        checkpoint_dir: the spec's ``checkpoint_dir`` (a local path or ``gs://...``), or None.
        data_dir: where the datasets are (``ROXXEL_DATA_DIR``: ``/data`` in a pod, the
            ``--data-dir`` directory in a local run), or None.
        restart_attempt: the gang restart this process belongs to (JobSet pods), or None.
        restore_from: another run's checkpoint directory to branch from while this run's
            own holds no step (``ROXXEL_RESTORE_FROM``, the spec's ``restore_from``), or None.
        output_dir: where the launcher asks for logs, metrics and plots (``ROXXEL_OUTPUT_DIR``:
            a host directory bound into a local container run), or None (the program's own
            default).
    """

    run_name: str | None
    checkpoint_dir: str | None
    data_dir: str | None
    restart_attempt: int | None
    restore_from: str | None = None
    output_dir: str | None = None


def run_info(
    environ: Mapping[str, str] | None = None,
    *,
    run_name: str | None = None,
    checkpoint_dir: str | None = None,
    data_dir: str | None = None,
) -> RunInfo:
    """The run's name and directories from the environment, each falling back to the given default.

    Args:
        environ: where to read; default ``os.environ``.
        run_name, checkpoint_dir, data_dir: the values for a run started without the
            launcher (an empty variable counts as unset).

    Raises:
        ValueError: ``ROXXEL_RESTART_ATTEMPT`` is set but not an integer.
    """
    env = os.environ if environ is None else environ
    attempt = env.get(ENV_RESTART_ATTEMPT) or None
    try:
        restart_attempt = None if attempt is None else int(attempt)
    except ValueError:
        raise ValueError(f"{ENV_RESTART_ATTEMPT}={attempt!r} is not an integer") from None
    return RunInfo(
        run_name=env.get(ENV_RUN_NAME) or run_name,
        checkpoint_dir=env.get(ENV_CHECKPOINT_DIR) or checkpoint_dir,
        data_dir=env.get(ENV_DATA_DIR) or data_dir,
        restart_attempt=restart_attempt,
        restore_from=env.get(ENV_RESTORE_FROM) or None,
        output_dir=env.get(ENV_OUTPUT_DIR) or None,
    )


def branch_overlap(checkpoint_dir: str, restore_from: str) -> str | None:
    """How ``restore_from`` overlaps ``checkpoint_dir`` (paths or ``gs://`` URLs, compared as
    written, a trailing ``/`` ignored): ``"same"`` (that would resume, not branch), ``"nested"``
    (the branch would write inside the other run's directory, or read its own), or ``None``."""
    mine, other = checkpoint_dir.rstrip("/"), restore_from.rstrip("/")
    if mine == other:
        return "same"
    if mine.startswith(other + "/") or other.startswith(mine + "/"):
        return "nested"
    return None
