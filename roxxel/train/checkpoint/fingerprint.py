"""The run fingerprint: what a checkpoint records about the run that saved it, and how a
resume's fingerprint is compared with it (which changes leave past batches as they were)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from roxxel.data.curriculum import RECORD_DEFAULTS, classify_changes

MAX_CHANGES_SHOWN = 25
SEED_KEY = "seed"
"""The fingerprint's key for the run's data seed (:meth:`Checkpointer.record_seed`)."""


def is_curriculum(fingerprint: Any) -> bool:
    """Whether a fingerprint is a ``Curriculum.describe()`` (whose changes can be classified)."""
    return (
        isinstance(fingerprint, Mapping) and isinstance(fingerprint.get("phases"), list) and "datasets" in fingerprint
    )


def indented(lines: list[str]) -> str:
    """``lines`` indented, at most :data:`MAX_CHANGES_SHOWN` of them."""
    text = "\n".join(f"  {line}" for line in lines[:MAX_CHANGES_SHOWN])
    if len(lines) > MAX_CHANGES_SHOWN:
        text += f"\n  ... and {len(lines) - MAX_CHANGES_SHOWN} more"
    return text


_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _short(value: Any, width: int = 60) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= width else text[: width - 3] + "..."


def _child(path: str, key: Any) -> str:
    if isinstance(key, str) and _IDENT.match(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key)}]"


def _same_scalar(a: Any, b: Any) -> bool:
    return a == b and isinstance(a, bool) == isinstance(b, bool) and (a is None) == (b is None)


def _diff(a: Any, b: Any, path: str, out: list[str]) -> None:
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for key in sorted(set(a) | set(b), key=str):
            sub = _child(path, key)
            if key not in b:
                out.append(f"{sub}: removed (was {_short(a[key])})")
            elif key not in a:
                out.append(f"{sub}: added {_short(b[key])}")
            else:
                _diff(a[key], b[key], sub, out)
    elif isinstance(a, list) and isinstance(b, list):
        for i in range(min(len(a), len(b))):
            _diff(a[i], b[i], f"{path}[{i}]", out)
        for i in range(len(b), len(a)):
            out.append(f"{path}[{i}]: removed (was {_short(a[i])})")
        for i in range(len(a), len(b)):
            out.append(f"{path}[{i}]: added {_short(b[i])}")
    elif not _same_scalar(a, b):
        out.append(f"{path or '<fingerprint>'}: {_short(a)} -> {_short(b)}")


def normalize_json(value: Any, what: str) -> Any:
    """``value`` as JSON would give it back (tuples -> lists, keys -> str).

    Raises:
        TypeError: ``value`` is not JSON-serialisable.
    """
    try:
        return json.loads(json.dumps(value, allow_nan=True))
    except (TypeError, ValueError) as err:
        raise TypeError(f"{what} must be JSON-serialisable (dicts, lists, str, numbers, bool, None): {err}") from err


def compare_runs(saved: Any, current: Any, step: int) -> tuple[list[str], list[str], str]:
    """How a resume's fingerprint differs from the one ``step`` was saved with.

    A ``seed`` the current fingerprint has and the saved one lacks (a step saved before
    the seed of a user-built Checkpointer was recorded) is allowed, listed as not recorded;
    a changed seed is refused (it changes every batch).

    Returns:
        ``(allowed, refused, hint)``: the changes that leave the batches before ``step`` as
        they were (curriculum fingerprints only: :func:`~roxxel.data.curriculum.classify_changes`),
        the others, one line each, and the end of the sentence that tells how to resume.
    """
    hint = ""
    unrecorded: list[str] = []
    if isinstance(saved, Mapping) and isinstance(current, Mapping) and SEED_KEY in current and SEED_KEY not in saved:
        # saved before the seed of a given Checkpointer was recorded: nothing to compare it with
        unrecorded = [f"{SEED_KEY}: not recorded in the checkpoint, now {_short(current[SEED_KEY])}"]
        current = {k: v for k, v in current.items() if k != SEED_KEY}
    if is_curriculum(saved) and is_curriculum(current):
        allowed, refused = classify_changes(saved, current, step, describe_changes)
        hint = (
            f" for the batches before step {step} (lengthening the phase that holds it, "
            "or changing later phases, is allowed)"
        )
    else:
        allowed, refused = [], describe_changes(saved, current)
    if any(line.startswith("batch_rows:") for line in refused):
        saved_rows = saved.get("batch_rows", RECORD_DEFAULTS["batch_rows"])
        hint += (
            f"; the run took {saved_rows} rows (runs saved before batch_rows existed did): pass "
            f"Curriculum(..., batch_rows={saved_rows!r}) to resume it"
        )
    elif any(line.startswith(f"{SEED_KEY}:") for line in refused) and isinstance(saved, Mapping):
        hint += f"; the seed orders every batch: resume with seed={_short(saved.get(SEED_KEY))}"
    elif any(line.startswith("data_order_version:") for line in refused):
        hint += (
            "; this version of roxxel puts the data in another order than the one that saved it: resume "
            "with that version, or start a new run in another checkpoint directory"
        )
    return unrecorded + list(allowed), list(refused), hint


def describe_changes(saved: Any, current: Any) -> list[str]:
    """List the differences between two JSON-like values, one readable line each.

    Paths use ``.key`` for identifier keys, ``["key"]`` otherwise and ``[i]`` for list
    items: ``"phases[1].batch_size: 16 -> 32"``, ``"datasets.web: removed (was ...)"``,
    ``"phases[2]: added {...}"``. Both values are first normalised as JSON (tuples become
    lists). ``True`` and ``1`` differ; ``1`` and ``1.0`` do not.

    Args:
        saved: the old value (from a checkpoint).
        current: the new value.

    Returns:
        The lines, in key order; empty when the values are equal.

    Raises:
        TypeError: either value is not JSON-serialisable.
    """
    out: list[str] = []
    _diff(normalize_json(saved, "saved"), normalize_json(current, "current"), "", out)
    return out


# --- JSON helpers ---------------------------------------------------------------------
