"""Checks rendered manifests before anything is sent to a cluster.

Four layers, each returning a list of problems (``Kind/name: where: what``):

* :func:`check_objects` — rules a schema cannot express: DNS names including the 63-character
  limit on the longest generated pod name, enum values (schemas of built-in kinds carry no
  enums), the JobSet failure-policy reasons, accelerator/topology consistency, and the API
  server's rules for container requests and limits (a request at most its limit, extended
  resources whole and not overcommitted: ``spec.resource_requirements_problems``).
* :func:`check_schemas` — built-in kinds (Job, Service, and each JobSet's child Job as the
  controller will create it) against the official OpenAPI schema, offline, with the
  ``kubernetes-validate`` package in strict mode (unknown fields are errors).
* :func:`check_jobset_crd` — a JobSet against the JobSet CRD's OpenAPI schema with
  ``jsonschema``, optionally rejecting unknown fields (a plain CRD schema prunes them).

* :func:`check_pod_security` — every Pod Security Standards control ("baseline", then
  "restricted") a rendered pod template breaks beyond the level it is written for (its
  ``roxxel.dev/pod-security`` annotation, from ``security.profile``); :func:`validate` logs
  these as warnings with the level the namespace must then enforce (an option such as
  inline NFS may need it); :func:`pod_security_line` names that level in one line.

Against a real cluster, a server-side dry run remains the authoritative check.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from roxxel_launch import names, tpu
from roxxel_launch.pod_security import pod_security_level, pod_templates, unexpected_findings
from roxxel_launch.spec import (
    GPU_ACCELERATOR_SELECTOR,
    GPU_RESOURCE,
    MACHINE_TYPE_SELECTOR,
    TPU_ACCELERATOR_SELECTOR,
    TPU_RESOURCE,
    TPU_TOPOLOGY_SELECTOR,
    resource_requirements_problems,
)

logger = logging.getLogger(__name__)

DEFAULT_KUBERNETES_VERSION = "1.30.0"
EXCLUSIVE_TOPOLOGY_ANNOTATION = "alpha.jobset.sigs.k8s.io/exclusive-topology"

RESTART_POLICIES = {"Never"}  # podFailurePolicy and the JobSet failure policy need Never
COMPLETION_MODES = {"Indexed"}
POD_FAILURE_ACTIONS = {"FailJob", "FailIndex", "Ignore", "Count"}
EXIT_CODE_OPERATORS = {"In", "NotIn"}
CONDITION_STATUSES = {"True", "False", "Unknown"}
TOLERATION_OPERATORS = {"Equal", "Exists"}
TAINT_EFFECTS = {"NoSchedule", "PreferNoSchedule", "NoExecute"}
EMPTY_DIR_MEDIA = {"", "Memory"}
JOBSET_RESTART_STRATEGIES = {"Recreate", "BlockingRecreate"}
JOBSET_FAILURE_ACTIONS = {
    "FailJobSet",
    "RestartJobSet",
    "RestartJobSetAndIgnoreMaxRestarts",
    "RestartJob",
    "RestartJobAndIgnoreMaxRestarts",
}
JOB_FAILURE_REASONS = {
    "BackoffLimitExceeded",
    "DeadlineExceeded",
    "FailedIndexes",
    "MaxFailedIndexesExceeded",
    "PodFailurePolicy",
}


WRONG_TYPE = "a field has the wrong type"


class ManifestError(ValueError):
    """Rendered manifests that must not be sent; ``problems`` lists every finding."""

    def __init__(self, problems: Iterable[str]):
        self.problems = tuple(problems)
        super().__init__("invalid manifests:\n  " + "\n  ".join(self.problems))


def _ident(obj: Mapping) -> str:
    return f"{obj.get('kind', '?')}/{obj.get('metadata', {}).get('name', '?')}"


class _Findings:
    def __init__(self, obj: Mapping):
        self.ident = _ident(obj)
        self.problems: list[str] = []

    def add(self, where: str, problem: str | None) -> None:
        if problem:
            self.problems.append(f"{self.ident}: {where}: {problem}")

    def enum(self, where: str, value: Any, allowed: set[str]) -> None:
        if value not in allowed:
            self.add(where, f"{value!r} is not one of {', '.join(sorted(allowed))}")


def _check_labels(f: _Findings, where: str, metadata: Mapping) -> None:
    for key, value in (metadata.get("labels") or {}).items():
        f.add(f"{where}.labels[{key!r}]", names.qualified_name_problem(key))
        f.add(f"{where}.labels[{key!r}]", names.label_value_problem(value))
    for key in metadata.get("annotations") or {}:
        f.add(f"{where}.annotations[{key!r}]", names.qualified_name_problem(key))


def _check_accelerator(
    f: _Findings, where: str, pod_spec: Mapping, limits: Mapping, hosts: int, exclusive: bool | None
) -> None:
    # exclusive: whether the JobSet asks for one node pool per slice; None for a bare Job
    # (a single slice, so there is nothing to keep apart).
    selectors = pod_spec.get("nodeSelector") or {}
    if TPU_RESOURCE in limits:
        accelerator = selectors.get(TPU_ACCELERATOR_SELECTOR)
        topology = selectors.get(TPU_TOPOLOGY_SELECTOR)
        by_accelerator = {t.gke_accelerator: t for t in tpu.TPU_TYPES.values()}
        if accelerator not in by_accelerator or topology is None:
            f.add(
                f"{where}.nodeSelector",
                f"a pod requesting {TPU_RESOURCE} needs "
                f"{TPU_ACCELERATOR_SELECTOR} (one of {', '.join(sorted(by_accelerator))}) "
                f"and {TPU_TOPOLOGY_SELECTOR}",
            )
            return
        try:
            shape = tpu.tpu_slice(by_accelerator[accelerator].name, topology)
            if str(limits[TPU_RESOURCE]) != str(shape.chips_per_host) and str(limits[TPU_RESOURCE]).isdigit():
                # A topology served both ways (v5e/v6e 2x4): the chip limit picks the layout.
                with contextlib.suppress(ValueError):
                    shape = tpu.tpu_slice(shape.type.name, topology, int(limits[TPU_RESOURCE]))
        except ValueError as err:
            f.add(f"{where}.nodeSelector", str(err))
            return
        if str(limits[TPU_RESOURCE]) != str(shape.chips_per_host):
            f.add(
                f"{where}.resources.limits",
                f"{TPU_RESOURCE}={limits[TPU_RESOURCE]} but a "
                f"{topology} {accelerator} host has {shape.chips_per_host} chips",
            )
        elif shape.layouts > 1 and selectors.get(MACHINE_TYPE_SELECTOR) != shape.machine_type:
            # Both host sizes carry the same labels: 4-chip pods would pack two to an 8-chip host.
            f.add(
                f"{where}.nodeSelector",
                f"{topology} {accelerator} is served by "
                f"{' and '.join(shape.type.machine_types[c] for c in (4, 8))} hosts alike: "
                f"select {MACHINE_TYPE_SELECTOR}: {shape.machine_type}",
            )
        if hosts != shape.hosts:
            f.add(where, f"{hosts} pods per slice but topology {topology} has {shape.hosts} hosts")
        if shape.hosts > 1 and exclusive is False:
            f.add(
                "metadata.annotations",
                f"a multi-host TPU slice needs {EXCLUSIVE_TOPOLOGY_ANNOTATION} so each slice gets its own node pool",
            )
    if GPU_RESOURCE in limits and GPU_ACCELERATOR_SELECTOR not in selectors:
        f.add(f"{where}.nodeSelector", f"a pod requesting {GPU_RESOURCE} needs {GPU_ACCELERATOR_SELECTOR}")


def _check_pod_template(f: _Findings, where: str, template: Mapping, hosts: int, exclusive: bool | None) -> None:
    # Kueue's topology-aware scheduling places these pods: no exclusive placement is needed.
    kueue_placed = any(
        k.startswith("kueue.x-k8s.io/podset-") for k in ((template.get("metadata") or {}).get("annotations") or {})
    )
    if kueue_placed and exclusive is False:
        exclusive = None
    _check_labels(f, f"{where}.metadata", template.get("metadata") or {})
    spec = template.get("spec") or {}
    f.enum(f"{where}.spec.restartPolicy", spec.get("restartPolicy"), RESTART_POLICIES)
    for i, toleration in enumerate(spec.get("tolerations") or []):
        at = f"{where}.spec.tolerations[{i}]"
        f.enum(f"{at}.operator", toleration.get("operator", "Equal"), TOLERATION_OPERATORS)
        if toleration.get("effect"):
            f.enum(f"{at}.effect", toleration["effect"], TAINT_EFFECTS)
    volume_names = []
    for i, volume in enumerate(spec.get("volumes") or []):
        f.add(f"{where}.spec.volumes[{i}].name", names.dns1123_label_problem(volume.get("name")))
        volume_names.append(volume.get("name"))
        if "emptyDir" in volume:
            f.enum(
                f"{where}.spec.volumes[{i}].emptyDir.medium",
                (volume["emptyDir"] or {}).get("medium", ""),
                EMPTY_DIR_MEDIA,
            )
    if len(set(volume_names)) != len(volume_names):
        f.add(f"{where}.spec.volumes", f"duplicate volume names in {volume_names}")
    limits: dict = {}
    for c, container in enumerate(spec.get("containers") or []):
        at = f"{where}.spec.containers[{c}]"
        f.add(f"{at}.name", names.dns1123_label_problem(container.get("name")))
        env_names = [var.get("name") for var in container.get("env") or []]
        for name in env_names:
            f.add(f"{at}.env", names.env_var_name_problem(name))
        duplicates = sorted({n for n in env_names if env_names.count(n) > 1})
        if duplicates:
            f.add(f"{at}.env", f"variables set twice: {', '.join(duplicates)}")
        for mount in container.get("volumeMounts") or []:
            if mount.get("name") not in volume_names:
                f.add(f"{at}.volumeMounts", f"mount of unknown volume {mount.get('name')!r}")
        limits.update((container.get("resources") or {}).get("limits") or {})
    for key in ("initContainers", "containers"):
        for c, container in enumerate(spec.get(key) or []):
            resources = container.get("resources") or {}
            for part, problem in resource_requirements_problems(
                {k: str(v) for k, v in (resources.get("requests") or {}).items()},
                {k: str(v) for k, v in (resources.get("limits") or {}).items()},
            ):
                f.add(f"{where}.spec.{key}[{c}].resources.{part}", problem)
    _check_accelerator(f, where, spec, limits, hosts, exclusive)


def _check_job_spec(f: _Findings, where: str, spec: Mapping, exclusive: bool | None) -> None:
    f.enum(f"{where}.completionMode", spec.get("completionMode"), COMPLETION_MODES)
    if spec.get("parallelism") != spec.get("completions"):
        f.add(where, "parallelism and completions differ: every host must run at once")
    for i, rule in enumerate((spec.get("podFailurePolicy") or {}).get("rules") or []):
        at = f"{where}.podFailurePolicy.rules[{i}]"
        f.enum(f"{at}.action", rule.get("action"), POD_FAILURE_ACTIONS)
        if "onExitCodes" in rule:
            f.enum(f"{at}.onExitCodes.operator", rule["onExitCodes"].get("operator"), EXIT_CODE_OPERATORS)
        for j, condition in enumerate(rule.get("onPodConditions") or []):
            f.enum(f"{at}.onPodConditions[{j}].status", condition.get("status"), CONDITION_STATUSES)
    _check_pod_template(f, f"{where}.template", spec.get("template") or {}, spec.get("completions") or 0, exclusive)


def _check_jobset(obj: Mapping) -> list[str]:
    f = _Findings(obj)
    meta = obj.get("metadata") or {}
    name = meta.get("name", "")
    f.add("metadata.name", names.dns1035_label_problem(name))
    exclusive = EXCLUSIVE_TOPOLOGY_ANNOTATION in (meta.get("annotations") or {})
    spec = obj.get("spec") or {}
    policy = spec.get("failurePolicy") or {}
    f.enum("spec.failurePolicy.restartStrategy", policy.get("restartStrategy", "Recreate"), JOBSET_RESTART_STRATEGIES)
    for i, rule in enumerate(policy.get("rules") or []):
        at = f"spec.failurePolicy.rules[{i}]"
        f.enum(f"{at}.action", rule.get("action"), JOBSET_FAILURE_ACTIONS)
        for reason in rule.get("onJobFailureReasons") or []:
            f.enum(f"{at}.onJobFailureReasons", reason, JOB_FAILURE_REASONS)
    for i, rjob in enumerate(spec.get("replicatedJobs") or []):
        at = f"spec.replicatedJobs[{i}]"
        rjob_name = rjob.get("name", "")
        f.add(f"{at}.name", names.dns1123_label_problem(rjob_name))
        job_spec = (rjob.get("template") or {}).get("spec") or {}
        replicas = rjob.get("replicas", 1)
        completions = job_spec.get("completions") or 1
        f.add("metadata.name", names.pod_name_problem(f"{name}-{rjob_name}-{replicas - 1}-{completions - 1}"))
        job_exclusive = exclusive or EXCLUSIVE_TOPOLOGY_ANNOTATION in (
            ((rjob.get("template") or {}).get("metadata") or {}).get("annotations") or {}
        )
        _check_job_spec(f, f"{at}.template.spec", job_spec, job_exclusive)
    return f.problems


def _check_job(obj: Mapping) -> list[str]:
    f = _Findings(obj)
    name = (obj.get("metadata") or {}).get("name", "")
    # Pod hostnames are <job>-<index>: the name must be a DNS label, not just a subdomain.
    f.add("metadata.name", names.dns1123_label_problem(name))
    spec = obj.get("spec") or {}
    f.add("metadata.name", names.pod_name_problem(f"{name}-{(spec.get('completions') or 1) - 1}"))
    _check_job_spec(f, "spec", spec, exclusive=None)
    return f.problems


def _check_network_policy(obj: Mapping) -> list[str]:
    f = _Findings(obj)
    f.add("metadata.name", names.dns1123_subdomain_problem((obj.get("metadata") or {}).get("name", "")))
    spec = obj.get("spec") or {}
    selector = (spec.get("podSelector") or {}).get("matchLabels") or {}
    if not selector:
        f.add("spec.podSelector", "must select the job's pods by label, not every pod in the namespace")
    for i, rule in enumerate(spec.get("ingress") or []):
        for j, peer in enumerate(rule.get("from") or []):
            if (peer.get("podSelector") or {}).get("matchLabels") != selector:
                f.add(f"spec.ingress[{i}].from[{j}]", "admits pods other than the job's own")
    return f.problems


def _check_service(obj: Mapping) -> list[str]:
    f = _Findings(obj)
    f.add("metadata.name", names.dns1035_label_problem((obj.get("metadata") or {}).get("name", "")))
    spec = obj.get("spec") or {}
    if spec.get("clusterIP") != "None":
        f.add("spec.clusterIP", "must be None: pods get DNS names only from a headless Service")
    return f.problems


_CHECKS = {
    "JobSet": _check_jobset,
    "Job": _check_job,
    "Service": _check_service,
    "NetworkPolicy": _check_network_policy,
}


def check_objects(objects: Iterable[Mapping]) -> list[str]:
    """Names, enums and accelerator consistency of rendered objects."""
    problems = []
    for obj in objects:
        try:
            problems += _check_object(obj)
        except (AttributeError, TypeError) as err:
            # A free-form value (pod_patch, affinity) of the wrong shape, e.g. a container given
            # as a string: the schema check names the field; these checks cannot read past it.
            problems.append(
                f"{_ident(obj)}: {WRONG_TYPE} ({err}); the schema check (on unless "
                "--no-schema) names it - fix pod_patch / affinity values"
            )
    return problems


def _check_object(obj: Mapping) -> list[str]:
    f = _Findings(obj)
    meta = obj.get("metadata") or {}
    f.add("metadata.namespace", names.dns1123_label_problem(meta.get("namespace", "default")))
    _check_labels(f, "metadata", meta)
    kind = obj.get("kind")
    check = _CHECKS.get(kind) if isinstance(kind, str) else None
    if check is None:
        f.add("kind", f"roxxel-launch does not render {obj.get('kind')!r}")
        return f.problems
    return check(obj) + f.problems


# ----------------------------------------------------------------------------- Pod Security
# The controls and levels are roxxel_launch.pod_security's; here, the lines validate prints.


def pod_security_line(objects: Iterable[Mapping], profile: str = "") -> str:
    """One line naming the namespace label that admits the rendered pods; ``profile``, if
    given, says which profile they are written for and why (``'baseline' (the TPU default)``)."""
    level = pod_security_level(objects)
    looser = "" if level == "privileged" else " or a looser level"
    written = f"pods written for {profile}; " if profile else ""
    return (
        f"pod security: {written}the namespace must enforce {level!r}{looser} "
        f"(label pod-security.kubernetes.io/enforce={level})"
    )


def check_pod_security(objects: Iterable[Mapping]) -> list[str]:
    """Every Pod Security control the rendered pods fail beyond the level each is written for
    (its ``roxxel.dev/pod-security`` annotation, else "restricted"), one line each."""
    problems = []
    for obj in objects:
        for where, template in pod_templates(obj):
            for profile, control, problem in unexpected_findings(template):
                problems.append(f"{_ident(obj)}: {where}: breaks Pod Security {profile!r} ({control}): {problem}")
    return problems


def _kubernetes_validate():
    try:
        import kubernetes_validate
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError(
            "schema validation needs the kubernetes-validate package: "
            "pip install kubernetes-validate (or skip it with --no-schema)"
        ) from err
    return kubernetes_validate


def _child_job(jobset: Mapping, rjob: Mapping) -> dict:
    template = rjob.get("template") or {}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            **(template.get("metadata") or {}),
            "name": f"{jobset['metadata']['name']}-{rjob.get('name')}-0",
            "namespace": jobset["metadata"].get("namespace", "default"),
        },
        "spec": template.get("spec") or {},
    }


def check_schemas(objects: Iterable[Mapping], kubernetes_version: str = DEFAULT_KUBERNETES_VERSION) -> list[str]:
    """Built-in kinds, and the child Jobs of JobSets, against the official schema (strict)."""
    kv = _kubernetes_validate()
    problems = []
    for obj in objects:
        docs: list[tuple[str, Mapping]]
        if obj.get("kind") == "JobSet":
            docs = [
                (f"{_ident(obj)}: replicatedJobs[{i}] child Job", _child_job(obj, rjob))
                for i, rjob in enumerate((obj.get("spec") or {}).get("replicatedJobs") or [])
            ]
        else:
            docs = [(_ident(obj), obj)]
        for ident, doc in docs:
            try:
                kv.validate(dict(doc), kubernetes_version, strict=True)
            except kv.ValidationError as err:
                where = ".".join(str(p) for p in err.absolute_path) or "(root)"
                problems.append(f"{ident}: {where}: {err.message}")
    return problems


def _reject_unknown_fields(schema: Any) -> Any:
    if isinstance(schema, dict):
        schema = {k: _reject_unknown_fields(v) for k, v in schema.items()}
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [_reject_unknown_fields(v) for v in schema]
    return schema


def jobset_crd_schema(crd: Mapping, version: str = "v1alpha2", reject_unknown_fields: bool = True) -> dict:
    """The OpenAPI schema of one version of the JobSet CRD, optionally closed to unknown fields."""
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version:
            schema = copy.deepcopy(entry["schema"]["openAPIV3Schema"])
            return _reject_unknown_fields(schema) if reject_unknown_fields else schema
    raise ValueError(f"the CRD has no version {version!r}")


def check_jobset_crd(obj: Mapping, schema: Mapping) -> list[str]:
    """A JobSet against a JobSet CRD schema (from :func:`jobset_crd_schema`)."""
    import jsonschema

    validator = jsonschema.Draft7Validator(schema)
    return [
        f"{_ident(obj)}: {'.'.join(str(p) for p in err.absolute_path) or '(root)'}: {err.message}"
        for err in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))
    ]


def validate(
    objects: Iterable[Mapping], *, schema: bool = True, kubernetes_version: str = DEFAULT_KUBERNETES_VERSION
) -> None:
    """Raises ManifestError listing every problem; returns quietly when the manifests are sendable."""
    objects = list(objects)
    problems = check_objects(objects)
    if schema:
        typed = check_schemas(objects, kubernetes_version)
        if typed:  # the schema names a wrongly typed field better than the line saying one exists
            problems = [p for p in problems if WRONG_TYPE not in p]
        problems += typed
    if problems:
        raise ManifestError(problems)
    warn_pod_security(objects)
    logger.debug("validated %d objects", len(objects))


def warn_pod_security(objects: Iterable[Mapping]) -> list[str]:
    """Logs (as warnings) what keeps the pods from the Pod Security level they are written for
    (``security.profile``), and the level their namespace must enforce instead; returns the
    lines. Not an error: an option such as inline NFS data may need it, and the namespace decides."""
    objects = list(objects)
    lines = check_pod_security(objects)
    if lines:
        level = pod_security_level(objects)
        lines.append(
            f"the namespace must admit Pod Security {level!r} pods "
            f"(label pod-security.kubernetes.io/enforce={level}); see "
            "docs/run-on-gke.md, Security"
        )
        for line in lines:
            logger.warning("%s", line)
    return lines
