"""Where checkpoints live: the path given (a local directory or ``gs://bucket/prefix``),
the storage backend it needs, and the directory's own files read when Orbax cannot name them."""

from __future__ import annotations

import json
import os

from etils import epath

from roxxel.exit_codes import ConfigValueError
from roxxel.run import branch_overlap
from roxxel.train.checkpoint.errors import CheckpointRestoreError


def damaged_metrics(directory: epath.Path) -> CheckpointRestoreError | None:
    """The error for a step whose metrics file is not a JSON object, or None if every one is.

    Orbax reads every step's metrics (they rank the steps for ``keep_best``) when a
    ``CheckpointManager`` opens the directory, and one damaged file fails that with a bare
    ``JSONDecodeError`` naming neither step nor file; so on that failure the files are read
    here to name it.
    """
    steps = sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())
    for step in steps:
        path = directory / str(step) / "metrics" / "metrics"
        try:
            ok = isinstance(json.loads(path.read_bytes().decode("utf-8")), dict)
        except FileNotFoundError:
            continue
        except (ValueError, UnicodeDecodeError, OSError):
            ok = False
        if not ok:
            return CheckpointRestoreError(
                f"{path}: the metrics of step {step} are damaged, and Orbax cannot open {directory} with them; "
                f"they only rank the steps for keep_best: remove {path.parent} (step {step} stays restorable) or "
                "restore the file",
                step=step,
                earlier_steps=[s for s in steps if s < step],
            )
    return None


def resolve_directory(checkpoint_path: str | os.PathLike[str]) -> epath.Path:
    text = os.fspath(checkpoint_path)
    if not isinstance(text, str) or not text:
        raise ValueError(f"checkpoint_path must be a non-empty path, got {checkpoint_path!r}")
    if text.startswith("gs://"):
        if len(text) <= len("gs://") or text[len("gs://") :].startswith("/"):
            raise ValueError(f"checkpoint_path {text!r} names no bucket; expected gs://bucket/prefix")
        return epath.Path(text.rstrip("/"))
    if "://" in text:
        raise ValueError(
            f"checkpoint_path {text!r}: only local directories and gs://bucket/prefix are supported "
            "(Orbax writes object storage through TensorStore's GCS driver)"
        )
    return epath.Path(os.path.abspath(os.path.expanduser(text)))


def check_gcs_backend(directory: epath.Path) -> None:
    """``gs://`` paths need a file-system backend for epath besides TensorStore's driver."""
    if not os.fspath(directory).startswith("gs://"):
        return
    import importlib.util

    if importlib.util.find_spec("gcsfs") is None and importlib.util.find_spec("tensorflow") is None:
        raise ImportError(
            f"checkpoint_path {os.fspath(directory)!r}: gs:// checkpoints need the `gcsfs` package "
            "(Orbax lists and renames objects through etils.epath, which uses gcsfs or TensorFlow); "
            "pip install gcsfs"
        )


def resolve_branch_source(directory: epath.Path, restore_from: str | os.PathLike[str] | None) -> epath.Path | None:
    """The directory of the run a new run branches from (``restore_from``), or None.

    Raises:
        ConfigValueError: it is ``directory`` itself, or one holds the other.
        ValueError, ImportError: as :func:`resolve_directory` and :func:`check_gcs_backend`.
    """
    if restore_from is None:
        return None
    source = resolve_directory(restore_from)
    check_gcs_backend(source)
    mine, other = os.fspath(directory), os.fspath(source)
    overlap = branch_overlap(mine, other)
    if overlap == "same":
        raise ConfigValueError(
            f"restore_from {other!r} is this run's own checkpoint directory; give the other "
            "run's directory, or leave restore_from out to resume"
        )
    if overlap == "nested":
        raise ConfigValueError(
            f"restore_from {other!r} and the checkpoint directory {mine!r} are nested: the "
            "branch would write inside the other run's directory (or read its own); give "
            "them separate directories"
        )
    return source
