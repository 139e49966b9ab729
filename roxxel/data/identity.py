"""The run's data identity: what a checkpoint records about the data a run took (the
curriculum's description, its ``data_order_version``, the seed) and the judge of a resume
(which changes leave the batches before the restored step as they were).

The checkpointer stores the identity as a JSON fingerprint and asks its ``judge`` method
(:class:`roxxel.train.checkpoint.fingerprint.Judge`) how a saved one compares: it never
imports this module. ``Curriculum.describe()`` and ``Curriculum.identity(seed)`` return a
:class:`RunIdentity`; the Trainer reconciles its identity with any checkpointer it is given
(:func:`with_seed`).
"""

from __future__ import annotations

import json
import logging
import math
import numbers
from collections.abc import Mapping
from typing import Any, Callable

from roxxel.exit_codes import ConfigValueError
from roxxel.json_changes import describe_changes, short

__all__ = ["RECORD_DEFAULTS", "SEED_KEY", "RunIdentity", "classify_changes", "judge_resume", "with_seed"]

log = logging.getLogger("roxxel.checkpoint")

RECORD_DEFAULTS: dict[str, Any] = {"order": "chunks", "data_order_version": 1, "batch_rows": "consecutive"}
"""What a :meth:`Curriculum.describe` key means when absent: ``order`` and ``batch_rows`` are
left out at the values every earlier version used (older fingerprints stay valid), and
checkpoints saved before ``data_order_version`` existed were made by version 1."""
SEED_KEY = "seed"
"""The identity's key for the run's data seed."""


def is_curriculum(fingerprint: Any) -> bool:
    """Whether a fingerprint is a ``Curriculum.describe()`` (whose changes can be classified)."""
    return (
        isinstance(fingerprint, Mapping) and isinstance(fingerprint.get("phases"), list) and "datasets" in fingerprint
    )


def judge_resume(saved: Any, current: Any, step: int) -> tuple[list[str], list[str], str]:
    """How a resume's identity differs from the one ``step`` was saved with.

    A ``seed`` the current identity has and the saved one lacks (a step saved before the
    seed was recorded) is allowed, listed as not recorded; a changed seed is refused (it
    changes every batch). Two curriculum descriptions are compared by :func:`classify_changes`;
    anything else by :func:`~roxxel.json_changes.describe_changes`, every difference refused.

    Returns:
        ``(allowed, refused, hint)``: the changes that leave the batches before ``step`` as
        they were, the others, one line each, and the end of the sentence that tells how to
        resume (a :class:`~roxxel.train.checkpoint.fingerprint.Judgement`'s fields).
    """
    hint = ""
    unrecorded: list[str] = []
    if isinstance(saved, Mapping) and isinstance(current, Mapping) and SEED_KEY in current and SEED_KEY not in saved:
        # saved before the seed of a given Checkpointer was recorded: nothing to compare it with
        unrecorded = [f"{SEED_KEY}: not recorded in the checkpoint, now {short(current[SEED_KEY])}"]
        current = {k: v for k, v in current.items() if k != SEED_KEY}
    if is_curriculum(saved) and is_curriculum(current):
        allowed, refused = classify_changes(saved, current, step)
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
        hint += f"; the seed orders every batch: resume with seed={short(saved.get(SEED_KEY))}"
    elif any(line.startswith("data_order_version:") for line in refused):
        hint += (
            "; this version of roxxel puts the data in another order than the one that saved it: resume "
            "with that version, or start a new run in another checkpoint directory"
        )
    return unrecorded + list(allowed), list(refused), hint


class RunIdentity(dict):
    """A run's data identity: a JSON object (a curriculum's description, and ``"seed"`` when
    known) that carries its judge, so that a checkpointer given it as ``fingerprint``
    compares a resume by what the data allows (:func:`judge_resume`), not by plain equality."""

    judge = staticmethod(judge_resume)


def with_seed(fingerprint: Any, seed: int) -> Any:
    """``fingerprint`` with the run's data ``seed`` in it as ``"seed"``: what the Trainer hands
    to a checkpointer, whichever built it, so that a resume under another seed, which
    changes every batch, is refused like a changed curriculum. ``None`` gives an identity of
    the seed alone; a fingerprint that is not a mapping is left as it is (logged).

    Raises:
        ConfigValueError: the fingerprint already holds another ``"seed"`` (names both).
        TypeError: ``seed`` is not an int.
    """
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    seed = int(seed)
    if fingerprint is None:
        fingerprint = {}
    if not isinstance(fingerprint, Mapping):
        log.warning("fingerprint is not a mapping: not recording seed %d in the checkpoints", seed)
        return fingerprint
    if SEED_KEY in fingerprint and fingerprint[SEED_KEY] != seed:
        raise ConfigValueError(
            f"the checkpointer's fingerprint has seed {fingerprint[SEED_KEY]!r} but the run's seed is "
            f"{seed}: give the Trainer seed={fingerprint[SEED_KEY]!r}, or build the Checkpointer with "
            f"the run's seed (or without a 'seed' in its fingerprint)"
        )
    return RunIdentity({**fingerprint, SEED_KEY: seed})


Diff = Callable[[Any, Any], list[str]]


def classify_changes(
    saved: Mapping[str, Any], current: Mapping[str, Any], step: int, diff: Diff = describe_changes
) -> tuple[list[str], list[str]]:
    """Split the differences between two :meth:`Curriculum.describe` values into those a run
    resumed at ``step`` may take and those it must refuse.

    Batches ``0..step-1`` were taken under ``saved``; the resumed run must give exactly the
    batches an uninterrupted run of ``current`` would. So every phase that started before
    ``step`` must keep its batch size, sequence length and weights; one that ended before
    ``step`` must also keep its length; the phase holding ``step`` may be lengthened or
    shortened down to ``step`` (extending the run); phases starting at or after ``step``
    may be changed, added or removed. Datasets, ``chunk_tokens``, ``repeat``, the ``order``,
    ``batch_rows`` and the data order version shape every batch and may not change (a key an
    older checkpoint lacks counts as its :data:`RECORD_DEFAULTS` value).

    Args:
        saved: the description stored with the checkpoint.
        current: this run's description.
        step: the restored step.
        diff: ``diff(a, b) -> list[str]``, one readable line per difference.

    Returns:
        ``(allowed, refused)``: lines like ``"phases[0].steps: 60 -> 80"``.
    """
    allowed: list[str] = []
    refused: list[str] = []
    for key in sorted(set(saved) | set(current)):
        if key == "phases":
            continue
        if key not in saved and key not in RECORD_DEFAULTS:  # recorded only by newer versions: nothing to compare
            allowed.append(f"{key}: not recorded in the checkpoint, now {json.dumps(current[key], default=str)}")
        else:  # a key left out at its default means the default (an old run resumed with order="documents" is refused)
            refused += diff(
                {key: saved.get(key, RECORD_DEFAULTS.get(key))}, {key: current.get(key, RECORD_DEFAULTS.get(key))}
            )
    old, new = list(saved.get("phases") or []), list(current.get("phases") or [])
    start: float = 0  # step where phase i starts (inf after an open-ended phase)
    for i, phase in enumerate(old):
        steps = phase.get("steps")
        end = math.inf if steps is None else start + steps
        if start >= step:
            break  # this phase and the later ones are all future
        lines = diff({"phases": [phase]}, {"phases": [new[i]]}) if i < len(new) else [f"phases[{i}]: removed"]
        lines = [line.replace("phases[0]", f"phases[{i}]", 1) for line in lines]
        if i >= len(new):
            refused += lines
        else:
            new_steps = new[i].get("steps")
            new_end = math.inf if new_steps is None else start + new_steps
            length = [line for line in lines if line.startswith(f"phases[{i}].steps:")]
            refused += [line for line in lines if line not in length]
            if not (end >= step and new_end >= step):
                refused += length
            else:
                allowed += [f"{line} (the phase holding step {step} changes length)" for line in length]
        start = end
    else:
        i = len(old)
    future_from = i if old else 0
    later = diff({"phases": old[future_from:]}, {"phases": new[future_from:]})
    allowed += [_reindex(line, future_from) + f" (starts at or after step {step})" for line in later]
    return allowed, refused


def _reindex(line: str, offset: int) -> str:
    """``phases[k]...`` -> ``phases[k + offset]...`` for a diff made on a slice of the phases."""
    if not line.startswith("phases[") or offset == 0:
        return line
    k, rest = line[len("phases[") :].split("]", 1)
    return f"phases[{int(k) + offset}]{rest}"
