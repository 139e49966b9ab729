"""Bounded waiting: every wait in the tests ends, with a message that says what did not happen."""

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float, what: str, *, interval: float = 0.05) -> T:
    """Call ``predicate`` every ``interval`` seconds until it returns something truthy; return that.

    Args:
        predicate: checked at once, then after each ``interval`` (seconds).
        timeout: seconds before giving up.
        what: what is awaited, for the failure message ("3 steps in the log").

    Raises:
        AssertionError: ``timed out after {timeout} s waiting for {what}``.
    """
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(interval)
    return value
