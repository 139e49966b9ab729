"""What one step holds besides the arrays: the names of its two Orbax items and the ``run``
record (layout in :mod:`roxxel.train.checkpoint`), built from the caller's metrics."""

from __future__ import annotations

import datetime
import numbers
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from roxxel._version import __version__
from roxxel.train.checkpoint.fingerprint import normalize_json
from roxxel.train.digest import array_checksums

STATE_ITEM = "state"
"""Name of the composite item holding model and optimizer variables."""
RUN_ITEM = "run"
"""Name of the composite item holding the run's JSON record."""
RUN_FORMAT = 1
"""Version of the ``run`` item's layout."""


def _json_scalar(value: Any, name: str) -> Any:
    """A metric value as a plain Python scalar (numbers, 0-d / 1-element arrays, str, bool)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, (np.ndarray, np.generic, jax.Array)) and np.size(value) == 1:
        item = np.asarray(value).reshape(()).item()
        return item if isinstance(item, (bool, int, float)) else float(item)
    raise TypeError(
        f"metric {name!r} must be a number, a one-element array, a str, a bool or None; got {type(value).__name__}"
    )


def json_metrics(metrics: Mapping[str, Any] | None) -> dict[str, Any]:
    """``metrics_dict`` as JSON scalars.

    Raises:
        TypeError: not a mapping, or a value that is not a scalar.
    """
    if metrics is None:
        return {}
    if not isinstance(metrics, Mapping):
        raise TypeError(f"metrics_dict must be a mapping of names to numbers, got {type(metrics).__name__}")
    return {str(k): _json_scalar(v, str(k)) for k, v in metrics.items()}


def check_tokens(tokens_consumed: Any) -> int | None:
    """``tokens_consumed`` as an int, or None.

    Raises:
        ValueError: not an int >= 0.
    """
    if tokens_consumed is None:
        return None
    if isinstance(tokens_consumed, bool) or not isinstance(tokens_consumed, numbers.Integral) or tokens_consumed < 0:
        raise ValueError(f"tokens_consumed must be an int >= 0 or None, got {tokens_consumed!r}")
    return int(tokens_consumed)


def run_record(
    step: int, tokens_consumed: int | None, metrics: dict[str, Any], fingerprint: Any, settings: Mapping[str, Any]
) -> dict[str, Any]:
    """The ``run`` item of ``step`` before its arrays are known (:func:`seal` adds them)."""
    return {
        "format": RUN_FORMAT,
        "step": step,
        "tokens_consumed": tokens_consumed,
        "metrics": metrics,
        "fingerprint": fingerprint,
        "roxxel_version": __version__,
        "process_count": jax.process_count(),
        "settings": normalize_json(settings, "settings"),
    }


def seal(run: dict[str, Any], pure: Any) -> None:
    """Add the arrays' checksums (:mod:`roxxel.train.digest`) and the UTC time of the save (ISO 8601)."""
    run["checksums"] = array_checksums(pure)
    run["saved_at"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
