"""Bounded waiting: every wait in the tests ends, with a message that says what did not happen."""

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float, what: str | Callable[[], str], *, interval: float = 0.05) -> T:
    """Call ``predicate`` every ``interval`` seconds until it returns something truthy; return that.

    ``predicate`` may itself assert (e.g. that the awaited process is still alive), so that a
    wait for a dead process fails at once rather than at the deadline.

    Args:
        predicate: checked at once, then after each ``interval`` (seconds).
        timeout: seconds before giving up.
        what: what is awaited, for the failure message ("3 steps in the log"); or a function
            giving it, called only on failure (e.g. to show a log's tail).

    Raises:
        AssertionError: ``timed out after {timeout} s waiting for {what}``.
    """
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what() if callable(what) else what}")
        time.sleep(interval)
    return value
