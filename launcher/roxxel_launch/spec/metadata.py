"""Labels and annotations of the job object itself (the JobSet, or the Indexed Job), as
opposed to the spec's ``labels`` (the object and its pods) and ``annotations`` (its pods).

Controllers and admission checks read some settings from the job object only: Kueue passes
its ``provreq.kueue.x-k8s.io/*`` annotations to a ProvisioningRequest, policy engines and
cost tools read its labels. Keys and values follow Kubernetes' syntax ("Labels and
Selectors", "Annotations": an optional DNS-subdomain prefix and a name of at most 63
characters; label values at most 63 characters of ``[A-Za-z0-9-_.]``); what roxxel-launch
sets itself is refused by :mod:`roxxel_launch.spec.owned`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from roxxel_launch import names
from roxxel_launch.spec.errors import _check
from roxxel_launch.spec.fields import _doc, _freeze


@dataclasses.dataclass(frozen=True)
class ObjectMetadata:
    """Labels and annotations of the JobSet / Job object (not its pods)."""

    labels: Mapping[str, str] = _doc("Labels of the JobSet / Job object only (not its pods).", default_factory=dict)
    annotations: Mapping[str, str] = _doc(
        "Annotations of the JobSet / Job object only (not its pods), e.g. Kueue's "
        "provreq.kueue.x-k8s.io/* ProvisioningRequest parameters (need queue).",
        default_factory=dict,
    )

    def __post_init__(self):
        for section in ("labels", "annotations"):
            for key, value in getattr(self, section).items():
                _check(f"{section}.{key}", names.qualified_name_problem(key))
                if section == "labels":
                    _check(f"{section}.{key}", names.label_value_problem(value))
            object.__setattr__(self, section, _freeze(getattr(self, section)))
