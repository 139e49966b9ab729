"""``Trainer``: run a curriculum on a Flax NNX model across every process of a pod.

One loop, every process: restore the latest checkpoint (which fixes the step, and the
step fixes the data position), then for each curriculum phase stream this process's
rows of each global batch, run the compiled step, log on process 0, checkpoint
asynchronously, and at a preemption save the agreed step and exit with the code that
makes the launcher restart the job.
"""

from __future__ import annotations

import collections
import logging
import math
import os
import time
from typing import Any, Callable, Mapping

import jax
import jax.numpy as jnp

from roxxel.data.curriculum import Curriculum, ResolvedPhase
from roxxel.train.checkpoint import Checkpointer, Preempted
from roxxel.train.logger import Logger
from roxxel.train.sharding import batch_sharding, default_mesh, place_on_mesh
from roxxel.train.state import ModelState
from roxxel.train.step import make_train_step

log = logging.getLogger("roxxel.train")


class NaNLossError(ValueError):
    """The loss became NaN or infinite; training stopped before wasting more compute."""


class Trainer:
    """Train ``model`` with ``optimizer`` on ``curriculum``, minimising ``loss_fn(model, batch)``.

    Args:
        model, optimizer: an ``nnx.Module`` and its ``nnx.Optimizer``; or pass ``state=``.
        curriculum: the data: phases of batch size, sequence length and blend weights.
        loss_fn: ``loss_fn(model, batch)`` returning a scalar, ``(loss, aux)`` or a dict with
            ``"loss"``; aux scalars are logged. ``batch`` is an int ``(batch_size, seq_len)``
            array, or a dict of them with ``outputs="documents"``.
        save_path: run directory: checkpoints in ``save_path/checkpoints``, logs in ``save_path``.
        checkpointer, logger: use these instead of the ones ``save_path`` creates.
        eval_fn: ``eval_fn(state) -> dict | scalar`` run every ``eval_every`` steps and at the end.
        eval_every, checkpoint_every, log_every: intervals in steps.
        seed: data shuffle seed.
        mesh: device mesh (default: every device on one ``"data"`` axis). Parameters are
            replicated on it, or placed by their ``nnx.with_partitioning`` annotations; Flax
            creates annotated variables on the current mesh, so build such a model under
            ``with jax.set_mesh(mesh):`` and pass the same ``mesh`` here.
        data_sharding: sharding of each batch (default: rows over the mesh's first axis).
        max_to_keep: checkpoints kept besides the best.
        async_queue_depth: steps dispatched ahead of the host before it waits for a result.
        grad_accum_steps: micro-batches per step (``batch_size`` must divide by it and by
            the number of data shards).
        state: a :class:`ModelState` or object with ``model`` and ``optimizer``.
        outputs: ``"tokens"`` or ``"documents"`` (tokens + segment ids, positions, loss mask).
        prefetch_size: batches prepared ahead on a background thread.
        allow_changed_run: restore a checkpoint made under another curriculum or dataset.

    Raises:
        ValueError: a batch size that does not divide over micro-batches or data shards
            (names the phase); a NaN loss (:class:`NaNLossError`) at a log or checkpoint step.
        Preempted: (a ``SystemExit`` with code 42) after saving at a preemption.
    """

    def __init__(self, model=None, optimizer=None, curriculum: Curriculum | None = None, loss_fn: Callable | None = None,
                 save_path: str | None = None, checkpointer: Checkpointer | None = None, logger: Logger | None = None,
                 eval_fn: Callable | None = None, eval_every: int = 500, checkpoint_every: int = 100,
                 log_every: int = 100, seed: int = 42, mesh=None, data_sharding=None, max_to_keep: int = 3,
                 async_queue_depth: int = 2, grad_accum_steps: int | None = None, *, state: Any = None,
                 outputs: str = "tokens", prefetch_size: int = 2, allow_changed_run: bool = False):
        if curriculum is None or loss_fn is None:
            raise TypeError("Trainer needs a curriculum and a loss_fn")
        for name, v in (("eval_every", eval_every), ("checkpoint_every", checkpoint_every), ("log_every", log_every),
                        ("async_queue_depth", async_queue_depth), ("grad_accum_steps", grad_accum_steps or 1)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        self.state = ModelState.from_object(state) if state is not None else ModelState(model, optimizer)
        if self.state.optimizer is None:
            raise TypeError("Trainer needs an optimizer (nnx.Optimizer)")
        self.curriculum, self.loss_fn, self.eval_fn = curriculum, loss_fn, eval_fn
        self.eval_every, self.checkpoint_every, self.log_every = eval_every, checkpoint_every, log_every
        self.seed, self.outputs, self.prefetch_size = seed, outputs, prefetch_size
        self.async_queue_depth = async_queue_depth
        self.grad_accum_steps = grad_accum_steps or 1
        self.mesh = mesh if mesh is not None else (data_sharding.mesh if data_sharding is not None else default_mesh())
        self.data_sharding = data_sharding if data_sharding is not None else batch_sharding(self.mesh)
        self._check_batch_sizes()
        self.save_path = save_path
        if logger is None and save_path is not None and "://" in save_path:
            raise ValueError(f"save_path {save_path!r} is object storage, but logs are local files: keep save_path "
                             "local, or pass checkpointer=Checkpointer('gs://...', ...) and logger=Logger('runs/NAME')")
        if checkpointer is None and save_path is not None:
            checkpointer = Checkpointer(os.path.join(save_path, "checkpoints"), state=self.state, max_to_keep=max_to_keep,
                                        fingerprint={**curriculum.describe(), "seed": seed}, allow_changed_run=allow_changed_run)
        if logger is None and save_path is not None:
            logger = Logger(save_path, total_steps=curriculum.total_steps)
        self.checkpointer, self.logger = checkpointer, logger
        place_on_mesh(self.mesh, self.state.model, self.state.optimizer)
        self._train_step = make_train_step(loss_fn, self.grad_accum_steps)
        self._evaluated_at: int | None = None

    def _check_batch_sizes(self) -> None:
        spec0 = self.data_sharding.spec[0] if len(self.data_sharding.spec) else None
        axes = () if spec0 is None else (spec0 if isinstance(spec0, tuple) else (spec0,))
        shards = math.prod(self.data_sharding.mesh.shape[a] for a in axes)
        for p in self.curriculum.resolved:
            if p.batch_size % self.grad_accum_steps:
                raise ValueError(f"phase {p.index}: batch_size {p.batch_size} does not divide into "
                                 f"{self.grad_accum_steps} micro-batches; pick a multiple of {self.grad_accum_steps}")
            if (p.batch_size // self.grad_accum_steps) % shards:
                raise ValueError(
                    f"phase {p.index}: each micro-batch of {p.batch_size // self.grad_accum_steps} rows must split "
                    f"evenly over the {shards} data shards (devices on the data axis); use a batch_size that is a "
                    f"multiple of {shards * self.grad_accum_steps}")

    # ----------------------------------------------------------------------------------
    def _log(self, msg: str) -> None:
        log.info(msg)
        if self.logger is not None:
            self.logger.log_message(msg)

    def _metrics(self, step: int, losses: list, auxes: list, tokens: int, seconds: float, steps: int) -> dict[str, float]:
        loss = float(jnp.mean(jnp.stack(losses)))
        if not math.isfinite(loss):
            raise NaNLossError(f"the loss is {loss} at step {step}; stopping (lower the learning rate, check the data)")
        metrics = {"loss": loss, "tokens_per_sec": tokens / max(seconds, 1e-9), "step_time_s": seconds / max(steps, 1)}
        for key in auxes[-1] if auxes else ():
            metrics[key] = float(jnp.mean(jnp.stack([a[key] for a in auxes])))
        return metrics

    def _evaluate(self, step: int) -> dict[str, float]:
        self._evaluated_at = step
        out = self.eval_fn(self.state)
        results = out if isinstance(out, Mapping) else {"eval_loss": out}
        results = {k: float(v) for k, v in results.items()}
        if self.logger is not None:
            self.logger.log_metrics_summary(step, results)
        return results

    def run(self, stop_at_step: int | None = None) -> dict[str, float]:
        """Train from the latest checkpoint (or step 0) to the end of the curriculum.

        Args:
            stop_at_step: stop (after checkpointing) once this step is reached, e.g. to
                fit a time budget; a later ``run()`` continues from there exactly.

        Returns:
            The last logged metrics (and the last evaluation's).
        """
        try:
            return self._run(stop_at_step)
        except Preempted:
            self._log("preempted: the checkpoint is complete; exiting for a restart")
            self._close(wait=False)
            raise
        except BaseException as e:
            if self.logger is not None:
                self.logger.log_exception(e)
            self._close(wait=False)
            raise

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
        cur, ckpt = self.curriculum, self.checkpointer
        start = ckpt.restore() if ckpt is not None else 0
        self.state.step = start
        total = cur.total_steps if stop_at_step is None else min(stop_at_step, cur.total_steps)
        self._log(f"training steps {start}..{total} on {jax.process_count()} process(es), "
                  f"{len(jax.devices())} device(s); {cur}")
        if self.logger is not None:
            self.logger.init_pbar(total, start)
        last: dict[str, float] = {}
        step = start
        for phase in cur.resolved:
            if phase.end_step <= step or step >= total:
                continue
            with cur.stream(step, min(phase.end_step, total), seed=self.seed, sharding=self.data_sharding,
                            outputs=self.outputs, prefetch_size=self.prefetch_size) as stream:
                step, last = self._run_phase(phase, stream, step, last)
        if ckpt is not None and (step not in ckpt.all_steps()):
            ckpt.save(step, last or None, tokens_consumed=cur.tokens_before(step), force=True)
        if self.eval_fn is not None and self._evaluated_at != step:
            last.update(self._evaluate(step))
        self._log(f"finished at step {step}")
        self._close(wait=True)
        return last

    def _run_phase(self, phase: ResolvedPhase, stream, step: int, last: dict) -> tuple[int, dict]:
        cur, ckpt = self.curriculum, self.checkpointer
        self._log(f"phase {phase.index}: steps {phase.start_step}..{phase.end_step}, batch {phase.batch_size} x "
                  f"{phase.seq_len} tokens, weights {dict(zip(cur.names, phase.weights))}")
        pending: collections.deque = collections.deque()
        losses, auxes = [], []
        window_start, window_steps = time.perf_counter(), 0
        for batch in stream:
            if ckpt is not None:
                ckpt.save_and_exit_if_preempted(step, last or None, tokens_consumed=cur.tokens_before(step))
            loss, aux = self._train_step(self.state.model, self.state.optimizer, batch)
            step += 1
            self.state.step = step
            losses.append(loss)
            auxes.append(aux)
            window_steps += 1
            pending.append(loss)
            if len(pending) > self.async_queue_depth:  # bound how far dispatch runs ahead
                pending.popleft().block_until_ready()
            log_now, ckpt_now = step % self.log_every == 0, step % self.checkpoint_every == 0
            if log_now or ckpt_now or step == phase.end_step or step == stream.stop_step:
                elapsed = time.perf_counter() - window_start
                last = self._metrics(step, losses, auxes, window_steps * phase.tokens_per_step, elapsed, window_steps)
                if self.logger is not None:
                    self.logger.log_metrics_summary(step, last)
                losses, auxes, window_start, window_steps = [], [], time.perf_counter(), 0
            if ckpt_now and ckpt is not None:
                ckpt.save(step, last, tokens_consumed=cur.tokens_before(step))
            if self.eval_fn is not None and step % self.eval_every == 0:
                last.update(self._evaluate(step))
        return step, last
