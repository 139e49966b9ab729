"""What the spec's dataclasses share: field documentation and checks of common values
(resource quantities, text, image references)."""

from __future__ import annotations

import dataclasses
import re
import types
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from roxxel_launch.spec.errors import SpecError

# Kubernetes stores replicas, parallelism, completions and most counts as int32.
INT32_MAX = 2**31 - 1

# A non-negative resource quantity (Kubernetes' Quantity grammar without a sign: a negative
# request or limit is refused by the API server only at submit time).
_QUANTITY = re.compile(r"\+?(\d+\.?\d*|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d+)?")
# The factor of each suffix (apimachinery's resource.Quantity: binary SI, decimal SI).
_SUFFIXES = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    **{s: Fraction(2 ** (10 * i)) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"), 1)},
}
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-/:@+]*")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_BAD_TEXT = re.compile(r"[\x00\ud800-\udfff]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _doc(text: str, **kwargs) -> Any:
    return dataclasses.field(metadata={"doc": text, **kwargs.pop("metadata", {})}, **kwargs)


def _check_quantity(field: str, quantity: str) -> None:
    if not _QUANTITY.fullmatch(quantity):
        raise SpecError(field, f"{quantity!r} is not a non-negative resource quantity", "Use e.g. '8', '500m', '32Gi'.")


def parse_quantity(quantity: str) -> Fraction:
    """The exact value of a non-negative Kubernetes resource quantity, in the resource's
    unit (cores for cpu, bytes for memory and storage): '500m' -> 1/2, '2Gi' -> 2147483648,
    '1e3' -> 1000.

    Raises:
        ValueError: ``quantity`` is not a non-negative quantity.
    """
    match = _QUANTITY.fullmatch(quantity) if isinstance(quantity, str) else None
    if match is None:
        raise ValueError(f"{quantity!r} is not a non-negative resource quantity")
    number, suffix = Fraction(match.group(1)), match.group(2) or ""
    if suffix[:1] in ("e", "E"):
        return number * Fraction(10) ** int(suffix[1:])
    return number * _SUFFIXES[suffix]


def _freeze(mapping: Mapping) -> Mapping:
    return types.MappingProxyType(dict(mapping))


def _one_of(obj: Any, fields: Sequence[str]) -> str:
    given = [f for f in fields if getattr(obj, f) is not None]
    if len(given) != 1:
        raise SpecError("", f"give exactly one of {', '.join(fields)} (got {', '.join(given) or 'none'})")
    return given[0]


def image_reference_problem(image: str) -> str | None:
    """Why ``image`` is not a pullable reference (``NAME[:TAG][@sha256:DIGEST]``), or None."""
    if not _IMAGE.fullmatch(image):
        return f"{image!r} is not an image reference"
    name, at, digest = image.partition("@")
    if at and not _DIGEST.fullmatch(digest):
        return f"{image!r}: the digest {digest!r} is not sha256: followed by 64 lowercase hex digits"
    if "@" in digest or not name or name.endswith((":", "/")):
        return f"{image!r} is not an image reference"
    return None


def image_is_pinned(image: str) -> bool:
    """Whether the image is pinned by digest (immutable) rather than named by a tag (mutable)."""
    return "@" in image
