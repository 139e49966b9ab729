"""A run's goodput totals as ``roxxel-launch status`` shows them (standard library only).

The training program's ``roxxel.train.callbacks.goodput.Goodput`` callback logs them as
window metrics: totals over the run's attempts, so the newest logged window (in the run's
metrics file) or the newest checkpoint's run record holds the whole run's. The names below
are that callback's (``tests/launcher/test_goodput_totals.py`` checks they still match); the
launcher does not import it, which would load JAX.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

SHARE = "goodput"
"""The productive share of the run's time, 0..1."""
TOTAL_S = "goodput_total_s"
"""Seconds of the run measured so far (productive plus every kind of badput)."""
PRODUCTIVE_S = "goodput_productive_s"
"""Seconds of compiled training steps."""
ATTEMPTS = "goodput_attempts"
"""The run's attempts so far (each ``Trainer.run()`` that restored is one)."""
REDONE_STEPS = "badput_redone_steps"
"""Steps that a later attempt trained again (past the checkpoint it resumed from)."""
_BADPUT = re.compile(r"badput_(?P<kind>\w+?)_s")
"""``badput_<kind>_s``: seconds of one kind of badput (restore, compile, data_wait, save,
preemption_save, eval, redone, restart, other; a later kind is read the same way)."""
SHOWN_KINDS = 3
"""The largest kinds of badput named in the text; the rest are summed."""


@dataclasses.dataclass(frozen=True)
class GoodputTotals:
    """The goodput totals of a run as of one logged step.

    Attributes:
        step: the training step they were logged (or the checkpoint saved) at.
        share: productive seconds / total seconds, 0..1.
        total_s: seconds measured over every attempt (from the first attempt's
            ``Trainer.run()``).
        productive_s: seconds of training steps.
        badput_s: seconds by kind of badput (``restart``, ``compile``, ...), largest first.
        redone_steps: steps trained again after a crash or stall (None when not logged).
        attempts: the run's attempts (None when not logged).
        source: where they were read (a metrics file, or a checkpoint's run record).
        as_of: when that step was logged or saved (ISO 8601, UTC), or None.
    """

    step: int
    share: float
    total_s: float
    productive_s: float
    badput_s: tuple[tuple[str, float], ...] = ()
    redone_steps: int | None = None
    attempts: int | None = None
    source: str = ""
    as_of: str | None = None

    @classmethod
    def from_metrics(
        cls, metrics: Mapping[str, Any], step: int, source: str, as_of: str | None = None
    ) -> GoodputTotals | None:
        """The totals in one window's metrics; None when they hold none (no Goodput callback)
        or a value is not a number."""
        try:
            total, productive = float(metrics[TOTAL_S]), float(metrics[PRODUCTIVE_S])
            share = float(metrics[SHARE]) if SHARE in metrics else (productive / total if total > 0 else 0.0)
            badput = {m["kind"]: float(v) for k, v in metrics.items() if (m := _BADPUT.fullmatch(k))}
            redone, attempts = _count(metrics.get(REDONE_STEPS)), _count(metrics.get(ATTEMPTS))
        except (KeyError, TypeError, ValueError):
            return None
        ranked = tuple(sorted(badput.items(), key=lambda kv: (-kv[1], kv[0])))
        return cls(step, share, total, productive, ranked, redone, attempts, source, as_of)

    def lines(self) -> list[str]:
        """Two lines for ``status``: the share and what it is of, then the largest badput."""
        facts = [f"at step {self.step}"]
        if self.attempts is not None:
            facts.append(f"{self.attempts} attempt{'' if self.attempts == 1 else 's'}")
        if self.redone_steps:
            facts.append(f"{self.redone_steps} step{'' if self.redone_steps == 1 else 's'} redone")
        head = (
            f"{100 * self.share:.1f}% of {duration(self.total_s)} "
            f"(productive {duration(self.productive_s)}), {', '.join(facts)}"
        )
        return [head, self._badput_text()]

    def _badput_text(self) -> str:
        nonzero = [(kind, s) for kind, s in self.badput_s if s > 0]
        if not nonzero:
            return "none"
        shown = [f"{kind} {duration(s)}" for kind, s in nonzero[:SHOWN_KINDS]]
        rest = nonzero[SHOWN_KINDS:]
        if rest:
            shown.append(f"{len(rest)} other kind{'' if len(rest) == 1 else 's'} {duration(sum(s for _, s in rest))}")
        return ", ".join(shown)

    def as_json(self) -> dict[str, Any]:
        """The totals as ``status --json`` prints them (seconds, the share 0..1)."""
        return {
            "step": self.step,
            "share": self.share,
            "total_s": self.total_s,
            "productive_s": self.productive_s,
            "badput_s": dict(self.badput_s),
            "redone_steps": self.redone_steps,
            "attempts": self.attempts,
            "source": self.source,
            "as_of": self.as_of,
        }


def _count(value: Any) -> int | None:
    """A count logged as a float metric (``2.0``) as an int; None when not logged."""
    return None if value is None or value == "" else int(float(value))


def duration(seconds: float) -> str:
    """'2h 05m', '5m 12s', '40.5s', '250ms'."""
    if seconds < 1:
        return f"{1000 * seconds:.0f}ms"
    if seconds < 60:
        return f"{seconds:.3g}s"
    whole = int(round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m {secs:02d}s"
