"""What the spec tells the training program besides its command: the progress watchdog's
bounds, rendered into the pods as ``ROXXEL_WATCHDOG`` (read by ``roxxel.train.Trainer``;
see ``roxxel.train.watchdog``), and the device mesh's layout (``parallelism``), rendered as
``ROXXEL_PARALLELISM`` (read by ``roxxel.sharding.default_mesh``)."""

from __future__ import annotations

import dataclasses
import json
import math

from roxxel import contract, sharding
from roxxel.exit_codes import ConfigValueError
from roxxel_launch.spec.errors import SpecError
from roxxel_launch.spec.fields import INT32_MAX, _doc


@dataclasses.dataclass(frozen=True)
class Watchdog:
    """When a worker that makes no progress ends the job (exit 43, a counted gang restart)
    instead of holding the gang: unset bounds keep the Trainer's defaults."""

    enabled: bool = _doc("Run the watchdog (false: a stuck worker holds the job until someone looks).", default=True)
    step_floor_s: int | None = _doc("Seconds a step may always take (default 600).", default=None)
    step_multiple: int | None = _doc("... or this many times the median step time (default 20).", default=None)
    first_step_s: int | None = _doc(
        "Seconds for the restore, the stream's set-up and the first step of a phase, which compiles (default 1800).",
        default=None,
    )
    eval_s: int | None = _doc("Seconds for one evaluation (default 1800).", default=None)
    save_s: int | None = _doc("Seconds to start a checkpoint save or wait for one (default 1800).", default=None)

    def __post_init__(self):
        for name in self.bounds():
            value = getattr(self, name)
            what = "factor of the median step time" if name == "step_multiple" else "number of seconds"
            if not 1 <= value <= INT32_MAX:
                raise SpecError(
                    name,
                    f"must be a positive {what}, got {value}",
                    f"Give e.g. {20 if name == 'step_multiple' else 300}, or leave it out for the default.",
                )
        if not self.enabled and self.bounds():
            raise SpecError(
                "enabled",
                f"is false, but bounds are given ({', '.join(self.bounds())}): they would be dropped",
                "Remove the bounds, or set enabled: true.",
            )

    def bounds(self) -> list[str]:
        """The bounds given, by name (each one of ``roxxel.contract.WATCHDOG_FIELDS``)."""
        return [
            f.name
            for f in dataclasses.fields(self)
            if f.name in contract.WATCHDOG_FIELDS and getattr(self, f.name) is not None
        ]

    def env_value(self) -> str | None:
        """``ROXXEL_WATCHDOG``'s value: ``off``, a JSON object of the bounds given, or None."""
        if not self.enabled:
            return "off"
        given = {name: getattr(self, name) for name in self.bounds()}
        return json.dumps(given, sort_keys=True, separators=(",", ":")) if given else None


# JAX devices per TPU chip, where not 1: a TPU7x (Ironwood) chip holds two TensorCores, each
# its own device (Cloud TPU's TPU7x page; JAX's mesh_utils lays out 8 devices per 4-chip
# host, ``_7X_TRAY_2x2x2_RING_ORDER``). v4 and v5p chips are one megacore device; v5e
# and v6e chips have one TensorCore.
TPU_DEVICES_PER_CHIP = {"tpu7x": 2}


def slice_devices(spec) -> tuple[int | None, str]:
    """The JAX devices in one slice of ``spec``, and what they are; None for CPU hosts,
    whose device count is the workers' own (``XLA_FLAGS``)."""
    accelerator = spec.accelerator
    if accelerator.tpu is not None:
        shape = accelerator.tpu.slice
        per_chip = TPU_DEVICES_PER_CHIP.get(shape.type.name, 1)
        cores = f" of {per_chip} TensorCores" if per_chip > 1 else ""
        return shape.chips * per_chip, f"{shape.type.name} {shape.topology}, {shape.chips} chips{cores}"
    if accelerator.gpu is not None:
        gpu = accelerator.gpu
        return gpu.count * gpu.hosts, f"{gpu.hosts} hosts x {gpu.count} GPUs"
    return None, "CPU hosts"


def check_parallelism(spec) -> None:
    """Refuse a ``parallelism`` the job's devices certainly cannot hold: unknown axes,
    sizes below 1 other than one ``-1``; on TPU and GPU, sizes the job's devices
    (``num_slices`` x one slice's) do not fit, as :func:`roxxel.sharding.axis_sizes` would
    at the workers; on CPU, whose per-worker device count the spec does not know, a
    ``data`` that is not a multiple of ``num_slices`` or fixed sizes whose product is not a
    multiple of the worker count.

    Raises:
        SpecError: on the field ``parallelism`` (or ``parallelism.AXIS``), with the fix.
    """
    given = dict(spec.parallelism or {})
    for axis, size in given.items():
        try:
            sharding.check_parallelism({axis: size})
        except ConfigValueError as err:
            raise _spec_error(f"parallelism.{axis}", err) from None
    per_slice, what = slice_devices(spec)
    slices = f"{spec.num_slices} slices" if spec.num_slices > 1 else "1 slice"
    try:
        sharding.check_parallelism(given)
        if per_slice is not None:
            sharding.axis_sizes(given, per_slice * spec.num_slices, spec.num_slices)
            return
    except ConfigValueError as err:
        raise _spec_error("parallelism", err, f" (the job: {slices} of {per_slice} devices, {what})") from None
    data = given.get(sharding.DATA_AXIS, sharding.FILL)
    if data != sharding.FILL and data % spec.num_slices:
        raise SpecError(
            "parallelism.data",
            f"{data} is not a multiple of num_slices {spec.num_slices}: data is the axis across slices",
            f"Give data a multiple of {spec.num_slices}, or leave it out to fill.",
        )
    if sharding.FILL not in given.values() and sharding.DATA_AXIS in given:
        product = math.prod(given.values())
        if product % spec.num_processes:
            raise SpecError(
                "parallelism",
                f"the sizes multiply to {product} devices, which {spec.num_processes} workers with "
                "equal device counts cannot hold",
                "Leave data out (or -1) to fill, or make the product a multiple of the worker count.",
            )


def parallelism_env_value(spec) -> str | None:
    """``ROXXEL_PARALLELISM``'s value (``fsdp=4,tensor=2``), or None without ``parallelism``."""
    return sharding.format_parallelism(spec.parallelism) if spec.parallelism else None


def _spec_error(field: str, err: ConfigValueError, where: str = "") -> SpecError:
    problem, _, fix = str(err).partition("; ")
    return SpecError(field, problem + where, fix[:1].upper() + fix[1:] + "." if fix else "")
