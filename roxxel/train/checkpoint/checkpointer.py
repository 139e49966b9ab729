"""The :class:`Checkpointer`: what one step holds, when it is saved, how it is restored.

See :mod:`roxxel.train.checkpoint` for the layout of a step, keeping, preemption and errors.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import math
import numbers
import os
import shutil
import time
from collections.abc import Iterator, Mapping
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from etils import epath
from flax import nnx
from orbax.checkpoint import checkpoint_managers as ocm

from roxxel._version import __version__
from roxxel.contract import ENV_RESTORE_FROM, PREEMPTION_FILE
from roxxel.data.curriculum import RECORD_DEFAULTS, classify_changes
from roxxel.exit_codes import PREEMPTED_EXIT_CODE, ConfigValueError
from roxxel.run import branch_overlap
from roxxel.train.checkpoint import _orbax, lifecycle, ownership
from roxxel.train.checkpoint.directory import check_gcs_backend, damaged_metrics, resolve_directory
from roxxel.train.checkpoint.errors import (
    CheckpointCorruptError,
    CheckpointRestoreError,
    CheckpointSaveError,
    ModelChangeError,
    Preempted,
    RunMismatchError,
    one_line,
)
from roxxel.train.checkpoint.fingerprint import describe_changes, indented, is_curriculum, normalize_json
from roxxel.train.checkpoint.preemption import PreemptionSync
from roxxel.train.digest import array_checksums
from roxxel.train.partial import RestorePlan, layout_of_metadata, layout_of_state, plan_restore, subset
from roxxel.train.state import ModelState
from roxxel.wording import as_clause, count

log = logging.getLogger("roxxel.checkpoint")

STATE_ITEM = "state"
"""Name of the composite item holding model and optimizer variables."""
RUN_ITEM = "run"
"""Name of the composite item holding the run's JSON record."""
RUN_FORMAT = 1
"""Version of the ``run`` item's layout."""


def _fmt(spec: tuple[tuple[int, ...], str] | None) -> str:
    """``(shape, dtype)`` as ``"shape (4, 3) float32"``."""
    return "absent" if spec is None else f"shape {spec[0]} {spec[1]}"



def _json_scalar(value: Any, name: str) -> Any:
    """A metric value as a plain Python scalar (numbers, 0-d / 1-element arrays, str, bool)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, (np.ndarray, np.generic, jax.Array)) and np.size(value) == 1:
        item = np.asarray(value).reshape(()).item()
        return item if isinstance(item, (bool, int, float)) else float(item)
    raise TypeError(f"metric {name!r} must be a number, a one-element array, a str, a bool or None; got {type(value).__name__}")


def _json_metrics(metrics: Mapping[str, Any] | None) -> dict[str, Any]:
    if metrics is None:
        return {}
    if not isinstance(metrics, Mapping):
        raise TypeError(f"metrics_dict must be a mapping of names to numbers, got {type(metrics).__name__}")
    return {str(k): _json_scalar(v, str(k)) for k, v in metrics.items()}


# --- the checkpointer -------------------------------------------------------------------


def _replicated_sharding() -> jax.sharding.Sharding:
    mesh = jax.sharding.Mesh(np.asarray(jax.devices()), ("all",))
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())


def _abstract_leaf(x: Any) -> Any:
    """Restore target for one leaf: shape, dtype and the sharding it has *now*."""
    if isinstance(x, jax.Array):
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
    if isinstance(x, jax.ShapeDtypeStruct):  # an abstract model (nnx.eval_shape)
        if x.sharding is None:
            return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=_replicated_sharding())
        return x
    return x  # numpy arrays and Python scalars restore as their own type


def _metric_ranker(metric: str, mode: str) -> Any:
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


class Checkpointer:
    """Save and restore a model and optimizer with Orbax, asynchronously, on every process.

    Every process of a ``jax.distributed`` job constructs it and calls :meth:`save`,
    :meth:`restore`, :meth:`reached_preemption` and :meth:`close` in the same order with
    the same arguments (Orbax synchronises them with barriers).

    Args:
        checkpoint_path: a local directory (created, also on every missing parent)
            or ``gs://bucket/prefix``.
        model: the ``nnx.Module`` to checkpoint (or give ``state=``).
        optimizer: its ``nnx.Optimizer``, or ``None`` to checkpoint the model alone.
        max_to_keep: how many of the latest steps to keep (``None``: all), ``>= 1``.
        timeout: seconds an asynchronous save may take from the call to :meth:`save`
            until it is committed, including waiting for the other processes and the
            storage library's own retries (gcsfs, TensorStore); past it the save fails
            with :class:`CheckpointSaveError`, its writes are abandoned (the step stays
            incomplete) and the process exits non-zero at the end.
        state: instead of ``model``/``optimizer``: a :class:`ModelState`, or an object
            with ``model`` and ``optimizer`` attributes (a restore sets its ``step``
            when it is an int attribute).
        fingerprint: JSON-serialisable description of the run (the trainer passes
            ``Curriculum.describe()``), stored with each step and compared on restore;
            ``None`` stores nothing and checks nothing.
        keep_best: also keep the best step by ``best_metric``.
        best_metric: the key of ``metrics_dict`` that ranks steps.
        best_mode: ``"min"`` (lower is better, e.g. a loss) or ``"max"``.
        allow_changed_run: on a fingerprint mismatch, log a warning instead of raising.
        save_interval_steps: :meth:`save` writes only steps divisible by it (``>= 1``),
            unless forced or at a preemption step.
        run_name: the run this directory belongs to (the Trainer passes ``ROXXEL_RUN_NAME``):
            recorded at the first save, and a checkpointer of another run is refused
            (:mod:`roxxel.train.checkpoint.ownership`); ``None`` records and checks no name.
        restore_from: the checkpoint directory of another run (local or ``gs://``) to
            branch from: while this directory holds no complete step, :meth:`restore`
            reads that one's latest step (or ``step=``) instead, with the same checks, and
            the run saves here from then on. It is only read: its owner and writer lock
            are neither checked nor taken (the explicit way to fine-tune from another run's
            weights; a run pointed at another run's own directory is refused).
            Process 0 also holds the directory's writer lock while open.

    Raises:
        TypeError: neither or both of ``model`` and ``state`` given, wrong types, or a
            fingerprint that is not JSON-serialisable.
        ValueError: a bad path or option value.
        ImportError: a ``gs://`` path without the ``gcsfs`` package.
        CheckpointOwnerError: the directory belongs to another run, another trainer holds
            its writer lock, or the processes of this run name different directories or runs.
    """

    def __init__(
        self,
        checkpoint_path: str | os.PathLike[str],
        model: nnx.Module | None = None,
        optimizer: nnx.Optimizer | None = None,
        max_to_keep: int | None = 3,
        timeout: float = 600,
        *,
        state: Any = None,
        fingerprint: Mapping[str, Any] | None = None,
        keep_best: bool = True,
        best_metric: str = "loss",
        best_mode: str = "min",
        allow_changed_run: bool = False,
        save_interval_steps: int = 1,
        run_name: str | None = None,
        restore_from: str | os.PathLike[str] | None = None,
    ) -> None:
        if (model is None) == (state is None):
            raise TypeError("give either `model` (and `optimizer`) or `state=`, not both and not neither")
        if state is not None and optimizer is not None:
            raise TypeError("`optimizer` cannot be combined with `state=`; put it in the state object")
        self._target = state
        if state is not None:
            self._state = ModelState.from_object(state)
        else:
            assert model is not None  # checked above: exactly one of model and state
            self._state = ModelState(model, optimizer)
        if max_to_keep is not None and (isinstance(max_to_keep, bool) or not isinstance(max_to_keep, int) or max_to_keep < 1):
            raise ValueError(f"max_to_keep must be an int >= 1 or None, got {max_to_keep!r}")
        if isinstance(save_interval_steps, bool) or not isinstance(save_interval_steps, int) or save_interval_steps < 1:
            raise ValueError(f"save_interval_steps must be an int >= 1, got {save_interval_steps!r}")
        if not (isinstance(timeout, (int, float)) and timeout > 0 and math.isfinite(timeout)):
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if best_mode not in ("min", "max"):
            raise ValueError(f"best_mode must be 'min' or 'max', got {best_mode!r}")
        if not isinstance(best_metric, str) or not best_metric:
            raise ValueError(f"best_metric must be a non-empty str, got {best_metric!r}")

        self.directory = resolve_directory(checkpoint_path)
        check_gcs_backend(self.directory)
        self.restore_from = None if restore_from is None else resolve_directory(restore_from)
        if self.restore_from is not None:
            check_gcs_backend(self.restore_from)
            mine, other = os.fspath(self.directory), os.fspath(self.restore_from)
            overlap = branch_overlap(mine, other)
            if overlap == "same":
                raise ConfigValueError(f"restore_from {other!r} is this run's own checkpoint directory; give the other "
                                       "run's directory, or leave restore_from out to resume")
            if overlap == "nested":
                raise ConfigValueError(f"restore_from {other!r} and the checkpoint directory {mine!r} are nested: the "
                                       "branch would write inside the other run's directory (or read its own); give "
                                       "them separate directories")
        self.fingerprint = None if fingerprint is None else normalize_json(fingerprint, "fingerprint")
        self.allow_changed_run = bool(allow_changed_run)
        self.best_metric = best_metric
        self.best_mode = best_mode
        self.keep_best = bool(keep_best)
        self.max_to_keep = max_to_keep
        self.save_interval_steps = save_interval_steps
        self.restore_plan: RestorePlan | None = None
        """What the last :meth:`restore` read: arrays restored, new, dropped, and whether
        the optimizer state was restored (see :class:`~roxxel.train.partial.RestorePlan`)."""
        self.restored_from: epath.Path | None = None
        """The directory the last :meth:`restore` read: this one, or :attr:`restore_from`."""
        self.restored_run: dict[str, Any] | None = None
        """The ``run`` record of the last restored step (``step``, ``tokens_consumed``,
        ``metrics``, ``fingerprint``, ``settings``, ...), or ``None`` before a restore / when none."""
        self.run_changes: list[str] = []
        """How this run's fingerprint differs from the restored step's, one line each
        (``"phases[0].steps: 40 -> 60"``): the changes a resume allows, and with
        ``allow_changed_run`` any; empty before a restore or when nothing changed."""
        self.settings: dict[str, Any] = {"save_interval_steps": save_interval_steps}
        """Settings that leave the run's batches as they are (cadences, prefetch; the Trainer
        adds its own), JSON-serialisable: stored with each step as ``settings``; a resume
        under other ones is allowed and :meth:`changed_settings` lists what changed."""

        rank = _metric_ranker(best_metric, best_mode)
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
        self._preemption = PreemptionSync()
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
            self._manager = _Manager(self.directory, options=options, preemption=self._preemption)
        except (ValueError, UnicodeDecodeError) as err:  # JSONDecodeError is a ValueError
            raise damaged_metrics(self.directory) or err
        self.run_name = run_name
        self._claim_directory()
        lifecycle.open_checkpointers.add(self)
        lifecycle.install_exit_hook()
        lifecycle.warn_untested_versions()
        lifecycle.divert_orbax_tracebacks()
        self._pending_step: int | None = None  # a save whose completion has not been checked
        self._pending_operation: str | None = None  # Orbax's operation id of that save
        self._save_deadline: float | None = None  # time.monotonic() that save must end by
        self._abandoned = False  # that save outlived its deadline: its threads may still run
        self._closed = False
        self._timeout = float(timeout)
        self._saved_steps: set[int] = set()  # steps this Checkpointer saved
        log.info(
            "checkpoints in %s: keep latest %s%s, save every %d steps, existing steps %s",
            self.directory,
            "all" if max_to_keep is None else max_to_keep,
            f" + best by {best_metric} ({best_mode})" if keep_best else "",
            save_interval_steps,
            list(self._manager.all_steps()),
        )

    def _claim_directory(self) -> None:
        """Refuse a directory of another run or with another writer, on every process alike."""
        holder = ownership.acquire_writer_lock(self.directory, self.run_name) if jax.process_index() == 0 else None
        try:
            ownership.check_agreement(self.directory, self.run_name, holder)
            ownership.check_owner(self.directory, self.run_name)
        except BaseException:
            if jax.process_index() == 0 and holder is None:
                ownership.release_writer_lock(self.directory)
            self._manager.close()
            raise
        self._owner_recorded = False

    # -- introspection ---------------------------------------------------------------

    @property
    def manager(self) -> ocp.CheckpointManager:
        """The underlying ``orbax.checkpoint.CheckpointManager`` (advanced use)."""
        return self._manager

    @property
    def state(self) -> ModelState:
        """The :class:`ModelState` being checkpointed."""
        return self._state

    def all_steps(self) -> list[int]:
        """Steps saved or being saved, ascending, as this process knows them."""
        return list(self._manager.all_steps())

    def latest_step(self) -> int | None:
        """The latest step saved or being saved, or ``None``."""
        return self._manager.latest_step()

    def best_step(self) -> int | None:
        """The step with the best ``best_metric`` (the latest when ``keep_best`` is off
        or no step has the metric), or ``None`` when there is no step."""
        best = self._manager.best_step()
        return best if best is not None else self._manager.latest_step()

    # -- saving ---------------------------------------------------------------------------

    def save(
        self,
        step: int,
        metrics_dict: Mapping[str, Any] | None = None,
        *,
        tokens_consumed: int | None = None,
        force: bool = False,
    ) -> bool:
        """Start an asynchronous save of the current state as ``step``; every process calls it.

        Blocks only for the device-to-host copy (and for the previous save, if it is
        still being written); the files are written in the background.

        Args:
            step: completed optimizer steps (``>= 0``) the state corresponds to.
            metrics_dict: scalars to store, e.g. ``{"loss": 2.31}`` (numbers or
                one-element arrays). ``best_metric`` ranks the step for keeping.
            tokens_consumed: training tokens consumed before ``step``, stored as is.
            force: save even if ``step`` is not a multiple of ``save_interval_steps``.

        Returns:
            True if a save of ``step`` started; False when the interval skips it or it
            is not newer than the latest saved step (a step is never overwritten).

        Raises:
            CheckpointSaveError: a previous asynchronous save failed.
            TypeError, ValueError: bad arguments.
            RuntimeError: the checkpointer is closed.
        """
        self._check_open()
        step = self._check_step(step)
        if tokens_consumed is not None:
            if isinstance(tokens_consumed, bool) or not isinstance(tokens_consumed, numbers.Integral) or tokens_consumed < 0:
                raise ValueError(f"tokens_consumed must be an int >= 0 or None, got {tokens_consumed!r}")
            tokens_consumed = int(tokens_consumed)
        metrics = _json_metrics(metrics_dict)

        if self._pending_step is not None and not self._manager.is_saving_in_progress():
            self._wait()  # the previous save has finished: surface its error now

        if step in self._manager.all_steps():
            if step in self._saved_steps:
                log.debug("step %d is already saved; not saving it again", step)
            else:  # an earlier run's (after restore(step=N) of an older step): this state would be lost unsaid
                log.warning("step %d is already saved in %s by an earlier run and is never overwritten: this state "
                            "is not saved, and restore() will take that step; delete it first to keep this one",
                            step, self.directory)
            return False
        preempted = self._preemption.agreed_step == step
        if not (force or preempted or self._manager.should_save(step)):
            return False
        latest = self._manager.latest_step()
        if latest is not None and step < latest:
            log.warning("saving step %d although step %d is newer; restore() takes the latest", step, latest)

        self._wait()  # surface an error of the previous save before starting this one
        lost = ownership.lock_lost(self.directory) if jax.process_index() == 0 else None
        if lost is not None:  # the other processes stop at Orbax's barrier, within its timeout
            raise ownership.CheckpointOwnerError(f"not saving step {step} to {self.directory}: {lost}")
        orbax_metrics = None
        if self.keep_best:
            value = metrics.get(self.best_metric)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                orbax_metrics = {self.best_metric: float(value)}
            elif value is not None:
                log.warning("step %d: %s=%r is not a finite number; the step cannot be the best", step, self.best_metric, value)
        run = {
            "format": RUN_FORMAT,
            "step": step,
            "tokens_consumed": tokens_consumed,
            "metrics": metrics,
            "fingerprint": self.fingerprint,
            "roxxel_version": __version__,
            "process_count": jax.process_count(),
            "settings": normalize_json(self.settings, "settings"),
        }
        deadline = time.monotonic() + self._timeout  # bounds the whole save, from this call on
        pure = nnx.to_pure_dict(self._state.nnx_state())
        run["checksums"] = array_checksums(pure)
        run["saved_at"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        saved = self._manager.save(
            step,
            args=ocp.args.Composite(**{STATE_ITEM: ocp.args.StandardSave(pure), RUN_ITEM: ocp.args.JsonSave(run)}),
            metrics=orbax_metrics,
            force=True,  # the decision was made above
        )
        if saved:
            if not self._owner_recorded and jax.process_index() == 0:
                ownership.record_owner(self.directory, self.run_name)
            self._owner_recorded = True
            self._saved_steps.add(step)
            self._pending_step = step
            self._pending_operation = _orbax.current_operation_id()
            self._save_deadline = deadline
            log.info("saving step %d to %s%s", step, self.directory, " (preemption)" if preempted else "")
        return bool(saved)

    def wait_until_finished(self) -> None:
        """Block until the save in progress (if any) is complete on every process.

        Raises:
            CheckpointSaveError: that save failed (the step is not complete).
        """
        self._check_open()
        self._wait()

    def _wait(self) -> None:
        """Wait for the pending save until its deadline. Orbax's own timeout bounds only its
        barriers; a storage client retrying errors (gcsfs: 6 tries, ~30 s) outlasts it, so
        the wait itself is bounded: past the deadline the save is abandoned and every later
        wait fails at once (its threads still hold Orbax's manager; the exit hook ends the
        process non-zero)."""
        step = self._pending_step
        try:
            if self._save_deadline is not None and not _orbax.join_save(self._manager, self._save_deadline):
                raise lifecycle.DeadlinePassed(f"the save of step {step}")
            self._manager.wait_until_finished()  # raises a failed save's error, once per thread
        except lifecycle.DeadlinePassed:
            self._abandoned = True
            lifecycle.mark_failed()
            _orbax.release_waiters(self._pending_operation)
            raise CheckpointSaveError(
                f"the asynchronous save of step {step} to {self.directory} did not finish within "
                f"the checkpointer's timeout ({self._timeout:g} s): the storage keeps failing or is "
                "too slow; the step is left incomplete (restore takes an earlier one)",
                step=step,
            ) from None
        except Exception as err:
            self._pending_step = None
            self._save_deadline = None
            lifecycle.mark_failed()
            _orbax.release_waiters(self._pending_operation)
            lifecycle.keep_short(err)
            raise CheckpointSaveError(
                f"the asynchronous save of step {step} to {self.directory} failed: {type(err).__name__}: {err}",
                step=step,
            ) from err
        if step is not None:
            log.debug("save of step %d is complete", step)
        self._pending_step = None
        self._save_deadline = None

    # -- restoring ------------------------------------------------------------------------

    def restore(self, step: int | None = None, *, partial: bool = False) -> int:
        """Load the latest complete step (or ``step``) into the live model and optimizer.

        Arrays are read straight into the shapes, dtypes and shardings the live state
        has now (its current mesh), whatever the number of processes that saved them.
        Every process calls it.

        By default the live model must have exactly the checkpoint's arrays. With
        ``partial=True`` the model definition may have changed (see
        :mod:`roxxel.train.partial`): arrays in both are restored, new ones keep their
        initial values, ones the model no longer has are reported and not read; the
        optimizer state is restored when its arrays match the checkpoint's exactly and
        re-initialised otherwise. What was restored, new and dropped is logged and kept in
        :attr:`restore_plan`. Checksums are verified for every array read.

        Args:
            step: the step to restore; ``None`` for the latest complete one.
            partial: allow a changed model definition (explicit: a resume of an unchanged
                model never needs it).

        Returns:
            The restored step; 0 when the directory holds no complete step (the state is
            then left as it is and ``restored_run`` is ``None``).

        Raises:
            RunMismatchError: the checkpoint's fingerprint differs from this run's in what
                batches before the step depended on (unless ``allow_changed_run``);
                nothing was loaded.
            CheckpointCorruptError: an array read back does not match its checksum
                recorded at save (names the array and the earlier steps); nothing was loaded.
            ModelChangeError: an array of the model has another shape or dtype than in the
                checkpoint (names its path and both), or, without ``partial``, the model has
                arrays the checkpoint lacks or lacks some it has; nothing was loaded.
            CheckpointRestoreError: the step cannot be read (damaged or missing files,
                bad JSON, a state that does not fit the live model); names the directory,
                the step, the cause and the earlier steps.
            FileNotFoundError: ``step`` was given but is not a complete checkpoint.
            CheckpointSaveError: a save of this checkpointer failed.
        """
        self._check_open()
        self._wait()
        self._await_tmp_cleanup()
        self._manager.reload()
        source, directory = self._manager, self.directory
        if not list(self._manager.all_steps()):
            given = os.environ.get(ENV_RESTORE_FROM)
            if self.restore_from is not None:
                source, directory = self._branch_source(), self.restore_from
            elif given:
                log.warning("%s=%s is set (the job spec's restore_from) but this Checkpointer was given no "
                            "restore_from: it starts from scratch. Pass restore_from=roxxel.run.run_info().restore_from",
                            ENV_RESTORE_FROM, given)
        try:
            if source is not self._manager and not list(source.all_steps()):
                raise ConfigValueError(
                    f"restore_from {os.fspath(directory)!r} holds no complete checkpoint (missing, empty, or only "
                    f"unfinished steps), so this run would start from scratch instead of branching; give the other "
                    f"run's checkpoint_dir, or leave restore_from out to start afresh")
            return self._restore_from(source, directory, step, partial)
        finally:
            if source is not self._manager:
                source.close()

    def _branch_source(self) -> ocp.CheckpointManager:
        """A read-only manager over :attr:`restore_from` (nothing there is written or removed)."""
        options = ocp.CheckpointManagerOptions(read_only=True, create=False, enable_async_checkpointing=False)
        try:
            return ocp.CheckpointManager(self.restore_from, options=options)
        except (ValueError, UnicodeDecodeError) as err:
            raise damaged_metrics(self.restore_from) or err

    def _restore_from(self, source: ocp.CheckpointManager, directory: epath.Path, step: int | None,
                      partial: bool) -> int:
        steps = source.all_steps()
        if step is None:
            if not steps:
                log.info("no checkpoint in %s; starting from step 0", directory)
                self.restored_run = None
                return 0
            step = max(steps)
        else:
            step = self._check_step(step)
            if step not in steps:
                raise FileNotFoundError(f"no complete checkpoint of step {step} in {directory} (steps: {list(steps)})")

        earlier = sorted(s for s in steps if s < step)
        with self._restore_errors(directory, step, earlier, "its run record"):
            run = source.restore(step, args=ocp.args.Composite(**{RUN_ITEM: ocp.args.JsonRestore()}))[RUN_ITEM]
            run = dict(run or {})
        self._check_fingerprint(directory, step, run.get("fingerprint"), run.get("process_count"))

        current = self._state.nnx_state()
        target = jax.tree.map(_abstract_leaf, nnx.to_pure_dict(current))
        plan = self._plan(directory, step, earlier, target, partial)
        with self._restore_errors(directory, step, earlier, "its arrays"):
            if plan.unchanged and plan.restored == plan.saved:
                restored = source.restore(
                    step, args=ocp.args.Composite(**{STATE_ITEM: ocp.args.StandardRestore(target)})
                )[STATE_ITEM]
            else:
                restored = self._read_partially(directory, step, subset(target, plan.restored))
        self._verify_checksums(directory, step, earlier, run.get("checksums"), restored)
        nnx.replace_by_pure_dict(current, restored)
        self._state.update(current)
        self._state.step = step
        if self._target is not None and not isinstance(self._target, ModelState):
            if isinstance(getattr(self._target, "step", None), int):
                self._target.step = step
        self.restored_run = run
        self.restored_from = directory
        self.restore_plan = plan
        if not plan.unchanged:
            log.warning("restored step %d from %s into a changed model (partial=True): %s",
                        step, directory, plan.summary())
        log.info(
            "restored step %d from %s%s (saved at %s; tokens_consumed=%s, metrics=%s)",
            step,
            directory,
            f" (restore_from: branching; this run saves to {self.directory})" if directory != self.directory else "",
            run.get("saved_at", "an unknown time"),
            run.get("tokens_consumed"),
            run.get("metrics"),
        )
        return step

    def changed_settings(self) -> list[str]:
        """The :attr:`settings` that differ from those the last restored step was saved with,
        one ``name: saved -> current`` line each; ``[]`` before a restore or for a step saved
        without settings (by an older Roxxel)."""
        saved = (self.restored_run or {}).get("settings")
        if not isinstance(saved, Mapping):
            return []
        return describe_changes(saved, normalize_json(self.settings, "settings"))

    def _read_partially(self, directory: epath.Path, step: int, item: Any) -> Any:
        """Only the arrays of ``item`` (abstract leaves), with Orbax's partial restore, through a
        checkpointer of its own (see :mod:`roxxel.train.partial` for why not the manager)."""
        reader = ocp.Checkpointer(ocp.PyTreeCheckpointHandler())
        try:
            return reader.restore(
                directory / str(step) / STATE_ITEM,
                args=ocp.args.PyTreeRestore(
                    item=item, restore_args=ocp.checkpoint_utils.construct_restore_args(item), partial_restore=True
                ),
            )
        finally:
            reader.close()

    def _plan(self, directory: epath.Path, step: int, earlier: list[int], target: Any, partial: bool) -> RestorePlan:
        """Compare the saved arrays with the live ones; refuse what cannot be restored."""
        with self._restore_errors(directory, step, earlier, "its array metadata"):
            # The manager's layout `<directory>/<step>/<item>`; Orbax's handler reads the metadata.
            handler = ocp.PyTreeCheckpointHandler()
            try:
                metadata = handler.metadata(directory / str(step) / STATE_ITEM)
            finally:
                handler.close()
        saved_layout = layout_of_metadata(getattr(metadata, "tree", metadata))
        current_layout = layout_of_state(target)
        plan = plan_restore(saved_layout, current_layout)
        where = f"step {step} in {directory}"
        if plan.mismatched:
            path, saved, current = plan.mismatched[0]
            more = f" (and {len(plan.mismatched) - 1} more)" if len(plan.mismatched) > 1 else ""
            raise ModelChangeError(
                f"cannot restore {where}: array {path!r} is {_fmt(saved)} in the checkpoint but {_fmt(current)} "
                f"in the model{more}; nothing was loaded. Give the model the saved shape, or rename the "
                "changed layer so that it starts from its initial values with restore(partial=True)",
                step=step, earlier_steps=earlier, array=path, saved=saved, current=current,
            )
        if not plan.unchanged and not partial:
            first = (plan.new or plan.dropped)[0]
            changes = [f"{count(len(names), 'array')} {what}, e.g. {names[0]!r}"
                       for names, what in ((plan.new, "new"), (plan.dropped, "no longer in the model")) if names]
            raise ModelChangeError(
                f"cannot restore {where}: the model changed ({'; '.join(changes)}); nothing was loaded. To restore the arrays in both and keep "
                "initial values for the new ones, pass partial=True (Trainer(partial_restore=True))",
                step=step, earlier_steps=earlier, array=first,
                saved=saved_layout.get(first), current=current_layout.get(first),
            )
        return plan

    @staticmethod
    def _fix_hint(directory: epath.Path, earlier: list[int]) -> str:
        if not earlier:
            return f"no earlier step exists in {directory}: start the run afresh (move the directory away)"
        return f"restore an earlier step with restore(step=N), N in {earlier}, or delete the damaged step's directory"

    @contextlib.contextmanager
    def _restore_errors(self, directory: epath.Path, step: int, earlier: list[int], what: str) -> Iterator[None]:
        """Turn any failure to read a step (bad JSON, missing metadata, a damaged chunk, a shape
        that does not fit) into one :class:`CheckpointRestoreError` naming the step and the fix."""
        try:
            yield
        except (CheckpointRestoreError, RunMismatchError):
            raise
        except Exception as err:
            raise CheckpointRestoreError(
                f"cannot restore step {step} from {directory} (reading {what}): {type(err).__name__}: "
                f"{as_clause(one_line(err))}. The step may be damaged or written by an incompatible model; "
                f"{self._fix_hint(directory, earlier)}",
                step=step,
                earlier_steps=earlier,
            ) from err

    def _verify_checksums(self, directory: epath.Path, step: int, earlier: list[int], saved: Any, restored: Any) -> None:
        if not isinstance(saved, Mapping):
            log.warning("step %d in %s has no array checksums (saved by an older Roxxel): not verified", step, directory)
            return
        got = array_checksums(restored)
        for path, value in got.items():
            if path in saved and saved[path] != value:
                raise CheckpointCorruptError(
                    f"step {step} in {directory} is damaged: array {path!r} does not match the checksum "
                    f"recorded at save ({saved[path]} saved, {value} read); nothing was loaded. "
                    f"{self._fix_hint(directory, earlier)}",
                    step=step,
                    earlier_steps=earlier,
                    array=path,
                )
        log.debug("step %d: %d array checksums verified", step, len(got))

    def _check_fingerprint(self, directory: epath.Path, step: int, saved: Any, process_count: Any = None) -> None:
        self.run_changes = []
        if process_count is not None and process_count != jax.process_count():
            log.info("step %d was saved by %s; resuming on %d", step, count(process_count, "process"), jax.process_count())
        if self.fingerprint is None:
            log.info("no fingerprint given: not checking that step %d belongs to this run", step)
            return
        if saved is None:
            log.warning("checkpoint of step %d in %s has no fingerprint: cannot check it belongs to this run", step, directory)
            return
        hint = ""
        if is_curriculum(saved) and is_curriculum(self.fingerprint):
            allowed, changes = classify_changes(saved, self.fingerprint, step, describe_changes)
            hint = (f" for the batches before step {step} (lengthening the phase that holds it, "
                    "or changing later phases, is allowed)")
        else:
            allowed, changes = [], describe_changes(saved, self.fingerprint)
        self.run_changes = list(allowed)
        if allowed:
            log.warning("resuming step %d of %s with changes that leave the batches before it as they were:\n%s",
                        step, directory, indented(allowed))
        if not changes:
            return
        shown = indented(changes)
        if any(line.startswith("batch_rows:") for line in changes):
            saved_rows = saved.get("batch_rows", RECORD_DEFAULTS["batch_rows"])
            hint += (f"; the run took {saved_rows} rows (runs saved before batch_rows existed did): pass "
                     f"Curriculum(..., batch_rows={saved_rows!r}) to resume it")
        elif any(line.startswith("data_order_version:") for line in changes):
            hint += ("; this version of roxxel puts the data in another order than the one that saved it: resume "
                     "with that version, or start a new run in another checkpoint directory")
        if self.allow_changed_run:
            self.run_changes += changes
            log.warning("resuming step %d of %s under a changed run (allow_changed_run=True):\n%s", step, directory, shown)
            return
        raise RunMismatchError(
            f"the checkpoint of step {step} in {directory} was saved by a different run "
            f"(saved -> current):\n{shown}\n"
            f"Resume with the same curriculum and datasets{hint}, or pass allow_changed_run=True to resume anyway.",
            step=step,
            changes=changes,
            saved=saved,
            current=self.fingerprint,
        )

    # -- preemption -------------------------------------------------------------------------

    def reached_preemption(self, step: int) -> bool:
        """Whether this is the step at which all processes save because of a preemption.

        Every process must call it at every step, with the same increasing ``step``s.
        Under ``jax.distributed``, a SIGTERM to any process (caught by JAX's preemption
        notifier) makes all processes agree on one step; this returns True there, on
        all of them. In a single process without ``jax.distributed``, the first call
        installs a SIGTERM handler that only records the signal (restored by
        :meth:`close`), and the first step checked after it is the one. Afterwards,
        the same ``step`` keeps returning True.

        Returns:
            True exactly at the agreed step; :meth:`save` then saves it whatever the
            interval.

        Raises:
            RuntimeError: the checkpointer is closed.
        """
        self._check_open()
        return self._preemption.check(self._check_step(step))

    def save_and_exit_if_preempted(
        self,
        step: int,
        metrics_dict: Mapping[str, Any] | None = None,
        *,
        tokens_consumed: int | None = None,
    ) -> None:
        """At the agreed preemption step: save ``step``, wait until complete, raise :class:`Preempted`.

        Call it on every process at every step, before the step's update; otherwise it
        returns at once. Uncaught, :class:`Preempted` exits with ``PREEMPTED_EXIT_CODE``.

        Args:
            step, metrics_dict, tokens_consumed: as for :meth:`save`.

        Raises:
            Preempted: the checkpoint of ``step`` is complete on every process.
            CheckpointSaveError: the preemption save (or an earlier one) failed: no
                complete checkpoint of ``step`` exists, so this is a failure, not 42.
        """
        if not self.reached_preemption(step):
            return
        if step not in self._manager.all_steps():
            self.save(step, metrics_dict, tokens_consumed=tokens_consumed, force=True)
        self.wait_until_finished()
        took = time.monotonic() - (self._preemption.agreed_at or time.monotonic())
        log.warning("preempted: checkpoint of step %d is complete in %s, %.1f s after the agreed step; exiting with %d",
                    step, self.directory, took, PREEMPTED_EXIT_CODE)
        if jax.process_index() == 0:
            self._record_preemption(step, took)
        raise Preempted(step)

    def _record_preemption(self, step: int, took: float) -> None:
        """Write :data:`~roxxel.contract.PREEMPTION_FILE` (on a local disk under a temporary
        name, then renamed): what the next ``validate`` compares the grace period with.
        Never fails the exit."""
        record = {"step": step, "save_s": round(took, 3), "process_count": jax.process_count(),
                  "state_bytes": int(sum(leaf.nbytes for leaf in jax.tree.leaves(nnx.to_pure_dict(self._state.nnx_state())))),
                  "at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
        text, path = json.dumps(record) + "\n", self.directory / PREEMPTION_FILE
        try:
            if os.fspath(self.directory).startswith("gs://"):
                path.write_text(text)  # an object appears whole or not at all; a rename is a slow copy there
            else:
                tmp = self.directory / f"{PREEMPTION_FILE}.tmp-{os.getpid()}"
                tmp.write_text(text)
                tmp.rename(path)
        except Exception as err:  # the checkpoint is complete; this is only a measurement
            log.warning("could not record the preemption save's time in %s: %s", self.directory, err)

    def request_preemption(self) -> None:
        """Act as if this process had received SIGTERM: save at the next agreed step and stop.

        Safe to call from a signal handler (the Trainer calls it on Ctrl-C). In a single
        process it records the request; under ``jax.distributed`` it sends SIGTERM to this
        process, which JAX's preemption notifier turns into a step all processes agree on.
        """
        self._preemption.request()

    # -- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        """Wait for the save in progress, then release Orbax's resources; idempotent.

        Returns within ``timeout`` plus a small margin, also after a failed save.

        Raises:
            CheckpointSaveError: the last save failed, or releasing the storage failed
                (e.g. an object store answering errors); resources are released anyway.
        """
        if self._closed:
            return
        self._closed = True
        lifecycle.open_checkpointers.discard(self)
        error: BaseException | None = None
        try:
            self._wait()
        except CheckpointSaveError as err:
            error = err
        deadline = time.monotonic() + self._timeout
        releases = (("removing half-written steps", self._await_tmp_cleanup),
                    ("closing Orbax's checkpoint manager", self._manager.close))
        for what, release in () if self._abandoned else releases:  # abandoned: close would wait on it
            try:
                if os.fspath(self.directory).startswith("gs://"):
                    lifecycle.call_with_deadline(release, deadline, what)
                else:  # local file systems fail at once; Orbax's close misreports from a thread
                    release()
            except Exception as err:  # e.g. an HttpError from the object store: one readable line
                lifecycle.keep_short(err)
                if error is None:
                    error = CheckpointSaveError(
                        f"{what} in {self.directory} failed: {type(err).__name__}: {one_line(err)}",
                        step=self._pending_step,
                    )
                    error.__cause__ = err
        if error is not None:
            lifecycle.mark_failed()
            if not self._abandoned:
                self._remove_failed_steps(deadline)
        self._preemption.close()
        if jax.process_index() == 0:
            ownership.release_writer_lock(self.directory, remove=error is None)
        if error is not None:
            raise error

    def _remove_failed_steps(self, deadline: float) -> None:
        """After a failed save: wait (bounded) for the storage threads still writing it, then
        remove the half-written step directories this checkpointer started (process 0, local
        disks; Orbax removes them on object storage when the next manager opens). Otherwise
        they went on writing ``<step>.orbax-checkpoint-tmp`` after close, and a new
        checkpointer's first save of that step failed with "Directory not empty"."""
        alive = lifecycle.writers_alive(min(deadline, time.monotonic() + lifecycle.WRITER_GRACE_S))
        if alive or jax.process_index() != 0 or os.fspath(self.directory).startswith("gs://"):
            if alive:
                log.warning("%d storage threads still write to %s after the failed save; its half-written steps "
                            "are left for the next checkpointer to remove", len(alive), self.directory)
            return
        complete = set(self._manager.all_steps())
        for step in sorted(self._saved_steps - complete):
            for leftover in self.directory.glob(f"{step}.orbax-checkpoint-tmp*"):
                shutil.rmtree(os.fspath(leftover), ignore_errors=True)
                log.info("removed %s, left by the failed save of step %d", leftover, step)

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _await_tmp_cleanup(self) -> None:
        """Wait for Orbax's background removal of half-written steps (started by the manager).

        Only Orbax's ``save`` waits for it; without this a restore-only checkpointer could
        close while that thread still talks to storage. Private Orbax API (pinned version).
        """
        _orbax.await_tmp_cleanup(self._manager)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"Checkpointer for {self.directory} is closed")

    @staticmethod
    def _check_step(step: Any) -> int:
        if isinstance(step, bool) or not isinstance(step, numbers.Integral):
            raise TypeError(f"step must be an int, got {type(step).__name__}")
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        return int(step)

    def __repr__(self) -> str:
        return f"Checkpointer({str(self.directory)!r}, steps={self.all_steps()})"
