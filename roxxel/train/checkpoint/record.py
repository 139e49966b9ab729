"""What one step holds besides the arrays: the names of its two Orbax items and the ``run``
record (layout in :mod:`roxxel.train.checkpoint`), built from the caller's metrics, and the
Orbax handler that writes the record in the save's background commit, once the checksums
dispatched with the save have been read from the devices."""

from __future__ import annotations

import dataclasses
import datetime
import numbers
import threading
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from etils import epath

from roxxel._version import __version__
from roxxel.json_changes import normalize_json
from roxxel.train.digest import ChecksumPlan, PendingChecksums, SumExchange

STATE_ITEM = "state"
"""Name of the composite item holding model and optimizer variables."""
RUN_ITEM = "run"
"""Name of the composite item holding the run's JSON record."""
RUN_FORMAT = 1
"""Version of the ``run`` item's layout."""


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
    raise TypeError(
        f"metric {name!r} must be a number, a one-element array, a str, a bool or None; got {type(value).__name__}"
    )


def json_metrics(metrics: Mapping[str, Any] | None) -> dict[str, Any]:
    """``metrics_dict`` as JSON scalars.

    Raises:
        TypeError: not a mapping, or a value that is not a scalar.
    """
    if metrics is None:
        return {}
    if not isinstance(metrics, Mapping):
        raise TypeError(f"metrics_dict must be a mapping of names to numbers, got {type(metrics).__name__}")
    return {str(k): _json_scalar(v, str(k)) for k, v in metrics.items()}


def check_tokens(tokens_consumed: Any) -> int | None:
    """``tokens_consumed`` as an int, or None.

    Raises:
        ValueError: not an int >= 0.
    """
    if tokens_consumed is None:
        return None
    if isinstance(tokens_consumed, bool) or not isinstance(tokens_consumed, numbers.Integral) or tokens_consumed < 0:
        raise ValueError(f"tokens_consumed must be an int >= 0 or None, got {tokens_consumed!r}")
    return int(tokens_consumed)


def run_record(
    step: int, tokens_consumed: int | None, metrics: dict[str, Any], fingerprint: Any, settings: Mapping[str, Any]
) -> dict[str, Any]:
    """The ``run`` item of ``step`` before its arrays are known (:func:`seal` adds them)."""
    return {
        "format": RUN_FORMAT,
        "step": step,
        "tokens_consumed": tokens_consumed,
        "metrics": metrics,
        "fingerprint": fingerprint,
        "roxxel_version": __version__,
        "process_count": jax.process_count(),
        "settings": normalize_json(settings, "settings"),
    }


class RunChecksums:
    """The checksums of one save's arrays: planned by the training thread before Orbax's save
    (a :class:`~roxxel.train.digest.ChecksumPlan`: which arrays, which programs), dispatched
    right after Orbax's manager has taken the arrays (:meth:`dispatch`: only the launches,
    while Orbax's background threads start), read by the run record's background commit
    (:meth:`read`), host-summed shares combined across processes by ``exchange``. Every
    process dispatches them (a collective)."""

    def __init__(self, plan: ChecksumPlan, exchange: SumExchange | None = None) -> None:
        self._given = threading.Event()
        self._exchange = exchange
        self._plan: ChecksumPlan | None = plan
        self._pending: PendingChecksums | None = None
        self._error: BaseException | None = None

    def dispatch(self) -> None:
        """Start computing the planned checksums; returns without waiting for the devices.
        An error of the dispatch (a dtype the sums refuse: complex, int4) is recorded for
        :meth:`read`, which raises it in the commit: Orbax's save has started by now, so the
        step fails like any failed write (``CheckpointSaveError`` naming it, at the next
        ``save``, ``wait_until_finished`` or ``close``) and leaves no step a restore could
        not check. Raised here it escaped ``save()`` before the save in flight was recorded,
        and the later error named no step."""
        if self._plan is None:
            raise RuntimeError("RunChecksums.dispatch() called twice")
        try:
            self._pending = self._plan.dispatch()
        except Exception as err:
            self.fail(err)
            return
        except BaseException as err:  # KeyboardInterrupt: the commit must not wait for it forever
            self.fail(err)
            raise
        self._plan = None
        self._given.set()

    def fail(self, err: BaseException) -> None:
        """No checksums will come (the save failed to start): :meth:`read` raises."""
        self._plan = None  # the arrays are not held for a save that did not start
        self._error = err
        self._given.set()

    def read(self) -> dict[str, str] | None:
        """``{path: "<16 hex digits>"}``, or ``None`` on a process that writes no record (its
        shares were sent to process 0); waits for :meth:`dispatch` (or :meth:`fail`), then
        for the devices and the host sums. Raises RuntimeError when no checksums will come."""
        self._given.wait()
        if self._pending is None:
            raise RuntimeError(f"the checksums of the save were not computed: {self._error!r}") from self._error
        return self._pending.read(self._exchange)


def seal(run: dict[str, Any], plan: ChecksumPlan, exchange: SumExchange | None = None) -> RunChecksums:
    """Add the UTC time of the save (ISO 8601) to ``run``; return the holder of its arrays'
    checksums (:mod:`roxxel.train.digest`), planned by ``plan`` (host shares combined by
    ``exchange``), to pass with it to :class:`RunRecordSave` and to
    :meth:`RunChecksums.dispatch` once Orbax's save has taken the arrays."""
    run["saved_at"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return RunChecksums(plan, exchange)


class RunRecordHandler(ocp.handlers.JsonCheckpointHandler):
    """Orbax's JSON handler for the ``run`` item, whose save does not block on the checksums.

    :meth:`async_save` returns at once; its commit (an Orbax background thread, after the
    step's directory exists) reads the dispatched checksums (:class:`RunChecksums`),
    adds them to the record as ``checksums`` and writes the JSON file as Orbax's handler
    does, so the record is committed with the step, atomically. A failure to read them
    fails the save like any failed write. On disk the item is the file Orbax's JSON handler
    writes (the step's metadata names this handler): ``ocp.args.JsonRestore`` reads it too.
    """

    async def async_save(
        self, directory: epath.Path, item: Any = None, args: Any = None
    ) -> list[ocp.future.Future] | None:
        if not isinstance(args, RunRecordSave):
            return await super().async_save(directory, item, args)
        record, checksums = dict(args.item), args.checksums

        async def commit() -> None:
            if checksums is not None:
                sums = checksums.read()  # waits for the devices / sums the host blocks, off the training thread
                if sums is None:  # a process that writes no record: its shares went to process 0
                    return
                record["checksums"] = sums
            await self._save_fn(record, directory)

        return [ocp.future.CommitFutureAwaitingContractedSignals(commit(), name="roxxel_run_record")]


@ocp.args.register_with_handler(RunRecordHandler, for_save=True)
@dataclasses.dataclass
class RunRecordSave(ocp.args.CheckpointArgs):
    """Save the ``run`` record ``item``, plus ``checksums`` (read in the background commit)."""

    item: Mapping[str, Any]
    checksums: RunChecksums | PendingChecksums | None = None


@ocp.args.register_with_handler(RunRecordHandler, for_restore=True)
@dataclasses.dataclass
class RunRecordRestore(ocp.args.CheckpointArgs):
    """Read the ``run`` record back (as ``ocp.args.JsonRestore``; also records of older steps)."""

    item: bytes | None = None
