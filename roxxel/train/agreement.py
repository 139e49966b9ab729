"""Processes agree before the first step: what must be identical on every process of a job.

A global batch is assembled from every process's rows, and each process computes its rows
from the curriculum, the seed and its copy of the datasets. Two processes with another seed,
or one reading a stale copy of a dataset, would each deliver rows of a different data plan:
every batch mixed from two plans, trained on silently. Likewise a model built with other
shapes on one process makes the collectives fail far from the cause, or hang.

:func:`check_processes_agree` hashes each field to a fixed 32 bytes (SHA-256 of its JSON),
gathers all of them with one ``process_allgather`` (as JAX's own ``assert_equal`` does, but
of a fixed size: arrays of different sizes abort the gloo collective instead of comparing)
and raises a :class:`~roxxel.exit_codes.ConfigValueError` (exit 78: every restart would hit
it again) naming the field and the processes that differ from process 0.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping

import numpy as np

from roxxel.exit_codes import ConfigValueError

__all__ = ["ProcessesDisagree", "check_processes_agree", "digest"]


class ProcessesDisagree(ConfigValueError):
    """Processes of one job were started with different settings, data or model shapes."""


def digest(value: Any) -> np.ndarray:
    """``(8,)`` uint32: SHA-256 of ``value`` as canonical JSON (``str`` for what JSON lacks)."""
    text = json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))
    return np.frombuffer(hashlib.sha256(text.encode()).digest(), dtype=">u4").astype(np.uint32)


def _brief(value: Any, limit: int = 160) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _groups(rows: np.ndarray) -> list[list[int]]:
    """Processes grouped by equal rows, process 0's group first."""
    groups: dict[bytes, list[int]] = {}
    for p, row in enumerate(rows):
        groups.setdefault(row.tobytes(), []).append(p)
    return list(groups.values())


def _processes(ps: list[int]) -> str:
    shown = ", ".join(map(str, ps[:8])) + (", ..." if len(ps) > 8 else "")
    return f"process{'es' if len(ps) > 1 else ''} {shown}"


def disagreements(fields: Mapping[str, Any], everyone: np.ndarray) -> list[str]:
    """One line per field on which the gathered digests ``everyone`` (``(processes, fields, 8)``,
    fields in ``fields``' order) differ, naming the processes and this process's value."""
    import jax

    lines = []
    for i, (name, value) in enumerate(fields.items()):
        groups = _groups(everyone[:, i])
        if len(groups) == 1:
            continue
        others = "; ".join(_processes(g) for g in groups[1:])
        agree = f" ({_processes(groups[0])} agree)" if len(groups[0]) > 1 else ""
        lines.append(
            f"{name}: {others} differ{'s' if sum(map(len, groups[1:])) == 1 else ''} from process 0{agree}; "
            f"here (process {jax.process_index()}) it is {_brief(value)}"
        )
    return lines


def check_processes_agree(fields: Mapping[str, Any]) -> None:
    """Check that every process of the job passes equal ``fields``; a no-op in one process.

    Every process must call it, with the same field names in the same order (a fixed list in
    the caller): one all-gather of ``(len(fields), 8)`` uint32.

    Args:
        fields: name -> JSON-able value (seed, data plan, dataset fingerprints, mesh, the tree
            of parameter shapes and dtypes, ...).

    Raises:
        ProcessesDisagree: (a ``ConfigValueError``, exit 78) naming each field that differs,
            the processes that differ from process 0, and this process's value.
    """
    import jax

    if jax.process_count() == 1:
        return
    from jax.experimental import multihost_utils

    mine = np.stack([digest(v) for v in fields.values()])
    everyone = np.asarray(multihost_utils.process_allgather(mine)).reshape(jax.process_count(), len(fields), 8)
    lines = disagreements(fields, everyone)
    if lines:
        raise ProcessesDisagree(
            "the processes of this job disagree, so each would train on another plan: "
            + " | ".join(lines)
            + " (start every process with the same arguments, the same dataset copy and the same model code)"
        )
