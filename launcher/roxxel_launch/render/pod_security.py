"""The pod's and the worker container's security settings, and its image pull policy."""

from __future__ import annotations

from typing import Any

from roxxel_launch.spec import JobSpec, image_is_pinned


def image_pull_policy(image: str, override: str | None = None) -> str:
    """The container's imagePullPolicy: ``override`` (the spec's ``image_pull_policy``) if
    given; else Always for a tag (it can move: every pod must get what the tag names now) and
    IfNotPresent for a digest, which names one immutable image."""
    if override is not None:
        return override
    return "IfNotPresent" if image_is_pinned(image) else "Always"


def security_values(spec: JobSpec, capabilities: tuple[str, ...] = ()) -> dict[str, Any]:
    """Pod and container securityContext for the spec's Pod Security profile
    (kubernetes.io/docs/concepts/security/pod-security-standards; ``spec.security_profile``),
    restricted with a read-only root filesystem; the service-account token only when asked for."""
    profile = spec.security_profile
    return {
        "automount_service_account_token": spec.security.automount_service_account_token,
        "pod_security_context": _pod_security_context(spec, profile),
        "container_security_context": _container_security_context(
            profile, capabilities, privileged=profile == "privileged" and (spec.uses_host_network or not capabilities)
        ),
        "image_pull_policy": image_pull_policy(spec.image, spec.image_pull_policy),
    }


def _pod_security_context(spec: JobSpec, profile: str) -> dict[str, Any]:
    user, group = spec.security.ids(profile)
    context: dict[str, Any] = {"runAsUser": user, "runAsGroup": group}
    if user != 0:
        context = {"runAsNonRoot": True, **context}
    if group != 0:
        # Group-writable volumes (a PVC for checkpoints); skip the recursive chown when
        # the volume's root already has the group, so large volumes mount fast.
        context.update(fsGroup=group, fsGroupChangePolicy="OnRootMismatch")
    context["seccompProfile"] = {"type": "RuntimeDefault"}
    return context


def _container_security_context(
    profile: str, capabilities: tuple[str, ...] = (), *, privileged: bool = False
) -> dict[str, Any]:
    """The worker's securityContext; ``capabilities`` (a GPU networking preset's) are added
    under baseline and privileged (the spec refuses them under restricted). ``privileged``
    (``privileged: true``, which has every capability): under the privileged profile, for
    host-network pods (as the references run them) and pods without a preset. A GPUDirect
    preset on the pod network gets its capabilities only: with GKE's NRI device injector its
    worker needs ``IPC_LOCK`` alone (the devices come through the pod's ``devices.gke.io``
    annotations), and a privileged training container could reach every device and the
    host's kernel interfaces; the profile then stays the namespace level the pods need (the
    daemon's host paths and ``NET_ADMIN``)."""
    if profile == "restricted":
        return {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}
    # baseline / privileged: the runtime's default capabilities and a writable root, as the
    # references run the container; the API server refuses allowPrivilegeEscalation: false
    # next to privileged: true, so neither profile sets it.
    context: dict[str, Any] = {"readOnlyRootFilesystem": False}
    if privileged:
        context["privileged"] = True
    elif capabilities:
        context["capabilities"] = {"add": list(capabilities)}
    return context
