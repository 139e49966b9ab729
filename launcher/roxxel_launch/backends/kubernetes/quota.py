"""The gang against the namespace's ResourceQuotas, before anything is created.

Admission checks quota one pod at a time, when the Job controller creates it: a gang of N
workers that fits only in part gets its first pods, which start and hold their chips, while
the rest are refused (FailedCreate events on the child Jobs); the started workers then wait in
``jax.distributed.initialize`` for peers that never come, until its timeout, and restart. The
pod-admission dry run (:func:`.preflight.check_pod_admission`) sees one pod only. Here the
whole gang is summed: every ResourceQuota's ``status.hard - status.used`` against the worker
pods' count times each pod's requests (GCS FUSE sidecars included, :func:`.fit.workers`) and
limits, for the keys quota counts (https://kubernetes.io/docs/concepts/policy/resource-quotas/:
``requests.cpu`` or ``cpu``, ``requests.memory`` or ``memory``, ``requests.ephemeral-storage``
or ``ephemeral-storage``, ``requests.<extended resource>`` such as ``requests.google.com/tpu``,
``limits.cpu``, ``limits.memory``, ``pods`` and ``count/pods``). Quotas with a scope
(``scopes``, ``scopeSelector``) are skipped: whether a pod falls in them depends on fields this
check does not model (a debug line says so). Reading quotas needs ``list resourcequotas``; without
it one warning says the gang's quota was not checked.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from decimal import Decimal

from kubernetes.utils import parse_quantity

from roxxel_launch.backends.base import BackendError
from roxxel_launch.backends.kubernetes.api import KubernetesApi
from roxxel_launch.backends.kubernetes.fit import amount, workers
from roxxel_launch.spec import JobSpec

logger = logging.getLogger(__name__)

_PLAIN = {"cpu", "memory", "ephemeral-storage"}  # quota keys without the requests. prefix


def gang_usage(objects: Sequence[Mapping]) -> dict[str, Decimal]:
    """What the job's worker pods together count against a ResourceQuota, by quota key
    (``requests.cpu``, ``limits.memory``, ``pods``, ...): cores, bytes or counts."""
    usage: dict[str, Decimal] = {}

    def add(key: str, value: Decimal) -> None:
        usage[key] = usage.get(key, Decimal(0)) + value

    for worker in workers(objects):
        pods = Decimal(worker.pods)
        add("pods", pods)
        add("count/pods", pods)
        for name, value in worker.requests.items():
            add(f"requests.{name}", pods * value)
            if name in _PLAIN:
                add(name, pods * value)
        for name, value in worker.limits.items():
            add(f"limits.{name}", pods * value)
    return usage


def check_gang_quota(api: KubernetesApi, spec: JobSpec, objects: Sequence[Mapping]) -> None:
    """Refuses a job whose worker pods together exceed what a ResourceQuota of the namespace
    has left (see the module docstring).

    Raises: BackendError, one line naming the quota, the resource, the numbers and the fix."""
    try:
        quotas = api.list("ResourceQuota", None)
    except BackendError as err:
        status = getattr(err.__cause__, "status", None)
        if status not in (403, 404):
            raise
        logger.warning(
            "%s: the gang's quota was not checked (%s); a gang that fits only in part would start some workers "
            "that wait for the others",
            spec.name,
            "this account may not list resourcequotas in " + api.namespace if status == 403 else "no quota API",
        )
        return
    usage = gang_usage(objects)
    for quota in quotas:
        name = (quota.get("metadata") or {}).get("name", "?")
        quota_spec = quota.get("spec") or {}
        if quota_spec.get("scopes") or quota_spec.get("scopeSelector"):
            logger.debug("%s: ResourceQuota %s has a scope; not summed", spec.name, name)
            continue
        status = quota.get("status") or {}
        hard = status.get("hard") or quota_spec.get("hard") or {}
        used = status.get("used") or {}
        for key, limit in hard.items():
            need = usage.get(key)
            if need is None:
                continue
            free = Decimal(parse_quantity(limit)) - Decimal(parse_quantity(used.get(key, "0")))
            if need > free:
                resource = key.removeprefix("requests.").removeprefix("limits.").removeprefix("count/")
                raise BackendError(
                    f"{spec.name}: its {spec.num_processes} worker pods need {amount(resource, need)} of {key}, "
                    f"but ResourceQuota {name} in namespace {api.namespace} has {amount(resource, max(free, Decimal(0)))} "
                    f"left (hard {limit}, used {used.get(key, '0')}). Nothing was created: the pods would start "
                    f"only in part and wait for the rest. Lower the job's hosts or requests, wait for other jobs to "
                    f"finish, or ask for more quota (kubectl describe resourcequota {name} -n {api.namespace})."
                )
    logger.info("%s: the gang fits the namespace's %d ResourceQuota(s)", spec.name, len(quotas))
