"""When and how long to retry a Kubernetes API call: timeouts, backoff, ``Retry-After``.

One policy for every call of the Kubernetes backend (:class:`RetryPolicy`), and one
function that applies it (:func:`retrying`). What is retried, and why it is safe:

* HTTP 429 Too Many Requests: the API server's priority-and-fairness or max-inflight
  limit refused the request before doing anything; it sends ``Retry-After`` (seconds),
  which is honoured (https://kubernetes.io/docs/concepts/cluster-administration/flow-control/).
  Safe for every method, creates included.
* HTTP 5xx (500, 502, 503, 504) and a connection that was refused, reset or timed out: the
  server or a proxy on the way failed. Safe to repeat for reads (GET, LIST, WATCH) and
  DELETE; a create may have happened, so the caller says whether a repeat is safe.
* Nothing else: 4xx other than 429 are answers (not found, forbidden, invalid, conflict).

Delays grow exponentially (``base * 2**attempt``), capped at ``cap``, with full jitter
(a uniform draw in [delay/2, delay]) so that many clients do not retry in step; a
``Retry-After`` longer than that wins. Everything stops at ``deadline`` seconds after the
first attempt: the last error then stands. Each retry is announced on one line (a logger
warning: no traceback). Tests pass a policy with a ``sleep`` and small delays of their own.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

import urllib3
from kubernetes.client.exceptions import ApiException

from roxxel.wording import count

logger = logging.getLogger(__name__)

T = TypeVar("T")

RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """Timeouts and retries of API calls.

    Attributes:
        connect_timeout: seconds to open a connection (a black-holed endpoint fails here).
        read_timeout: seconds to wait for an answer to a plain request.
        deadline: seconds after the first attempt past which a call is not tried again.
        base: seconds of the first backoff delay.
        cap: the longest backoff delay (and the longest ``Retry-After`` honoured), seconds.
        sleep: how to pause (``time.sleep``; tests pass their own).
        clock: monotonic seconds (``time.monotonic``).
        jitter: a draw in [0, 1) (``random.random``).
    """

    connect_timeout: float = 10.0
    read_timeout: float = 60.0
    deadline: float = 120.0
    base: float = 0.5
    cap: float = 30.0
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    jitter: Callable[[], float] = random.random

    @property
    def request_timeout(self) -> tuple[float, float]:
        """``(connect, read)`` seconds: the client's ``_request_timeout``."""
        return (self.connect_timeout, self.read_timeout)

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry ``attempt`` (1 for the first retry)."""
        backoff = min(self.cap, self.base * 2 ** (attempt - 1))
        backoff *= 0.5 + 0.5 * self.jitter()
        if retry_after is not None:
            backoff = max(backoff, min(retry_after, self.cap))
        return backoff


DEFAULT_POLICY = RetryPolicy()  # what a backend without a policy of its own uses


def retry_after(err: ApiException) -> float | None:
    """The ``Retry-After`` of an error answer in seconds (delta-seconds form), else None."""
    headers = err.headers or {}
    value = headers.get("Retry-After") or headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None  # an HTTP date: the API server sends seconds; fall back to the backoff


def transient(err: BaseException, *, idempotent: bool) -> bool:
    """Whether ``err`` may go away on a retry (see the module docstring)."""
    if isinstance(err, ApiException):
        if err.status == 429:
            return True
        return idempotent and (err.status in RETRYABLE_STATUS or not err.status)
    return idempotent and isinstance(err, urllib3.exceptions.HTTPError)


def _status_message(err: ApiException) -> str:
    """The ``message`` of the Status object the API server answered with, on one line; "" when
    the body is not one (a proxy's page, an empty body)."""
    body = err.body
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    try:
        message = json.loads(body or "").get("message") or ""
    except (ValueError, AttributeError):
        return ""
    return " ".join(str(message).split())


def describe(err: BaseException) -> str:
    """A short one-line account of an error, for the retry line: for an API error its status
    and the server's own words (a 500 of ``logs`` says which node's kubelet did not answer)."""
    if isinstance(err, ApiException):
        head = f"HTTP {err.status} {err.reason or ''}".strip()
        message = _status_message(err)
        return f"{head}: {message}"[:300] if message else head
    if isinstance(err, urllib3.exceptions.MaxRetryError) and err.reason is not None:
        err = err.reason
    text = str(err).splitlines()[0] if str(err) else ""
    return f"{type(err).__name__}: {text}"[:200]


def retrying(call: Callable[[], T], policy: RetryPolicy, what: str, *, idempotent: bool = True) -> T:
    """``call()``, repeated while it fails with a transient error and the deadline allows.

    Args:
        call: one attempt; raises :class:`ApiException` or a urllib3 error on failure.
        policy: the :class:`RetryPolicy`.
        what: what is being done, for the retry line ("read JobSet team-a/lm").
        idempotent: whether a 5xx or a broken connection may be retried (429 always is).

    Returns: the first successful result. Raises: the last error, once it is not transient
    or the deadline has passed (its message is the caller's to explain).
    """
    started = policy.clock()
    attempt = 0
    while True:
        try:
            return call()
        except (ApiException, urllib3.exceptions.HTTPError) as err:
            attempt += 1
            if not transient(err, idempotent=idempotent):
                raise
            wait = policy.delay(attempt, retry_after(err) if isinstance(err, ApiException) else None)
            elapsed = policy.clock() - started
            if elapsed + wait > policy.deadline:
                err.add_note(
                    f"gave up after {count(attempt, 'attempt')} in {elapsed:.0f} s "
                    f"(retry deadline {policy.deadline:g} s)"
                )
                raise
            logger.warning("%s: %s; retry %d in %.1f s", what, describe(err), attempt, wait)
            policy.sleep(wait)
