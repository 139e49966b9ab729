"""A clock that only moves when something sleeps on it: backoff and polling in simulated time.

``RetryPolicy(sleep=clock.sleep, clock=clock.monotonic)`` makes an hour of retries with
their real delays (exponential backoff, ``Retry-After``) take no wall time, while every
deadline is still checked against the time that would have passed.
"""

from __future__ import annotations

import threading


class FakeClock:
    """Simulated monotonic seconds; ``sleep`` advances them (and yields the thread briefly)."""

    def __init__(self, start: float = 1000.0):
        self.now = start
        self.slept: list[float] = []
        self._lock = threading.Lock()

    def monotonic(self) -> float:
        with self._lock:
            return self.now

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.slept.append(seconds)
            self.now += max(0.0, seconds)
        threading.Event().wait(0.001)  # let the fake server's threads run


def fast_retry(clock: FakeClock | None = None, **changes):
    """A :class:`RetryPolicy` on a :class:`FakeClock` (its delays are simulated), no jitter."""
    from roxxel_launch.backends.kubernetes.retry import RetryPolicy

    clock = clock or FakeClock()
    options = dict(sleep=clock.sleep, clock=clock.monotonic, jitter=lambda: 1.0)
    return RetryPolicy(**{**options, **changes})
