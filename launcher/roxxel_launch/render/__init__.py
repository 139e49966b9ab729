"""Renders a JobSpec into Kubernetes manifests: a JobSet, or an Indexed Job + headless Service.

Python decides every value (:func:`template_values`); the jinja2 templates in ``templates/`` only
place them. Each value reaches the text through the ``q`` filter, which writes it as JSON
(valid YAML) with every character that YAML could read as structure, a line break or
non-printable escaped, so no string can change the shape of the output. The environment's
``finalize`` hook refuses any ``{{ ... }}`` that did not go through ``q``.

The modules: :mod:`.manifest_keys` (label and annotation keys, volume names),
:mod:`.yaml_quoting` (the ``q`` filter and the jinja2 environment), :mod:`.manifest_values`
(:func:`template_values`, from :mod:`.pod_values`: volumes, resources, tolerations, ports;
:mod:`.pod_env`: the worker's command and env; :mod:`.pod_security`: securityContext and
imagePullPolicy), :mod:`.render_checks` (what rendering refuses or warns about); this module
renders the templates.

What an Indexed Job (``workload: indexed-job``) cannot do that a JobSet does: it has no
gang restart. Its podFailurePolicy fails the whole Job on a preemption (reason
``PodFailurePolicy``) or on any other failure (``backoffLimit: 0``) because a single
re-created pod cannot rejoin a running JAX cluster; restarting is then up to
``roxxel-launch resume``, and ``max_restarts`` does not apply. It also runs one slice only
(no multislice, no exclusive-topology placement) and needs its own headless Service.
"""

from __future__ import annotations

import dataclasses
import logging

import yaml

from roxxel_launch import patch
from roxxel_launch.pod_security import POD_SECURITY_ANNOTATION
from roxxel_launch.render.manifest_keys import (
    DATA_VOLUME,
    DEFAULT_CONTAINER_ANNOTATION,
    EXCLUSIVE_TOPOLOGY_ANNOTATION,
    GCSFUSE_ANNOTATION,
    GCSFUSE_CACHE_VOLUME,
    GCSFUSE_DRIVER,
    GCSFUSE_LIMIT_ANNOTATIONS,
    GKE_NVIDIA_LIB_DIR,
    IMPENDING_TERMINATION_TAINT,
    JOB_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    NODEPOOL_LABEL,
    RUN_NAME_LABEL,
    SHM_VOLUME,
    SPEC_ANNOTATION,
    SPOT_SELECTORS,
)
from roxxel_launch.render.manifest_values import CONFIG_ERROR_MESSAGE_PATTERN, template_values
from roxxel_launch.render.pod_security import image_pull_policy
from roxxel_launch.render.render_checks import MAX_ANNOTATIONS_BYTES, PREEMPTION_SAVE_MARGIN, SPOT_GRACE_SECONDS
from roxxel_launch.render.yaml_quoting import TEMPLATE_PACKAGE, environment, quote
from roxxel_launch.spec import PRIORITY_CLASS_LABEL, QUEUE_LABEL, JobSpec, SpecError

__all__ = [
    "CONFIG_ERROR_MESSAGE_PATTERN",
    "DATA_VOLUME",
    "DEFAULT_CONTAINER_ANNOTATION",
    "EXCLUSIVE_TOPOLOGY_ANNOTATION",
    "GCSFUSE_ANNOTATION",
    "GCSFUSE_CACHE_VOLUME",
    "GCSFUSE_DRIVER",
    "GCSFUSE_LIMIT_ANNOTATIONS",
    "GKE_NVIDIA_LIB_DIR",
    "IMPENDING_TERMINATION_TAINT",
    "JOB_LABEL",
    "MANAGED_BY",
    "MANAGED_BY_LABEL",
    "MAX_ANNOTATIONS_BYTES",
    "NODEPOOL_LABEL",
    "POD_SECURITY_ANNOTATION",
    "PREEMPTION_SAVE_MARGIN",
    "PRIORITY_CLASS_LABEL",
    "QUEUE_LABEL",
    "RUN_NAME_LABEL",
    "SHM_VOLUME",
    "SPEC_ANNOTATION",
    "SPOT_GRACE_SECONDS",
    "SPOT_SELECTORS",
    "TEMPLATE_PACKAGE",
    "Rendered",
    "image_pull_policy",
    "quote",
    "render",
    "template_values",
]

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Rendered:
    """Rendered manifests: the YAML text (for ``kubectl apply -f -``) and the parsed objects."""

    objects: tuple[dict, ...]
    yaml: str


def _parse(text: str) -> tuple[dict, ...]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return tuple(doc for doc in yaml.load_all(text, Loader=loader) if doc is not None)


def render(spec: JobSpec, *, cluster: bool = True) -> Rendered:
    """Renders the manifests of a job, in creation order: [NetworkPolicy, JobSet] or
    [Service, NetworkPolicy, Job] (no NetworkPolicy with ``security.network_policy: false``).

    The NetworkPolicy comes before the pods' owner so that no pod ever runs unprotected.

    Args:
        spec: the job.
        cluster: see :func:`template_values` (False for ``--local`` dress rehearsals).

    Raises:
        SpecError: see :func:`template_values`; a ``pod_patch`` that is not a valid patch.
    """
    values = template_values(spec, cluster=cluster)
    env = environment()
    if spec.pod_patch is not None:
        # The pod template as rendered, patched, then placed whole through the q filter.
        pod = yaml.safe_load(env.get_template("_pod.yaml.j2").render(values))
        try:
            values["pod_template"] = patch.strategic_merge(pod, spec.pod_patch)
        except ValueError as err:
            raise SpecError("pod_patch", str(err)) from err
    parts = []
    if spec.workload == "indexed-job":
        parts.append("service.yaml.j2")
    if spec.security.network_policy:
        parts.append("networkpolicy.yaml.j2")
    parts.append("jobset.yaml.j2" if spec.workload == "jobset" else "indexed-job.yaml.j2")
    text = "---\n".join(env.get_template(name).render(values) for name in parts)
    logger.debug("rendered %s %s/%s", spec.workload, spec.namespace, spec.name)
    return Rendered(objects=_parse(text), yaml=text)
