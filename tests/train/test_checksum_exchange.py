"""The processes' shares of a save's host-summed checksums reach process 0, which adds them
up; a share that does not come, comes as an error, or names other arrays fails the save
naming the process. The coordination service is a stand-in with the behaviour of JAX's
client (``key_value_set``, ``blocking_key_value_get`` raising after its timeout,
``key_value_delete``); the real service is used by the multi-process checkpoint tests
(tests/train/test_train_sharded.py restores verify the combined sums)."""

from __future__ import annotations

import itertools
import threading
import time

import jax
import pytest

from roxxel.train.checkpoint import checksum_exchange
from roxxel.train.checkpoint.checksum_exchange import CoordinationExchange


class FakeStore:
    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self.changed = threading.Condition()

    def key_value_set(self, key: str, value: str) -> None:
        with self.changed:
            assert key not in self.values, key
            self.values[key] = value
            self.changed.notify_all()

    def blocking_key_value_get(self, key: str, timeout_ms: int) -> str:
        with self.changed:
            if not self.changed.wait_for(lambda: key in self.values, timeout_ms / 1000):
                raise RuntimeError(f"DEADLINE_EXCEEDED: {key}")
            return self.values[key]

    def key_value_delete(self, key: str) -> None:
        with self.changed:
            del self.values[key]


def _as(monkeypatch, index: int, count: int = 3) -> None:
    monkeypatch.setattr(jax, "process_index", lambda: index)
    monkeypatch.setattr(jax, "process_count", lambda: count)


def _exchanges(monkeypatch, store, n=3, deadline_s=5.0):
    """One save's exchange on each of ``n`` processes: each process's counter of saves is at
    the same ordinal (saves are collective)."""
    monkeypatch.setattr(checksum_exchange, "_SAVES", itertools.repeat(42))
    return [CoordinationExchange(7, time.monotonic() + deadline_s, client=store) for _ in range(n)]


def test_process_zero_adds_up_every_share_mod_2_32(monkeypatch):
    store = FakeStore()
    ex = _exchanges(monkeypatch, store)
    _as(monkeypatch, 1)
    assert ex[1].total({"a": (2**32 - 1, 5), "b": (0, 0)}) is None
    _as(monkeypatch, 2)
    assert ex[2].total({"a": (3, 2**31), "b": (1, 1)}) is None
    _as(monkeypatch, 0)
    assert ex[0].total({"a": (1, 2**31), "b": (4, 9)}) == {"a": (3, 5), "b": (5, 10)}
    assert store.values == {}  # read shares are removed from the store


def test_a_missing_share_fails_the_save_by_its_deadline_naming_the_process(monkeypatch):
    store = FakeStore()
    ex = _exchanges(monkeypatch, store, n=2, deadline_s=0.5)
    _as(monkeypatch, 0, count=2)
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match=r"step 7: process 1 sent no share .* within the save's timeout"):
        ex[0].total({"a": (1, 1)})
    assert time.monotonic() - t0 < 3


def test_a_peer_that_could_not_sum_sends_its_error(monkeypatch):
    store = FakeStore()
    ex = _exchanges(monkeypatch, store, n=2)
    _as(monkeypatch, 1, count=2)
    ex[1].fail(MemoryError("cannot allocate 1 MiB"))
    _as(monkeypatch, 0, count=2)
    with pytest.raises(RuntimeError, match=r"process 1 could not sum its blocks: MemoryError: cannot allocate 1 MiB"):
        ex[0].total({"a": (1, 1)})


def test_a_peer_that_summed_other_arrays_is_refused(monkeypatch):
    store = FakeStore()
    ex = _exchanges(monkeypatch, store, n=2)
    _as(monkeypatch, 1, count=2)
    ex[1].total({"model/w": (1, 1)})
    _as(monkeypatch, 0, count=2)
    with pytest.raises(RuntimeError, match=r"process 1 summed other arrays .* different states"):
        ex[0].total({"model/v": (1, 1)})


def test_every_save_has_its_own_key():
    store = FakeStore()
    a = CoordinationExchange(1, time.monotonic() + 1, client=store)
    b = CoordinationExchange(1, time.monotonic() + 1, client=store)
    assert a._key != b._key


def test_processes_whose_counts_of_saves_parted_fail_instead_of_adding_two_saves(monkeypatch):
    """The same ordinal but another step (a save one process skipped): no share is taken
    from the other save; process 0 fails by the deadline."""
    store = FakeStore()
    monkeypatch.setattr(checksum_exchange, "_SAVES", itertools.repeat(42))
    mine = CoordinationExchange(7, time.monotonic() + 0.5, client=store)
    theirs = CoordinationExchange(8, time.monotonic() + 0.5, client=store)
    _as(monkeypatch, 1, count=2)
    theirs.total({"a": (1, 1)})
    _as(monkeypatch, 0, count=2)
    with pytest.raises(RuntimeError, match=r"step 7: process 1 sent no share"):
        mine.total({"a": (1, 1)})
