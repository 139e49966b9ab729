"""The Trainer's flat keywords from before its option objects (``eval_every=``, ``seed=``,
``learning_rate=`` ...): still accepted, with one
:class:`~roxxel.deprecation.RoxxelDeprecationWarning` per call that names
what replaces each (:mod:`roxxel.train.options`, or a callback in ``callbacks=``).

The one place that turns a call's flat keywords into option objects and callback shortcuts,
so that every old keyword behaves alike: the same warning, the same conflicts refused.
"""

from __future__ import annotations

from typing import Any, Mapping

from roxxel.deprecation import warn_renamed
from roxxel.exit_codes import ConfigTypeError, ConfigValueError
from roxxel.train.cadence import unknown_keyword
from roxxel.train.options import Cadence, DataOptions, LoopOptions, RestoreOptions

__all__ = ["FLAT_KEYWORDS", "OPTION_TYPES", "SHORTCUTS", "replacements", "resolve_options"]

OPTION_TYPES: dict[str, type] = {
    "cadence": Cadence,
    "data": DataOptions,
    "restore": RestoreOptions,
    "loop": LoopOptions,
}
"""The Trainer's option parameters and the type each takes."""

FLAT_KEYWORDS: dict[str, tuple[str, str]] = {
    "log_every": ("cadence", "log_every"),
    "eval_every": ("cadence", "eval_every"),
    "save_interval_steps": ("cadence", "save_interval_steps"),
    "checkpoint_every": ("cadence", "save_interval_steps"),  # the original Roxxel's name
    "max_to_keep": ("cadence", "max_to_keep"),
    "seed": ("data", "seed"),
    "outputs": ("data", "outputs"),
    "prefetch_size": ("data", "prefetch_size"),
    "data_sharding": ("data", "data_sharding"),
    "allow_changed_run": ("restore", "allow_changed_run"),
    "partial_restore": ("restore", "partial"),
    "grad_accum_steps": ("loop", "grad_accum_steps"),
    "async_queue_depth": ("loop", "async_queue_depth"),
    "handle_sigint": ("loop", "handle_sigint"),
    "watchdog": ("loop", "watchdog"),
}
"""Old keyword -> (the option parameter that holds it now, its field there)."""

SHORTCUTS: dict[str, str] = {
    "learning_rate": "LearningRate(...)",
    "flops_per_token": "Throughput(...)",
    "num_params": "Throughput(...)",
    "peak_flops_per_device": "Throughput(...)",
    "profile_steps": "Profile(steps, os.path.join(save_path, 'profile'))",
}
"""Old shortcut keyword -> the callback it builds (:func:`~roxxel.train.callbacks.builtin.trainer_callbacks`)."""

# The old keywords took any truthy value, or None for one micro-batch; the options check strictly.
_AS_BEFORE = {"allow_changed_run": bool, "partial_restore": bool, "handle_sigint": bool}


def resolve_options(options: Mapping[str, Any], flat: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The Trainer's option objects and callback shortcuts, from its option parameters and old keywords.

    Args:
        options: the option parameters as given, by name (:data:`OPTION_TYPES`; ``None``: not given).
        flat: the call's other keyword arguments (the Trainer's ``**deprecated``).

    Returns:
        ``(objects, shortcuts)``: an object of each option type (the given one, one built from
        the old keywords, or the defaults), and the shortcut keywords given
        (:data:`SHORTCUTS`), for ``trainer_callbacks``.

    Raises:
        TypeError: an unknown keyword (worded as Python words it, with the closest keyword's
            replacement: "did you mean cadence=Cadence(log_every=...)?"); an option of the wrong
            type; an old keyword together with the option object that holds it now.
        ValueError: ``save_interval_steps`` and ``checkpoint_every`` that disagree; a bad
            value (the option object's own check).
    """
    for name in flat:
        if name not in FLAT_KEYWORDS and name not in SHORTCUTS:
            raise unknown_keyword("Trainer", name, _hints(), call=".__init__()")
    for name, kind in OPTION_TYPES.items():
        if options.get(name) is not None and not isinstance(options[name], kind):
            raise ConfigTypeError(
                f"Trainer: {name}= must be a {kind.__name__}, got {type(options[name]).__name__}; "
                f"e.g. {name}={kind.__name__}()"
            )
    fields: dict[str, dict[str, Any]] = {name: {} for name in OPTION_TYPES}
    for old, value in flat.items():
        if old in FLAT_KEYWORDS:
            fields[_holder(old, options)][FLAT_KEYWORDS[old][1]] = _as_before(old, value)
    _one_interval(flat)
    if flat:
        warn_renamed("Trainer", ", ".join(f"{old}=" for old in flat), replacements(flat))
    objects = {
        name: kind(**fields[name]) if fields[name] else options.get(name) or kind()
        for name, kind in OPTION_TYPES.items()
    }
    return objects, {k: v for k, v in flat.items() if k in SHORTCUTS}


def _hints() -> dict[str, str]:
    """The keywords a misspelt one is matched against, each as the hint writes it: an option
    parameter as itself, an old keyword as what replaces it (``cadence=Cadence(log_every=...)``)."""
    hints = {name: f"{name}={kind.__name__}(...)" for name, kind in OPTION_TYPES.items()}
    hints.update((old, replacements({old: None})) for old in [*FLAT_KEYWORDS, *SHORTCUTS])
    return hints


def _holder(old: str, options: Mapping[str, Any]) -> str:
    """The option parameter that holds ``old`` now; refuses it when that object was given too."""
    holder, field = FLAT_KEYWORDS[old]
    if options.get(holder) is not None:
        kind = OPTION_TYPES[holder].__name__
        raise ConfigTypeError(
            f"Trainer: {old}= and {holder}= both given; set it in the option object only: "
            f"{holder}={kind}({field}=..., ...)"
        )
    return holder


def _as_before(old: str, value: Any) -> Any:
    if old == "grad_accum_steps" and value is None:
        return 1
    return _AS_BEFORE[old](value) if old in _AS_BEFORE else value


def _one_interval(flat: Mapping[str, Any]) -> None:
    """``save_interval_steps`` and its original name ``checkpoint_every`` name one interval."""
    new, old = flat.get("save_interval_steps"), flat.get("checkpoint_every")
    if new is not None and old is not None and new != old:
        raise ConfigValueError(
            f"Trainer: save_interval_steps={new!r} and its deprecated name checkpoint_every={old!r} "
            "disagree; give one interval: cadence=Cadence(save_interval_steps=...)"
        )


def replacements(flat: Mapping[str, Any]) -> str:
    """What replaces a call's old keywords, each group once, for its one warning.

    ``{"eval_every": 5, "log_every": 1, "learning_rate": 1e-3}`` gives
    ``"cadence=Cadence(eval_every=..., log_every=...) and callbacks=[LearningRate(...)]"``.
    """
    groups: dict[str, list[str]] = {}
    for old in flat:
        target = FLAT_KEYWORDS[old][0] if old in FLAT_KEYWORDS else SHORTCUTS[old]
        groups.setdefault(target, []).append(FLAT_KEYWORDS[old][1] if old in FLAT_KEYWORDS else old)
    parts = [
        f"{target}={kind.__name__}({', '.join(f'{f}=...' for f in dict.fromkeys(groups[target]))})"
        for target, kind in OPTION_TYPES.items()
        if target in groups
    ]
    callbacks = [target for target in groups if target not in OPTION_TYPES]
    if callbacks:
        parts.append(f"callbacks=[{', '.join(callbacks)}]")
    return " and ".join(parts)
