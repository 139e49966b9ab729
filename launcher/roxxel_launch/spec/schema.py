"""The job spec's JSON schema, made from the dataclasses' type hints and field docs."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Any, Literal

from roxxel.sharding import FILL, MESH_AXES
from roxxel_launch.spec.accelerators import Accelerator
from roxxel_launch.spec.fields import INT32_MAX
from roxxel_launch.spec.loading import _key, _strip_optional, spec_to_dict
from roxxel_launch.spec.model import API_VERSION, KIND, JobSpec
from roxxel_launch.spec.pod import EnvFromSource, KeyRef
from roxxel_launch.spec.storage import DataMount, ExtraVolume


def _schema_of(tp: Any) -> dict:
    tp = _strip_optional(tp)
    origin = typing.get_origin(tp)
    if origin is Literal:
        return {"type": "string", "enum": list(typing.get_args(tp))}
    if tp is str:
        return {"type": "string"}
    if tp is bool:
        return {"type": "boolean"}
    if tp is int:
        return {"type": "integer", "minimum": -INT32_MAX - 1, "maximum": INT32_MAX}
    if tp is Any:
        return {}
    if origin is tuple:
        return {"type": "array", "items": _schema_of(typing.get_args(tp)[0])}
    if origin is Mapping:
        return {"type": "object", "additionalProperties": _schema_of(typing.get_args(tp)[1])}
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        properties, required = {}, []
        for f in dataclasses.fields(tp):
            prop = _schema_of(hints[f.name])
            prop["description"] = f.metadata.get("doc", "")
            if f.default is not dataclasses.MISSING:
                if f.default is not None:
                    prop["default"] = spec_to_dict(f.default)
            elif f.default_factory is dataclasses.MISSING:
                required.append(_key(f))
            properties[_key(f)] = prop
        schema = {
            "type": "object",
            "description": (tp.__doc__ or "").strip(),
            "properties": properties,
            "additionalProperties": False,
        }
        if required:
            schema["required"] = required
        if tp in (Accelerator, DataMount, EnvFromSource, KeyRef, ExtraVolume):
            schema["minProperties"] = schema["maxProperties"] = 1
        return schema
    raise TypeError(f"no schema for {tp!r}")


def spec_schema() -> dict:
    """A JSON-schema-like description of the job spec, for generated docs and editors."""
    schema = _schema_of(JobSpec)
    schema["title"] = f"{KIND} ({API_VERSION})"
    schema["properties"]["apiVersion"]["enum"] = [API_VERSION]
    schema["properties"]["kind"]["enum"] = [KIND]
    parallelism = schema["properties"]["parallelism"]
    parallelism["propertyNames"] = {"enum": list(MESH_AXES)}
    parallelism["additionalProperties"] = {"type": "integer", "minimum": FILL, "not": {"const": 0}}
    schema["properties"]["accelerator"]["oneOf"] = [{"type": "object"}, {"type": "string", "enum": ["cpu"]}]
    return schema
