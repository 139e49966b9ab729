"""From YAML text and ``--set`` overrides to a validated :class:`JobSpec`, and back to data.

Errors name the field, the line and column of malformed YAML, and where a bad value came
from: the spec file or the ``--set`` that wrote it.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import re
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Union

import yaml

from roxxel_launch.spec.errors import SpecError, _Problems, _within
from roxxel_launch.spec.fields import _BAD_TEXT, INT32_MAX
from roxxel_launch.spec.model import API_VERSION, KIND, JobSpec

# A spec file is at most this many bytes: the whole spec is stored in one annotation and
# Kubernetes refuses more than 256 KiB of annotations per object (JSON escaping can triple
# non-ASCII text, so 64 KiB of YAML always fits).
MAX_SPEC_BYTES = 64 * 1024
# Deepest nesting of mappings and lists a spec may have (the real spec nests about 6 deep;
# the cap keeps a hostile file from exhausting the parser's recursion).
MAX_SPEC_DEPTH = 32


def _key(f: dataclasses.Field) -> str:
    return f.metadata.get("key", f.name)


def _is_optional(tp: Any) -> bool:
    return typing.get_origin(tp) in (Union, types.UnionType) and type(None) in typing.get_args(tp)


def _strip_optional(tp: Any) -> Any:
    if _is_optional(tp):
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        return inner
    return tp


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _convert(tp: Any, value: Any, path: str) -> Any:
    if _is_optional(tp):
        return None if value is None else _convert(_strip_optional(tp), value, path)
    origin = typing.get_origin(tp)
    if origin is Literal:
        choices = typing.get_args(tp)
        if value not in choices:
            raise SpecError(path, f"{value!r} is not allowed", f"Use one of {', '.join(choices)}.")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise SpecError(path, f"must be a string, got {_type_name(value)} {value!r}", "Quote the value in YAML.")
        if _BAD_TEXT.search(value):
            raise SpecError(path, "contains a NUL character or a lone surrogate, which is not text")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise SpecError(path, f"must be true or false, got {_type_name(value)} {value!r}")
        return value
    if tp is Any:
        return _plain(value, path)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(path, f"must be an integer, got {_type_name(value)} {value!r}")
        if not -INT32_MAX - 1 <= value <= INT32_MAX:
            raise SpecError(
                path,
                f"{value} does not fit in the 32-bit integer Kubernetes stores",
                f"Use a value between 0 and {INT32_MAX}.",
            )
        return value
    if origin is tuple:
        if not isinstance(value, list):
            raise SpecError(path, f"must be a list, got {_type_name(value)} {value!r}")
        item = typing.get_args(tp)[0]
        return tuple(_convert(item, v, f"{path}[{i}]") for i, v in enumerate(value))
    if origin is Mapping:
        if not isinstance(value, dict):
            raise SpecError(path, f"must be a mapping, got {_type_name(value)} {value!r}")
        key_type, value_type = typing.get_args(tp)
        return {_convert(key_type, k, path): _convert(value_type, v, f"{path}.{k}") for k, v in value.items()}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _build(tp, value, path)
    raise TypeError(f"no converter for {tp!r} at {path}")


def _plain(value: Any, path: str) -> Any:
    """A free-form value (affinity, pod_patch): strings, integers, booleans, null, lists and
    string-keyed mappings, returned as plain data; the schema check comes after rendering."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise SpecError(path, f"key {k!r} must be a string")
            out[_convert(str, k, path)] = _plain(v, f"{path}.{k}")
        return out
    if isinstance(value, list):
        return [_plain(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, str):
        return _convert(str, value, path)
    if isinstance(value, int) and not isinstance(value, bool):
        return _convert(int, value, path)
    if value is None or isinstance(value, bool):
        return value
    raise SpecError(
        path, f"a {_type_name(value)} cannot be placed in a manifest", "Write numbers as integers or quoted strings."
    )


def _build(cls: type, data: Any, path: str) -> Any:
    coerce = getattr(cls, "_coerce", None)
    if coerce is not None:
        data = coerce(data)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SpecError(path, f"must be a mapping, got {_type_name(data)} {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {_key(f): f for f in dataclasses.fields(cls)}
    # Every field is checked on its own and all problems are reported together. The checks of
    # the object as a whole (its __post_init__) run when every known field converted and every
    # required one is there: an unknown field alone does not hide them.
    unknown = []
    meant = set()  # fields an unknown key probably meant: not reported missing as well
    for key in data:
        if key not in fields:
            close = _meant_field(str(key), list(fields))
            meant.update(close)
            fix = f"Did you mean {close[0]!r}?" if close else f"Valid fields: {', '.join(fields)}."
            unknown.append(SpecError(f"{path}.{key}" if path else str(key), "unknown field", fix))
    problems = _Problems()
    kwargs, missing = {}, False
    for key, f in fields.items():
        sub = f"{path}.{key}" if path else key
        if key in data:
            with problems.check():
                kwargs[f.name] = _convert(hints[f.name], data[key], sub)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            missing = True
            if key not in meant:
                problems.errors.append(SpecError(sub, "is required", f"Add it: {f.metadata.get('doc', '')}"))
    built = None
    if not problems.errors and not missing:
        with problems.check(), _within(path):
            built = cls(**kwargs)
    if unknown or problems.errors:
        raise SpecError.joined(unknown + problems.errors)
    return built


def _meant_field(key: str, fields: list[str]) -> list[str]:
    """The field an unknown key most likely meant (``[]``: none): the longest field it contains
    (``queue`` for ``queue_name``), else the closest spelling."""
    contained = [f for f in fields if len(f) >= 4 and f in key]
    return [max(contained, key=len)] if contained else difflib.get_close_matches(key, fields, n=1)


def _type_at(path: Sequence[str]) -> Any:
    """The declared type of the field at a dotted path, or None if there is no such field."""
    tp: Any = JobSpec
    for part in path:
        tp = _strip_optional(tp)
        if tp is Any:  # inside a free-form value (pod_patch, affinity): everything below is too
            return Any
        if dataclasses.is_dataclass(tp):
            fields = {_key(f): f for f in dataclasses.fields(tp)}
            if part not in fields:
                return None
            tp = typing.get_type_hints(tp)[fields[part].name]
        elif typing.get_origin(tp) is Mapping:
            tp = typing.get_args(tp)[1]
        else:
            return None
    return _strip_optional(tp)


def apply_overrides(data: Mapping, overrides: Sequence[str]) -> dict:
    """Applies ``key.path=value`` overrides to a raw spec mapping; returns a new mapping.

    The value's type follows the field: strings are taken verbatim (``--set env.X=007`` keeps
    ``007``), integers are parsed, and lists or mappings are read as YAML flow text
    (``--set 'command=[python, train.py]'``); inside a free-form field (``pod_patch``,
    ``affinity``) every value is YAML, as it would be in the spec file.
    """
    out, problems = _overridden(data, overrides)
    problems.raise_any()
    return out


def _overridden(data: Mapping, overrides: Sequence[str]) -> tuple[dict, _Problems]:
    """The mapping with every valid override applied, and the problems of the others."""
    out = copy.deepcopy(dict(data))
    problems = _Problems()
    for override in overrides:
        with problems.check():
            _apply_override(out, override)
    return out, problems


def _apply_override(out: dict, override: str) -> None:
    """Applies one ``key.path=value`` to ``out`` in place (nothing changes when it raises)."""
    path, eq, text = override.partition("=")
    # Keys such as nvidia.com/gpu contain dots: write them as nvidia\.com/gpu.
    parts = [p.replace("\\.", ".") for p in re.split(r"(?<!\\)\.", path)]
    if not eq or not all(parts):
        raise SpecError(
            "--set", f"{override!r} is not key.path=value", "Write e.g. --set accelerator.tpu.topology=4x4."
        )
    tp = _type_at(parts)
    value: Any
    if tp is Any:  # free-form (pod_patch, affinity): a YAML value, as in the spec file
        value = _override_yaml(text, path)
    elif tp is str or typing.get_origin(tp) is Literal or tp is None:
        value = text
    elif tp is int:
        try:
            value = int(text)
        except ValueError:
            raise SpecError(path, f"{text!r} is not an integer") from None
    elif tp is bool:
        if text.lower() not in ("true", "false"):
            raise SpecError(path, f"{text!r} is not true or false")
        value = text.lower() == "true"
    else:
        value = _override_yaml(text, path)
    node = out
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise SpecError(
                ".".join(parts[: i + 1]),
                f"is a {_type_name(child)}, not a mapping",
                f"Set the whole field instead: --set {'.'.join(parts[: i + 1])}=...",
            )
        node = child
    node[parts[-1]] = value


def _override_yaml(text: str, path: str) -> Any:
    """The YAML value of ``--set path=text``; an error names the field (so, the --set)."""
    try:
        return parse_yaml(text, f"--set {path}")
    except SpecError as err:
        raise SpecError(path, err.problem.removeprefix(f"--set {path}: "), err.fix) from None


def spec_from_dict(data: Any, overrides: Sequence[str] = ()) -> JobSpec:
    """Validates a raw mapping (e.g. parsed YAML) plus overrides into a JobSpec."""
    if not isinstance(data, dict):
        raise SpecError(
            "",
            f"a job spec must be a mapping, got {_type_name(data)}",
            f"Start the file with apiVersion: {API_VERSION} and kind: {KIND}.",
        )
    out, problems = _overridden(data, overrides)
    with problems.check():
        spec = _build(JobSpec, out, "")
    problems.raise_any()
    return spec


class _SpecYAMLError(yaml.MarkedYAMLError):
    """Valid YAML that a job spec still refuses (duplicate keys, aliases, deep nesting)."""


class _SpecLoader(yaml.SafeLoader):
    """YAML's safe loader, stricter: no duplicate keys, no aliases, bounded nesting.

    PyYAML keeps the last of two equal keys silently, expands aliases (a small file can
    name a huge tree) and composes nested nodes recursively; a spec needs none of these.
    """

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise _SpecYAMLError(
                None, None, "aliases (*name) are not allowed in a job spec; write the value out", event.start_mark
            )
        self._depth += 1
        try:
            if self._depth > MAX_SPEC_DEPTH:
                raise _SpecYAMLError(
                    None, None, f"nested more than {MAX_SPEC_DEPTH} levels deep", self.peek_event().start_mark
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, (str, int, float, bool)) or key is None:
                if key in seen:
                    raise _SpecYAMLError(None, None, f"duplicate key {key!r}", key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _position(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "unknown position"


def parse_yaml(text: str, source: str) -> Any:
    """Parses YAML text with :class:`_SpecLoader`; every failure is one SpecError line.

    Raises:
        SpecError: syntax errors, duplicate keys, aliases and too deep nesting, naming
            ``source`` and the line and column (1-based).
    """
    try:
        return yaml.load(text, Loader=_SpecLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        what = " ".join(str(p) for p in (err.context, err.problem) if p)
        kind = "" if isinstance(err, _SpecYAMLError) else "not valid YAML: "
        raise SpecError("", f"{source}: {_position(mark)}: {kind}{' '.join(what.split())}") from None
    except yaml.YAMLError as err:
        raise SpecError("", f"{source}: not valid YAML: {' '.join(str(err).split())}") from None


def read_spec_text(path: str | Path) -> str:
    """Reads a spec file as UTF-8 text of at most :data:`MAX_SPEC_BYTES` bytes.

    Raises:
        SpecError: the file is unreadable, too large or not UTF-8 (with the line and column
            of the first bad byte).
    """
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_SPEC_BYTES + 1)
    except OSError as err:
        raise SpecError("", f"{path}: cannot read the job spec: {err.strerror or err}") from None
    if len(raw) > MAX_SPEC_BYTES:
        raise SpecError(
            "",
            f"{path}: the job spec is larger than {MAX_SPEC_BYTES // 1024} KiB",
            "The whole spec is stored in one annotation (Kubernetes allows 256 KiB of "
            "annotations); move large values into a ConfigMap and use env_from.",
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        column = err.start - (raw.rfind(b"\n", 0, err.start) + 1) + 1
        raise SpecError(
            "",
            f"{path}: line {line}, column {column}: byte 0x{raw[err.start]:02x} is not UTF-8",
            "Save the file as UTF-8.",
        ) from None


def load_spec(path: str | Path, overrides: Sequence[str] = ()) -> JobSpec:
    """Reads a YAML job spec file and applies ``--set`` overrides.

    Raises:
        SpecError: one line naming the file, and the position for malformed YAML.
    """
    data = parse_yaml(read_spec_text(path), str(path))
    try:
        return spec_from_dict(data, overrides)
    except SpecError as err:

        def located(e: SpecError) -> SpecError:
            source = _source_of(e.field, overrides, path)
            return SpecError(e.field, f"{e.problem} ({source})" if source else e.problem, e.fix)

        raise err.mapped(located) from err


def _source_of(field: str, overrides: Sequence[str], path: str | Path) -> str:
    """Where the value of ``field`` came from: the last ``--set`` that wrote it, a field around
    it (``command`` for ``command[3]``) or one inside it (``accelerater.tpu.type`` for an unknown
    ``accelerater``), else the spec file ("" for a malformed --set, whose message quotes it)."""
    if field == "--set":
        return ""
    for override in reversed(overrides):
        key = override.partition("=")[0].replace("\\.", ".")
        if field == key or field.startswith((key + ".", key + "[")) or key.startswith(field + "."):
            return f"from --set {override}"
    return f"in {path}"


def spec_to_dict(spec: Any) -> Any:
    """The spec as plain data with YAML keys, omitting unset optional fields."""
    if dataclasses.is_dataclass(spec):
        return {
            _key(f): spec_to_dict(getattr(spec, f.name))
            for f in dataclasses.fields(spec)
            if getattr(spec, f.name) is not None
        }
    if isinstance(spec, tuple):
        return [spec_to_dict(v) for v in spec]
    if isinstance(spec, Mapping):
        return {k: spec_to_dict(v) for k, v in spec.items()}
    return spec
