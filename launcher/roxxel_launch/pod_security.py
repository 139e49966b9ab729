"""The Pod Security Standards as a table of controls, and the level a rendered pod needs.

Each row of :data:`CONTROLS` is one control of
https://kubernetes.io/docs/concepts/security/pod-security-standards/ ("baseline", then what
"restricted" adds), with the profile it belongs to, its name as on that page, and a check that
yields one problem per place the pod breaks it. A pod breaking "baseline" needs a namespace
that enforces "privileged"; one breaking only "restricted" needs "baseline". Against a real
cluster, the API server's own admission remains the authoritative check (the submit preflight
dry-runs a pod for that).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from roxxel_launch.spec import POD_SECURITY_LEVELS

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
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}
SELINUX_TYPES = {None, "", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
RESTRICTED_VOLUME_TYPES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
RESTRICTED_ADDABLE_CAPABILITIES = {"NET_BIND_SERVICE"}

POD_SECURITY_ANNOTATION = "roxxel.dev/pod-security"
"""The annotation naming the Pod Security level a rendered pod template is written for
(render/ sets it from ``security.profile``)."""


@dataclasses.dataclass(frozen=True)
class Pod:
    """What the controls read of a pod template (metadata + spec)."""

    spec: Mapping
    annotations: Mapping
    security_context: Mapping  # the pod's
    containers: list[tuple[str, Mapping]]  # ("containers[0]", container), init and ephemeral ones too

    @classmethod
    def of(cls, template: Mapping) -> Pod:
        spec = template.get("spec") or {}
        containers = [
            (f"{field}[{i}]", c)
            for field in ("initContainers", "containers", "ephemeralContainers")
            for i, c in enumerate(spec.get(field) or [])
        ]
        annotations = (template.get("metadata") or {}).get("annotations") or {}
        return cls(spec, annotations, spec.get("securityContext") or {}, containers)

    def contexts(self) -> Iterator[tuple[str, Mapping, Mapping]]:
        """(where, a container's securityContext, the container) for every container."""
        for at, container in self.containers:
            yield at, container.get("securityContext") or {}, container

    def all_contexts(self) -> Iterator[tuple[str, Mapping]]:
        """(field path, securityContext) of the pod, then of every container."""
        yield "securityContext", self.security_context
        for at, sc, _ in self.contexts():
            yield f"{at}.securityContext", sc

    def effective(self, sc: Mapping, key: str) -> Any:
        """A container's setting, else the pod's (the kubelet's precedence)."""
        return sc.get(key, self.security_context.get(key))


Check = Callable[[Pod], Iterable[str]]


def _added(sc: Mapping) -> set[str]:
    return set((sc.get("capabilities") or {}).get("add") or [])


# ----------------------------------------------------------------------------- baseline


def _host_process(pod: Pod) -> Iterator[str]:
    if (pod.security_context.get("windowsOptions") or {}).get("hostProcess"):
        yield "securityContext.windowsOptions.hostProcess is true"
    for at, sc, _ in pod.contexts():
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            yield f"{at}: windowsOptions.hostProcess is true"


def _host_namespaces(pod: Pod) -> Iterator[str]:
    yield from (f"{key} is true" for key in ("hostNetwork", "hostPID", "hostIPC") if pod.spec.get(key))


def _host_path_volumes(pod: Pod) -> Iterator[str]:
    for i, volume in enumerate(pod.spec.get("volumes") or []):
        if "hostPath" in volume:
            yield f"volumes[{i}] ({volume.get('name')}) is a hostPath"


def _privileged(pod: Pod) -> Iterator[str]:
    yield from (f"{at}: privileged is true" for at, sc, _ in pod.contexts() if sc.get("privileged"))


def _baseline_capabilities(pod: Pod) -> Iterator[str]:
    for at, sc, _ in pod.contexts():
        if _added(sc) - BASELINE_CAPABILITIES:
            yield f"{at}: adds {', '.join(sorted(_added(sc) - BASELINE_CAPABILITIES))}"


def _host_ports(pod: Pod) -> Iterator[str]:
    for at, _, container in pod.contexts():
        yield from (f"{at}: hostPort {p['hostPort']}" for p in container.get("ports") or [] if p.get("hostPort"))


def _app_armor(pod: Pod) -> Iterator[str]:
    for key, value in pod.annotations.items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and not (
            value == "runtime/default" or value.startswith("localhost/")
        ):
            yield f"annotation {key}={value}"
    for where, sc in pod.all_contexts():
        if (sc.get("appArmorProfile") or {}).get("type") not in (None, "RuntimeDefault", "Localhost"):
            yield f"{where}.appArmorProfile.type is {sc['appArmorProfile']['type']}"


def _se_linux(pod: Pod) -> Iterator[str]:
    for where, sc in pod.all_contexts():
        selinux = sc.get("seLinuxOptions") or {}
        if selinux.get("type") not in SELINUX_TYPES or selinux.get("user") or selinux.get("role"):
            yield f"{where}.seLinuxOptions sets {selinux}"


def _proc_mount(pod: Pod) -> Iterator[str]:
    for at, sc, _ in pod.contexts():
        if sc.get("procMount", "Default") != "Default":
            yield f"{at}: procMount is {sc['procMount']}"


def _baseline_seccomp(pod: Pod) -> Iterator[str]:
    for where, sc in pod.all_contexts():
        if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
            yield f"{where}.seccompProfile.type is Unconfined"


def _sysctls(pod: Pod) -> Iterator[str]:
    for sysctl in pod.security_context.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            yield f"sysctl {sysctl.get('name')} is not in the safe set"


# ----------------------------------------------------------------------------- restricted


def _volume_types(pod: Pod) -> Iterator[str]:
    for i, volume in enumerate(pod.spec.get("volumes") or []):
        kinds = set(volume) - {"name"} - RESTRICTED_VOLUME_TYPES
        if kinds:
            yield (
                f"volumes[{i}] ({volume.get('name')}) is of type {', '.join(sorted(kinds))}; "
                f"allowed: {', '.join(sorted(RESTRICTED_VOLUME_TYPES))}"
            )


def _privilege_escalation(pod: Pod) -> Iterator[str]:
    for at, sc, _ in pod.contexts():
        if sc.get("allowPrivilegeEscalation") is not False:
            yield f"{at}: allowPrivilegeEscalation is not false"


def _non_root(pod: Pod) -> Iterator[str]:
    for at, sc, _ in pod.contexts():
        if pod.effective(sc, "runAsNonRoot") is not True:
            yield f"{at}: runAsNonRoot is not true (in the container or the pod)"


def _non_root_user(pod: Pod) -> Iterator[str]:
    yield from (f"{at}: runAsUser is 0" for at, sc, _ in pod.contexts() if pod.effective(sc, "runAsUser") == 0)
    if pod.security_context.get("runAsUser") == 0:
        yield "securityContext.runAsUser is 0"


def _restricted_seccomp(pod: Pod) -> Iterator[str]:
    for at, sc, _ in pod.contexts():
        if (pod.effective(sc, "seccompProfile") or {}).get("type") not in ("RuntimeDefault", "Localhost"):
            yield f"{at}: seccompProfile.type is not RuntimeDefault or Localhost (in the container or the pod)"


def _restricted_capabilities(pod: Pod) -> Iterator[str]:
    for at, sc, _ in pod.contexts():
        if "ALL" not in ((sc.get("capabilities") or {}).get("drop") or []):
            yield f"{at}: capabilities.drop does not include ALL"
        if _added(sc) - RESTRICTED_ADDABLE_CAPABILITIES:
            yield f"{at}: adds {', '.join(sorted(_added(sc) - RESTRICTED_ADDABLE_CAPABILITIES))}"


CONTROLS: tuple[tuple[str, str, Check], ...] = (
    ("baseline", "HostProcess", _host_process),
    ("baseline", "Host Namespaces", _host_namespaces),
    ("baseline", "Privileged Containers", _privileged),
    ("baseline", "Capabilities", _baseline_capabilities),
    ("baseline", "HostPath Volumes", _host_path_volumes),
    ("baseline", "Host Ports", _host_ports),
    ("baseline", "AppArmor", _app_armor),
    ("baseline", "SELinux", _se_linux),
    ("baseline", "/proc Mount Type", _proc_mount),
    ("baseline", "Seccomp", _baseline_seccomp),
    ("baseline", "Sysctls", _sysctls),
    ("restricted", "Volume Types", _volume_types),
    ("restricted", "Privilege Escalation", _privilege_escalation),
    ("restricted", "Running as Non-root", _non_root),
    ("restricted", "Running as Non-root user", _non_root_user),
    ("restricted", "Seccomp", _restricted_seccomp),
    ("restricted", "Capabilities", _restricted_capabilities),
)
"""(profile, control as on the Pod Security Standards page, check), in the page's order."""


def pod_security_findings(pod: Mapping) -> list[tuple[str, str, str]]:
    """What keeps a pod template (metadata + spec) from the Pod Security "restricted" profile.

    Returns (profile broken: ``baseline`` or ``restricted``, control name as on the Pod
    Security Standards page, problem) for every failed control, in :data:`CONTROLS`' order;
    [] when the pod is restricted.
    """
    view = Pod.of(pod)
    return [(profile, control, problem) for profile, control, check in CONTROLS for problem in check(view)]


# ----------------------------------------------------------------------------- levels


def pod_templates(obj: Mapping) -> list[tuple[str, Mapping]]:
    """(field path, pod template) of a rendered Job or JobSet; [] for other kinds."""
    spec = obj.get("spec") or {}
    if obj.get("kind") == "Job":
        return [("spec.template", spec.get("template") or {})]
    if obj.get("kind") == "JobSet":
        return [
            (
                f"spec.replicatedJobs[{i}].template.spec.template",
                ((rjob.get("template") or {}).get("spec") or {}).get("template") or {},
            )
            for i, rjob in enumerate(spec.get("replicatedJobs") or [])
        ]
    return []


def _needed(broken: str) -> str:
    # A pod breaking "baseline" needs "privileged"; one breaking "restricted" needs "baseline".
    return "privileged" if broken == "baseline" else "baseline"


def _looser(a: str, b: str) -> str:
    return max(a, b, key=POD_SECURITY_LEVELS.index)


def required_pod_security_level(findings: Iterable[tuple[str, str, str]]) -> str:
    """The least Pod Security level a namespace must enforce to admit pods with these findings."""
    level = "restricted"
    for broken, _, _ in findings:
        level = _looser(level, _needed(broken))
    return level


def declared_pod_security_level(template: Mapping) -> str:
    """The level a pod template is written for (its ``roxxel.dev/pod-security`` annotation;
    "restricted" when it has none)."""
    value = ((template.get("metadata") or {}).get("annotations") or {}).get(POD_SECURITY_ANNOTATION)
    return value if value in POD_SECURITY_LEVELS else "restricted"


def unexpected_findings(template: Mapping) -> list[tuple[str, str, str]]:
    """The controls a pod template breaks beyond the level it is written for."""
    declared = POD_SECURITY_LEVELS.index(declared_pod_security_level(template))
    return [f for f in pod_security_findings(template) if POD_SECURITY_LEVELS.index(_needed(f[0])) > declared]


def pod_security_level(objects: Iterable[Mapping]) -> str:
    """The least Pod Security level the namespace must enforce to admit every rendered pod:
    each template's declared level, or what its findings need where that is looser."""
    level = "restricted"
    for obj in objects:
        for _, template in pod_templates(obj):
            needed = required_pod_security_level(pod_security_findings(template))
            level = _looser(level, _looser(declared_pod_security_level(template), needed))
    return level
