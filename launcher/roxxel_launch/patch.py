"""A strategic-merge patch of a pod template, as ``kubectl patch --type strategic`` applies it.

Only the parts of Kubernetes' strategic merge that a pod template needs (from the
``patchMergeKey`` / ``patchStrategy`` markers of k8s.io/api/core/v1):

- mappings merge key by key; a ``null`` value deletes the key;
- lists whose items Kubernetes merges by a key (containers, initContainers and volumes by
  ``name``, env and volumeMounts by ``name`` / ``mountPath``, ports by ``containerPort``,
  imagePullSecrets by ``name``, tolerations are replaced) merge item by item: an item
  whose key matches is patched, a new one is appended, and an item
  ``{KEY: ..., "$patch": "delete"}`` removes the match;
- every other list, and every scalar, is replaced.

The patched template is validated after rendering like any other (strict schema check).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

# Field name -> merge key, for the lists Kubernetes merges (k8s.io/api/core/v1 types.go).
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
}
DIRECTIVE = "$patch"


def strategic_merge(original: Mapping, patch: Mapping) -> dict:
    """Returns ``original`` patched by ``patch``; neither is modified.

    Raises:
        ValueError: a patch that is not a mapping where one is needed, or an unknown
            ``$patch`` directive.
    """
    if not isinstance(patch, Mapping):
        raise ValueError(f"a patch of a mapping must be a mapping, got {type(patch).__name__}")
    out = copy.deepcopy(dict(original))
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif key in MERGE_KEYS and isinstance(value, list) and isinstance(out.get(key), list):
            out[key] = _merge_list(out[key], value, MERGE_KEYS[key], key)
        elif isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = strategic_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(_without_directives(value, key))
    return out


def _merge_list(items: list, patch: list, merge_key: str, field: str) -> list:
    out = copy.deepcopy(items)
    for entry in patch:
        if not isinstance(entry, Mapping) or merge_key not in entry:
            raise ValueError(f"every item of a {field} patch must be a mapping with {merge_key!r}")
        directive = entry.get(DIRECTIVE)
        if directive not in (None, "delete"):
            raise ValueError(f"{field}: unknown {DIRECTIVE} directive {directive!r} (only 'delete')")
        match = next(
            (i for i, item in enumerate(out) if isinstance(item, Mapping) and item.get(merge_key) == entry[merge_key]),
            None,
        )
        if directive == "delete":
            if match is not None:
                out.pop(match)
        elif match is None:
            out.append(_without_directives(entry, field))
        else:
            out[match] = strategic_merge(out[match], entry)
    return out


def _without_directives(value: Any, field: str) -> Any:
    if isinstance(value, Mapping):
        if DIRECTIVE in value:
            raise ValueError(f"{field}: {DIRECTIVE} applies to items of merged lists only")
        return {k: _without_directives(v, field) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_directives(v, field) for v in value]
    return value
