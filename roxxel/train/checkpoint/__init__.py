"""Asynchronous, multi-process checkpoints of an NNX model and its optimizer (Orbax).

Orbax does the I/O; this module decides what a checkpoint holds and when it is safe.

What one checkpoint (one step) holds
====================================
A directory ``<checkpoint_path>/<step>/`` written by ``orbax.checkpoint.CheckpointManager``
as a composite of two items:

- ``state``: the model's and the optimizer's variables, as the pure nested dict
  ``{"model": ..., "optimizer": ...}`` of ``nnx.to_pure_dict`` (so a checkpoint does not
  depend on NNX's variable classes), saved with ``StandardSave``. Every process writes
  the shards it owns; arrays keep their dtypes (PRNG key arrays included).
- ``run``: a JSON dict ``{"step", "tokens_consumed", "metrics", "fingerprint",
  "roxxel_version", "process_count", "format", "checksums", "saved_at"}``; ``fingerprint``
  is what the caller passed (the trainer passes ``Curriculum.describe()`` and its seed),
  ``checksums`` one sharding-independent checksum per array (:mod:`roxxel.train.digest`),
  verified at restore, ``saved_at`` the UTC time of the save (ISO 8601).

Orbax also writes ``metrics/metrics`` (the value of ``best_metric``, for keeping the
best step) and its own metadata. A step becomes visible only when complete: on a local
disk it is written under ``<step>.orbax-checkpoint-tmp*`` and renamed, on ``gs://``
it is committed by a ``commit_success.txt`` file written last. Incomplete steps are
never restored and are deleted when the next :class:`Checkpointer` opens the directory.

Keeping
=======
The latest ``max_to_keep`` steps plus the best one by ``best_metric`` (Orbax
preservation policies ``LatestN`` OR ``BestN(n=1)``); old steps are deleted only after
the newer step is committed. A step saved without a finite ``best_metric`` never
counts as the best.

Preemption and exit code
========================
Every process calls :meth:`Checkpointer.reached_preemption` (or
:meth:`Checkpointer.save_and_exit_if_preempted`) once per step, before the step's
update. After a SIGTERM to any process, all processes agree on the same step
(JAX's preemption sync point over ``jax.distributed``; in a single process without
``jax.distributed``, the first step checked after the signal), save it, wait until the
save is complete, and raise :class:`Preempted`, a ``SystemExit`` whose code is
:data:`roxxel.exit_codes.PREEMPTED_EXIT_CODE` (42): uncaught, the interpreter exits with
42, which the launcher treats as "preempted after a complete checkpoint, restart"::

    with Checkpointer(path, model, optimizer, fingerprint=curriculum.describe()) as ckpt:
        step = ckpt.restore()
        while step < total_steps:
            ckpt.save_and_exit_if_preempted(step, tokens_consumed=curriculum.tokens_before(step))
            loss = train_step(model, optimizer, batch(step))
            step += 1
            ckpt.save(step, {"loss": loss}, tokens_consumed=curriculum.tokens_before(step))

Errors
======
An error in an asynchronous save is raised as :class:`CheckpointSaveError` by the
next :meth:`Checkpointer.save` call (at the latest when that call writes),
:meth:`Checkpointer.wait_until_finished`, :meth:`Checkpointer.restore` or
:meth:`Checkpointer.close` -- never swallowed. A restore under a different run raises
:class:`RunMismatchError` (unless ``allow_changed_run``).

The package follows Orbax's seams: :mod:`.checkpointer` (the class, tying the rest
together), :mod:`.manager` (Orbax's ``CheckpointManager``: save interval, keeping, the best
step), :mod:`.record` (the item names and the ``run`` record), :mod:`.saving` (the part of
a save that blocks the caller: the state as Orbax saves it, the hand-over to Orbax, the
checksums' launch), :mod:`.pending` (the asynchronous save in flight, its deadline, what a
failed one leaves), :mod:`.restoring`
(reading a step back: plan, arrays, checksums), :mod:`.errors`, :mod:`.fingerprint` (the
run fingerprint and how a resume is compared with it), :mod:`.preemption` (the agreed step
after a SIGTERM, and its record), :mod:`.directory` (paths, storage, the branch source),
:mod:`.ownership` (one run and one writer per directory),
:mod:`.lifecycle` (exit hook, deadlines, Orbax's background tracebacks) and
:mod:`._orbax` (every private Orbax/JAX API used, with the tested versions).
"""

from __future__ import annotations

from roxxel.train.checkpoint.checkpointer import Checkpointer
from roxxel.train.checkpoint.errors import (
    CheckpointCorruptError,
    CheckpointRestoreError,
    CheckpointSaveError,
    ModelChangeError,
    Preempted,
    RunMismatchError,
)
from roxxel.train.checkpoint.fingerprint import describe_changes
from roxxel.train.checkpoint.lifecycle import ORBAX_DETAILS_LOGGER
from roxxel.train.checkpoint.ownership import CheckpointOwnerError
from roxxel.train.checkpoint.record import RUN_FORMAT, RUN_ITEM, STATE_ITEM

__all__ = [
    "ORBAX_DETAILS_LOGGER",
    "RUN_FORMAT",
    "RUN_ITEM",
    "STATE_ITEM",
    "CheckpointCorruptError",
    "CheckpointOwnerError",
    "CheckpointRestoreError",
    "CheckpointSaveError",
    "Checkpointer",
    "ModelChangeError",
    "Preempted",
    "RunMismatchError",
    "describe_changes",
]
