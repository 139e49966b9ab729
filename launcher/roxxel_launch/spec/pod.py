"""The pods' scheduling, resources, security context and environment sources."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any, Literal

from roxxel_launch import contract, names
from roxxel_launch.spec.errors import SpecError, _check
from roxxel_launch.spec.fields import INT32_MAX, _check_quantity, _doc, _freeze, _one_of
from roxxel_launch.spec.owned import refuse

_CONFIG_KEY = re.compile(r"[-._a-zA-Z0-9]{1,253}")


@dataclasses.dataclass(frozen=True)
class Toleration:
    """A pod toleration, as in Kubernetes (snake_case ``toleration_seconds``)."""

    key: str | None = _doc("Taint key; empty with operator Exists tolerates every taint.", default=None)
    operator: Literal["Equal", "Exists"] = _doc("Equal or Exists.", default="Equal")
    value: str | None = _doc("Taint value (operator Equal).", default=None)
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = _doc(
        "Taint effect; empty matches all effects.", default=None)
    toleration_seconds: int | None = _doc("How long a NoExecute taint is tolerated.", default=None)

    def __post_init__(self):
        if self.key is not None:
            _check("key", names.qualified_name_problem(self.key))
        elif self.operator != "Exists":
            raise SpecError("key", "is required unless operator is Exists")
        if self.operator == "Exists" and self.value is not None:
            raise SpecError("value", "must be empty when operator is Exists")
        if self.value is not None:
            _check("value", names.label_value_problem(self.value))
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise SpecError("toleration_seconds", "is only allowed with effect NoExecute")

    def to_k8s(self) -> dict:
        out = {"key": self.key, "operator": self.operator, "value": self.value,
               "effect": self.effect, "tolerationSeconds": self.toleration_seconds}
        return {k: v for k, v in out.items() if v is not None}


@dataclasses.dataclass(frozen=True)
class Resources:
    """Extra container requests and limits (cpu, memory, ephemeral-storage, ...)."""

    requests: Mapping[str, str] = _doc("Resource requests, e.g. {cpu: '8', memory: 32Gi}.",
                                       default_factory=dict)
    limits: Mapping[str, str] = _doc("Resource limits.", default_factory=dict)

    @classmethod
    def _coerce(cls, data: Any) -> Any:
        # YAML reads `cpu: 8` as an int; a quantity is a string in the API.
        if isinstance(data, dict):
            return {k: ({n: str(q) if isinstance(q, (int, float)) and not isinstance(q, bool) else q
                         for n, q in v.items()} if isinstance(v, dict) else v)
                    for k, v in data.items()}
        return data

    def __post_init__(self):
        for section in ("requests", "limits"):
            mapping = getattr(self, section)
            for name, quantity in mapping.items():
                _check(f"{section}.{name}", names.qualified_name_problem(name))
                refuse("resources", name, self, at=f"{section}.{name}")
                _check_quantity(f"{section}.{name}", quantity)
            object.__setattr__(self, section, _freeze(mapping))


# ----------------------------------------------------------------------------- security


@dataclasses.dataclass(frozen=True)
class Security:
    """What the pods may do: who they run as, API credentials, who may reach them.

    The pods meet the Kubernetes Pod Security Standards "restricted" profile: non-root user,
    no privilege escalation, all capabilities dropped, RuntimeDefault seccomp, read-only root
    filesystem with emptyDir mounts for /tmp and caches (docs/run-on-gke.md, "Security").
    """

    run_as_user: int = _doc("UID the worker runs as; the worker image's user (Dockerfile).",
                            default=contract.WORKER_UID)
    run_as_group: int = _doc("GID the worker runs as, and the pod's fsGroup.",
                             default=contract.WORKER_GID)
    automount_service_account_token: bool = _doc(
        "Mount a Kubernetes API token into the pods. Off: the worker never calls the API, and "
        "Workload Identity gets cloud credentials from the GKE metadata server without it. "
        "Turn it on for a program that uses the Kubernetes API (e.g. JAX's K8sCluster "
        "auto-detection).", default=False)
    network_policy: bool = _doc(
        "Create a NetworkPolicy with the job that admits traffic to its pods only from its own "
        "pods (needs a CNI that enforces NetworkPolicy, e.g. GKE Dataplane V2).", default=True)

    def __post_init__(self):
        # Pod Security "restricted" forbids UID 0; the kubelet refuses it with runAsNonRoot.
        for name in ("run_as_user", "run_as_group"):
            value = getattr(self, name)
            if not 1 <= value <= INT32_MAX:
                raise SpecError(name, f"must be between 1 and {INT32_MAX}, got {value}",
                                "Pods never run as root (0); use the image's user, e.g. "
                                f"{contract.WORKER_UID}.")


@dataclasses.dataclass(frozen=True)
class EnvFromSource:
    """Every key of a Secret or a ConfigMap as environment variables (Kubernetes ``envFrom``)."""

    secret: str | None = _doc("Secret name.", default=None)
    config_map: str | None = _doc("ConfigMap name.", default=None)
    prefix: str | None = _doc("Prefix added to every variable name.", default=None)
    optional: bool = _doc("Start even if the object is missing.", default=False)

    def __post_init__(self):
        _one_of(self, ("secret", "config_map"))
        for field in ("secret", "config_map"):
            if getattr(self, field) is not None:
                _check(field, names.dns1123_subdomain_problem(getattr(self, field)))
        if self.prefix is not None:
            _check("prefix", names.env_var_name_problem(self.prefix))

    def to_k8s(self) -> dict:
        ref = {"name": self.secret or self.config_map, "optional": self.optional}
        out: dict = {"secretRef" if self.secret else "configMapRef": ref}
        if self.prefix is not None:
            out["prefix"] = self.prefix
        return out


@dataclasses.dataclass(frozen=True)
class KeyRef:
    """One key of a Secret or ConfigMap as one variable (Kubernetes ``valueFrom``)."""

    key: str = _doc("Key in the object's data.")
    secret: str | None = _doc("Secret name.", default=None)
    config_map: str | None = _doc("ConfigMap name.", default=None)
    optional: bool = _doc("Start even if the key is missing.", default=False)

    def __post_init__(self):
        _one_of(self, ("secret", "config_map"))
        _check("key", None if _CONFIG_KEY.fullmatch(self.key) else
               f"{self.key!r} is not a Secret/ConfigMap key (letters, digits, '-', '_', '.')")
        for field in ("secret", "config_map"):
            if getattr(self, field) is not None:
                _check(field, names.dns1123_subdomain_problem(getattr(self, field)))

    def to_k8s(self) -> dict:
        ref = {"name": self.secret or self.config_map, "key": self.key, "optional": self.optional}
        return {"secretKeyRef" if self.secret else "configMapKeyRef": ref}


