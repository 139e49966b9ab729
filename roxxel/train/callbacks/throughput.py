"""Throughput of each logging window: tokens per second, step time, model FLOPs and MFU.

The Trainer adds one :class:`Throughput` to every run (``tokens_per_sec`` is always logged);
pass your own in ``callbacks=`` to give it a FLOP count (the Trainer's ``flops_per_token=``,
``num_params=`` and ``peak_flops_per_device=`` keywords still build it, deprecated). Its
numbers come from the loop's sections: each window's :class:`Window` is the ``step`` and
``data_wait`` sections of its timed steps, as :class:`~roxxel.train.sections.TimedSteps`
reads them, the window's last step waiting in its section for its result.
"""

from __future__ import annotations

import numbers
from typing import Mapping

import jax

from roxxel.exit_codes import ConfigValueError
from roxxel.train.callbacks.base import Callback, Window

__all__ = ["PEAK_FLOPS_PER_DEVICE", "Throughput", "peak_flops"]

# Peak dense bf16 FLOP/s per device, from the vendors' datasheets; matched on the start
# of ``device.device_kind``. Pass ``peak_flops_per_device`` for anything else.
PEAK_FLOPS_PER_DEVICE = {
    "TPU v4": 275e12,
    "TPU v5 lite": 197e12,
    "TPU v5e": 197e12,
    "TPU v5p": 459e12,
    "TPU v5": 459e12,
    "TPU v6 lite": 918e12,
    "TPU v6e": 918e12,
    "NVIDIA H100": 989e12,
    "NVIDIA H200": 989e12,
    "NVIDIA A100": 312e12,
    "NVIDIA B200": 2250e12,
}


def peak_flops(device_kind: str) -> float | None:
    """Peak bf16 FLOP/s of a device kind (``jax.Device.device_kind``), or None when unknown
    (CPUs, other accelerators); the longest matching prefix of :data:`PEAK_FLOPS_PER_DEVICE` wins."""
    for kind in sorted(PEAK_FLOPS_PER_DEVICE, key=len, reverse=True):
        if device_kind.startswith(kind):
            return PEAK_FLOPS_PER_DEVICE[kind]
    return None


class Throughput(Callback):
    """Adds each window's throughput to its metrics (see docs/logging.md for each one).

    Logs ``tokens_per_sec`` (global tokens per second), ``tokens_per_sec_per_device``
    (divided by ``jax.device_count()``) and ``step_time_s`` (seconds per timed step); with
    a FLOP count also ``model_tflops_per_device`` (``tokens_per_sec_per_device *
    flops_per_token / 1e12``) and, with a known peak, ``mfu`` (model FLOPs utilisation: that
    rate over ``peak_flops_per_device``). A window without timed steps (only a phase's
    compiling first step) adds nothing.

    Args:
        flops_per_token: model FLOPs per trained token, forward and backward.
        num_params: the model's parameter count, when ``flops_per_token`` is not given: taken
            as ``6 * num_params`` (forward 2N + backward 4N per token, Kaplan et al. 2020).
        peak_flops_per_device: the device's peak FLOP/s for ``mfu`` (default: from
            :data:`PEAK_FLOPS_PER_DEVICE` by ``jax.devices()[0].device_kind``; none for CPUs).

    Raises:
        ValueError: a FLOP count or peak that is not a positive number.
    """

    def __init__(
        self,
        flops_per_token: float | None = None,
        num_params: int | None = None,
        peak_flops_per_device: float | None = None,
    ) -> None:
        if flops_per_token is None and num_params is not None:
            flops_per_token = 6.0 * _positive("num_params", num_params)
        self.flops_per_token = None if flops_per_token is None else _positive("flops_per_token", flops_per_token)
        if peak_flops_per_device is None:
            self.peak_flops_per_device = peak_flops(jax.devices()[0].device_kind)
        else:
            self.peak_flops_per_device = _positive("peak_flops_per_device", peak_flops_per_device)

    def window_metrics(self, step: int, window: Window) -> Mapping[str, float]:
        if not window.steps:
            return {}
        rate = window.tokens / max(window.seconds, 1e-9)
        per_device = rate / jax.device_count()
        metrics = {
            "tokens_per_sec": rate,
            "tokens_per_sec_per_device": per_device,
            "step_time_s": window.seconds / window.steps,
        }
        if self.flops_per_token is not None:
            flops = per_device * self.flops_per_token
            metrics["model_tflops_per_device"] = flops / 1e12
            if self.peak_flops_per_device:
                metrics["mfu"] = flops / self.peak_flops_per_device
        return metrics


def _positive(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0:
        raise ConfigValueError(f"{name} must be a positive number, got {value!r}")
    return float(value)
