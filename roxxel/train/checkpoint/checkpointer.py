"""The :class:`Checkpointer`: what one step holds, when it is saved, how it is restored.

See :mod:`roxxel.train.checkpoint` for the layout of a step, keeping, preemption and errors.
The class ties the package's parts together: :mod:`.manager` (Orbax's manager and its
policies), :mod:`.record` (the run record), :mod:`.saving` (the part of a save that blocks
the caller), :mod:`.pending` (the save in flight), :mod:`.restoring` (reading a step back),
:mod:`.fingerprint` (and the judgement of a resume), :mod:`.preemption`, :mod:`.ownership`
and :mod:`.lifecycle`.
"""

from __future__ import annotations

import logging
import math
import numbers
import os
import time
from collections.abc import Mapping
from typing import Any

import jax
import orbax.checkpoint as ocp
from etils import epath
from flax import nnx

from roxxel.contract import ENV_RESTORE_FROM
from roxxel.exit_codes import PREEMPTED_EXIT_CODE, ConfigValueError
from roxxel.train.cadence import Cadence, Default, checkpoint_cadence
from roxxel.train.checkpoint import _orbax, lifecycle, ownership, restoring
from roxxel.train.checkpoint.checksum_exchange import exchange_for
from roxxel.train.checkpoint.directory import check_gcs_backend, resolve_branch_source, resolve_directory
from roxxel.train.checkpoint.errors import CheckpointSaveError, Preempted, one_line
from roxxel.train.checkpoint.fingerprint import describe_changes, judge_of, judge_resume, normalize_json
from roxxel.train.checkpoint.manager import open_branch_source, open_manager, ranked_metrics
from roxxel.train.checkpoint.pending import PendingSave
from roxxel.train.checkpoint.preemption import PreemptionSync, record_preemption
from roxxel.train.checkpoint.record import RUN_FORMAT, RUN_ITEM, STATE_ITEM, check_tokens, json_metrics, run_record
from roxxel.train.checkpoint.saving import PureState, already_saved, hand_to_orbax
from roxxel.train.partial import RestorePlan
from roxxel.train.state import ModelState
from roxxel.wording import count

__all__ = ["RUN_FORMAT", "RUN_ITEM", "STATE_ITEM", "Checkpointer"]

log = logging.getLogger("roxxel.checkpoint")

# Defaults told apart from the same values given: a keyword left out may come from ``cadence=``.
_KEEP_3: Any = Default(3)
_EVERY_STEP: Any = Default(1)


def _model_state(model: nnx.Module | None, optimizer: nnx.Optimizer | None, state: Any) -> ModelState:
    """What is checkpointed: ``state=``, or ``model`` and ``optimizer``."""
    if (model is None) == (state is None):
        raise TypeError("give either `model` (and `optimizer`) or `state=`, not both and not neither")
    if state is not None and optimizer is not None:
        raise TypeError("`optimizer` cannot be combined with `state=`; put it in the state object")
    if state is not None:
        return ModelState.from_object(state)
    assert model is not None  # checked above: exactly one of model and state
    return ModelState(model, optimizer)


def _check_options(max_to_keep: Any, save_interval_steps: Any, timeout: Any, best_mode: Any, best_metric: Any) -> None:
    if max_to_keep is not None and (
        isinstance(max_to_keep, bool) or not isinstance(max_to_keep, int) or max_to_keep < 1
    ):
        raise ValueError(f"max_to_keep must be an int >= 1 or None, got {max_to_keep!r}")
    if isinstance(save_interval_steps, bool) or not isinstance(save_interval_steps, int) or save_interval_steps < 1:
        raise ValueError(f"save_interval_steps must be an int >= 1, got {save_interval_steps!r}")
    if not (isinstance(timeout, (int, float)) and timeout > 0 and math.isfinite(timeout)):
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if best_mode not in ("min", "max"):
        raise ValueError(f"best_mode must be 'min' or 'max', got {best_mode!r}")
    if not isinstance(best_metric, str) or not best_metric:
        raise ValueError(f"best_metric must be a non-empty str, got {best_metric!r}")


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
        max_to_keep: how many of the latest steps to keep (``None``: all), ``>= 1``; or
            give it in ``cadence``.
        timeout: seconds an asynchronous save may take from the call to :meth:`save`
            until it is committed, including waiting for the other processes and the
            storage library's own retries (gcsfs, TensorStore); past it the save fails
            with :class:`CheckpointSaveError`, its writes are abandoned (the step stays
            incomplete) and the process exits non-zero at the end.
        state: instead of ``model``/``optimizer``: a :class:`ModelState`, or an object
            with ``model`` and ``optimizer`` attributes (a restore sets its ``step``
            when it is an int attribute).
        fingerprint: JSON-serialisable description of the run (the trainer passes
            ``Curriculum.identity(seed)``), stored with each step and compared on restore
            by its ``judge`` method when it has one (``Curriculum.describe()`` and
            ``identity()`` do: lengthening the phase that holds the restored step is
            allowed), else by plain equality (:mod:`.fingerprint`); ``None`` stores nothing
            and checks nothing (the Trainer still records its seed: :meth:`use_fingerprint`).
        keep_best: also keep the best step by ``best_metric``.
        best_metric: the key of ``metrics_dict`` that ranks steps.
        best_mode: ``"min"`` (lower is better, e.g. a loss) or ``"max"``.
        allow_changed_run: on a fingerprint mismatch, log a warning instead of raising.
        save_interval_steps: :meth:`save` writes only steps divisible by it (``>= 1``),
            unless forced or at a preemption step; or give it in ``cadence``.
        cadence: a :class:`~roxxel.train.Cadence`, the Trainer's: its ``max_to_keep`` and
            ``save_interval_steps`` (``None``: 1) instead of the two keywords above, as
            Orbax's ``CheckpointManagerOptions`` holds them. The keywords stay (no warning:
            a Checkpointer alone needs no other cadence); giving one beside ``cadence`` is a
            ``TypeError``.
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
        TypeError: neither or both of ``model`` and ``state`` given, wrong types, a
            fingerprint that is not JSON-serialisable, or ``cadence`` beside a keyword it holds.
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
        max_to_keep: int | None = _KEEP_3,
        timeout: float = 600,
        *,
        state: Any = None,
        fingerprint: Mapping[str, Any] | None = None,
        keep_best: bool = True,
        best_metric: str = "loss",
        best_mode: str = "min",
        allow_changed_run: bool = False,
        save_interval_steps: int = _EVERY_STEP,
        run_name: str | None = None,
        restore_from: str | os.PathLike[str] | None = None,
        cadence: Cadence | None = None,
    ) -> None:
        max_to_keep, save_interval_steps = checkpoint_cadence(cadence, max_to_keep, save_interval_steps)
        self._target = state
        self._state = _model_state(model, optimizer, state)
        self._pure = PureState(self._state)
        _check_options(max_to_keep, save_interval_steps, timeout, best_mode, best_metric)
        self.directory = resolve_directory(checkpoint_path)
        check_gcs_backend(self.directory)
        self.restore_from = resolve_branch_source(self.directory, restore_from)
        self.fingerprint = None if fingerprint is None else normalize_json(fingerprint, "fingerprint")
        self._judge = judge_of(fingerprint)
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

        self._preemption = PreemptionSync()
        self._manager = open_manager(
            self.directory,
            max_to_keep=max_to_keep,
            keep_best=keep_best,
            best_metric=best_metric,
            best_mode=best_mode,
            save_interval_steps=save_interval_steps,
            timeout=timeout,
            preemption=self._preemption,
        )
        self.run_name = run_name
        self._claim_directory()
        lifecycle.open_checkpointers.add(self)
        lifecycle.install_exit_hook()
        lifecycle.warn_untested_versions()
        lifecycle.divert_orbax_tracebacks()
        self._pending = PendingSave(self._manager, self.directory, float(timeout))
        self._closed = False
        self._timeout = float(timeout)
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

    def use_fingerprint(self, fingerprint: Any) -> None:
        """Store and compare ``fingerprint`` from now on, judged by its ``judge`` method when
        it has one (see ``fingerprint`` in the class docstring). The Trainer calls it with its
        run identity (the data seed added to the fingerprint given here: a resume under
        another seed is refused), also for a checkpointer it was given. Call it before
        :meth:`restore`.

        Raises:
            ConfigValueError: :meth:`restore` has already compared another fingerprint.
            TypeError: ``fingerprint`` is not JSON-serialisable.
        """
        normalized = None if fingerprint is None else normalize_json(fingerprint, "fingerprint")
        if self.restored_run is not None and normalized != self.fingerprint:
            raise ConfigValueError(
                f"the run's fingerprint changed after the checkpointer restored a step "
                f"({'; '.join(describe_changes(self.fingerprint, normalized))}): the resume could not check it; "
                "give the Trainer the Checkpointer before calling restore()"
            )
        self.fingerprint = normalized
        self._judge = judge_of(fingerprint)

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

        Blocks only for taking the arrays from the live modules (:mod:`.saving`), Orbax's
        device-to-host copy and the dispatch of the arrays' checksums to the devices (and
        for the previous save, if it is still being written): the checksums are read, the
        files written and the step committed in the background.

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
        tokens_consumed = check_tokens(tokens_consumed)
        metrics = json_metrics(metrics_dict)

        if self._pending.step is not None and not self._manager.is_saving_in_progress():
            self._pending.wait()  # the previous save has finished: surface its error now
        if already_saved(self._manager, self.directory, self._pending.saved_steps, step):
            return False
        preempted = self._preemption.agreed_step == step
        if not (force or preempted or self._manager.should_save(step)):
            return False
        latest = self._manager.latest_step()
        if latest is not None and step < latest:
            log.warning("saving step %d although step %d is newer; restore() takes the latest", step, latest)

        self._pending.wait()  # surface an error of the previous save before starting this one
        self._check_writer_lock(step)
        return self._start_save(step, metrics, tokens_consumed, preempted)

    def _check_writer_lock(self, step: int) -> None:
        """Process 0 still holds the directory's writer lock (else another trainer may write)."""
        lost = ownership.lock_lost(self.directory) if jax.process_index() == 0 else None
        if lost is not None:  # the other processes stop at Orbax's barrier, within its timeout
            raise ownership.CheckpointOwnerError(f"not saving step {step} to {self.directory}: {lost}")

    def _start_save(self, step: int, metrics: dict[str, Any], tokens_consumed: int | None, preempted: bool) -> bool:
        """Hand ``step`` to Orbax (the decision to save it is made); True if a save started."""
        orbax_metrics = ranked_metrics(metrics, self.best_metric, step) if self.keep_best else None
        run = run_record(step, tokens_consumed, metrics, self.fingerprint, self.settings)
        deadline = time.monotonic() + self._timeout  # bounds the whole save, from this call on
        pure, checksums = self._pure.take()
        exchange = exchange_for(step, deadline)
        saved = hand_to_orbax(self._manager, step, pure, run, checksums, orbax_metrics, exchange)
        if saved:
            if not self._owner_recorded and jax.process_index() == 0:
                ownership.record_owner(self.directory, self.run_name)
            self._owner_recorded = True
            self._pending.started(step, deadline)
            log.info("saving step %d to %s%s", step, self.directory, " (preemption)" if preempted else "")
        return saved

    def wait_until_finished(self) -> None:
        """Block until the save in progress (if any) is complete on every process.

        Raises:
            CheckpointSaveError: that save failed (the step is not complete).
        """
        self._check_open()
        self._pending.wait()

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
        self._pending.wait()
        self._await_tmp_cleanup()
        self._manager.reload()
        source, directory = self._manager, self.directory
        if not list(self._manager.all_steps()):
            given = os.environ.get(ENV_RESTORE_FROM)
            if self.restore_from is not None:
                source, directory = self._branch_source(), self.restore_from
            elif given:
                log.warning(
                    "%s=%s is set (the job spec's restore_from) but this Checkpointer was given no "
                    "restore_from: it starts from scratch. Pass restore_from=roxxel.run.run_info().restore_from",
                    ENV_RESTORE_FROM,
                    given,
                )
        try:
            if source is not self._manager and not list(source.all_steps()):
                raise ConfigValueError(
                    f"restore_from {os.fspath(directory)!r} holds no complete checkpoint (missing, empty, or only "
                    f"unfinished steps), so this run would start from scratch instead of branching; give the other "
                    f"run's checkpoint_dir, or leave restore_from out to start afresh"
                )
            return self._restore_from(source, directory, step, partial)
        finally:
            if source is not self._manager:
                source.close()

    def _branch_source(self) -> ocp.CheckpointManager:
        """A read-only manager over :attr:`restore_from` (nothing there is written or removed)."""
        assert self.restore_from is not None  # restore() asks only when there is one
        return open_branch_source(self.restore_from)

    def _restore_from(
        self, source: ocp.CheckpointManager, directory: epath.Path, step: int | None, partial: bool
    ) -> int:
        steps = source.all_steps()
        chosen = restoring.pick_step(steps, directory, None if step is None else self._check_step(step))
        if chosen is None:
            self.restored_run = None
            return 0
        step = chosen
        earlier = sorted(s for s in steps if s < step)
        run = restoring.read_run(source, directory, step, earlier)
        self._check_fingerprint(directory, step, run.get("fingerprint"), run.get("process_count"))

        current = self._state.nnx_state()
        target = jax.tree.map(restoring.abstract_leaf, nnx.to_pure_dict(current))
        plan = restoring.plan(directory, step, earlier, target, partial)
        restored = restoring.read_state(source, directory, step, earlier, target, plan)
        restoring.verify_checksums(directory, step, earlier, run.get("checksums"), restored)
        self._load(current, restored, step)
        self._restored(directory, step, run, plan)
        return step

    def _load(self, current: Any, restored: Any, step: int) -> None:
        """Put the arrays read into the live state, and its step (and the given object's)."""
        nnx.replace_by_pure_dict(current, restored)
        self._state.update(current)
        self._state.step = step
        if self._target is not None and not isinstance(self._target, ModelState):
            if isinstance(getattr(self._target, "step", None), int):
                self._target.step = step

    def _restored(self, directory: epath.Path, step: int, run: dict[str, Any], plan: RestorePlan) -> None:
        """Record and log what the restore read."""
        self.restored_run = run
        self.restored_from = directory
        self.restore_plan = plan
        if not plan.unchanged:
            log.warning(
                "restored step %d from %s into a changed model (partial=True): %s", step, directory, plan.summary()
            )
        log.info(
            "restored step %d from %s%s (saved at %s; tokens_consumed=%s, metrics=%s)",
            step,
            directory,
            f" (restore_from: branching; this run saves to {self.directory})" if directory != self.directory else "",
            run.get("saved_at", "an unknown time"),
            run.get("tokens_consumed"),
            run.get("metrics"),
        )

    def changed_settings(self) -> list[str]:
        """The :attr:`settings` that differ from those the last restored step was saved with,
        one ``name: saved -> current`` line each; ``[]`` before a restore or for a step saved
        without settings (by an older Roxxel)."""
        saved = (self.restored_run or {}).get("settings")
        if not isinstance(saved, Mapping):
            return []
        return describe_changes(saved, normalize_json(self.settings, "settings"))

    def _check_fingerprint(self, directory: epath.Path, step: int, saved: Any, process_count: Any = None) -> None:
        self.run_changes = []
        if process_count is not None and process_count != jax.process_count():
            log.info(
                "step %d was saved by %s; resuming on %d", step, count(process_count, "process"), jax.process_count()
            )
        if self.fingerprint is None:
            log.info("no fingerprint given: not checking that step %d belongs to this run", step)
            return
        self.run_changes = judge_resume(
            self._judge, saved, self.fingerprint, directory=directory, step=step, allow_changed=self.allow_changed_run
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
        log.warning(
            "preempted: checkpoint of step %d is complete in %s, %.1f s after the agreed step; exiting with %d",
            step,
            self.directory,
            took,
            PREEMPTED_EXIT_CODE,
        )
        if jax.process_index() == 0:
            state_bytes = int(sum(leaf.nbytes for leaf in jax.tree.leaves(nnx.to_pure_dict(self._state.nnx_state()))))
            record_preemption(self.directory, step, took, state_bytes)
        raise Preempted(step)

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

        Returns within ``timeout`` plus a small margin, also after a failed save. After a
        failed save (raised here or earlier) it returns once Orbax's threads of that save
        have ended (those waiting for the step's directory are cancelled at the failure,
        those already writing finish), so none writes into the directory afterwards, and it removes the failed step's half-written directories (local disks);
        threads still alive at the deadline are logged as a warning.

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
            self._pending.wait()
        except CheckpointSaveError as err:
            error = err
        deadline = time.monotonic() + self._timeout
        if not self._pending.abandoned:  # abandoned: closing the manager would wait on its threads
            error = self._release_storage(deadline, error)
        if error is not None or self._pending.failed:  # also when the failure was raised earlier
            lifecycle.mark_failed()
            if not self._pending.abandoned:  # no Orbax writer left (bounded wait): nothing writes after close
                self._pending.remove_failed_steps(deadline)
        self._preemption.close()
        if jax.process_index() == 0:
            ownership.release_writer_lock(self.directory, remove=error is None)
        if error is not None:
            raise error

    def _release_storage(self, deadline: float, error: BaseException | None) -> BaseException | None:
        """Remove half-written steps and close Orbax's manager, on object storage within
        ``deadline``; returns ``error``, else the first failure as a :class:`CheckpointSaveError`."""
        releases = (
            ("removing half-written steps", self._await_tmp_cleanup),
            ("closing Orbax's checkpoint manager", self._manager.close),
        )
        for what, release in releases:
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
                        step=self._pending.step,
                    )
                    error.__cause__ = err
        return error

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
