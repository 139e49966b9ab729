"""Differences between two JSON values, one readable line each (standard library only).

The neutral ground of a run's identity: :mod:`roxxel.data.identity` judges a resume with it
and :mod:`roxxel.train.checkpoint` stores and compares fingerprints with it, neither
importing the other.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["MAX_CHANGES_SHOWN", "describe_changes", "indented", "normalize_json", "short"]

MAX_CHANGES_SHOWN = 25
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def indented(lines: list[str]) -> str:
    """``lines`` indented, at most :data:`MAX_CHANGES_SHOWN` of them."""
    text = "\n".join(f"  {line}" for line in lines[:MAX_CHANGES_SHOWN])
    if len(lines) > MAX_CHANGES_SHOWN:
        text += f"\n  ... and {len(lines) - MAX_CHANGES_SHOWN} more"
    return text


def short(value: Any, width: int = 60) -> str:
    """``value`` as JSON, cut to ``width`` characters."""
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= width else text[: width - 3] + "..."


def _child(path: str, key: Any) -> str:
    if isinstance(key, str) and _IDENT.match(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key)}]"


def _same_scalar(a: Any, b: Any) -> bool:
    return a == b and isinstance(a, bool) == isinstance(b, bool) and (a is None) == (b is None)


def _diff(a: Any, b: Any, path: str, out: list[str]) -> None:
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for key in sorted(set(a) | set(b), key=str):
            sub = _child(path, key)
            if key not in b:
                out.append(f"{sub}: removed (was {short(a[key])})")
            elif key not in a:
                out.append(f"{sub}: added {short(b[key])}")
            else:
                _diff(a[key], b[key], sub, out)
    elif isinstance(a, list) and isinstance(b, list):
        for i in range(min(len(a), len(b))):
            _diff(a[i], b[i], f"{path}[{i}]", out)
        for i in range(len(b), len(a)):
            out.append(f"{path}[{i}]: removed (was {short(a[i])})")
        for i in range(len(a), len(b)):
            out.append(f"{path}[{i}]: added {short(b[i])}")
    elif not _same_scalar(a, b):
        out.append(f"{path or '<fingerprint>'}: {short(a)} -> {short(b)}")


def normalize_json(value: Any, what: str) -> Any:
    """``value`` as JSON would give it back (tuples -> lists, keys -> str).

    Raises:
        TypeError: ``value`` is not JSON-serialisable.
    """
    try:
        return json.loads(json.dumps(value, allow_nan=True))
    except (TypeError, ValueError) as err:
        raise TypeError(f"{what} must be JSON-serialisable (dicts, lists, str, numbers, bool, None): {err}") from err


def describe_changes(saved: Any, current: Any) -> list[str]:
    """List the differences between two JSON-like values, one readable line each.

    Paths use ``.key`` for identifier keys, ``["key"]`` otherwise and ``[i]`` for list
    items: ``"phases[1].batch_size: 16 -> 32"``, ``"datasets.web: removed (was ...)"``,
    ``"phases[2]: added {...}"``. Both values are first normalised as JSON (tuples become
    lists). ``True`` and ``1`` differ; ``1`` and ``1.0`` do not.

    Args:
        saved: the old value (from a checkpoint).
        current: the new value.

    Returns:
        The lines, in key order; empty when the values are equal.

    Raises:
        TypeError: either value is not JSON-serialisable.
    """
    out: list[str] = []
    _diff(normalize_json(saved, "saved"), normalize_json(current, "current"), "", out)
    return out
