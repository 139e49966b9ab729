"""The processes' shares of a save's host-summed checksums (:mod:`roxxel.train.digest`: on
JAX's CPU backend each process sums the blocks it holds), added up on process 0, the process
that writes the ``run`` record (Orbax's JSON handler writes on its primary host, process 0).

The shares travel through the key-value store of JAX's coordination service (the service
``jax.distributed.initialize`` starts, which Orbax's own signals use), from Orbax's
background commit threads: no collective, so nothing has to be ordered against the
training thread's programs. Every process keys its share by the ordinal of the save
(saves are collective: every process makes them in the same order), its step and its
process index.
"""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

import jax

from roxxel.train.checkpoint import _orbax
from roxxel.train.digest import SumExchange, add_shares

_SAVES = itertools.count()  # the n-th save of this process: the same n on every process
_PREFIX = "roxxel/checkpoint_checksums"


class CoordinationExchange(SumExchange):
    """The exchange of one save's shares, made by the training thread when the save starts.

    Args:
        step: the step saved (for messages).
        deadline: ``time.monotonic()`` by which process 0 must have every share (the save's
            deadline); past it the save fails.
        client: the coordination service's client (JAX's by default).

    Raises (from :meth:`total`, failing the save's commit):
        RuntimeError: a process sent no share before the deadline, could not compute its
            share (its error is named), or summed other arrays.
    """

    def __init__(self, step: int, deadline: float, client: Any = None) -> None:
        # The step in the key too: processes whose counts of saves parted (a save one of
        # them skipped) wait for a key nobody writes and fail by the deadline, instead of
        # adding up the shares of two different saves.
        self._key = f"{_PREFIX}/{next(_SAVES)}/step_{step}"
        self._step = step
        self._deadline = deadline
        self._client = client

    def _store(self) -> Any:
        client = self._client or _orbax.coordination_client()
        if client is None:
            raise RuntimeError(
                "a multi-process save needs jax.distributed's coordination service, which is not running"
            )
        return client

    def total(self, shares: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]] | None:
        me = jax.process_index()
        if me != 0:
            self._store().key_value_set(f"{self._key}/{me}", json.dumps({"shares": shares}))
            return None
        received = [self._receive(peer, set(shares)) for peer in range(1, jax.process_count())]
        return {path: add_shares([own, *(got[path] for got in received)]) for path, own in shares.items()}

    def _receive(self, peer: int, paths: set[str]) -> dict[str, tuple[int, int]]:
        """Process ``peer``'s shares (removed from the store once read)."""
        store, key = self._store(), f"{self._key}/{peer}"
        wait_ms = max(1, int((self._deadline - time.monotonic()) * 1000))
        try:
            raw = store.blocking_key_value_get(key, wait_ms)
        except Exception as err:
            raise RuntimeError(
                f"the checksums of step {self._step}: process {peer} sent no share of its arrays' "
                f"checksums within the save's timeout ({type(err).__name__}: {err}); see its log"
            ) from None
        store.key_value_delete(key)
        got = json.loads(raw)
        if "error" in got:
            raise RuntimeError(
                f"the checksums of step {self._step}: process {peer} could not sum its blocks: {got['error']}"
            )
        if set(got["shares"]) != paths:
            raise RuntimeError(
                f"the checksums of step {self._step}: process {peer} summed other arrays than process 0 "
                f"({sorted(set(got['shares']) ^ paths)[:3]}...): the processes save different states"
            )
        return {path: (int(a), int(b)) for path, (a, b) in got["shares"].items()}

    def fail(self, err: BaseException) -> None:
        if jax.process_index() != 0:  # process 0 raises its own error
            message = f"{type(err).__name__}: {err}"[:500]
            self._store().key_value_set(f"{self._key}/{jax.process_index()}", json.dumps({"error": message}))


def exchange_for(step: int, deadline: float) -> CoordinationExchange | None:
    """The exchange a save of ``step`` needs: one per save in a multi-process job (made on
    every process, in save order), ``None`` in a single process (its shares are the sums)."""
    return CoordinationExchange(step, deadline) if jax.process_count() > 1 else None
