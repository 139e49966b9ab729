"""The writer lease of a checkpoint directory on object storage (``gs://``).

Object storage has no ``flock``; what it has is preconditions on object generations
(https://cloud.google.com/storage/docs/request-preconditions): an upload with
``ifGenerationMatch=0`` succeeds only when the object does not exist, and a rewrite or a
delete with ``ifGenerationMatch=G`` only when the live generation is still ``G``. The lease
is one small object, ``<directory>/.roxxel-writer.lease``, naming its holder:

- **Taken** by creating it with ``ifGenerationMatch=0``; exactly one of two racing writers
  succeeds.
- **Held** by rewriting it every ``ttl/3`` seconds, each time conditional on the generation
  last written (a lease that another writer took over is noticed, never overwritten).
- **Stale** when its generation stays the same for ``ttl`` seconds, measured on the
  observer's own monotonic clock (as Kubernetes leader election does with its Lease
  objects: no clock of two machines is compared). A stale lease is deleted conditional on
  that generation and taken; a crashed attempt's lease thus delays the next attempt by at
  most ``ttl`` seconds, while a live writer renews it and the newcomer is refused.
- **Released** (deleted, conditional on its generation) when the checkpointer closes,
  including on the preemption exit: a gang restart after a clean exit waits for nothing.

The client is Google's ``google-cloud-storage`` (a dependency of ``gcsfs``, which ``gs://``
checkpoints already need); ``STORAGE_EMULATOR_HOST`` points it at an emulator as usual.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("roxxel.checkpoint")

LEASE_OBJECT = ".roxxel-writer.lease"
DEFAULT_TTL_S = 30.0
"""Seconds without a renewal after which a lease is stale (renewed every third of it)."""
CALL_TIMEOUT_S = 10.0
"""Seconds one lease call may take, its retries of transient errors included (the client's
own default retries for two minutes: a failing store would hold a closing trainer that long)."""


def _bounded() -> dict[str, Any]:
    """The ``retry`` and ``timeout`` of every call: the client's retry, capped."""
    from google.cloud.storage.retry import DEFAULT_RETRY

    return {"retry": DEFAULT_RETRY.with_timeout(CALL_TIMEOUT_S), "timeout": CALL_TIMEOUT_S}


def split_gs(directory: str) -> tuple[str, str]:
    """``gs://bucket/prefix`` -> (``bucket``, ``prefix/.roxxel-writer.lease``)."""
    bucket, _, prefix = directory[len("gs://") :].partition("/")
    prefix = prefix.strip("/")
    return bucket, f"{prefix}/{LEASE_OBJECT}" if prefix else LEASE_OBJECT


class GcsLease:
    """A held writer lease; :meth:`take` makes one, :meth:`release` gives it up.

    Attributes:
        lost: a renewal found the lease deleted or taken over by another writer (after
            this process failed to renew it for ``ttl`` seconds): saves must stop.
    """

    def __init__(self, blob: Any, generation: int, ttl_s: float, body: str) -> None:
        self._blob = blob
        self._generation = generation
        self._ttl_s = ttl_s
        self._body = body
        self.lost: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew_loop, name="roxxel-lease", daemon=True)
        self._thread.start()

    @classmethod
    def take(
        cls,
        directory: str,
        holder: dict[str, Any],
        ttl_s: float = DEFAULT_TTL_S,
        sleep: Callable[[float], None] = time.sleep,
    ) -> GcsLease | str:
        """Take the lease of ``directory`` (``gs://bucket/prefix``): the lease, or a line
        naming the live holder. Waits up to ``ttl_s`` (plus one poll) when a lease exists,
        to tell a crashed holder's (taken over) from a live one's (refused).

        Raises:
            google.api_core.exceptions.GoogleAPIError: the object store failed otherwise.
        """
        from google.api_core import exceptions
        from google.cloud import storage

        bucket_name, name = split_gs(directory)
        blob = storage.Client().bucket(bucket_name).blob(name)
        body = json.dumps({**holder, "ttl_s": ttl_s})
        seen: tuple[int, float] | None = None  # (generation, monotonic time first seen)
        while True:
            try:
                blob.upload_from_string(body, content_type="application/json", if_generation_match=0, **_bounded())
                return cls(blob, int(blob.generation), ttl_s, body)
            except exceptions.PreconditionFailed:
                pass
            try:
                blob.reload(**_bounded())
                generation = int(blob.generation)
                text = blob.download_as_text(if_generation_match=generation, **_bounded())
            except (exceptions.NotFound, exceptions.PreconditionFailed):
                continue  # released or renewed between the calls: try again
            now = time.monotonic()
            if seen is None or seen[0] != generation:
                if seen is not None:  # renewed while we watched: its writer is alive
                    return _describe(text)
                log.info(
                    "gs://%s/%s: a writer lease exists (%s); waiting up to %.0f s to see whether its holder renews it",
                    bucket_name,
                    name,
                    _describe(text),
                    ttl_s,
                )
                seen = (generation, now)
            elif now - seen[1] >= ttl_s:
                log.warning(
                    "gs://%s/%s: taking over the stale writer lease of %s (not renewed for %.0f s)",
                    bucket_name,
                    name,
                    _describe(text),
                    now - seen[1],
                )
                try:
                    blob.delete(if_generation_match=generation, **_bounded())
                except (exceptions.NotFound, exceptions.PreconditionFailed):
                    pass
                seen = None
                continue
            sleep(min(ttl_s / 6, max(0.0, seen[1] + ttl_s - now)) or 0.01)

    def _renew_loop(self) -> None:
        while not self._stop.wait(self._ttl_s / 3) and self.renew():
            pass

    def renew(self) -> bool:
        """Rewrite the lease, conditional on the generation last written; False once lost."""
        from google.api_core import exceptions

        try:
            self._blob.upload_from_string(
                self._body, content_type="application/json", if_generation_match=self._generation, **_bounded()
            )
            self._generation = int(self._blob.generation)
        except (exceptions.NotFound, exceptions.PreconditionFailed):
            self.lost = (
                f"the writer lease {self._blob.name} was taken over or removed by another writer "
                "(this process could not renew it in time)"
            )
            log.error("%s: stop this run; its saves are refused", self.lost)
            return False
        except Exception as err:  # a transient store error: the next renewal may succeed
            log.warning(
                "renewing the writer lease %s failed (%s); retrying in %.0f s", self._blob.name, err, self._ttl_s / 3
            )
        return True

    def release(self, remove: bool = True) -> None:
        """Stop renewing and delete the lease (unless another writer holds it by now, or
        ``remove`` is False: the lease then goes stale after its ttl)."""
        from google.api_core import exceptions

        self._stop.set()
        self._thread.join(timeout=2 * CALL_TIMEOUT_S)
        if self.lost is not None or not remove:
            return
        try:
            self._blob.delete(if_generation_match=self._generation, **_bounded())
        except (exceptions.NotFound, exceptions.PreconditionFailed):
            pass
        except Exception as err:  # left behind, it goes stale and is taken over after its ttl
            log.warning(
                "could not remove the writer lease %s (%s); the next writer takes it over after %.0f s",
                self._blob.name,
                err,
                self._ttl_s,
            )


def _describe(text: str) -> str:
    try:
        record = json.loads(text)
        return str(record.get("holder", text))
    except ValueError:
        return text.strip() or "another writer (its lease names nobody)"
