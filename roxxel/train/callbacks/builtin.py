"""The Trainer's callbacks: a default :class:`Throughput` and straggler report unless one is
given, and its deprecated keyword shortcuts (``learning_rate=``, ``flops_per_token=``,
``profile_steps=`` ...) turned into the callbacks they stand for, ahead of the user's own."""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence

from roxxel.exit_codes import ConfigValueError
from roxxel.train.callbacks.base import Callback
from roxxel.train.callbacks.learning_rate import LearningRate
from roxxel.train.callbacks.profiling import Profile, check_window
from roxxel.train.callbacks.throughput import Throughput
from roxxel.train.stragglers import StragglerReport

__all__ = ["trainer_callbacks"]


def trainer_callbacks(
    callbacks: Sequence[Callback],
    *,
    learning_rate: Callable[[int], Any] | float | None = None,
    flops_per_token: float | None = None,
    num_params: int | None = None,
    peak_flops_per_device: float | None = None,
    profile_steps: tuple[int, int] | None = None,
    save_path: str | None = None,
    log: Callable[[str], None] | None = None,
) -> list[Callback]:
    """The callbacks a Trainer runs: the built-in ones its arguments ask for, then ``callbacks``.

    A :class:`Throughput` is always among them (``tokens_per_sec`` is always logged): the one
    in ``callbacks``, else one built from ``flops_per_token``, ``num_params`` and
    ``peak_flops_per_device``; so is a :class:`~roxxel.train.stragglers.StragglerReport`
    (a default one after the Throughput, unless ``callbacks`` holds one). ``learning_rate`` adds a :class:`LearningRate`, and
    ``profile_steps`` a :class:`Profile` into ``save_path/profile``, which reports to ``log``
    (as does a ``Profile`` in ``callbacks`` given no ``log`` of its own).

    Raises:
        ValueError: an argument whose callback ``callbacks`` already holds (two would log the
            same metric, or start two traces); ``profile_steps`` without ``save_path``, or not
            ``(first, last)`` with ``1 <= first <= last``.
    """
    user = list(callbacks)
    builtin: list[Callback] = []
    flops = {
        k: v
        for k, v in (
            ("flops_per_token", flops_per_token),
            ("num_params", num_params),
            ("peak_flops_per_device", peak_flops_per_device),
        )
        if v is not None
    }
    if not any(isinstance(cb, Throughput) for cb in user):
        builtin.append(Throughput(flops_per_token, num_params, peak_flops_per_device))
    elif flops:
        raise _given_twice(", ".join(flops), Throughput)
    if not any(isinstance(cb, StragglerReport) for cb in user):
        builtin.append(StragglerReport())
    if learning_rate is not None:
        if any(isinstance(cb, LearningRate) for cb in user):
            raise _given_twice("learning_rate", LearningRate)
        builtin.append(LearningRate(learning_rate))
    if profile_steps is not None:
        if any(isinstance(cb, Profile) for cb in user):
            raise _given_twice("profile_steps", Profile)
        check_window(profile_steps)
        if save_path is None:
            raise ConfigValueError("profile_steps needs save_path (the trace goes to save_path/profile)")
        builtin.append(Profile(profile_steps, os.path.join(save_path, "profile"), log))
    for cb in user:
        if isinstance(cb, Profile) and cb.log is None:  # its "written to" line goes to the run's log too
            cb.log = log
    return builtin + user


def _given_twice(arguments: str, kind: type) -> ConfigValueError:
    return ConfigValueError(
        f"Trainer: {arguments} and a {kind.__name__} in callbacks= both given; "
        f"configure the {kind.__name__} callback only"
    )
