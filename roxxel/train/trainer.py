"""``Trainer``: run a curriculum on a Flax NNX model across every process of a pod.

One loop, every process: restore the latest checkpoint (which fixes the step, and the
step fixes the data position), then for each curriculum phase stream this process's
rows of each global batch, run the compiled step, log on process 0, checkpoint
asynchronously, and at a preemption save the agreed step and exit with the code that
makes the launcher restart the job. What watches the loop (throughput, the straggler
report, the learning rate, a profiler trace, a user's tracker) is a callback
(``roxxel.train.callbacks``); the loop's time reaches them as sections
(``roxxel.train.sections``), each logging window's timed steps as a ``Window``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import signal
import threading
from typing import Any, Callable, Iterator, Mapping, Sequence

import jax
import jax.numpy as jnp
from flax import nnx

from roxxel.contract import ENV_RESTORE_FROM, ENV_RUN_NAME
from roxxel.data.curriculum import Curriculum, ResolvedPhase
from roxxel.data.identity import with_seed
from roxxel.exit_codes import ConfigTypeError, ConfigValueError
from roxxel.sharding import BatchShardingError
from roxxel.train.agreement import check_processes_agree
from roxxel.train.axis_rules import AxisRules
from roxxel.train.callbacks.base import HOOKS, Callback, Window, bound_hooks
from roxxel.train.callbacks.builtin import trainer_callbacks
from roxxel.train.callbacks.throughput import PEAK_FLOPS_PER_DEVICE
from roxxel.train.checkpoint import ORBAX_DETAILS_LOGGER, Checkpointer, Preempted
from roxxel.train.flat_keywords import resolve_options
from roxxel.train.logger import Logger
from roxxel.train.options import Cadence, DataOptions, LoopOptions, RestoreOptions
from roxxel.train.sections import (
    COMPILE,
    DATA_WAIT,
    EVAL,
    PREEMPTION_SAVE,
    RESTORE,
    SAVE,
    STEP,
    LoopSections,
    TimedSteps,
)
from roxxel.train.state import ModelState
from roxxel.train.state_placement import batch_sharding, default_mesh, place_on_mesh
from roxxel.train.step import make_train_step, param_shardings
from roxxel.train.step_window import StepWindow
from roxxel.train.vocabulary import check_embeddings
from roxxel.train.watchdog import ProgressWatchdog, chosen_bounds, in_a_job
from roxxel.wording import count

__all__ = ["Callback", "DEFAULT_SAVE_INTERVAL_STEPS", "NaNLossError", "PEAK_FLOPS_PER_DEVICE", "Trainer"]

log = logging.getLogger("roxxel.train")
_END = object()  # a stream's end


class NaNLossError(ValueError):
    """The loss became NaN or infinite; training stopped before wasting more compute."""


DEFAULT_SAVE_INTERVAL_STEPS = 100
"""Steps between checkpoints when neither the Trainer nor its checkpointer is given one."""


def _save_interval(interval: int | None, checkpointer: Checkpointer | None) -> int:
    """The one checkpoint cadence, from the Trainer's :class:`Cadence` or the checkpointer's."""
    own = checkpointer.save_interval_steps if checkpointer is not None else 1
    if own > 1:  # the checkpointer skips other steps: its interval is the cadence
        if interval is not None and interval != own:
            raise ConfigValueError(
                f"Trainer: Cadence save_interval_steps={interval} but the checkpointer saves every {own} steps; "
                "give the interval once (Checkpointer(cadence=...), or the Trainer's cadence= with a "
                "checkpointer of save_interval_steps=1)"
            )
        return own
    return DEFAULT_SAVE_INTERVAL_STEPS if interval is None else interval


def _check_core(curriculum: Curriculum | None, loss_fn: Callable | None) -> tuple[Curriculum, Callable]:
    """The arguments every Trainer needs (optional in the signature only so that ``state=``
    may stand in for ``model`` and ``optimizer``)."""
    if curriculum is None or loss_fn is None:
        missing = " and ".join(
            name for name, value in (("curriculum", curriculum), ("loss_fn", loss_fn)) if value is None
        )
        raise ConfigTypeError(f"Trainer needs {missing}: Trainer(model, optimizer, curriculum, loss_fn, ...)")
    return curriculum, loss_fn


def _mesh_and_sharding(mesh: Any, data_sharding: Any) -> tuple[Any, Any]:
    """The device mesh and batch sharding: as given, the sharding's own mesh, or the defaults."""
    if mesh is None:
        mesh = data_sharding.mesh if data_sharding is not None else default_mesh()
    return mesh, data_sharding if data_sharding is not None else batch_sharding(mesh)


class Trainer:
    """Train ``model`` with ``optimizer`` on ``curriculum``, minimising ``loss_fn(model, batch)``.

    The options come in groups (:mod:`roxxel.train.options`, after Orbax's
    ``CheckpointManagerOptions``, Levanter's ``TrainerConfig`` and MaxText's config groups):
    ``cadence=Cadence(log_every=..., eval_every=..., save_interval_steps=..., max_to_keep=...)``,
    ``data=DataOptions(seed=..., outputs=..., prefetch_size=..., data_sharding=...)``,
    ``restore=RestoreOptions(allow_changed_run=..., partial=...)`` and
    ``loop=LoopOptions(grad_accum_steps=..., async_queue_depth=..., handle_sigint=..., watchdog=...)``;
    docs/trainer.md has a table of each. The flat keywords of before (``eval_every=``,
    ``seed=``, ``partial_restore=`` ...) and the callback shortcuts (``learning_rate=``,
    ``flops_per_token=``, ``num_params=``, ``peak_flops_per_device=``, ``profile_steps=``)
    still work, with one :class:`~roxxel.deprecation.RoxxelDeprecationWarning` per call naming what replaces each
    (:mod:`roxxel.train.flat_keywords`).

    Args:
        model, optimizer: an ``nnx.Module`` and its ``nnx.Optimizer``; or pass ``state=``.
        curriculum: the data: phases of batch size, sequence length and blend weights (required).
        loss_fn: ``loss_fn(model, batch)`` returning a scalar, ``(loss, aux)`` or a dict with
            ``"loss"``; aux scalars are logged. ``batch`` is an int ``(batch_size, seq_len)``
            array, or a dict of them with ``DataOptions(outputs="documents")`` (required).
        state: a :class:`ModelState` or object with ``model`` and ``optimizer``.
        save_path: run directory: checkpoints in ``save_path/checkpoints``, logs in ``save_path``.
        checkpointer, logger: use these instead of the ones ``save_path`` creates. A given
            checkpointer keeps its own ``max_to_keep``; its ``save_interval_steps``, when
            above 1, is the run's cadence.
        mesh: device mesh (default: every device on one ``"data"`` axis). State already on
            it (built by :func:`~roxxel.train.sharded_state`, the way to create a model larger
            than one host) is used as it is; other variables are moved onto it: replicated, or
            by their ``nnx.with_partitioning`` annotations (``docs/sharded-training.md``).
        axis_rules: logical axis names of the annotations to mesh axes, e.g.
            ``[("embed", "fsdp"), ("mlp", "tensor")]`` (:mod:`roxxel.train.axis_rules`), for
            the variables the Trainer places.
        eval_fn: ``eval_fn(state) -> dict | scalar`` run every ``cadence.eval_every`` steps and at the end.
        cadence: a :class:`Cadence` (default ``Cadence()``: log every 100 steps, evaluate every
            500, save every 100 unless the ``checkpointer`` saves less often, keep 3).
        data: a :class:`DataOptions` (default: seed 42, ``"tokens"``, prefetch 2).
        restore: a :class:`RestoreOptions` (default: the run and model must be unchanged).
        loop: a :class:`LoopOptions` (default: no accumulation, queue depth 2, Ctrl-C
            saves, the watchdog's default bounds).
        callbacks: :class:`Callback` objects (:mod:`roxxel.train.callbacks`), called after the
            built-in ones. A :class:`~roxxel.train.callbacks.Throughput` (``tokens_per_sec``,
            and model FLOPs and MFU given ``flops_per_token`` or ``num_params``) and a
            :class:`~roxxel.train.stragglers.StragglerReport` are always run: the ones given
            here, else default ones. Both read the loop's sections (``on_section``), as
            any callback may. Add a
            :class:`~roxxel.train.callbacks.LearningRate` to log the schedule's rate and a
            :class:`~roxxel.train.callbacks.Profile` for a ``jax.profiler`` trace.
        **deprecated: the flat keywords and shortcuts above (each warns; see the class text).

    Raises:
        ValueError: a batch size that does not divide over micro-batches or data shards
            (names the phase); two different save intervals (the Trainer's and the
            ``checkpointer``'s); a NaN loss (:class:`NaNLossError`) at a log or checkpoint
            step; a shortcut together with its callback in ``callbacks``; two callbacks (or a
            callback and the loss) logging the same metric name; a bad option value.
        TypeError: no ``curriculum`` or ``loss_fn``; no optimizer; an option of the wrong
            type; a flat keyword together with the option object that holds it now
            (``eval_every=`` and ``cadence=``); an unknown keyword.
        Preempted: (a ``SystemExit`` with code 42) after saving at a preemption.
    """

    def __init__(
        self,
        model=None,
        optimizer=None,
        curriculum: Curriculum | None = None,
        loss_fn: Callable | None = None,
        *,
        state: Any = None,
        save_path: str | None = None,
        checkpointer: Checkpointer | None = None,
        logger: Logger | None = None,
        mesh=None,
        axis_rules: AxisRules | None = None,
        eval_fn: Callable | None = None,
        cadence: Cadence | None = None,
        data: DataOptions | None = None,
        restore: RestoreOptions | None = None,
        loop: LoopOptions | None = None,
        callbacks: Sequence[Callback] = (),
        **deprecated: Any,
    ):
        curriculum, loss_fn = _check_core(curriculum, loss_fn)
        given = {"cadence": cadence, "data": data, "restore": restore, "loop": loop}
        options, shortcuts = resolve_options(given, deprecated)
        cadence, data, restore, loop = options["cadence"], options["data"], options["restore"], options["loop"]
        save_interval_steps = _save_interval(cadence.save_interval_steps, checkpointer)
        self.cadence = dataclasses.replace(cadence, save_interval_steps=save_interval_steps)
        self.data_options, self.restore_options, self.loop_options = data, restore, loop
        self.state = ModelState.from_object(state) if state is not None else ModelState(model, optimizer)
        if self.state.optimizer is None:
            raise ConfigTypeError("Trainer needs an optimizer (nnx.Optimizer)")
        self.curriculum, self.loss_fn, self.eval_fn = curriculum, loss_fn, eval_fn
        self.eval_every, self.log_every = cadence.eval_every, cadence.log_every
        self.save_interval_steps = save_interval_steps
        self.seed, self.outputs, self.prefetch_size = data.seed, data.outputs, data.prefetch_size
        self.partial_restore = restore.partial
        self.async_queue_depth = loop.async_queue_depth
        self.grad_accum_steps = loop.grad_accum_steps
        self.mesh, self.data_sharding = _mesh_and_sharding(mesh, data.data_sharding)
        self._check_batch_sizes()
        self.save_path = save_path
        self.callbacks = trainer_callbacks(callbacks, **shortcuts, save_path=save_path, log=self._log)
        self.watchdog_bounds = chosen_bounds(loop.watchdog)
        self.checkpointer, self.logger = self._run_directory(checkpointer, logger, restore.allow_changed_run)
        check_processes_agree(self._agreement_fields())  # before any collective that needs equal trees
        place_on_mesh(self.mesh, self.state.model, self.state.optimizer, axis_rules=axis_rules)
        # Summed micro-batch gradients are pinned to the parameters' shardings as placed here.
        shardings = param_shardings(self.state.model, self.state.optimizer) if self.grad_accum_steps > 1 else None
        self._train_step = make_train_step(loss_fn, self.grad_accum_steps, param_shardings=shardings)
        self._evaluated_at: int | None = None
        self._hooks: dict[str, list[Callable]] = {}
        self.handle_sigint = loop.handle_sigint
        self._watchdog: ProgressWatchdog | None = None
        self._sections = LoopSections()
        self._timed = TimedSteps()  # the callbacks' Window: each logging window's timed steps
        self._interrupts = 0

    def _run_directory(
        self, checkpointer: Checkpointer | None, logger: Logger | None, allow_changed_run: bool
    ) -> tuple[Checkpointer | None, Logger | None]:
        """The checkpointer and logger: as given, else the ones ``save_path`` implies."""
        save_path, cur = self.save_path, self.curriculum
        if logger is None and save_path is not None and "://" in save_path:
            raise ConfigValueError(
                f"save_path {save_path!r} is object storage, but logs are local files: keep save_path "
                "local, or pass checkpointer=Checkpointer('gs://...', ...) and logger=Logger('runs/NAME')"
            )
        if checkpointer is None and save_path is not None:
            checkpointer = Checkpointer(
                os.path.join(save_path, "checkpoints"),
                state=self.state,
                cadence=self.cadence,
                fingerprint=cur.identity(self.seed),
                allow_changed_run=allow_changed_run,
                run_name=os.environ.get(ENV_RUN_NAME) or None,
                restore_from=os.environ.get(ENV_RESTORE_FROM) or None,
            )
        if logger is None and save_path is not None:
            logger = Logger(save_path, total_steps=cur.total_steps)
        if checkpointer is not None:
            # the run's identity, also a given one's: a resume under another seed is refused, and a
            # curriculum description is judged by what the data allows whatever built the checkpointer
            checkpointer.use_fingerprint(with_seed(checkpointer.fingerprint, self.seed))
            # stored with each step: a resume logs the ones that changed
            checkpointer.settings.update(
                save_interval_steps=self.save_interval_steps,
                log_every=self.log_every,
                eval_every=self.eval_every,
                prefetch_size=self.prefetch_size,
            )
        return checkpointer, logger

    def _agreement_fields(self) -> dict[str, Any]:
        """What every process of the job must hold equal (:mod:`roxxel.train.agreement`): a fixed list."""
        plan = self.curriculum.describe()
        datasets = plan.pop("datasets", {})
        mesh = self.mesh
        variables = nnx.to_flat_state(nnx.state(self.state.modules()))
        return {
            "seed": self.seed,
            "data plan (curriculum)": plan,
            "datasets (fingerprints)": datasets,
            "mesh": [list(mesh.axis_names), list(mesh.devices.shape), [d.id for d in mesh.devices.flat]],
            "batch sharding": str(self.data_sharding.spec),
            "model and optimizer (shapes, dtypes)": [
                [
                    "/".join(map(str, path)),
                    type(var).__name__,
                    list(getattr(var, "shape", ())),
                    str(getattr(var, "dtype", "")),
                ]
                for path, var in variables
            ],
            "grad_accum_steps, outputs": [self.grad_accum_steps, self.outputs],
        }

    def _check_batch_sizes(self) -> None:
        spec0 = self.data_sharding.spec[0] if len(self.data_sharding.spec) else None
        axes = () if spec0 is None else (spec0 if isinstance(spec0, tuple) else (spec0,))
        shards = math.prod(self.data_sharding.mesh.shape[a] for a in axes)
        over = " x ".join(axes) + (" axis" if len(axes) == 1 else " axes")
        for p in self.curriculum.resolved:
            if p.global_batch_size % self.grad_accum_steps:
                raise BatchShardingError(
                    f"phase {p.index}: global_batch_size {p.global_batch_size} does not divide into "
                    f"{self.grad_accum_steps} micro-batches; pick a multiple of {self.grad_accum_steps}"
                )
            if (p.global_batch_size // self.grad_accum_steps) % shards:
                raise BatchShardingError(
                    f"phase {p.index}: each micro-batch of {p.global_batch_size // self.grad_accum_steps} rows must split "
                    f"evenly over the {shards} data shards (the mesh's {over}); use a global_batch_size that is a "
                    f"multiple of {shards * self.grad_accum_steps}"
                )

    # ----------------------------------------------------------------------------------
    def _log(self, msg: str, echo: bool = True) -> None:
        log.info(msg)
        if self.logger is not None and not self.logger.closed:  # closed: a callback's last word at the run's end
            self.logger.log_message(msg, echo=echo)

    def _window_metrics(self, step: int, losses: list, auxes: list, window: Window) -> dict[str, float]:
        """The window's metrics: mean ``loss`` (the NaN guard), each callback's (throughput,
        learning rate, ...), the mean of each aux value, and ``perplexity = exp(mean loss)``."""
        loss = float(jnp.mean(jnp.stack(losses)))
        if not math.isfinite(loss):
            raise NaNLossError(
                f"the loss is {loss} at step {step}; stopping (lower the learning rate, check the data: "
                "token ids beyond the model's embedding tables also give NaN)"
            )
        metrics = {"loss": loss}
        for hook in self._hooks["window_metrics"]:
            for key, value in hook(step, window).items():
                if key in metrics:
                    raise ConfigValueError(
                        f"callback {type(getattr(hook, '__self__', hook)).__name__} logs {key!r}, which the loss or an "
                        "earlier callback already logs; give the metric another name"
                    )
                metrics[key] = float(value)
        for key in auxes[-1] if auxes else ():
            metrics[key] = float(jnp.mean(jnp.stack([a[key] for a in auxes])))
        # exp of the mean loss, not the mean of per-step exp (replaces an aux of that name)
        metrics["perplexity"] = math.exp(min(loss, 700.0))
        return metrics

    def _notify(self, hook: str, *args: Any) -> None:
        """Call every callback's ``hook`` (a name in :data:`HOOKS`) in order."""
        for fn in self._hooks[hook]:
            fn(*args)

    def _evaluate(self, step: int) -> dict[str, float]:
        if self.eval_fn is None:
            raise RuntimeError("_evaluate needs an eval_fn")  # callers check first
        self._evaluated_at = step
        out = self.eval_fn(self.state)
        results = out if isinstance(out, Mapping) else {"eval_loss": out}
        results = {k: float(v) for k, v in results.items()}
        if self.logger is not None:
            self.logger.log_metrics_summary(step, results)
        self._notify("on_eval", step, results)
        return results

    def run(self, stop_at_step: int | None = None) -> dict[str, float]:
        """Train from the latest checkpoint (or step 0) to the end of the curriculum.

        Args:
            stop_at_step: stop (after checkpointing) once this step is reached, e.g. to
                fit a time budget; a later ``run()`` continues from there exactly.

        Returns:
            The last logged metrics (and the last evaluation's).
        """
        self._hooks = {name: bound_hooks(self.callbacks, name) for name in HOOKS}
        watchdog = None
        if self.watchdog_bounds is not None and in_a_job():
            watchdog = self._watchdog = ProgressWatchdog(
                self.watchdog_bounds, process_index=jax.process_index(), process_count=jax.process_count()
            ).start()
        ended = [self._timed.observe, *self._hooks["on_section"]]
        self._sections = LoopSections(  # the watchdog first: a step's end is progress before any callback runs
            [watchdog.on_section, *ended] if watchdog else ended, [watchdog.section_began] if watchdog else []
        )
        try:
            with self._sigint_saves(), self._orbax_details_to_system_log():
                return self._run(stop_at_step)
        except Preempted:
            self._log("preempted: the checkpoint is complete; exiting for a restart")
            self._close(wait=False)
            raise
        except BaseException as e:
            if self.logger is not None:
                self.logger.log_exception(e, echo=False)  # Python prints it as it propagates: once
            self._close(wait=False)
            raise
        finally:
            try:
                self._notify("on_run_end")
            finally:
                if self._watchdog is not None:
                    self._watchdog.stop()
                    self._watchdog = None

    @contextlib.contextmanager
    def _orbax_details_to_system_log(self) -> Iterator[None]:
        """Orbax's tracebacks of a failed save go to the system log only (the terminal gets
        the one-line :class:`CheckpointSaveError`)."""
        if self.logger is None:
            yield
            return
        logger = self.logger

        class ToSystemLog(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                try:
                    logger.log_message(f"orbax: {self.format(record)}", "ERROR", echo=False)
                except Exception:  # the logger is closed: the details are lost, the error is not
                    pass

        handler = ToSystemLog(logging.DEBUG)
        details = logging.getLogger(ORBAX_DETAILS_LOGGER)
        details.addHandler(handler)
        previous = details.level, details.propagate
        details.setLevel(logging.DEBUG)
        details.propagate = False  # not to the terminal through the root logger's handlers
        try:
            yield
        finally:
            details.removeHandler(handler)
            details.setLevel(previous[0])
            details.propagate = previous[1]

    @contextlib.contextmanager
    def _sigint_saves(self) -> Iterator[None]:
        """Ctrl-C saves like SIGTERM; a second one raises KeyboardInterrupt at once."""
        if (
            not self.handle_sigint
            or self.checkpointer is None
            or threading.current_thread() is not threading.main_thread()
        ):
            yield
            return

        def on_sigint(signum, frame):
            self._interrupts += 1
            if self._interrupts > 1:
                raise KeyboardInterrupt
            log.warning("Ctrl-C: saving a checkpoint at the next step, then exiting (Ctrl-C again to stop at once)")
            self.checkpointer.request_preemption()

        previous = signal.signal(signal.SIGINT, on_sigint)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)

    def _close(self, wait: bool) -> None:
        if self.checkpointer is not None:
            try:
                self.checkpointer.close()
            except Exception:
                if wait:
                    raise
                log.exception("closing the checkpointer failed")
        if self.logger is not None:
            self.logger.close()

    def _run(self, stop_at_step: int | None) -> dict[str, float]:
        start, total = self._restore(stop_at_step)
        if self.logger is not None:
            self.logger.start_from(start)  # metrics an earlier attempt logged after `start` are superseded
            self.logger.init_pbar(total, start)
        step, last = self._train_phases(start, total)
        if step == start:
            last = self._restored_metrics(last)
        return self._finish(step, last)

    def _restore(self, stop_at_step: int | None) -> tuple[int, int]:
        """Restore the latest checkpoint (or start at 0) and log where training starts and ends.

        Returns:
            ``(start, total)``: the restored step and the step this run stops at.
        """
        cur, ckpt = self.curriculum, self.checkpointer
        check_embeddings(self.state.model, cur.vocab_size, f"dataset {cur.names[0]!r}")
        started = self._sections.begin(RESTORE, self.state.step)
        start = ckpt.restore(partial=self.partial_restore) if ckpt is not None else 0
        self._sections.end(RESTORE, start, started)
        self._notify("on_restore", start, ckpt.restored_run if ckpt is not None else None)
        self.state.step = start
        total = cur.total_steps if stop_at_step is None else min(stop_at_step, cur.total_steps)
        self._log(
            f"training steps {start}..{total} on {count(jax.process_count(), 'process')}, "
            f"{count(len(jax.devices()), 'device')}; {cur}"
        )
        if ckpt is not None and ckpt.restored_run is not None:
            self._log_restored(start, ckpt, ckpt.restored_run)
        return start, total

    def _log_restored(self, start: int, ckpt: Checkpointer, run: Mapping[str, Any]) -> None:
        """Log what the restored step was saved by, and what differs now (all allowed changes)."""
        self._log(
            f"restored step {start} from {ckpt.restored_from or ckpt.directory} "
            f"(saved at {run.get('saved_at', 'an unknown time')})"
        )
        if ckpt.restore_plan is not None and not ckpt.restore_plan.unchanged:
            self._log(f"restored into a changed model: {ckpt.restore_plan.summary()}")
        saved_by = run.get("process_count")
        if saved_by is not None and saved_by != jax.process_count():  # allowed: batches do not depend on it
            self._log(f"step {start} was saved by {count(saved_by, 'process')}; resuming on {jax.process_count()}")
        for change in ckpt.changed_settings():  # allowed: cadences and prefetch leave the batches as they were
            self._log(f"step {start} was saved with other settings; now {change}")
        for change in ckpt.run_changes:  # allowed: e.g. a longer last phase (also a warning on stderr)
            self._log(f"step {start} was saved by a run with another curriculum: {change}")

    def _train_phases(self, start: int, total: int) -> tuple[int, dict[str, float]]:
        """Train each phase that overlaps ``start..total`` on its own data stream.

        Returns:
            ``(step, last)``: the step reached and the last logged metrics.
        """
        cur = self.curriculum
        last: dict[str, float] = {}
        step = start
        # The step bound to the model and optimizer trained now, after the restore, with nnx.cached_partial:
        # nnx.jit otherwise walks both object graphs (every parameter and Adam moment) in Python on each
        # call, ~14 ms of CPU per step here, which on CPU hosts competes with the step itself.
        train_step = nnx.cached_partial(self._train_step, self.state.model, self.state.optimizer)
        for phase in cur.resolved:
            if phase.end_step <= step or step >= total:
                continue
            opening = self._sections.begin(DATA_WAIT, step + 1)  # the stream's set-up: the first batch's wait
            with cur.stream(
                step,
                min(phase.end_step, total),
                seed=self.seed,
                sharding=self.data_sharding,
                outputs=self.outputs,
                prefetch_size=self.prefetch_size,
            ) as stream:
                step, last = self._run_phase(phase, stream, step, last, train_step, opening)
        return step, last

    def _restored_metrics(self, last: dict[str, float]) -> dict[str, float]:
        """Nothing was left to train: the metrics the restored step was saved with are the last logged."""
        ckpt = self.checkpointer
        if ckpt is None or ckpt.restored_run is None:
            return last
        saved = ckpt.restored_run.get("metrics") or {}
        return {k: float(v) for k, v in saved.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}

    def _finish(self, step: int, last: dict[str, float]) -> dict[str, float]:
        """Save the last step (unless saved already), evaluate it (unless done), and close."""
        ckpt = self.checkpointer
        if ckpt is not None and (step not in ckpt.all_steps()):
            self._checkpoint(step, last or None, force=True)
        if self.eval_fn is not None and self._evaluated_at != step:
            self._evaluate_into(last, step)
        self._log(f"finished at step {step}")
        with self._sections.timed(SAVE, step):  # waiting for the last save to complete
            self._close(wait=True)
        return last

    def _checkpoint(self, step: int, metrics: dict[str, float] | None, force: bool = False) -> None:
        """Save ``step`` under the watchdog's save bound and tell the callbacks when a save started."""
        ckpt = self.checkpointer
        if ckpt is None:
            return
        with self._sections.timed(SAVE, step):
            saved = ckpt.save(step, metrics, tokens_consumed=self.curriculum.tokens_before(step), force=force)
        if saved:
            self._notify("on_checkpoint", step, str(ckpt.directory))

    def _evaluate_into(self, last: dict[str, float], step: int) -> None:
        """Run ``eval_fn`` under the watchdog's eval bound; its results join ``last``."""
        with self._sections.timed(EVAL, step):
            last.update(self._evaluate(step))

    def _run_phase(
        self, phase: ResolvedPhase, stream, step: int, last: dict, train_step: Callable, waiting: tuple[float, float]
    ) -> tuple[int, dict]:
        """Train ``phase`` on ``stream`` from ``step`` (``waiting``: when the stream's set-up began):
        per step, the batch, the preemption check, the step itself, then the window's metrics, the
        checkpoint and the evaluation when due."""
        cur = self.curriculum
        resumed = f" (resuming at step {step})" if step > phase.start_step else ""
        self._log(
            f"phase {phase.index}: steps {phase.start_step}..{phase.end_step}{resumed}, batch "
            f"{phase.global_batch_size} x {phase.seq_len} tokens, weights {dict(zip(cur.names, phase.weights))}"
        )
        window, sections, batches = StepWindow(phase.tokens_per_step), self._sections, iter(stream)
        while (batch := next(batches, _END)) is not _END:
            sections.end(DATA_WAIT, step + 1, waiting)
            last = self._save_if_preempted(step, last, window)
            logged, saved = self._due(step + 1, step + 1 in (phase.end_step, stream.stop_step))
            step = self._train_one(train_step, batch, step, window, phase.index, settle=logged or saved)
            last = self._after_step(step, logged, saved, window, last)
            waiting = sections.begin(DATA_WAIT, step + 1)
        return step, last

    def _save_if_preempted(self, step: int, last: dict[str, float], window: StepWindow) -> dict[str, float]:
        """At the step every process agreed to stop at, save it with the metrics of the steps
        since the last window (the run record then describes the state it holds) and exit
        (:class:`Preempted`); returns ``last``."""
        ckpt = self.checkpointer
        if ckpt is not None and ckpt.reached_preemption(step):
            if window.losses:  # its last results are waited for here, outside the step sections
                last = self._close_window(step, window, logged=False)
            with self._sections.timed(PREEMPTION_SAVE, step):
                ckpt.save_and_exit_if_preempted(step, last or None, tokens_consumed=self.curriculum.tokens_before(step))
        return last

    def _due(self, step: int, end: bool) -> tuple[bool, bool]:
        """Whether ``step`` ends a logged window (a multiple of ``log_every``, or ``end``: the
        phase's or the run's) and whether it is a checkpoint step; the same on every process."""
        return step % self.log_every == 0 or end, step % self.save_interval_steps == 0

    def _train_one(
        self, train_step: Callable, batch: Any, step: int, window: StepWindow, phase_index: int, settle: bool
    ) -> int:
        """Run one compiled step on ``batch`` and add its loss to ``window``; returns the new step.

        The phase's first step (it compiles) and a window's last (``settle``) wait for their
        result inside their section: the compile time, and the window's device time up to its
        last result, are then in the sections that throughput is read from."""
        self._notify("on_batch_begin", step)
        section = STEP if window.compiled else COMPILE  # compilation (or a cache hit) happens in this step
        started = self._sections.begin(section, step + 1)
        loss, aux = train_step(batch)
        step += 1
        self.state.step = step
        waited = window.add(loss, aux, self.async_queue_depth, settle=settle or section == COMPILE)
        seconds = self._sections.end(section, step, started, waited)
        if section == COMPILE:
            window.compiled, window.compile_s = True, seconds
            self._log(
                f"step {step}: first step of phase {phase_index} took {seconds:.2f} s including "
                f"compilation; throughput is measured from the next step",
                echo=False,
            )
        self._notify("on_batch_end", step, loss)
        return step

    def _after_step(self, step: int, logged: bool, saved: bool, window: StepWindow, last: dict) -> dict:
        """The window's metrics at a log, checkpoint or phase-end step (logged when ``logged``),
        then the checkpoint (``saved``) and the evaluation when due; returns the last metrics."""
        if logged or saved:
            last = self._close_window(step, window, logged)
        if saved:
            self._checkpoint(step, last)
        if self.eval_fn is not None and step % self.eval_every == 0:
            self._evaluate_into(last, step)
        return last

    def _close_window(self, step: int, window: StepWindow, logged: bool) -> dict[str, float]:
        """The window's metrics, its timing read from the sections; when ``logged`` (windows end
        only at multiples of ``log_every`` and at the end) also the compile time, logged, and
        a new window."""
        timed = self._timed
        measured = Window(timed.steps, timed.steps * window.tokens_per_step, timed.seconds, logged)
        metrics = self._window_metrics(step, window.losses, window.auxes, measured)
        if not logged:
            return metrics
        if window.compile_s is not None:
            metrics["compile_time_s"] = window.compile_s
            window.compile_s = None
        if self.logger is not None:
            self.logger.log_metrics_summary(step, metrics)
        self._notify("on_step", step, metrics)
        window.restart()
        timed.reset()
        return metrics
