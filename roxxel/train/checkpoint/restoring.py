"""Reading one step back: its run record, the comparison of its arrays with the live model's
(:mod:`roxxel.train.partial`), the arrays themselves (all, or the subset a changed model
keeps), and their checksums; every failure becomes one error naming the step and the fix."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from etils import epath

from roxxel.train.checkpoint import _orbax
from roxxel.train.checkpoint.errors import (
    CheckpointCorruptError,
    CheckpointRestoreError,
    ModelChangeError,
    RunMismatchError,
    one_line,
)
from roxxel.train.checkpoint.record import RUN_ITEM, STATE_ITEM, RunRecordRestore
from roxxel.train.digest import array_checksums
from roxxel.train.partial import RestorePlan, layout_of_metadata, layout_of_state, plan_restore, subset
from roxxel.wording import as_clause, count

log = logging.getLogger("roxxel.checkpoint")


def pick_step(steps: Any, directory: epath.Path, step: int | None) -> int | None:
    """The step to restore of ``steps`` (the complete ones): ``step``, else the latest; ``None``
    when ``step`` is ``None`` and there is none (logged: the run starts from step 0).

    Raises:
        FileNotFoundError: ``step`` is not one of ``steps``.
    """
    if step is None:
        if not steps:
            log.info("no checkpoint in %s; starting from step 0", directory)
            return None
        return max(steps)
    if step not in steps:
        raise FileNotFoundError(f"no complete checkpoint of step {step} in {directory} (steps: {list(steps)})")
    return step


def _fmt(spec: tuple[tuple[int, ...], str] | None) -> str:
    """``(shape, dtype)`` as ``"shape (4, 3) float32"``."""
    return "absent" if spec is None else f"shape {spec[0]} {spec[1]}"


def _replicated_sharding() -> jax.sharding.Sharding:
    mesh = jax.sharding.Mesh(np.asarray(jax.devices()), ("all",))
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())


def abstract_leaf(x: Any) -> Any:
    """Restore target for one leaf: shape, dtype and the sharding it has *now*."""
    if isinstance(x, jax.Array):
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
    if isinstance(x, jax.ShapeDtypeStruct):  # an abstract model (nnx.eval_shape)
        if x.sharding is None:
            return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=_replicated_sharding())
        return x
    return x  # numpy arrays and Python scalars restore as their own type


def fix_hint(directory: epath.Path, earlier: list[int]) -> str:
    if not earlier:
        return f"no earlier step exists in {directory}: start the run afresh (move the directory away)"
    return f"restore an earlier step with restore(step=N), N in {earlier}, or delete the damaged step's directory"


@contextlib.contextmanager
def restore_errors(directory: epath.Path, step: int, earlier: list[int], what: str) -> Iterator[None]:
    """Turn any failure to read a step (bad JSON, missing metadata, a damaged chunk, a shape
    that does not fit) into one :class:`CheckpointRestoreError` naming the step and the fix.
    A failed read's sibling reads finish before Orbax closes their event loop
    (:func:`_orbax.reads_finish_before_failing`)."""
    try:
        with _orbax.reads_finish_before_failing():
            yield
    except (CheckpointRestoreError, RunMismatchError):
        raise
    except Exception as err:
        raise CheckpointRestoreError(
            f"cannot restore step {step} from {directory} (reading {what}): {type(err).__name__}: "
            f"{as_clause(one_line(err))}. The step may be damaged or written by an incompatible model; "
            f"{fix_hint(directory, earlier)}",
            step=step,
            earlier_steps=earlier,
        ) from err


def read_run(source: ocp.CheckpointManager, directory: epath.Path, step: int, earlier: list[int]) -> dict[str, Any]:
    """The ``run`` record of ``step`` (an empty dict when it holds none)."""
    with restore_errors(directory, step, earlier, "its run record"):
        run = source.restore(step, args=ocp.args.Composite(**{RUN_ITEM: RunRecordRestore()}))[RUN_ITEM]
        return dict(run or {})


def plan(directory: epath.Path, step: int, earlier: list[int], target: Any, partial: bool) -> RestorePlan:
    """Compare the saved arrays with the live ones; refuse what cannot be restored."""
    with restore_errors(directory, step, earlier, "its array metadata"):
        # The manager's layout `<directory>/<step>/<item>`; Orbax's handler reads the metadata.
        handler = ocp.PyTreeCheckpointHandler()
        try:
            metadata = handler.metadata(directory / str(step) / STATE_ITEM)
        finally:
            handler.close()
    saved_layout = layout_of_metadata(getattr(metadata, "tree", metadata))
    current_layout = layout_of_state(target)
    restore_plan = plan_restore(saved_layout, current_layout)
    where = f"step {step} in {directory}"
    if restore_plan.mismatched:
        path, saved, current = restore_plan.mismatched[0]
        more = f" (and {len(restore_plan.mismatched) - 1} more)" if len(restore_plan.mismatched) > 1 else ""
        raise ModelChangeError(
            f"cannot restore {where}: array {path!r} is {_fmt(saved)} in the checkpoint but {_fmt(current)} "
            f"in the model{more}; nothing was loaded. Give the model the saved shape, or rename the "
            "changed layer so that it starts from its initial values with restore(partial=True)",
            step=step,
            earlier_steps=earlier,
            array=path,
            saved=saved,
            current=current,
        )
    if not restore_plan.unchanged and not partial:
        first = (restore_plan.new or restore_plan.dropped)[0]
        changes = [
            f"{count(len(names), 'array')} {what}, e.g. {names[0]!r}"
            for names, what in ((restore_plan.new, "new"), (restore_plan.dropped, "no longer in the model"))
            if names
        ]
        raise ModelChangeError(
            f"cannot restore {where}: the model changed ({'; '.join(changes)}); nothing was loaded. To restore the arrays in both and keep "
            "initial values for the new ones, pass partial=True (Trainer(restore=RestoreOptions(partial=True)))",
            step=step,
            earlier_steps=earlier,
            array=first,
            saved=saved_layout.get(first),
            current=current_layout.get(first),
        )
    return restore_plan


def read_state(
    source: ocp.CheckpointManager,
    directory: epath.Path,
    step: int,
    earlier: list[int],
    target: Any,
    restore_plan: RestorePlan,
) -> Any:
    """The arrays of ``step`` the plan restores, as the pure dict of ``target``'s (abstract) leaves."""
    with restore_errors(directory, step, earlier, "its arrays"):
        if restore_plan.unchanged and restore_plan.restored == restore_plan.saved:
            return source.restore(step, args=ocp.args.Composite(**{STATE_ITEM: ocp.args.StandardRestore(target)}))[
                STATE_ITEM
            ]
        return _read_partially(directory, step, subset(target, restore_plan.restored))


def _read_partially(directory: epath.Path, step: int, item: Any) -> Any:
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


def verify_checksums(directory: epath.Path, step: int, earlier: list[int], saved: Any, restored: Any) -> None:
    """Compare each array read with the checksum recorded at save.

    Raises:
        CheckpointCorruptError: one differs (names the array and the earlier steps).
    """
    if not isinstance(saved, Mapping):
        log.warning("step %d in %s has no array checksums (saved by an older Roxxel): not verified", step, directory)
        return
    got = array_checksums(restored)
    for path, value in got.items():
        if path in saved and saved[path] != value:
            raise CheckpointCorruptError(
                f"step {step} in {directory} is damaged: array {path!r} does not match the checksum "
                f"recorded at save ({saved[path]} saved, {value} read); nothing was loaded. "
                f"{fix_hint(directory, earlier)}",
                step=step,
                earlier_steps=earlier,
                array=path,
            )
    log.debug("step %d: %d array checksums verified", step, len(got))
