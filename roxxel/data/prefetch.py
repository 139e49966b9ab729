"""Run an iterator on a background thread, keeping up to ``size`` items ready.

Order is kept (one producer thread), an exception raised by the producer is re-raised in
the consumer at the point where the failed item would have come, and ``close()`` stops
the thread promptly even when the queue is full.
"""

from __future__ import annotations

import queue
import threading
from typing import Iterator, TypeVar

T = TypeVar("T")
_DONE = object()


class _Failure:
    def __init__(self, error: BaseException):
        self.error = error


class Prefetcher(Iterator[T]):
    """Iterate ``source`` on a daemon thread, ``size`` items ahead.

    Args:
        source: the iterator to drain (its ``close()`` is not called).
        size: items kept ready (>= 1).
        name: thread name, for debugging.
    """

    def __init__(self, source: Iterator[T], size: int, name: str = "roxxel-prefetch"):
        if size < 1:
            raise ValueError(f"prefetch size must be >= 1, got {size}")
        # Two C-level queues (items, and free slots bounding them to ``size``): a hand-off is a few lock
        # operations in C instead of queue.Queue's Python-level condition variables.
        self._items: queue.SimpleQueue = queue.SimpleQueue()
        self._slots: queue.SimpleQueue = queue.SimpleQueue()
        for _ in range(size):
            self._slots.put(None)
        self._stop = threading.Event()
        self._finished = False
        self._thread = threading.Thread(target=self._work, args=(source,), name=name, daemon=True)
        self._thread.start()

    def _put(self, item) -> bool:
        while not self._stop.is_set():
            try:
                self._slots.get(timeout=0.05)
            except queue.Empty:
                continue
            self._items.put(item)
            return True
        return False

    def _work(self, source: Iterator[T]) -> None:
        try:
            for item in source:
                if not self._put(item):
                    return
            self._put(_DONE)
        except BaseException as e:  # handed to the consumer, which re-raises it
            self._put(_Failure(e))

    def __next__(self) -> T:
        if self._finished:
            raise StopIteration
        item = self._items.get()
        self._slots.put(None)
        if item is _DONE:
            self._finished = True
            raise StopIteration
        if isinstance(item, _Failure):
            self._finished = True
            raise item.error
        return item

    def close(self, timeout: float = 5.0) -> None:
        """Stop the producer and wait for its thread (it finishes the item it is building)."""
        self._stop.set()
        self._finished = True
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        """Whether the producer thread is still running."""
        return self._thread.is_alive()
