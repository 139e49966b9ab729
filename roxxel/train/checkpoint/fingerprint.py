"""The run fingerprint as the checkpointer sees it: a JSON value stored with every step, and
the judge that compares a resume's fingerprint with the saved one.

The checkpointer knows nothing of curricula or seeds (it imports nothing from
:mod:`roxxel.data`). A fingerprint may carry its own judge: an object with a ``judge``
method (the :class:`Judge` protocol), as :class:`roxxel.data.identity.RunIdentity` (what
``Curriculum.describe()`` returns) does, which knows which changes leave past batches as
they were. Any other fingerprint is judged by :func:`plain_judge`: every difference is
refused.
"""

from __future__ import annotations

import logging
import os
from typing import Any, NamedTuple, Protocol

from roxxel.json_changes import describe_changes, indented, normalize_json
from roxxel.train.checkpoint.errors import RunMismatchError

__all__ = [
    "Judge",
    "Judgement",
    "describe_changes",
    "indented",
    "judge_of",
    "judge_resume",
    "normalize_json",
    "plain_judge",
]

log = logging.getLogger("roxxel.checkpoint")


class Judgement(NamedTuple):
    """How a resume's fingerprint differs from the one its step was saved with."""

    allowed: list[str]
    """Changes that leave the batches before the step as they were (logged), one line each."""
    refused: list[str]
    """The others: a resume with any of them raises ``RunMismatchError`` (unless ``allow_changed_run``)."""
    hint: str = ""
    """The end of the sentence that tells how to resume (``"Resume with the same curriculum and
    datasets{hint}, or ..."``): empty, or starting with a space or a ``;``."""


class Judge(Protocol):
    """Compares the fingerprint a step was saved with against this run's.

    ``judge(saved, current, step)``: ``saved`` and ``current`` are JSON values (as
    :func:`normalize_json` gives them), ``step`` the restored step; returns a
    :class:`Judgement` (or an ``(allowed, refused, hint)`` tuple).
    """

    def __call__(self, saved: Any, current: Any, step: int) -> tuple[list[str], list[str], str]: ...


def plain_judge(saved: Any, current: Any, step: int) -> Judgement:
    """The default judge: every difference (:func:`describe_changes`) is refused."""
    return Judgement([], describe_changes(saved, current))


def judge_of(fingerprint: Any) -> Judge:
    """The judge a fingerprint carries (its ``judge`` method), else :func:`plain_judge`."""
    judge = getattr(fingerprint, "judge", None)
    return judge if callable(judge) else plain_judge


def judge_resume(
    judge: Judge, saved: Any, current: Any, *, directory: os.PathLike[str], step: int, allow_changed: bool
) -> list[str]:
    """Whether this run (fingerprint ``current``) may resume ``step`` of ``directory``, saved
    under the fingerprint ``saved`` (``None``: saved without one, so nothing is checked).

    Returns:
        The changes the resume goes on with, one line each (logged as a warning): those
        ``judge`` allows, and with ``allow_changed`` also those it refuses; ``[]`` when none.

    Raises:
        RunMismatchError: ``judge`` refuses a change and ``allow_changed`` is off; names
            every change and the two ways on.
    """
    if saved is None:
        log.warning(
            "checkpoint of step %d in %s has no fingerprint: cannot check it belongs to this run", step, directory
        )
        return []
    allowed, changes, hint = judge(saved, current, step)
    if allowed:
        log.warning(
            "resuming step %d of %s with changes that leave the batches before it as they were:\n%s",
            step,
            directory,
            indented(allowed),
        )
    if not changes:
        return list(allowed)
    shown = indented(changes)
    if allow_changed:
        log.warning("resuming step %d of %s under a changed run (allow_changed_run=True):\n%s", step, directory, shown)
        return [*allowed, *changes]
    raise RunMismatchError(
        f"the checkpoint of step {step} in {directory} was saved by a different run "
        f"(saved -> current):\n{shown}\n"
        f"Resume with the same curriculum and datasets{hint}, or pass allow_changed_run=True "
        "(a Trainer's restore=RestoreOptions(allow_changed_run=True)) to resume anyway.",
        step=step,
        changes=changes,
        saved=saved,
        current=current,
    )
