"""Finding a roxxel-launch job by name: in this namespace, or the one other namespace that
holds it."""

from __future__ import annotations

import logging

from roxxel_launch.backends.base import (
    BackendError,
    JobNotFoundError,
)
from roxxel_launch.backends.kubernetes.api import KubernetesApi
from roxxel_launch.backends.kubernetes.status import JOBSET_NAME_LABEL
from roxxel_launch.render import MANAGED_BY, MANAGED_BY_LABEL

logger = logging.getLogger(__name__)


def locate(api: KubernetesApi, name: str) -> str | None:
    """The one other namespace holding roxxel-launch job ``name``, from a list of JobSets and
    Jobs across namespaces; None when there is none, or when listing across namespaces is
    not allowed (a namespaced Role: the caller's not-found error stands and names -n).

    Raises: BackendError naming the namespaces when several hold a job of that name."""
    selector, fields = f"{MANAGED_BY_LABEL}={MANAGED_BY}", f"metadata.name={name}"
    namespaces: set[str] = set()
    for kind in ("JobSet", "Job"):
        try:
            items = api.list_all_namespaces(kind, selector, fields)
        except BackendError as err:
            if getattr(err.__cause__, "status", None) not in (403, 404):
                raise
            logger.info("cannot list %ss across namespaces (%s)", kind, err)
            continue
        namespaces |= {
            (o.get("metadata") or {}).get("namespace") or ""
            for o in items
            if JOBSET_NAME_LABEL not in ((o.get("metadata") or {}).get("labels") or {})
        }
    namespaces.discard(api.namespace)
    if len(namespaces) > 1:
        raise BackendError(
            f"jobs named {name!r} exist in namespaces {', '.join(sorted(namespaces))}: choose one with -n/--namespace"
        )
    return next(iter(namespaces), None)


def find_here(api: KubernetesApi, name: str) -> tuple[str, dict] | None:
    for kind in ("JobSet", "Job"):
        obj = api.get(kind, name)
        if obj is None:
            continue
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        parent = labels.get(JOBSET_NAME_LABEL) or next(
            (o.get("name") for o in meta.get("ownerReferences") or [] if o.get("kind") == "JobSet"), None
        )
        if kind == "Job" and parent:
            raise JobNotFoundError(
                f"Job {api.namespace}/{name} is a child of JobSet {parent}: use the JobSet's name ({parent})."
            )
        if labels.get(MANAGED_BY_LABEL) != MANAGED_BY:
            raise BackendError(
                f"{kind} {api.namespace}/{name} was not created by roxxel-launch (no "
                f"{MANAGED_BY_LABEL}={MANAGED_BY} label); manage it with kubectl."
            )
        return kind, obj
    return None
