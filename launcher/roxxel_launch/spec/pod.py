"""The pods' scheduling, resources, security context and environment sources."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any, Literal

from roxxel_launch import contract, names
from roxxel_launch.spec.errors import SpecError, _check
from roxxel_launch.spec.fields import INT32_MAX, _check_quantity, _doc, _freeze, _one_of, parse_quantity
from roxxel_launch.spec.owned import refuse

_CONFIG_KEY = re.compile(r"[-._a-zA-Z0-9]{1,253}")

# What the API server checks in a container's resources beyond the OpenAPI schema, from
# kubernetes/kubernetes pkg/apis/core/validation/validation.go (validateResourceRequirements,
# validateContainerResourceName, ValidateResourceQuantityValue) and pkg/apis/core/helper
# (IsOvercommitAllowed, IsExtendedResourceName), cited in docs/kubernetes.md ("Resources").
STANDARD_CONTAINER_RESOURCES = ("cpu", "memory", "ephemeral-storage")
HUGEPAGES_PREFIX = "hugepages-"
_NATIVE_DOMAIN = "kubernetes.io/"


RESOURCES_FIX = (
    "Set each request at most its limit (extended resources such as example.com/widget: "
    "whole numbers, request equal to limit), or give only the limit: the request then "
    "defaults to it."
)


def _is_extended(name: str) -> bool:
    # A name with a domain other than kubernetes.io: nvidia.com/gpu, google.com/tpu, ...
    return "/" in name and _NATIVE_DOMAIN not in name and not name.startswith("requests.")


def _overcommit_allowed(name: str) -> bool:
    # Native resources (no domain, or kubernetes.io) except huge pages.
    return ("/" not in name or _NATIVE_DOMAIN in name) and not name.startswith(HUGEPAGES_PREFIX)


def resource_name_problem(name: str) -> str | None:
    """Why the API server refuses ``name`` as a container resource, or None."""
    if "/" not in name:
        if name in STANDARD_CONTAINER_RESOURCES or name.startswith(HUGEPAGES_PREFIX):
            return None
        return (
            f"{name!r} is not a container resource: cpu, memory, ephemeral-storage, "
            "hugepages-<page size>, or an extended resource with a domain (example.com/widget)"
        )
    if name.startswith("requests.") or (_is_extended(name) and names.qualified_name_problem(f"requests.{name}")):
        return f"{name!r} does not follow the extended resource name standard (DOMAIN/NAME)"
    return None


def resource_requirements_problems(requests: Mapping[str, str], limits: Mapping[str, str]) -> list[tuple[str, str]]:
    """What the API server refuses in one container's ``requests`` and ``limits`` that its
    OpenAPI schema lets through, as ``(where, problem)`` pairs (``where``: ``requests.cpu``).

    The rules: a quantity parses and is not negative; an extended resource (a name with a
    domain, e.g. nvidia.com/gpu) is a whole number; a request is at most its limit; a resource
    that cannot be overcommitted (extended resources, huge pages) has a limit whenever it
    has a request, and both are equal; huge pages come with a cpu or memory request or
    limit, in whole pages. Quantities are compared exactly ('1Gi' = '1073741824').
    """
    problems: list[tuple[str, str]] = []
    values: dict[tuple[str, str], Fraction] = {}
    for section, mapping in (("limits", limits), ("requests", requests)):
        for name, quantity in mapping.items():
            where = f"{section}.{name}"
            try:
                value = values[section, name] = parse_quantity(quantity)
            except ValueError as err:
                problems.append((where, f"{err} (e.g. '8', '500m', '32Gi')"))
                continue
            if _is_extended(name) and value.denominator != 1:
                problems.append((where, f"{quantity!r}: {name} is an extended resource and must be a whole number"))
            if name.startswith(HUGEPAGES_PREFIX):
                try:
                    page = parse_quantity(name[len(HUGEPAGES_PREFIX) :])
                except ValueError:
                    problems.append((where, f"{name!r} does not name a page size (hugepages-2Mi)"))
                    continue
                if value <= 0 or value % page:
                    problems.append(
                        (where, f"{quantity!r} is not a positive whole number of {name[len(HUGEPAGES_PREFIX) :]} pages")
                    )
    for name, quantity in requests.items():
        request, limit = values.get(("requests", name)), values.get(("limits", name))
        if request is None:
            continue
        if name not in limits:
            if not _overcommit_allowed(name):
                problems.append(
                    (
                        f"requests.{name}",
                        f"{name} cannot be overcommitted: it needs a limit equal to its request ({quantity})",
                    )
                )
        elif limit is None:
            continue
        elif not _overcommit_allowed(name) and request != limit:
            problems.append(
                (
                    f"requests.{name}",
                    f"{quantity} must equal the {name} limit ({limits[name]}): {name} cannot be overcommitted",
                )
            )
        elif request > limit:
            problems.append(
                (
                    f"requests.{name}",
                    f"{quantity} is more than the {name} limit "
                    f"({limits[name]}); the API server refuses a request above its limit",
                )
            )
    if any(n.startswith(HUGEPAGES_PREFIX) for n in (*requests, *limits)) and not any(
        n in ("cpu", "memory") for n in (*requests, *limits)
    ):
        problems.append(("limits", "huge pages need a cpu or memory request or limit too"))
    return problems


@dataclasses.dataclass(frozen=True)
class Toleration:
    """A pod toleration, as in Kubernetes (snake_case ``toleration_seconds``)."""

    key: str | None = _doc("Taint key; empty with operator Exists tolerates every taint.", default=None)
    operator: Literal["Equal", "Exists"] = _doc("Equal or Exists.", default="Equal")
    value: str | None = _doc("Taint value (operator Equal).", default=None)
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = _doc(
        "Taint effect; empty matches all effects.", default=None
    )
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
        out = {
            "key": self.key,
            "operator": self.operator,
            "value": self.value,
            "effect": self.effect,
            "tolerationSeconds": self.toleration_seconds,
        }
        return {k: v for k, v in out.items() if v is not None}


@dataclasses.dataclass(frozen=True)
class Resources:
    """Extra container requests and limits (cpu, memory, ephemeral-storage, ...).

    Checked as the API server checks them (:func:`resource_requirements_problems`): e.g.
    ``requests: {cpu: "8"}`` with ``limits: {cpu: "2"}`` is refused here, not at submit time.
    """

    requests: Mapping[str, str] = _doc("Resource requests, e.g. {cpu: '8', memory: 32Gi}.", default_factory=dict)
    limits: Mapping[str, str] = _doc("Resource limits.", default_factory=dict)

    @classmethod
    def _coerce(cls, data: Any) -> Any:
        # YAML reads `cpu: 8` as an int; a quantity is a string in the API.
        if isinstance(data, dict):
            return {
                k: (
                    {n: str(q) if isinstance(q, (int, float)) and not isinstance(q, bool) else q for n, q in v.items()}
                    if isinstance(v, dict)
                    else v
                )
                for k, v in data.items()
            }
        return data

    def __post_init__(self):
        for section in ("requests", "limits"):
            mapping = getattr(self, section)
            for name, quantity in mapping.items():
                _check(f"{section}.{name}", names.qualified_name_problem(name) or resource_name_problem(name))
                refuse("resources", name, self, at=f"{section}.{name}")
                _check_quantity(f"{section}.{name}", quantity)
            object.__setattr__(self, section, _freeze(mapping))
        problems = resource_requirements_problems(self.requests, self.limits)
        if problems:
            raise SpecError.joined([SpecError(where, problem, RESOURCES_FIX) for where, problem in problems])


# ----------------------------------------------------------------------------- security


# The Kubernetes Pod Security Standards levels, most to least restrictive
# (kubernetes.io/docs/concepts/security/pod-security-standards).
POD_SECURITY_LEVELS = ("restricted", "baseline", "privileged")
ROOT = 0


@dataclasses.dataclass(frozen=True)
class Security:
    """What the pods may do: the Pod Security profile they are written for, who they run as,
    API credentials, who may reach them.

    ``profile`` names a Kubernetes Pod Security Standards level
    (kubernetes.io/docs/concepts/security/pod-security-standards) and sets the worker
    container's security context (docs/kubernetes.md, "Pod security"):

    * ``restricted``: non-root user (the image's, UID 10001), no privilege escalation, all
      capabilities dropped, RuntimeDefault seccomp, read-only root filesystem with emptyDir
      mounts for /tmp and caches.
    * ``baseline``: root (UID 0), as every TPU and GPU reference runs its container (GKE's
      TPU manifests, xpk, the JobSet TPU example, GKE's GPUDirect manifests), the container
      runtime's default capabilities, RuntimeDefault seccomp, a writable root filesystem.
    * ``privileged``: baseline plus ``privileged: true`` on the worker container, as the
      references render it with host networking (the JobSet TPU multislice example, xpk,
      Google's A3 Mega / A3 Ultra / A4 GPU recipes).

    Unset, it follows the accelerator (``JobSpec.security_profile``): restricted for CPU and
    for GPU without a networking preset; baseline for TPU (GKE documents TPU access without
    privileged mode from GKE 1.28) and GPU networking presets; privileged for pods on the
    host network.
    """

    profile: Literal["restricted", "baseline", "privileged"] | None = _doc(
        "Pod Security Standards level the pods are written for: restricted (non-root UID "
        "10001, no capabilities, read-only root), baseline (root as GKE's TPU/GPU "
        "references run, default capabilities, writable root) or privileged (baseline plus a "
        "privileged worker container, as the references with host networking). Default: "
        "restricted for CPU and plain GPU; baseline for TPU and GPU networking presets; "
        "privileged for host-network pods (TPU multislice, GPU with host_network: true). "
        "The namespace must enforce this level or a looser one "
        "(pod-security.kubernetes.io/enforce; `roxxel-launch validate` names it).",
        default=None,
    )
    run_as_user: int | None = _doc(
        "UID the worker runs as. Default: the worker image's user "
        f"({contract.WORKER_UID}, Dockerfile) under restricted, root (0) under baseline and "
        "privileged.",
        default=None,
    )
    run_as_group: int | None = _doc(
        "GID the worker runs as, and the pod's fsGroup when not 0. Default: "
        f"{contract.WORKER_GID} under restricted, 0 under baseline and privileged.",
        default=None,
    )
    automount_service_account_token: bool = _doc(
        "Mount a Kubernetes API token into the pods. Off: the worker never calls the API, and "
        "Workload Identity gets cloud credentials from the GKE metadata server without it. "
        "Turn it on for a program that uses the Kubernetes API (e.g. JAX's K8sCluster "
        "auto-detection).",
        default=False,
    )
    network_policy: bool = _doc(
        "Create a NetworkPolicy with the job that admits traffic to its pods only from its own "
        "pods (needs a CNI that enforces NetworkPolicy, e.g. GKE Dataplane V2).",
        default=True,
    )

    def __post_init__(self):
        for name in ("run_as_user", "run_as_group"):
            value = getattr(self, name)
            if value is not None and not ROOT <= value <= INT32_MAX:
                raise SpecError(name, f"must be between 0 and {INT32_MAX}, got {value}")

    def ids(self, profile: str) -> tuple[int, int]:
        """(UID, GID) the worker runs as under ``profile``: the given ones, else the image's
        user under restricted and root otherwise."""
        restricted = profile == "restricted"
        user = self.run_as_user if self.run_as_user is not None else (contract.WORKER_UID if restricted else ROOT)
        group = self.run_as_group if self.run_as_group is not None else (contract.WORKER_GID if restricted else ROOT)
        return user, group


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
        _check(
            "key",
            None
            if _CONFIG_KEY.fullmatch(self.key)
            else f"{self.key!r} is not a Secret/ConfigMap key (letters, digits, '-', '_', '.')",
        )
        for field in ("secret", "config_map"):
            if getattr(self, field) is not None:
                _check(field, names.dns1123_subdomain_problem(getattr(self, field)))

    def to_k8s(self) -> dict:
        ref = {"name": self.secret or self.config_map, "key": self.key, "optional": self.optional}
        return {"secretKeyRef" if self.secret else "configMapKeyRef": ref}
