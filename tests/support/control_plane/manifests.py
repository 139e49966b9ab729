"""What the JobSet and Kueue releases install beside their controllers, rewritten for
controllers that run as processes on this machine instead of as pods behind a Service.

The releases' kustomizations point every webhook (admission, and Kueue's CRD conversion) at a
``webhook-service`` in their namespace, with a CA that cert-manager or their internal cert
rotation injects. Here the API server reaches each controller at ``https://127.0.0.1:PORT``
with the local CA. Kept as the releases have them: which webhooks exist, their rules, failure
policies and the object and namespace selectors their kustomize patches add (JobSet's pod
webhooks act only on pods with a ``jobset.sigs.k8s.io/jobset-name`` label; Kueue's skip
``kube-system`` and ``kueue-system``). Left out: Kueue's webhooks of the integrations this
cluster does not enable (only ``batch/job`` and ``jobset.x-k8s.io/jobset`` are), which Kueue
does not serve, so that their ``failurePolicy: Fail`` would refuse every Deployment or Pod.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Iterable
from pathlib import Path

import yaml

KUEUE_GROUPS = {"kueue.x-k8s.io", "batch", "jobset.x-k8s.io"}
KUEUE_SKIPPED_NAMESPACES = {
    "matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "kueue-system"]}
    ]
}


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _client_config(ca: bytes, port: int, path: str) -> dict:
    return {"url": f"https://127.0.0.1:{port}{path}", "caBundle": base64.b64encode(ca).decode()}


def _json_patch(obj: dict, ops: Iterable[dict]) -> None:
    """The ``replace`` and ``add`` operations of an RFC 6902 patch on list indices and keys (what
    the releases' webhook patches use)."""
    for op in ops:
        if op.get("op") not in ("replace", "add"):
            raise ValueError(f"unsupported patch operation {op!r}")
        *parents, last = [p for p in op["path"].split("/") if p]
        target = obj
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if isinstance(target, list):
            target[int(last)] = copy.deepcopy(op["value"])
        else:
            target[last] = copy.deepcopy(op["value"])


def _point_at(configs: list[dict], ca: bytes, port: int, prefix: str) -> list[dict]:
    for config in configs:
        config["metadata"]["name"] = f"{prefix}-{config['metadata']['name']}"
        for hook in config.get("webhooks") or []:
            hook["clientConfig"] = _client_config(ca, port, hook["clientConfig"]["service"]["path"])
    return configs


def jobset_webhooks(upstream: Path, ca: bytes, port: int) -> list[dict]:
    """JobSet's mutating and validating webhook configurations, with its kustomize patches."""
    configs = _docs(upstream / "jobset" / "webhook" / "manifests.yaml")
    patches = {
        "MutatingWebhookConfiguration": "mutating-patch.yaml",
        "ValidatingWebhookConfiguration": "validating-patch.yaml",
    }
    for config in configs:
        patch = upstream / "jobset" / "webhook" / "patches" / patches[config["kind"]]
        _json_patch(config, yaml.safe_load(patch.read_text()))
    return _point_at(configs, ca, port, "jobset")


def kueue_webhooks(upstream: Path, ca: bytes, port: int) -> list[dict]:
    """Kueue's webhook configurations for its own objects, Jobs and JobSets."""
    configs = _docs(upstream / "kueue" / "webhook" / "manifests.yaml")
    for config in configs:
        kept = []
        for hook in config.get("webhooks") or []:
            groups = {g for rule in hook.get("rules") or [] for g in rule.get("apiGroups") or []}
            if groups <= KUEUE_GROUPS:
                if not groups & {"kueue.x-k8s.io"}:
                    hook["namespaceSelector"] = copy.deepcopy(KUEUE_SKIPPED_NAMESPACES)
                kept.append(hook)
        config["webhooks"] = kept
    return _point_at(configs, ca, port, "kueue")


def jobset_crds(upstream: Path) -> list[dict]:
    """JobSet's CRD as its release installs it."""
    return [d for p in sorted((upstream / "jobset" / "crd" / "bases").glob("*.yaml")) for d in _docs(p)]


def kueue_crds(upstream: Path, ca: bytes, port: int) -> list[dict]:
    """Kueue's CRDs, with the conversion webhook its kustomization enables
    (``config/components/crd/kustomization.yaml``: ``patches/webhook_in_*.yaml``) pointed at Kueue."""
    crd_dir = upstream / "kueue" / "crd"
    kustomization = yaml.safe_load((crd_dir / "kustomization.yaml").read_text())
    converted = set()
    for patch in kustomization.get("patches") or []:
        for doc in _docs(crd_dir / patch["path"]):
            if (doc.get("spec") or {}).get("conversion"):
                converted.add(doc["metadata"]["name"])
    crds = [d for r in kustomization["resources"] for d in _docs(crd_dir / r)]
    for crd in crds:
        if crd["metadata"]["name"] in converted:
            crd["spec"]["conversion"] = {
                "strategy": "Webhook",
                "webhook": {"clientConfig": _client_config(ca, port, "/convert"), "conversionReviewVersions": ["v1"]},
            }
    return crds
