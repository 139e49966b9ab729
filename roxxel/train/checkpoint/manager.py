"""Orbax's ``CheckpointManager`` as the :class:`~roxxel.train.checkpoint.Checkpointer` sets
it up: which steps are saved (an interval, and the preemption step), which are kept (the
latest N, and the best by one metric), and its preemption checks answered by
:class:`~roxxel.train.checkpoint.preemption.PreemptionSync`."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

import orbax.checkpoint as ocp
from etils import epath
from orbax.checkpoint import checkpoint_managers as ocm

from roxxel.train.checkpoint.directory import damaged_metrics
from roxxel.train.checkpoint.preemption import PreemptionSync

log = logging.getLogger("roxxel.checkpoint")


def metric_ranker(metric: str, mode: str) -> Any:
    """Orbax's ``best_fn``: the metric as a float; a step whose stored metrics lack it
    (e.g. saved under another ``best_metric``) or hold a non-finite value ranks worst."""
    worst = math.inf if mode == "min" else -math.inf

    def rank(metrics: Any) -> float:
        raw = metrics.get(metric) if isinstance(metrics, Mapping) else None
        if raw is None:
            return worst
        try:
            value = float(raw)
        except (TypeError, ValueError):
            return worst
        return value if math.isfinite(value) else worst

    return rank


class _Manager(ocp.CheckpointManager):
    """Orbax's manager, whose own preemption checks (in ``should_save``, ``save`` and the
    finalize thread) ask the checkpointer's :class:`PreemptionSync`, so that JAX is given
    this attempt's step ids (see :mod:`roxxel.train.checkpoint.preemption`)."""

    def __init__(self, directory: Any, *, options: ocp.CheckpointManagerOptions, preemption: PreemptionSync) -> None:
        self._roxxel_preemption = preemption
        super().__init__(directory, options=options)

    def reached_preemption(self, step: int) -> bool:
        return self._roxxel_preemption.agreed(step)


def open_manager(
    directory: epath.Path,
    *,
    max_to_keep: int | None,
    keep_best: bool,
    best_metric: str,
    best_mode: str,
    save_interval_steps: int,
    timeout: float,
    preemption: PreemptionSync,
) -> ocp.CheckpointManager:
    """The asynchronous manager of ``directory`` (created if missing; half-written steps removed).

    Raises:
        CheckpointRestoreError: a step's metrics file is damaged (Orbax reads them all here).
    """
    rank = metric_ranker(best_metric, best_mode)
    preserve: list[Any] = [ocm.LatestN(n=max_to_keep)]
    if keep_best:
        preserve.append(
            ocm.BestN(
                get_metric_fn=rank,
                reverse=(best_mode == "min"),
                n=1,
                keep_checkpoints_without_metrics=False,
            )
        )
    options = ocp.CheckpointManagerOptions(
        # No InitialSavePolicy: the first save of a run follows the interval like the others.
        save_decision_policy=ocm.AnySavePolicy(
            [ocm.FixedIntervalPolicy(save_interval_steps), ocm.PreemptionCheckpointingPolicy()]
        ),
        preservation_policy=ocm.AnyPreservationPolicy(preserve),
        # best_fn makes Orbax write each step's metrics next to it, so the best step
        # is still known after a restart; keeping itself is the policy above.
        best_fn=rank if keep_best else None,
        best_mode=best_mode,
        keep_checkpoints_without_metrics=False,
        create=True,
        cleanup_tmp_directories=True,
        enable_async_checkpointing=True,
        async_options=ocp.AsyncOptions(timeout_secs=max(1, int(math.ceil(timeout)))),
    )
    try:
        return _Manager(directory, options=options, preemption=preemption)
    except (ValueError, UnicodeDecodeError) as err:  # JSONDecodeError is a ValueError
        raise damaged_metrics(directory) or err


def open_branch_source(directory: epath.Path) -> ocp.CheckpointManager:
    """A read-only manager over another run's directory (nothing there is written or removed)."""
    options = ocp.CheckpointManagerOptions(read_only=True, create=False, enable_async_checkpointing=False)
    try:
        return ocp.CheckpointManager(directory, options=options)
    except (ValueError, UnicodeDecodeError) as err:
        raise damaged_metrics(directory) or err


def ranked_metrics(metrics: Mapping[str, Any], best_metric: str, step: int) -> dict[str, float] | None:
    """What Orbax ranks ``step`` by: ``{best_metric: value}``, or None when the metric is
    absent or not a finite number (such a step is never the best; the latter is logged)."""
    value = metrics.get(best_metric)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return {best_metric: float(value)}
    if value is not None:
        log.warning("step %d: %s=%r is not a finite number; the step cannot be the best", step, best_metric, value)
    return None
