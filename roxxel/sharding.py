"""The device mesh and batch sharding, defined once for the streamer and the Trainer.

Two kinds of mesh:

- :func:`make_mesh` builds the mesh users ask for: the named axes :data:`MESH_AXES`
  (``data``, ``fsdp``, ``tensor``, ``sequence``, outer to inner), each of the size a
  *parallelism* mapping gives (``{"fsdp": 4, "tensor": 2}``; one axis may be ``-1``: it
  fills; ``data`` fills when no axis does). With several slices (TPU multislice, or hosts
  joined by a slower network) the ``data`` axis spans the slices (DCN) and every other
  axis stays inside one slice (ICI), as MaxText's ``ici_*`` / ``dcn_*`` parallelism with
  its default of DCN data parallelism.
- :func:`default_mesh` is the mesh of the job: the layout the launcher passes in
  ``ROXXEL_PARALLELISM`` (the job spec's ``parallelism``) over ``ROXXEL_NUM_SLICES``
  slices; without that variable, today's default, a 1-D mesh named ``"data"`` over every
  device of every process (``jax.devices()`` order).

Batches (:func:`batch_sharding`) split their rows (axis 0) over the ``data`` and ``fsdp``
axes together and are replicated over ``tensor`` and ``sequence``; on a mesh with neither
axis, over its first axis. Each process's devices are contiguous along those axes, so
each process reads one run of rows (:func:`roxxel.data.stream.process_rows`).

Parsing and sizing are pure Python (the launcher checks a spec's ``parallelism`` with them
without loading JAX); JAX is imported on first call of a mesh function, so that importing
:mod:`roxxel.data` does not load it.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from roxxel.contract import ENV_NUM_SLICES, ENV_PARALLELISM
from roxxel.exit_codes import ConfigurationError, ConfigValueError

if TYPE_CHECKING:
    from jax.sharding import Mesh, NamedSharding

log = logging.getLogger("roxxel.sharding")

DATA_AXIS = "data"
"""Name of the data-parallel axis (the default mesh's only axis)."""
FSDP_AXIS = "fsdp"
"""Name of the fully-sharded data-parallel axis: batch rows and parameters are split over it."""
TENSOR_AXIS = "tensor"
"""Name of the tensor-parallel axis: parameters split over it, batches replicated."""
SEQUENCE_AXIS = "sequence"
"""Name of the sequence-parallel axis: batches replicated over it (the model splits activations)."""
MESH_AXES = (DATA_AXIS, FSDP_AXIS, TENSOR_AXIS, SEQUENCE_AXIS)
"""The axes of a :func:`make_mesh` mesh, outer (least communication: across slices) to inner
(most: inside a slice), the order ``jax.experimental.mesh_utils.create_device_mesh`` expects."""
BATCH_AXES = (DATA_AXIS, FSDP_AXIS)
"""The mesh axes a batch's rows are split over (together, ``data`` outer)."""
FILL = -1
"""The size of the one axis that takes what the others leave (MaxText's ``-1``)."""

_EXAMPLE = "fsdp=4,tensor=2"


def parse_parallelism(text: str, *, source: str = ENV_PARALLELISM) -> dict[str, int]:
    """Axis sizes from their compact text form, ``AXIS=SIZE`` entries separated by commas.

    ``"fsdp=4,tensor=2"`` -> ``{"fsdp": 4, "tensor": 2}``; ``"data=-1,fsdp=8"`` fills
    ``data``; ``""`` -> ``{}``. The format of ``ROXXEL_PARALLELISM``, which
    :func:`format_parallelism` writes.

    Raises:
        ConfigValueError: an entry that is not ``AXIS=INTEGER``, an axis named twice, or
            what :func:`check_parallelism` refuses; the message names ``source``.
    """
    sizes: dict[str, int] = {}
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        axis, eq, value = (part.strip() for part in entry.partition("="))
        try:
            size = int(value) if eq and axis else None
        except ValueError:
            size = None
        if size is None:
            raise ConfigValueError(
                f"{source}={text!r}: {entry!r} is not AXIS=SIZE; write e.g. {_EXAMPLE} (axes: {', '.join(MESH_AXES)})"
            )
        if axis in sizes:
            raise ConfigValueError(f"{source}={text!r}: axis {axis!r} is given twice; give each axis once")
        sizes[axis] = size
    try:
        check_parallelism(sizes)
    except ConfigValueError as err:
        raise ConfigValueError(f"{source}={text!r}: {err}") from None
    return sizes


def format_parallelism(parallelism: Mapping[str, int]) -> str:
    """The compact text form of axis sizes, in :data:`MESH_AXES` order: ``fsdp=4,tensor=2``.

    Raises:
        ConfigValueError: what :func:`check_parallelism` refuses.
    """
    check_parallelism(parallelism)
    return ",".join(f"{axis}={parallelism[axis]}" for axis in MESH_AXES if axis in parallelism)


def check_parallelism(parallelism: Mapping[str, int]) -> None:
    """Check axis sizes on their own (no device count): known axis names, integer sizes of
    at least 1 or :data:`FILL` (``-1``), at most one ``-1``.

    Raises:
        ConfigValueError: one line naming the axis and the fix.
    """
    for axis, size in parallelism.items():
        if axis not in MESH_AXES:
            raise ConfigValueError(f"unknown mesh axis {axis!r}; the axes are {', '.join(MESH_AXES)}")
        if isinstance(size, bool) or not isinstance(size, int) or (size < 1 and size != FILL):
            raise ConfigValueError(
                f"axis {axis!r} has size {size!r}; give a positive integer, or -1 for the axis that fills"
            )
    fills = [axis for axis, size in parallelism.items() if size == FILL]
    if len(fills) > 1:
        raise ConfigValueError(f"axes {' and '.join(fills)} are both -1; at most one axis fills what the others leave")


def axis_sizes(parallelism: Mapping[str, int] | None, device_count: int, num_slices: int = 1) -> dict[str, int]:
    """The size of every axis of :data:`MESH_AXES` for ``device_count`` devices in
    ``num_slices`` equal slices.

    Axes not given are 1, except ``data``, which fills when no axis is ``-1`` (so ``{}``
    and ``None`` mean pure data parallelism, and one layout serves any number of hosts and
    slices). The ``data`` axis spans the slices: it is a multiple of ``num_slices``, and
    the other axes together divide one slice's devices (MaxText's DCN data parallelism).

    Returns:
        ``{axis: size}`` for every axis of :data:`MESH_AXES`, in that order; the product
        is ``device_count``.

    Raises:
        ConfigValueError: what :func:`check_parallelism` refuses, a product that is not the
            device count, or a layout the slices cannot hold; one line naming the fix.
    """
    given = dict(parallelism or {})
    check_parallelism(given)
    if device_count < 1 or num_slices < 1:
        raise ConfigValueError(f"{device_count} devices in {num_slices} slices: both must be at least 1")
    if device_count % num_slices:
        raise ConfigValueError(
            f"{num_slices} slices cannot split {device_count} devices evenly; "
            "check the slice count (ROXXEL_NUM_SLICES, the job spec's num_slices)"
        )
    if FILL not in given.values() and DATA_AXIS not in given:
        given[DATA_AXIS] = FILL
    sizes = {axis: given.get(axis, 1) for axis in MESH_AXES}
    fixed = math.prod(size for size in sizes.values() if size != FILL)
    shown = " x ".join(f"{a}={s}" for a, s in sizes.items() if s not in (1, FILL)) or "1"
    fill = next((axis for axis, size in sizes.items() if size == FILL), None)
    if fill is None:
        if fixed != device_count:
            raise ConfigValueError(
                f"the mesh {shown} has {fixed} devices but there are {device_count}; "
                "make the sizes multiply to the device count, or give one axis -1 to fill"
            )
    else:
        if device_count % fixed:
            raise ConfigValueError(
                f"{shown} ({fixed} devices) does not divide the {device_count} devices, so {fill} "
                f"cannot fill the rest; use sizes whose product divides {device_count}"
            )
        sizes[fill] = device_count // fixed
    if sizes[DATA_AXIS] % num_slices:
        inner = " x ".join(f"{a}={sizes[a]}" for a in MESH_AXES[1:] if sizes[a] > 1) or "nothing"
        raise ConfigValueError(
            f"data={sizes[DATA_AXIS]} does not span the {num_slices} slices evenly: data is the axis "
            f"across slices, so it must be a multiple of {num_slices}, and {inner} must fit in one "
            f"slice of {device_count // num_slices} devices; shrink the inner axes"
        )
    return sizes


def make_mesh(
    parallelism: Mapping[str, int] | None = None,
    num_slices: int | None = None,
    devices: Sequence[Any] | None = None,
) -> Mesh:
    """A mesh with the axes :data:`MESH_AXES` (``data``, ``fsdp``, ``tensor``, ``sequence``),
    sized by ``parallelism`` (:func:`axis_sizes`), over ``devices``.

    Each slice's devices are placed by ``jax.experimental.mesh_utils.create_device_mesh``
    (on TPU it follows the physical torus; elsewhere it keeps the devices' order, by id on
    GPU), and the slices are stacked along ``data``: what
    ``mesh_utils.create_hybrid_device_mesh(ici_shape, dcn_shape=(num_slices, 1, 1, 1))``
    does with its granules (``slice_index`` on TPU; ``process_is_granule=True``
    elsewhere, one process per slice), here also for slices of several processes. Each
    process's devices are then contiguous along ``data`` x ``fsdp``, as the streamer needs;
    where the topology's order would interleave processes, the devices of each slice are
    put in process order instead (a warning says so). The axes are ``AxisType.Auto``, as
    ``jax.sharding.Mesh``'s default: ``jax.make_mesh`` now defaults to ``Explicit`` axes,
    on which a matmul over a sharded contracting dimension raises ``ShardingTypeError``
    (jax 0.9 changelog; seen with jax 0.10.2 in our training step).

    Args:
        parallelism: axis sizes, e.g. ``{"fsdp": 4, "tensor": 2}``; one may be ``-1``;
            missing axes are 1 and ``data`` fills (None: every device on ``data``).
        num_slices: slices the ``data`` axis spans. None: ``ROXXEL_NUM_SLICES`` when set
            (the launcher sets it in every pod), else the number of distinct
            ``slice_index`` values of the devices (TPU multislice), else 1. On CPU and GPU
            a slice is ``process_count / num_slices`` consecutive processes (one process
            alone may stand for several slices, each a run of its devices).
        devices: the devices (default ``jax.devices()``).

    Returns:
        A ``jax.sharding.Mesh`` of shape ``(data, fsdp, tensor, sequence)``.

    Raises:
        ConfigValueError: sizes :func:`axis_sizes` refuses; a slice count that does not
            divide the processes (CPU/GPU) or that disagrees with the TPU devices' slices.
    """
    import jax
    from jax.sharding import AxisType, Mesh

    devices = list(jax.devices() if devices is None else devices)
    if num_slices is None:
        num_slices = _env_num_slices(os.environ) or len({getattr(d, "slice_index", 0) for d in devices})
    sizes = axis_sizes(parallelism, len(devices), num_slices)
    array = _device_array(sizes, num_slices, devices)
    return Mesh(array, MESH_AXES, axis_types=(AxisType.Auto,) * len(MESH_AXES))


def _device_array(sizes: Mapping[str, int], num_slices: int, devices: list[Any]) -> Any:
    """The devices as an array of shape ``sizes`` (in :data:`MESH_AXES` order): each
    slice's block (:func:`_slice_devices`) stacked along ``data``."""
    import numpy as np

    slice_shape = (sizes[DATA_AXIS] // num_slices, *(sizes[a] for a in MESH_AXES[1:]))
    return np.concatenate([_slice_devices(slice_shape, group) for group in _slices(devices, num_slices)], axis=0)


def _slices(devices: list[Any], num_slices: int) -> list[list[Any]]:
    """The devices of each slice, in slice order: by ``slice_index`` on TPU multislice,
    else runs of consecutive processes (or of one process's devices)."""
    if num_slices == 1:
        return [devices]
    by_slice: dict[int, list[Any]] = {}
    for d in devices:
        by_slice.setdefault(getattr(d, "slice_index", 0), []).append(d)
    if len(by_slice) > 1 or devices[0].platform == "tpu":
        if len(by_slice) != num_slices:
            raise ConfigValueError(
                f"num_slices={num_slices} but the devices are in {len(by_slice)} slices (their slice_index); "
                f"set the job's num_slices (ROXXEL_NUM_SLICES) to {len(by_slice)}"
            )
        return [by_slice[key] for key in sorted(by_slice)]
    ordered = sorted(devices, key=lambda d: (d.process_index, d.id))
    processes = len({d.process_index for d in ordered})
    if processes > 1 and processes % num_slices:
        raise ConfigValueError(
            f"num_slices={num_slices} does not divide the {processes} processes: a slice is whole processes; "
            f"set the job's num_slices (ROXXEL_NUM_SLICES) to a divisor of {processes}"
        )
    per = len(ordered) // num_slices
    return [ordered[i * per : (i + 1) * per] for i in range(num_slices)]


def _slice_devices(shape: tuple[int, ...], devices: list[Any]) -> Any:
    """One slice's devices as an array of ``shape``: ``create_device_mesh``'s placement, or
    process order where that placement would give a process rows that are not contiguous."""
    import numpy as np
    from jax.experimental import mesh_utils

    try:
        array = mesh_utils.create_device_mesh(shape, devices, allow_split_physical_axes=True)
    except (ValueError, AssertionError, NotImplementedError) as err:
        raise ConfigValueError(
            f"cannot lay out a mesh of {dict(zip(MESH_AXES, shape))} per slice on these devices ({err}); "
            "pick sizes that follow the slice's topology"
        ) from None
    if _rows_contiguous(array):
        return array
    log.warning(
        "the topology's device order gives a process batch rows that are not contiguous on the mesh %s; "
        "using the devices in process order instead",
        dict(zip(MESH_AXES, shape)),
    )
    ordered = sorted(array.ravel(), key=lambda d: d.process_index)  # stable: keeps each process's own order
    return np.array(ordered, dtype=object).reshape(shape)


def _rows_contiguous(array: Any) -> bool:
    """Whether each process's devices hold one run of batch shards (``data`` x ``fsdp``
    positions, ``data`` outer) of a slice's device array."""
    import numpy as np

    shards: dict[int, set[int]] = {}
    fsdp = array.shape[1]
    for (d, f, *_), device in zip(np.ndindex(*array.shape), array.ravel()):
        shards.setdefault(device.process_index, set()).add(d * fsdp + f)
    return all(max(s) - min(s) + 1 == len(s) for s in shards.values())


def _env_num_slices(environ: Mapping[str, str]) -> int | None:
    """``ROXXEL_NUM_SLICES`` as a positive integer, None when unset or empty.

    Raises:
        ConfigValueError: a value that is not a positive integer (names the variable).
    """
    text = environ.get(ENV_NUM_SLICES, "").strip()
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigValueError(f"{ENV_NUM_SLICES}={text!r} is not a positive number of slices; give e.g. 2")
    return value


def default_mesh(environ: Mapping[str, str] | None = None) -> Mesh:
    """The job's mesh: :func:`make_mesh` of ``ROXXEL_PARALLELISM`` over ``ROXXEL_NUM_SLICES``
    slices when the launcher set the layout (the job spec's ``parallelism``), else every
    device of every process on ``data`` (``fsdp``, ``tensor`` and ``sequence`` of size 1).

    The mesh always has the four axes of :data:`MESH_AXES`, so a model annotated with mesh
    axis names (``("fsdp", None)``) runs unchanged where the layout leaves them at 1: on a
    laptop as on the pod.

    Args:
        environ: where to read the variables (default ``os.environ``).

    Raises:
        ConfigValueError: a malformed variable, or a layout the devices cannot hold (the
            message names the variable); a worker exits 78 on it.
    """
    env = os.environ if environ is None else environ
    text = env.get(ENV_PARALLELISM, "").strip()
    parallelism = parse_parallelism(text) if text else None
    num_slices = _env_num_slices(env)
    try:
        return make_mesh(parallelism, num_slices=num_slices)
    except ConfigValueError as err:
        named = [f"{ENV_PARALLELISM}={text!r}"] if text else []
        named += [f"{ENV_NUM_SLICES}={num_slices}"] if num_slices is not None else []
        raise ConfigValueError(f"{', '.join(named) or 'the default mesh'}: {err}") from None


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Rows of a batch split over the mesh's ``data`` and ``fsdp`` axes together (those of
    them it has, ``data`` outer), replicated over the others (``tensor``, ``sequence``); on
    a mesh with neither, over its first axis.

    Returns:
        ``NamedSharding(mesh, PartitionSpec(("data", "fsdp")))`` on a :func:`make_mesh`
        mesh, ``PartitionSpec("data")`` on the 1-D default one.
    """
    from jax.sharding import NamedSharding, PartitionSpec

    axes = tuple(a for a in BATCH_AXES if a in mesh.axis_names)
    if not axes:
        return NamedSharding(mesh, PartitionSpec(mesh.axis_names[0]))
    return NamedSharding(mesh, PartitionSpec(axes[0] if len(axes) == 1 else axes))


def default_batch_sharding() -> NamedSharding:
    """Rows sharded as :func:`batch_sharding` on :func:`default_mesh`.

    Returns:
        ``NamedSharding(Mesh(jax.devices(), ("data",)), PartitionSpec("data"))`` without
        ``ROXXEL_PARALLELISM``; rows over ``("data", "fsdp")`` of the job's mesh with it.
    """
    return batch_sharding(default_mesh())


class BatchShardingError(ConfigurationError, ValueError):
    """A global batch (or micro-batch) that does not split evenly over the data shards, or
    whose rows a process does not hold contiguously: the same on every attempt."""
