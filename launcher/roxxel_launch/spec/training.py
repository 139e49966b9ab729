"""What the spec tells the training program besides its command: the progress watchdog's
bounds, rendered into the pods as ``ROXXEL_WATCHDOG`` (read by ``roxxel.train.Trainer``;
see ``roxxel.train.watchdog``)."""

from __future__ import annotations

import dataclasses
import json

from roxxel import contract
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
