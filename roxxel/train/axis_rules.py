"""Partition specs of model variables on a mesh: their annotations, through logical axis rules.

A variable annotated with ``nnx.with_partitioning(init, ("embed", "mlp"))`` names one axis
per dimension. A name is either a mesh axis (``"fsdp"``) or a *logical* name that
``axis_rules`` maps to mesh axes, so that one model definition serves several layouts:

    AXIS_RULES = [("embed", "fsdp"), ("mlp", "tensor"), ("vocab", "tensor"), ("batch", ("data", "fsdp"))]

Resolution follows Flax Linen's ``logical_to_mesh_axes`` (and MaxText's lists of rules): a
name may have several rules, and the first whose mesh axes are all in the mesh and not yet
used by another dimension of the same variable wins; ``None`` (or no fitting rule) keeps the
dimension replicated. NNX's own rules (``flax/core/spmd.py``) keep only the last rule of a
name and fail on a mesh without its axis, which is why this is resolved here.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from jax.sharding import Mesh, PartitionSpec

from roxxel.exit_codes import ConfigValueError

AxisRules = Sequence[tuple[str, "str | tuple[str, ...] | None"]]
"""``(logical name, mesh axis | tuple of mesh axes | None)`` pairs, tried in order."""

__all__ = ["AxisRules", "check_rules", "mesh_spec"]


def check_rules(rules: AxisRules | None) -> tuple[tuple[str, tuple[str, ...] | None], ...]:
    """``rules`` as a tuple of ``(name, mesh axes or None)``.

    Raises:
        ConfigValueError: a rule that is not a ``(str, str | tuple[str] | None)`` pair.
    """
    out: list[tuple[str, tuple[str, ...] | None]] = []
    for rule in rules or ():
        if not (isinstance(rule, (tuple, list)) and len(rule) == 2 and isinstance(rule[0], str)):
            raise ConfigValueError(
                f"axis rule {rule!r} is not a (logical name, mesh axes) pair; write e.g. ('embed', 'fsdp')"
            )
        name, axes = rule
        if axes is None:
            out.append((name, None))
            continue
        axes = (axes,) if isinstance(axes, str) else tuple(axes)
        if not axes or not all(isinstance(a, str) for a in axes):
            raise ConfigValueError(f"axis rule {rule!r}: the mesh axes must be a name, a tuple of names or None")
        out.append((name, axes))
    return tuple(out)


def _resolve(name: str, mesh: Mesh, rules, used: set[str], where: str) -> tuple[str, ...]:
    """The mesh axes one annotated name stands for (``()``: replicated)."""
    candidates = [axes for n, axes in rules if n == name]
    if not candidates:
        if name in mesh.axis_names:
            if name in used:
                raise ConfigValueError(f"{where}: mesh axis {name!r} is named by two dimensions; name it once")
            return (name,)
        raise ConfigValueError(
            f"{where}: annotated axis {name!r} is neither an axis of the mesh {tuple(mesh.axis_names)} nor a "
            "logical name with a rule; pass axis_rules (e.g. [(" + repr(name) + ", 'fsdp')]) or annotate with mesh axes"
        )
    for axes in candidates:
        if axes is None:
            return ()
        if all(a in mesh.axis_names for a in axes) and not used.intersection(axes):
            return axes
    return ()


def mesh_spec(
    annotation: Any, shape: tuple[int, ...], mesh: Mesh, rules=(), where: str = "a variable"
) -> PartitionSpec:
    """The ``PartitionSpec`` on ``mesh`` of a variable annotated with ``annotation``.

    Args:
        annotation: the variable's ``out_sharding`` metadata (a tuple with one entry per
            dimension: a name, a tuple of names, or ``None``), or ``None`` for none.
        shape: the variable's shape; each sharded dimension must divide by its mesh axes' size.
        mesh: the device mesh.
        rules: :func:`check_rules`' output.
        where: the variable's path, for errors.

    Raises:
        ConfigValueError: a name neither on the mesh nor in the rules, a mesh axis used twice,
            more names than dimensions, or a dimension that does not divide over its axes.
    """
    if not annotation:
        return PartitionSpec()
    annotation = tuple(annotation)
    if len(annotation) > len(shape):
        raise ConfigValueError(f"{where}: annotated with {len(annotation)} axes {annotation} but has shape {shape}")
    used: set[str] = set()
    out: list[Any] = []
    for dim, entry in enumerate(annotation):
        names = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
        axes: list[str] = []
        for name in names:
            axes.extend(_resolve(name, mesh, rules, used | set(axes), where))
        used.update(axes)
        size = math.prod(mesh.shape[a] for a in axes)
        if shape[dim] % size:
            raise ConfigValueError(
                f"{where}: dimension {dim} of size {shape[dim]} does not divide over mesh axes {tuple(axes)} "
                f"({size} devices); pad it to a multiple of {size} or shard it along another axis"
            )
        out.append(None if not axes else axes[0] if len(axes) == 1 else tuple(axes))
    while out and out[-1] is None:
        out.pop()
    return PartitionSpec(*out)
