"""What the simulated API server checks when an object is created: its schema, as a cluster would.

This is NOT the API server's code. It follows what the Kubernetes documentation says a
create goes through, for the kinds ``k8s_fake_server`` serves, in the same order:

1. Decoding, with the request's field validation
   (https://kubernetes.io/docs/reference/using-api/api-concepts/#field-validation):
   an unknown or duplicate field fails the request with ``400 BadRequest`` under
   ``fieldValidation=Strict``, is dropped with one ``Warning`` header each under ``Warn``
   (the server's default when the parameter is absent) and dropped silently under
   ``Ignore``. The message has the API server's shape: ``Job in version "v1" cannot be
   handled as a Job: strict decoding error: unknown field "spec.foo"``. For a built-in kind
   a value of the wrong JSON type also fails decoding (400, ``json: cannot unmarshal ...``;
   the Go type names in it are approximated).
2. Defaulting, for a custom resource: the ``default`` values of its CRD's structural schema
   (https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#defaulting).
   Built-in kinds are not defaulted here (their defaults live in Go code, not in a schema).
3. Validation, ``422 Invalid`` with one cause per problem and the message
   ``JobSet.jobset.x-k8s.io "NAME" is invalid: [FIELD: DETAIL, ...]``: required fields,
   types (custom resources), enums (``Unsupported value``), item and length bounds,
   patterns, and the CRD's CEL rules (``x-kubernetes-validations``,
   https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#validation-rules),
   evaluated with the ``cel-python`` package; transition rules (those that use ``oldSelf``)
   apply to updates only and are skipped on create, as the documentation says.

Schemas: the JobSet CRD of tests/fixtures/k8s (its ``openAPIV3Schema``), and for built-in
kinds the official OpenAPI definitions of Kubernetes :data:`KUBERNETES_VERSION` as the
``kubernetes-validate`` package ships them (JSON Schema converted back to OpenAPI v3 here,
which is also what :mod:`k8s_discovery` serves at ``/openapi/v3``). Go-coded rules that no
schema states (e.g. a Job's selector must match its template) are not checked.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

from support.paths import JOBSET_CRD

_SCHEMAS = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"


def _served_version(wanted: str = "1.32.0") -> str:
    """``wanted`` (the version of the kubectl here) when kubernetes-validate ships its schemas,
    else the newest version it ships."""
    shipped = [d.name[1 : -len("-local")] for d in _SCHEMAS.glob("v*-local")]
    if wanted in shipped or not shipped:
        return wanted
    return max(shipped, key=lambda v: tuple(int(x) for x in v.split(".")))


KUBERNETES_VERSION = _served_version()
JOBSET_GROUP, JOBSET_VERSION = "jobset.x-k8s.io", "v1alpha2"
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
# resource -> the OpenAPI definition of its kind (built-in kinds)
BUILTIN_DEFINITIONS = {
    "jobs": "io.k8s.api.batch.v1.Job",
    "pods": "io.k8s.api.core.v1.Pod",
    "services": "io.k8s.api.core.v1.Service",
    "networkpolicies": "io.k8s.api.networking.v1.NetworkPolicy",
}
JOBSET_DEFINITION = "io.x-k8s.jobset.v1alpha2.JobSet"
FIELD_VALIDATION = ("Strict", "Warn", "Ignore")


# ----------------------------------------------------------------------------- schemas


def _to_openapi(node: Any) -> Any:
    """kubernetes-validate's JSON Schema -> OpenAPI v3: ``type: [T, "null"]`` becomes
    ``type: T`` + ``nullable``; ``$ref``s point into ``#/components/schemas``."""
    if isinstance(node, list):
        return [_to_openapi(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _to_openapi(v) for k, v in node.items()}
    if isinstance(out.get("type"), list):
        types = [t for t in out["type"] if t != "null"]
        out["type"] = types[0] if len(types) == 1 else types
        if "null" in node["type"]:
            out["nullable"] = True
    if isinstance(out.get("$ref"), str):
        out["$ref"] = out["$ref"].replace("#/$defs/", "#/components/schemas/")
    return out


@functools.cache
def builtin_schemas() -> dict[str, dict]:
    """Every built-in definition of :data:`KUBERNETES_VERSION`, as OpenAPI v3 schemas by name."""
    defs = json.loads((_SCHEMAS / f"v{KUBERNETES_VERSION}-local" / "_definitions.json").read_text())
    return {name: _to_openapi(schema) for name, schema in defs["$defs"].items()}


@functools.cache
def jobset_crd() -> dict:
    return yaml.load(JOBSET_CRD.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@functools.cache
def jobset_schema() -> dict:
    """The JobSet's ``openAPIV3Schema`` (served version), with its group-version-kind."""
    version = next(v for v in jobset_crd()["spec"]["versions"] if v["name"] == JOBSET_VERSION)
    schema = copy.deepcopy(version["schema"]["openAPIV3Schema"])
    schema["x-kubernetes-group-version-kind"] = [{"group": JOBSET_GROUP, "version": JOBSET_VERSION, "kind": "JobSet"}]
    return schema


def schema_of(resource: str) -> dict:
    if resource == "jobsets":
        return jobset_schema()
    return builtin_schemas()[BUILTIN_DEFINITIONS[resource]]


# ----------------------------------------------------------------------------- checking


@dataclass
class Findings:
    """What a walk over an object found (paths as the API server writes them)."""

    unknown: list[str] = field(default_factory=list)  # field paths, for strict decoding
    decode: list[str] = field(default_factory=list)  # Go decoding errors (built-in kinds)
    causes: list[dict] = field(default_factory=list)  # 422 causes: reason, field, message

    def invalid(self, reason: str, path: str, body: str) -> None:
        self.causes.append({"reason": reason, "field": path, "message": body})


def _go_value(value: Any) -> str:
    """A value as field.Error prints it (``Invalid value: ...``)."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps("object" if isinstance(value, dict) else "array")
    return str(value)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return {str: "string", list: "array", dict: "object"}[type(value)]


def _type_ok(expected: str, value: Any) -> bool:
    actual = _json_type(value)
    return (
        actual == expected
        or (expected == "number" and actual == "integer")
        or (expected == "integer" and isinstance(value, float) and value.is_integer())
    )


class _Walker:
    def __init__(self, components: dict[str, dict], *, builtin: bool, cel: bool):
        self.components = components
        self.builtin = builtin  # built-in kinds decode (type errors are 400s); CRDs validate
        self.cel = cel
        self.found = Findings()

    def resolve(self, schema: dict) -> tuple[dict, str | None]:
        ref = schema.get("$ref")
        if ref is None:
            return schema, None
        name = ref.rsplit("/", 1)[-1]
        return self.components[name], name

    def walk(self, schema: dict, value: Any, path: str, go_struct: str) -> Any:
        """Checks ``value`` against ``schema``; returns it with unknown fields pruned and
        defaults applied (a copy)."""
        schema, name = self.resolve(schema)
        go_struct = (name or "").rsplit(".", 1)[-1] or go_struct
        if value is None:
            return value  # Go decodes null as the zero value; a CRD prunes it (see _object)
        if not self._type(schema, value, path, go_struct):
            return value
        self._bounds(schema, value, path)
        if isinstance(value, dict):
            value = self._object(schema, value, path, go_struct)
        elif isinstance(value, list) and "items" in schema:
            value = [self.walk(schema["items"], item, f"{path}[{i}]", go_struct) for i, item in enumerate(value)]
        if self.cel:
            self._rules(schema, value, path)
        return value

    def _type(self, schema: dict, value: Any, path: str, go_struct: str) -> bool:
        if schema.get("x-kubernetes-int-or-string"):
            allowed: list[str] = ["integer", "string"]
        elif "oneOf" in schema or "anyOf" in schema:
            allowed = [s.get("type") for s in schema.get("oneOf", schema.get("anyOf", []))]
        elif isinstance(schema.get("type"), list):
            allowed = schema["type"]
        elif schema.get("type"):
            allowed = [schema["type"]]
        else:
            return True
        if any(_type_ok(t, value) for t in allowed if t):
            return True
        actual = _json_type(value)
        if self.builtin:
            go_type = {
                "string": "string",
                "integer": "int32" if schema.get("format") == "int32" else "int64",
                "number": "float64",
                "boolean": "bool",
                "array": "[]",
                "object": "map[string]",
            }.get(allowed[0] or "", allowed[0] or "?")
            where = re.sub(r"\[\d+\]", "", path)
            self.found.decode.append(
                f"json: cannot unmarshal {'number' if actual in ('integer', 'number') else actual} "
                f"into Go struct field {go_struct}.{where} of type {go_type}"
            )
        else:
            self.found.invalid(
                "FieldValueTypeInvalid",
                path,
                f"Invalid value: {json.dumps(actual)}: {path} in body must be of "
                f"type {' or '.join(t for t in allowed if t)}: {json.dumps(actual)}",
            )
        return False

    def _bounds(self, schema: dict, value: Any, path: str) -> None:
        add = self.found.invalid
        if "enum" in schema and value not in schema["enum"] and path not in ("apiVersion", "kind"):
            supported = ", ".join(json.dumps(v) for v in schema["enum"])
            add("FieldValueNotSupported", path, f"Unsupported value: {_go_value(value)}: supported values: {supported}")
        if isinstance(value, list):
            if "maxItems" in schema and len(value) > schema["maxItems"]:
                add("FieldValueTooMany", path, f"Too many: {len(value)}: must have at most {schema['maxItems']} items")
            if "minItems" in schema and len(value) < schema["minItems"]:
                add(
                    "FieldValueInvalid",
                    path,
                    f"Invalid value: {len(value)}: {path} in body should have at least {schema['minItems']} items",
                )
        if isinstance(value, str):
            if "maxLength" in schema and len(value) > schema["maxLength"]:
                add("FieldValueTooLong", path, f"Too long: may not be more than {schema['maxLength']} bytes")
            if "minLength" in schema and len(value) < schema["minLength"]:
                add(
                    "FieldValueInvalid",
                    path,
                    f"Invalid value: {_go_value(value)}: {path} in "
                    f"body should be at least {schema['minLength']} chars long",
                )
            if "pattern" in schema and not re.search(schema["pattern"], value):
                add(
                    "FieldValueInvalid",
                    path,
                    f"Invalid value: {_go_value(value)}: {path} in body should match '{schema['pattern']}'",
                )
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if "minimum" in schema and value < schema["minimum"]:
                add(
                    "FieldValueInvalid",
                    path,
                    f"Invalid value: {value}: {path} in body should be greater than or equal to {schema['minimum']}",
                )
            if "maximum" in schema and value > schema["maximum"]:
                add(
                    "FieldValueInvalid",
                    path,
                    f"Invalid value: {value}: {path} in body should be less than or equal to {schema['maximum']}",
                )

    def _object(self, schema: dict, value: dict, path: str, go_struct: str) -> dict:
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        preserve = schema.get("x-kubernetes-preserve-unknown-fields")
        out = {}
        for key, item in value.items():
            at = f"{path}.{key}" if path else key
            if properties is not None and key in properties:
                sub = properties[key]
                if item is None and not self.builtin and not self.resolve(sub)[0].get("nullable"):
                    continue  # a CRD prunes null unless the field is nullable (then defaults)
                if not path and key == "metadata" and not self.builtin:
                    sub = {"$ref": f"#/components/schemas/{OBJECT_META}"}  # the root ObjectMeta
                out[key] = self.walk(sub, item, at, go_struct)
            elif isinstance(extra, dict):
                out[key] = self.walk(extra, item, at, go_struct)
            elif preserve or extra is True or (properties is None and extra is None):
                out[key] = item
            else:
                self.found.unknown.append(at)
        for key, sub in (properties or {}).items():
            if key not in out and "default" in sub and not self.builtin:
                out[key] = copy.deepcopy(sub["default"])
        for key in schema.get("required") or []:
            if out.get(key) is None:
                self.found.invalid("FieldValueRequired", f"{path}.{key}" if path else key, "Required value")
        return out

    def _rules(self, schema: dict, value: Any, path: str) -> None:
        for rule in schema.get("x-kubernetes-validations") or []:
            if "oldSelf" in rule["rule"]:
                continue  # a transition rule: updates only
            problem = cel_problem(rule["rule"], value)
            if problem is not None:
                message = rule.get("message") or f"failed rule: {rule['rule']}"
                if problem:
                    message = f"{problem} evaluating rule: {message}"
                self.found.invalid(
                    "FieldValueInvalid", path or "<nil>", f"Invalid value: {_go_value(value)}: {message}"
                )


def cel_problem(rule: str, value: Any) -> str | None:
    """None when the CEL ``rule`` holds for ``self`` = ``value``; "" when it is false; the
    evaluation error otherwise (a missing field, as the API server reports it)."""
    import celpy

    program = _cel_program(rule)
    try:
        result = program.evaluate({"self": celpy.json_to_cel(value)})
    except celpy.CELEvalError as err:
        return str(err.args[0]) if err.args else str(err)
    if isinstance(result, celpy.CELEvalError):
        return str(result.args[0]) if result.args else str(result)
    return None if bool(result) else ""


@functools.cache
def _cel_environment():
    import celpy

    return celpy.Environment()  # half a second to build (its parser): once per process


@functools.cache
def _cel_program(rule: str):
    environment = _cel_environment()
    return environment.program(environment.compile(rule))


def cel_available() -> bool:
    try:
        import celpy  # noqa: F401
    except ImportError:
        return False
    return True


# ----------------------------------------------------------------------------- the create


def duplicate_fields(raw: bytes) -> list[str]:
    """Field paths that occur twice in one JSON object of the request body."""
    found: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict:
        seen: set[str] = set()
        for key, _ in items:
            if key in seen:
                found.append(key)
            seen.add(key)
        return dict(items)

    json.loads(raw, object_pairs_hook=pairs)
    return found


@dataclass
class Admission:
    """The outcome of :func:`admit`: ``error`` (code, Status) or the object to store."""

    obj: dict | None = None
    warnings: list[str] = field(default_factory=list)
    error: tuple[int, dict] | None = None


def admit(resource: str, obj: dict, *, raw: bytes, field_validation: str | None, status_object) -> Admission:
    """Decode, default and validate ``obj`` (a create of ``resource``) as the API server does.

    ``status_object(code, reason, message, **details)`` builds the error answers.
    """
    mode = field_validation or "Warn"
    kind = obj.get("kind", "")
    api_version = obj.get("apiVersion", "")
    group = api_version.rsplit("/", 1)[0] if "/" in api_version else ""
    version = api_version.rsplit("/", 1)[-1]
    name = (obj.get("metadata") or {}).get("name", "")
    if mode not in FIELD_VALIDATION:
        return Admission(
            error=(
                400,
                status_object(
                    400, "BadRequest", f'fieldValidation must be one of "Ignore", "Warn", or "Strict", got "{mode}"'
                ),
            )
        )
    builtin = resource != "jobsets"
    components = builtin_schemas() if builtin else {**builtin_schemas(), JOBSET_DEFINITION: jobset_schema()}
    walker = _Walker(components, builtin=builtin, cel=not builtin and cel_available())
    go_kind = BUILTIN_DEFINITIONS.get(resource, kind).rsplit(".", 1)[-1]
    pruned = walker.walk(schema_of(resource), obj, "", go_kind)
    found = walker.found
    cannot = f'{kind} in version "{version}" cannot be handled as a {kind}'
    if found.decode:
        return Admission(error=(400, status_object(400, "BadRequest", f"{cannot}: {found.decode[0]}")))
    problems = [f'unknown field "{p}"' for p in found.unknown]
    problems += [f'duplicate field "{p}"' for p in duplicate_fields(raw)] if raw else []
    warnings: list[str] = []
    if problems and mode == "Strict":
        return Admission(
            error=(400, status_object(400, "BadRequest", f"{cannot}: strict decoding error: {', '.join(problems)}"))
        )
    if mode == "Warn":
        warnings = problems
    if found.causes:
        qualified = f"{kind}.{group}" if group else kind
        errors = [f"{c['field']}: {c['message']}" for c in found.causes]
        joined = errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]"
        return Admission(
            warnings=warnings,
            error=(
                422,
                status_object(
                    422,
                    "Invalid",
                    f'{qualified} "{name}" is invalid: {joined}',
                    name=name,
                    group=group,
                    kind=kind,
                    causes=found.causes,
                ),
            ),
        )
    return Admission(obj=pruned, warnings=warnings)


def assert_official(objects: list[dict], crd_schema: dict) -> None:
    """The offline checks a rendered manifest must pass (no API server): names and Pod Security,
    Kubernetes' own schemas (strict), the JobSet CRD's schema for a JobSet, then ``validate``."""
    from roxxel_launch import validate

    assert validate.check_objects(objects) == []
    assert validate.check_schemas(objects) == []
    for obj in objects:
        if obj["kind"] == "JobSet":
            assert validate.check_jobset_crd(obj, crd_schema) == []
    validate.validate(objects)
