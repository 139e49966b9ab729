"""The run's cadence: when it logs, evaluates and saves, and how many checkpoints it keeps.

Shared by the Trainer and the :class:`~roxxel.train.Checkpointer`, as Orbax's
``CheckpointManagerOptions`` holds the save interval and ``max_to_keep`` together; its own
module so that the checkpoint package takes it without the Trainer's other options (and
their data imports: ``train/checkpoint`` does not import ``roxxel.data``).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
from dataclasses import dataclass
from typing import Any, Mapping, TypeVar

from roxxel.exit_codes import ConfigTypeError, ConfigValueError

__all__ = ["Cadence", "Default", "checkpoint_cadence", "keywords_checked", "positive_int", "unknown_keyword"]

_Class = TypeVar("_Class", bound=type)


def unknown_keyword(owner: str, name: str, known: Mapping[str, str], call: str = "()") -> ConfigTypeError:
    """The error for a keyword ``name`` that ``owner`` (``"Cadence"``) does not take, in one line:
    Python's wording, then the closest known keyword (``difflib``), as Python's own error for a
    misspelt attribute names one; without a close one, where the keywords are listed.

    Args:
        known: the keywords a misspelt one is matched against -> how the hint writes each
            (``"`log_every`"``, or the new form of a deprecated keyword).
        call: what follows ``owner`` in the message (``".__init__()"`` for a class's own method).
    """
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean {known[close[0]]}?" if close else f"see help({owner})"
    return ConfigTypeError(f"{owner}{call} got an unexpected keyword argument '{name}'; {hint}")


def keywords_checked(cls: _Class) -> _Class:
    """Make the dataclass ``cls`` refuse an unknown keyword with :func:`unknown_keyword`'s hint,
    where the ``__init__`` a dataclass writes raises Python's bare ``TypeError``. Apply it above
    ``@dataclass``; the signature (``inspect.signature``) stays the dataclass's."""
    init = vars(cls)["__init__"]
    known = {f.name: f"`{f.name}`" for f in dataclasses.fields(cls) if f.init}

    @functools.wraps(init)
    def checked_init(self: Any, *args: Any, **kwargs: Any) -> None:
        for name in kwargs:
            if name not in known:
                raise unknown_keyword(cls.__name__, name, known)
        init(self, *args, **kwargs)

    setattr(cls, "__init__", checked_init)  # (an assignment to a method, which mypy refuses)
    return cls


def positive_int(owner: str, name: str, value: Any, none_means: str | None = None) -> None:
    """Refuse a ``value`` that is not an int >= 1 (``None`` too, unless ``none_means`` says what it means)."""
    if value is None and none_means is not None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        also = f", or None for {none_means}" if none_means is not None else ""
        raise ConfigValueError(f"{owner}.{name} must be a positive int{also}, got {value!r}; e.g. {owner}({name}=10)")


@keywords_checked
@dataclass(frozen=True)
class Cadence:
    """When the run logs, evaluates and saves, in optimizer steps.

    The :class:`~roxxel.train.Checkpointer` takes the same object (``cadence=``) for its
    ``save_interval_steps`` and ``max_to_keep``, as Orbax's ``CheckpointManagerOptions``
    holds both.

    Args:
        log_every: steps per logging window (metrics are averaged over it; >= 1). Default 100.
        eval_every: steps between calls of the Trainer's ``eval_fn`` (it also runs at the
            end; >= 1). Default 500.
        save_interval_steps: steps between checkpoints (Orbax's name; >= 1). ``None``: in
            the Trainer, the given checkpointer's interval when above 1, else 100; in the
            Checkpointer, 1 (every step :meth:`~roxxel.train.Checkpointer.save` is called
            with). Preemptions and the end of the run save at any step.
        max_to_keep: the latest checkpoints kept besides the best (>= 1; ``None``: all).
            Default 3.

    Raises:
        ValueError: a value that is not a positive int (``None`` where allowed); the message
            names the field.
        TypeError: an unknown keyword (the message names the closest field).
    """

    log_every: int = 100
    eval_every: int = 500
    save_interval_steps: int | None = None
    max_to_keep: int | None = 3

    def __post_init__(self) -> None:
        positive_int("Cadence", "log_every", self.log_every)
        positive_int("Cadence", "eval_every", self.eval_every)
        positive_int("Cadence", "save_interval_steps", self.save_interval_steps, "the default interval")
        positive_int("Cadence", "max_to_keep", self.max_to_keep, "keeping every step")


class Default:
    """A keyword's default, told apart from the same value given on purpose: a keyword left
    out may come from a :class:`Cadence`, one given beside it is refused. Shows as the value."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return repr(self.value)


def checkpoint_cadence(cadence: Any, max_to_keep: Any, save_interval_steps: Any) -> tuple[Any, Any]:
    """The Checkpointer's ``(max_to_keep, save_interval_steps)``: its own keywords (their
    :class:`Default` when left out), or ``cadence``'s (``save_interval_steps=None``: 1).

    Raises:
        TypeError: ``cadence`` is not a :class:`Cadence`; a keyword given beside it.
    """
    if cadence is None:
        own = (v.value if isinstance(v, Default) else v for v in (max_to_keep, save_interval_steps))
        return next(own), next(own)
    if not isinstance(cadence, Cadence):
        raise ConfigTypeError(f"Checkpointer: cadence= must be a Cadence, got {type(cadence).__name__}")
    for name, value in (("max_to_keep", max_to_keep), ("save_interval_steps", save_interval_steps)):
        if not isinstance(value, Default):
            raise ConfigTypeError(
                f"Checkpointer: {name}= and cadence= both given; set it in the Cadence only: cadence=Cadence({name}=...)"
            )
    return cadence.max_to_keep, cadence.save_interval_steps or 1
