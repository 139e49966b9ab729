"""Callbacks: the hooks of the Trainer's loop, and the built-in ones.

The Trainer's core is the step loop, gradient accumulation, the NaN guard, evaluation,
checkpointing and the watchdog; what watches the loop is a callback: :class:`Throughput`
(tokens per second, model FLOPs, MFU), :class:`LearningRate` (the schedule's rate),
:class:`Profile` (a ``jax.profiler`` trace of some steps) and :class:`Goodput` (productive
time against each kind of badput, across attempts). Pass them, and your own, in the
Trainer's ``callbacks=``; it runs a default :class:`Throughput` and a default straggler
report (:class:`roxxel.train.stragglers.StragglerReport`) when none is given (its
deprecated ``flops_per_token=``, ``learning_rate=`` and ``profile_steps=`` keywords still
build the first three). Each window's timing is read from the loop's sections
(:mod:`roxxel.train.sections`), which a callback's ``on_section`` receives as well.
"""

from roxxel.train.callbacks.base import Callback, Window
from roxxel.train.callbacks.goodput import Goodput
from roxxel.train.callbacks.learning_rate import LearningRate
from roxxel.train.callbacks.profiling import Profile
from roxxel.train.callbacks.throughput import PEAK_FLOPS_PER_DEVICE, Throughput

__all__ = ["PEAK_FLOPS_PER_DEVICE", "Callback", "Goodput", "LearningRate", "Profile", "Throughput", "Window"]
