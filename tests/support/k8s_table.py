"""Server-side printing of the JobSet custom resource: the Table that ``kubectl get`` asks for.

``kubectl get`` without ``-o`` sends ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io``
and prints the rows the API server computed
(https://kubernetes.io/docs/reference/using-api/api-concepts/#receiving-resources-as-tables).
For a custom resource the columns are Name and the CRD's ``additionalPrinterColumns``
(https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#additional-printer-columns):
each cell is the value at the column's JSONPath (string columns printed as text, a missing
value as null), and each row carries the object as asked by ``includeObject`` (``Metadata``
by default). Built-in kinds are printed by Go code in a real server and are not simulated:
they are answered as lists, which kubectl prints with its default columns (Name, Age).
"""

from __future__ import annotations

import json
import re
from typing import Any

from support import k8s_schema

_FILTER = re.compile(r'\[\?\(@\.(\w+)=="([^"]*)"\)\]')


def wants_table(accept: str) -> bool:
    return "as=Table" in accept and "g=meta.k8s.io" in accept


def jsonpath(obj: Any, path: str) -> Any:
    """The value at a printer column's JSONPath: ``.a.b`` steps and ``[?(@.k=="v")]`` filters
    (the forms CRDs use); None when there is none."""
    node = obj
    for step in re.findall(r'\.\w+|\[\?\(@\.\w+=="[^"]*"\)\]', path):
        if step.startswith("."):
            node = node.get(step[1:]) if isinstance(node, dict) else None
        else:
            key, value = _FILTER.fullmatch(step).groups()
            node = (
                next((x for x in node if isinstance(x, dict) and x.get(key) == value), None)
                if isinstance(node, list)
                else None
            )
        if node is None:
            return None
    return node


def _columns() -> list[dict]:
    version = next(v for v in k8s_schema.jobset_crd()["spec"]["versions"] if v["name"] == k8s_schema.JOBSET_VERSION)
    return version.get("additionalPrinterColumns") or []


def _cell(column: dict, value: Any) -> Any:
    if value is None:
        return None
    if column["type"] == "string" and not isinstance(value, str):
        return json.dumps(value)  # printed as JSON text: 0, true
    return value


def table(objects: list[dict], resource_version: str, include_object: str | None) -> dict:
    """A ``meta.k8s.io/v1`` Table of JobSets."""
    columns = _columns()
    definitions = [
        {
            "name": "Name",
            "type": "string",
            "format": "name",
            "priority": 0,
            "description": "Name must be unique within a namespace.",
        }
    ]
    definitions += [
        {
            "name": c["name"],
            "type": c["type"],
            "format": c.get("format", ""),
            "description": c.get("description", ""),
            "priority": c.get("priority", 0),
        }
        for c in columns
    ]
    rows = []
    for obj in objects:
        row: dict[str, Any] = {
            "cells": [obj["metadata"]["name"]] + [_cell(c, jsonpath(obj, c["jsonPath"])) for c in columns]
        }
        if include_object == "Object":
            row["object"] = obj
        elif include_object != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj["metadata"],
            }
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": definitions,
        "rows": rows,
    }
