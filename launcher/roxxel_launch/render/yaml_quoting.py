"""The templates' jinja2 environment, and the ``q`` filter that writes every value they place.

``q`` writes a value as JSON (valid YAML) with every character that YAML could read as
structure, a line break or non-printable escaped, so no string can change the shape of the
output. The environment's ``finalize`` hook refuses any ``{{ ... }}`` that did not go through
``q``.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import re
from collections.abc import Mapping
from typing import Any

import jinja2

TEMPLATE_PACKAGE = "roxxel_launch.templates"

# Characters written as-is inside a double-quoted scalar: printable ASCII except '"' and
# '\', and printable non-ASCII except YAML line breaks (U+2028/9), BOM and surrogates.
_NEEDS_ESCAPE = re.compile(
    r"[^\x20\x21\x23-\x5b\x5d-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd"
    r"\U00010000-\U0010ffff]"
)


class _Quoted(str):
    """Text produced by the ``q`` filter; the only kind of value a template may print."""


def _escape(match: re.Match) -> str:
    char = match.group()
    if char == '"':
        return '\\"'
    if char == "\\":
        return "\\\\"
    if "\ud800" <= char <= "\udfff":
        raise ValueError("a lone surrogate cannot be written to a manifest")
    return f"\\u{ord(char):04x}"


def quote(value: Any) -> _Quoted:
    """Writes a value as JSON flow text that YAML reads back as exactly that value.

    Raises:
        TypeError: a value that is not a string, number, bool, None, list or mapping of them.
        ValueError: a string holding a lone surrogate.
    """
    if isinstance(value, str):
        return _Quoted('"' + _NEEDS_ESCAPE.sub(_escape, value) + '"')
    if value is None or isinstance(value, (bool, int)):
        return _Quoted(json.dumps(value))
    if isinstance(value, (list, tuple)):
        return _Quoted("[" + ", ".join(quote(v) for v in value) + "]")
    if isinstance(value, Mapping):
        return _Quoted("{" + ", ".join(f"{quote(k)}: {quote(v)}" for k, v in value.items()) + "}")
    raise TypeError(f"cannot place a {type(value).__name__} in a manifest: {value!r}")


def _finalize(value: Any) -> Any:
    if not isinstance(value, _Quoted):
        raise jinja2.TemplateError(f"template printed {value!r} without the q filter")
    return value


def _nest(text: str, width: int) -> str:
    pad = " " * width
    return "".join(pad + line if line.strip() else line for line in text.splitlines(True))


def load_template(name: str) -> str:
    """The text of template ``name`` in :data:`TEMPLATE_PACKAGE`."""
    return importlib.resources.files(TEMPLATE_PACKAGE).joinpath(name).read_text(encoding="utf-8")


@functools.cache
def environment() -> jinja2.Environment:
    """The one jinja2 environment (strict: undefined names and unquoted output raise)."""
    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(load_template),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        finalize=_finalize,
    )
    env.filters["q"] = quote
    env.filters["nest"] = _nest
    return env
