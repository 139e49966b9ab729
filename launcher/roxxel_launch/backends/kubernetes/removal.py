"""Removing a job: the objects created alongside it that go with it, and waiting until they
are gone (``delete --wait``, ``resume``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence

from roxxel_launch.backends.base import (
    BackendError,
)
from roxxel_launch.backends.kubernetes.api import KubernetesApi
from roxxel_launch.backends.kubernetes.status import _int, pod_selector
from roxxel_launch.render import MANAGED_BY, MANAGED_BY_LABEL

logger = logging.getLogger(__name__)


def companion_kinds(api: KubernetesApi, kind: str, name: str) -> list[str]:
    """Kinds of the objects created alongside the job that go with it: an indexed job's
    headless Service, and the NetworkPolicy of either kind (same name, our label)."""
    found = []
    for companion in (["Service"] if kind == "Job" else []) + ["NetworkPolicy"]:
        try:
            obj = api.get(companion, name)
        except BackendError as err:
            cause = err.__cause__
            if companion != "NetworkPolicy" or getattr(cause, "status", None) != 403:
                raise
            # A job submitted with security.network_policy: false by an account that
            # may not read NetworkPolicies: nothing of ours to delete there.
            logger.warning("cannot read NetworkPolicy %s/%s (%s); leaving it", api.namespace, name, err)
            continue
        if obj is None:
            continue
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if labels.get(MANAGED_BY_LABEL) != MANAGED_BY:
            logger.warning("%s %s/%s was not created by roxxel-launch; leaving it", companion, api.namespace, name)
            continue
        found.append(companion)
    return found


def wait_gone(
    api: KubernetesApi,
    kind: str,
    name: str,
    obj: Mapping,
    companions: Sequence[str],
    *,
    timeout: float | None,
    poll_seconds: float,
) -> None:
    if timeout is None:
        timeout = grace_period(kind, obj) + 300
    deadline = time.monotonic() + timeout
    pending = [kind, *companions]
    while True:
        pending = [k for k in pending if api.get(k, name) is not None]
        if not pending:
            return
        if time.monotonic() >= deadline:
            raise BackendError(
                f"{', '.join(pending)} {api.namespace}/{name} still exists {timeout:.0f} s "
                f"after deletion (pods finishing a checkpoint, or a stuck finalizer). Wait "
                f"and retry, and check: kubectl get pods -n {api.namespace} "
                f"-l {pod_selector(kind, name)}"
            )
        logger.info("waiting for %s %s/%s to be deleted", ", ".join(pending), api.namespace, name)
        time.sleep(poll_seconds)


def grace_period(kind: str, obj: Mapping) -> int:
    spec = obj.get("spec") or {}
    if kind == "JobSet":
        rjobs = spec.get("replicatedJobs") or [{}]
        spec = (rjobs[0].get("template") or {}).get("spec") or {}
    pod_spec = (spec.get("template") or {}).get("spec") or {}
    return _int(pod_spec.get("terminationGracePeriodSeconds"), 30)
