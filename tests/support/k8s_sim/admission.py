"""What the API server's admission does to a pod create (the launcher's dry run of one worker
pod, ``dryRun=All``), before any controller sees it:

* the ``Priority`` plugin refuses a ``priorityClassName`` with no PriorityClass: 403 ``pods
  "NAME" is forbidden: no PriorityClass with name X was found``
  (https://kubernetes.io/docs/reference/access-authn-authz/admission-controllers/#priority;
  https://kubernetes.io/docs/concepts/scheduling-eviction/pod-priority-preemption/#pod-priority).
  A cluster ships ``system-cluster-critical`` and ``system-node-critical``;
* the ``ServiceAccount`` plugin refuses a ``serviceAccountName`` that does not exist: 403
  ``error looking up service account NS/NAME: serviceaccount "NAME" not found``
  (https://kubernetes.io/docs/reference/access-authn-authz/admission-controllers/#serviceaccount).
  Only modelled once a test names the namespace's service accounts (``service_accounts``);
* Pod Security admission, with the namespace label ``pod-security.kubernetes.io/enforce:
  baseline`` or ``restricted``, refuses a pod that breaks that profile: 403 ``violates
  PodSecurity "LEVEL:latest": ...`` (https://kubernetes.io/docs/concepts/security/pod-security-admission/;
  ``privileged`` refuses nothing). The checks here are those of
  https://kubernetes.io/docs/concepts/security/pod-security-standards/ a worker pod can break:
  baseline's host namespaces, privileged containers, capabilities beyond its default list,
  hostPath volumes and host ports; restricted's besides (capabilities beyond NET_BIND_SERVICE,
  allowPrivilegeEscalation, runAsNonRoot, seccomp, volume types);
* GKE Autopilot's policy webhook refuses privileged containers and host namespaces
  (https://cloud.google.com/kubernetes-engine/docs/concepts/autopilot-security#built-in-security,
  "Autopilot doesn't allow privileged Pods"): 403 ``admission webhook
  "warden-validating.common-webhooks.networking.gke.io" denied the request: GKE Warden rejected
  the request because it violates one or more constraints.``
"""

from __future__ import annotations

import json

from typing import Any

from support.k8s_sim.api import status_object
from support.k8s_sim.request import Request

SYSTEM_PRIORITY_CLASSES = ("system-cluster-critical", "system-node-critical")
# The capabilities baseline lets a container add (Pod Security Standards, baseline, "Capabilities").
BASELINE_CAPABILITIES = {
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
}
RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


class Admission:
    """Admission plugins for pod creates (a mixin of ``FakeKubernetes``)."""

    def add_priority_class(self, name: str, value: int = 1000) -> None:
        """A PriorityClass (scheduling.k8s.io/v1, cluster-scoped)."""
        with self._lock:
            self._real.pod_priority_classes[name] = value

    def set_service_accounts(self, *names: str) -> None:
        """The namespace's ServiceAccounts (``default`` is always one); before this, any name exists."""
        with self._lock:
            self._real.service_accounts = {"default", *names}

    def enforce_pod_security(self, level: str) -> None:
        """The namespace's ``pod-security.kubernetes.io/enforce`` label: ``baseline`` and
        ``restricted`` refuse what they forbid, ``privileged`` nothing."""
        with self._lock:
            self._real.pod_security = level

    def autopilot(self) -> None:
        """A GKE Autopilot cluster: its policy webhook refuses privileged pods and host namespaces."""
        with self._lock:
            self._real.autopilot = True

    def _priority_class_answer(self, name: str | None) -> tuple[int, Any]:
        """``GET /apis/scheduling.k8s.io/v1/priorityclasses/NAME``."""
        value = self._real.pod_priority_classes.get(name or "")
        if value is None:
            return 404, status_object(
                404,
                "NotFound",
                f'priorityclasses.scheduling.k8s.io "{name}" not found',
                name=name,
                group="scheduling.k8s.io",
                kind="priorityclasses",
            )
        return 200, {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
        }

    def _admit_pod(self, request: Request) -> tuple[int, dict] | None:
        """The refusal of a pod create by the admission plugins above, else None."""
        real = self._real
        pod = request.body or {}
        name = (pod.get("metadata") or {}).get("name", "")
        spec = pod.get("spec") or {}
        ns = request.namespace

        def forbidden(text: str) -> tuple[int, dict]:
            return 403, status_object(403, "Forbidden", f'pods "{name}" is forbidden: {text}', name=name, kind="pods")

        if real.autopilot:
            # One key per Warden constraint, as GKE names them (autogke-disallow-privilege,
            # autogke-disallow-hostnamespaces), each with its own list of violations.
            privileged = [
                f"container '{c.get('name')}' not allowed to be privileged in Autopilot."
                for c in spec.get("containers") or []
                if (c.get("securityContext") or {}).get("privileged")
            ]
            host = [f"{k} not allowed in Autopilot." for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k)]
            violations = {
                key: found
                for key, found in (
                    ("autogke-disallow-privilege", privileged),
                    ("autogke-disallow-hostnamespaces", host),
                )
                if found
            }
            if violations:
                details = ",".join(f'"[denied by {key}]":{json.dumps(found)}' for key, found in violations.items())
                return 403, status_object(
                    403,
                    "Forbidden",
                    'admission webhook "warden-validating.common-webhooks.networking.gke.io" denied the request: '
                    "GKE Warden rejected the request because it violates one or more constraints. "
                    f"Violations details: {{{details}}}",
                )
        level = real.pod_security
        checks = {"baseline": baseline_violations, "restricted": restricted_violations}
        broken = checks[level](spec) if level in checks else []
        if broken:
            return forbidden(f'violates PodSecurity "{level}:latest": {"; ".join(broken)}')
        priority = spec.get("priorityClassName")
        if priority and priority not in real.pod_priority_classes:
            return forbidden(f"no PriorityClass with name {priority} was found")
        account = spec.get("serviceAccountName") or "default"
        if real.service_accounts is not None and account not in real.service_accounts:
            return forbidden(f'error looking up service account {ns}/{account}: serviceaccount "{account}" not found')
        return None


def baseline_violations(spec: dict) -> list[str]:
    """What of the baseline Pod Security Standard ``spec`` breaks (a worker pod's part of it)."""
    out = [f"host namespaces ({k}=true)" for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k)]
    for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        ctx = c.get("securityContext") or {}
        who = f'container "{c.get("name")}"'
        if ctx.get("privileged"):
            out.append(f"privileged ({who} must not set securityContext.privileged=true)")
        added = set((ctx.get("capabilities") or {}).get("add") or []) - BASELINE_CAPABILITIES
        if added:
            out.append(f"non-default capabilities ({who} must not include {sorted(added)} in capabilities.add)")
        if any(p.get("hostPort") for p in c.get("ports") or []):
            out.append(f"hostPort ({who} uses hostPort)")
    host_paths = [v.get("name") for v in spec.get("volumes") or [] if "hostPath" in v]
    if host_paths:
        out.append(f"hostPath volumes (volumes {', '.join(map(repr, host_paths))})")
    return out


def restricted_violations(spec: dict) -> list[str]:
    """What of the restricted Pod Security Standard ``spec`` breaks (a worker pod's part of it)."""
    out = [f"host namespaces ({k}=true)" for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k)]
    pod_context = spec.get("securityContext") or {}
    for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        ctx = c.get("securityContext") or {}
        who = f'container "{c.get("name")}"'
        if ctx.get("privileged"):
            out.append(f"privileged ({who} must not set securityContext.privileged=true)")
        if ctx.get("allowPrivilegeEscalation") is not False:
            out.append(f"allowPrivilegeEscalation != false ({who} must set allowPrivilegeEscalation=false)")
        added = set((ctx.get("capabilities") or {}).get("add") or []) - {"NET_BIND_SERVICE"}
        if added:
            out.append(f"unrestricted capabilities ({who} must not include {sorted(added)} in capabilities.add)")
        if "ALL" not in ((ctx.get("capabilities") or {}).get("drop") or []):
            out.append(f'unrestricted capabilities ({who} must set securityContext.capabilities.drop=["ALL"])')
        if not (ctx.get("runAsNonRoot", pod_context.get("runAsNonRoot"))):
            out.append(f"runAsNonRoot != true ({who} must set securityContext.runAsNonRoot=true)")
        seccomp = (ctx.get("seccompProfile") or pod_context.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f'seccompProfile ({who} must set securityContext.seccompProfile.type to "RuntimeDefault")')
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if kinds - RESTRICTED_VOLUMES:
            out.append(f'restricted volume types (volume "{volume.get("name")}" uses {sorted(kinds)})')
    return out
