"""Putting one process's host batch on its devices: what ``jax.device_put(rows, sharding)`` does, cheaper per batch.

``jax.device_put`` runs several layers of Python per call (tree flattening, dtype and
sharding checks, dispatch) before one C++ call makes one transfer per device; on a CPU
backend those layers cost more than reading the batch (about 100 us of a 32x2048 batch's
~200 us on 2 cores). A stream puts arrays of one shape and dtype on one sharding over and
over, so :class:`Placer` works out the per-device slices once per shape and then makes the
C++ call directly (JAX's own ``batched_device_put``, the function ``device_put`` ends in).

In a job of several processes each one holds only its rows of the global batch, and the
public path is ``jax.make_array_from_process_local_data``, which costs more Python still
(about 0.18 ms a batch more than the single-process path). The same call builds the global
array from this process's per-device slices: each addressable device's slice of the global
batch, shifted by this process's first row, taken from the local rows.

That function is not public JAX API: a Placer uses it only when it can import it, when the
dtype needs no canonicalisation, and after checking, on the first batch of each shape, that
it gives exactly what the public path gives (``jax.device_put``, or
``jax.make_array_from_process_local_data`` in a job of several processes: values, sharding,
shape, the device and index of every shard). Otherwise it calls the public path: a JAX
upgrade can make it slower, never wrong.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

log = logging.getLogger("roxxel.data")

_batched_device_put: Any
try:  # the C++ call at the end of jax.device_put (absent or changed in some JAX version: device_put is used)
    from jax._src.interpreters.pxla import batched_device_put as _batched_device_put
except Exception:  # noqa: BLE001 - any failure to import means "use the public path"
    _batched_device_put = None


class Placer:
    """``placer(rows)`` is ``jax.device_put(rows, sharding)``, and ``placer(rows, global_shape,
    first_row)`` is ``jax.make_array_from_process_local_data(sharding, rows, global_shape)``
    for the rows ``[first_row, first_row + len(rows))`` of the global batch that this process
    holds (see the module docstring).

    Args:
        sharding: the batch's ``jax.sharding.Sharding``.
    """

    def __init__(self, sharding):
        self.sharding = sharding
        self._plans: dict[tuple, Any] = {}  # (shape, dtype, global shape, first row) -> (aval, slices, devices) or None

    def __call__(self, rows: np.ndarray, global_shape: tuple[int, ...] | None = None, first_row: int = 0) -> Any:
        key = (rows.shape, rows.dtype, global_shape, first_row)
        plan = self._plans.get(key, False)
        if plan is False:
            plan = self._plans[key] = self._plan(rows, global_shape, first_row)
            if plan is not None:
                return self._checked(key, plan, rows, global_shape)
        if plan is None:
            return self._public(rows, global_shape)
        aval, slices, devices = plan
        return _batched_device_put(aval, self.sharding, [rows[i] for i in slices], devices)

    def _public(self, rows: np.ndarray, global_shape: tuple[int, ...] | None) -> Any:
        import jax

        if global_shape is None:
            return jax.device_put(rows, self.sharding)
        return jax.make_array_from_process_local_data(self.sharding, rows, global_shape)

    def _plan(
        self, rows: np.ndarray, global_shape: tuple[int, ...] | None, first_row: int
    ) -> tuple[Any, list, list] | None:
        import jax

        if (
            _batched_device_put is None
            or not isinstance(rows, np.ndarray)
            or jax.dtypes.canonicalize_dtype(rows.dtype) != rows.dtype
        ):
            return None
        shape = rows.shape if global_shape is None else tuple(global_shape)
        if shape[1:] != rows.shape[1:]:
            return None  # a sharding that splits more than rows over processes
        index_map = self.sharding.addressable_devices_indices_map(shape)
        slices = []
        for index in index_map.values():
            start, stop, step = index[0].indices(shape[0]) if index else (0, shape[0], 1)
            start, stop = start - first_row, stop - first_row
            if step != 1 or start < 0 or stop > rows.shape[0]:
                return None  # a device's rows outside this process's: only the public path knows
            slices.append((slice(start, stop), *index[1:]))
        return jax.core.ShapedArray(shape, rows.dtype), slices, list(index_map)

    def _checked(
        self, key: tuple, plan: tuple[Any, list, list], rows: np.ndarray, global_shape: tuple[int, ...] | None
    ):
        """The first batch of a shape: placed both ways; the direct call is kept only if it
        matches the public path."""
        want = self._public(rows, global_shape)
        try:
            aval, slices, devices = plan
            got = _batched_device_put(aval, self.sharding, [rows[i] for i in slices], devices)
            same = (
                got.sharding == want.sharding
                and got.shape == want.shape
                and got.dtype == want.dtype
                and [(s.device, s.index) for s in got.addressable_shards]
                == [(s.device, s.index) for s in want.addressable_shards]
                and all(
                    np.array_equal(np.asarray(a.data), np.asarray(b.data))
                    for a, b in zip(got.addressable_shards, want.addressable_shards)
                )
            )
        except Exception as e:  # noqa: BLE001 - a changed private API: fall back to the public one
            log.debug("direct placement unavailable (%s: %s); using the public path", type(e).__name__, e)
            same = False
        if not same:
            self._plans[key] = None
        return want
